package eta

// simCases are the simulated jobs the accuracy test runs: 4 servers × 128
// running requests, 30,000 requests unless said otherwise.
func simCases() []SimConfig {
	return []SimConfig{
		{Name: "lognormal-s1.0", Lengths: LogNormal(2500, 1), MaxTokens: 12000, Seed: 1},
		{Name: "lognormal-s1.0-kv-ramp", Lengths: LogNormal(2500, 1), MaxTokens: 12000, StepPerKToken: 3e-5, RampSeconds: 20, Seed: 2},
		{Name: "lognormal-s1.0-lowerbound", Lengths: LogNormal(2500, 1), MaxTokens: 12000, LowerBound: 0.3, Seed: 8},
		{Name: "lognormal-s0.5", Lengths: LogNormal(2500, 0.5), MaxTokens: 6000, Seed: 3},
		{Name: "lognormal-s1.5", Lengths: LogNormal(2500, 1.5), MaxTokens: 16000, Seed: 4},
		{Name: "lognormal-s1.2-c256", Lengths: LogNormal(2500, 1.2), MaxTokens: 16384, Slots: 256, Requests: 20000, Seed: 9},
		{Name: "bimodal", Lengths: Mixture(0.6, LogNormal(600, 0.5), LogNormal(5500, 0.6)), MaxTokens: 12000, Seed: 5},
		{Name: "lomax-a2", Lengths: Lomax(2500, 2.0), MaxTokens: 16000, Seed: 6},
		{Name: "gamma-k2", Lengths: Gamma(2500, 2), MaxTokens: 8000, Seed: 7},
	}
}
