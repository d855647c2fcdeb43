package eta

// simCase is a simulated job and the accuracy it must reach: |error| ≤ tol2
// from 2 % progress on and ≤ tol10 from 10 % on.
type simCase struct {
	cfg         SimConfig
	tol2, tol10 float64
}

// simCases are the simulated jobs of the accuracy test: 4 servers × 128
// running requests and 30,000 requests unless said otherwise. The first
// ones are the targets; the others are harder on purpose (see
// docs/eta.md for why their early checkpoints cannot be as good).
func simCases() []simCase {
	return []simCase{
		{SimConfig{Name: "lognormal-s1.0", Lengths: LogNormal(2500, 1), MaxTokens: 11000, Seed: 1, EstimateEvery: 5}, 0.10, 0.05},
		{SimConfig{Name: "lognormal-s0.5", Lengths: LogNormal(2500, 0.5), MaxTokens: 6000, Seed: 3, EstimateEvery: 5}, 0.10, 0.05},
		{SimConfig{Name: "lognormal-s1.5", Lengths: LogNormal(2500, 1.5), MaxTokens: 16000, Seed: 4, EstimateEvery: 5}, 0.10, 0.05},
		{SimConfig{Name: "gamma-k2", Lengths: Gamma(2500, 2), MaxTokens: 7000, Seed: 7, EstimateEvery: 5}, 0.10, 0.05},
		{SimConfig{Name: "lomax-a2", Lengths: Lomax(2500, 2.0), MaxTokens: 15000, Seed: 6, EstimateEvery: 5}, 0.10, 0.05},
		// Short and long answers: the long mode is unseen at 1–2 %.
		{SimConfig{Name: "bimodal", Lengths: Mixture(0.6, LogNormal(600, 0.5), LogNormal(5500, 0.6)), MaxTokens: 12000, Seed: 5, EstimateEvery: 5}, 0.20, 0.05},
		// Decode slows as contexts grow (KV reads) and the fleet ramps up.
		{SimConfig{Name: "lognormal-s1.0-kv-ramp", Lengths: LogNormal(2500, 1), MaxTokens: 11000, StepPerKToken: 3e-5, RampSeconds: 20, Seed: 2, EstimateEvery: 5}, 0.25, 0.05},
		// In-flight lengths reported up to 30 % low.
		{SimConfig{Name: "lognormal-s1.0-lowerbound", Lengths: LogNormal(2500, 1), MaxTokens: 11000, LowerBound: 0.3, Seed: 8, EstimateEvery: 5}, 0.25, 0.05},
		// 1,024 running, 20,000 requests: 2 % is a fraction of the first
		// wave, and a solo request is 2.3× faster than in a full batch
		// (the prior says 1.5×), so the end of the job is overestimated.
		{SimConfig{Name: "lognormal-s1.2-c256", Lengths: LogNormal(2500, 1.2), MaxTokens: 12000, Slots: 256, Requests: 20000, Seed: 9, EstimateEvery: 5}, 0.10, 0.10},
	}
}
