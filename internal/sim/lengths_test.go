package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// resolveLengths is the length model a server with sc gets under seed.
func resolveLengths(t *testing.T, sc ServerConfig, seed int64) lengthModel {
	t.Helper()
	p, errs := sc.resolve(seed)
	if len(errs) > 0 {
		t.Fatalf("resolve %+v: %v", sc, errs)
	}
	return p.lengths
}

// TestDefaultLengthsUnchanged pins the lognormal default to the lengths the
// model drew before output_dist existed (recorded from that code): the
// benchmarks' seeds depend on them.
func TestDefaultLengthsUnchanged(t *testing.T) {
	t.Parallel()
	recorded := []struct {
		seed                      int64
		text                      string
		total, reasoning, noThink int
	}{
		{0, "prompt 0", 2980, 2116, 596},
		{0, "prompt 1", 7574, 6645, 1515},
		{0, "prompt 2", 10025, 7107, 2005},
		{0, "prompt 3", 1981, 1355, 396},
		{0, "prompt 4", 487, 427, 97},
		{42, "prompt 0", 6048, 4055, 1210},
		{42, "prompt 1", 2607, 1606, 521},
		{42, "prompt 5", 4933, 3942, 987},
	}
	for _, dist := range []string{"", "lognormal"} {
		for _, r := range recorded {
			m := resolveLengths(t, ServerConfig{OutputDist: dist}, r.seed)
			on, off := m.plan(r.text, true), m.plan(r.text, false)
			if on != (outputPlan{r.total, r.reasoning}) || off != (outputPlan{r.noThink, 0}) {
				t.Errorf("dist %q seed %d %q: got %+v / %+v, recorded {%d %d} / %d",
					dist, r.seed, r.text, on, off, r.total, r.reasoning, r.noThink)
			}
		}
		// A checksum over 20,000 prompts, also recorded from the old code.
		m := resolveLengths(t, ServerConfig{OutputDist: dist}, 42)
		h := fnv.New64a()
		for i := range 20000 {
			text := "checksum prompt " + strconv.Itoa(i)
			a, b := m.plan(text, true), m.plan(text, false)
			fmt.Fprintf(h, "%d,%d,%d;", a.total, a.reasoning, b.total)
		}
		if got, want := h.Sum64(), uint64(0x7560b9e8a9fe4d91); got != want {
			t.Errorf("dist %q: checksum of 20,000 plans %#x, recorded %#x", dist, got, want)
		}
	}
	m := lengthModel{seed: 7, mean: 800, sigma: 1.6, meanPlain: 120}
	for _, r := range []struct {
		text                      string
		total, reasoning, noThink int
	}{{"question 0", 1856, 1346, 278}, {"question 1", 1211, 944, 182}, {"question 2", 1732, 1348, 260}} {
		if on, off := m.plan(r.text, true), m.plan(r.text, false); on != (outputPlan{r.total, r.reasoning}) || off.total != r.noThink {
			t.Errorf("sigma 1.6 %q: got %+v / %+v, recorded {%d %d} / %d", r.text, on, off, r.total, r.reasoning, r.noThink)
		}
	}
}

// lognormalSF is P(X > q) for a lognormal with the given mean and sigma.
func lognormalSF(mean, sigma, q float64) float64 {
	mu := math.Log(mean) - sigma*sigma/2
	return 0.5 * math.Erfc((math.Log(q)-mu)/(sigma*math.Sqrt2))
}

type sample struct {
	n                  int
	mean, variance     float64
	min, max, runaways int
	totals             []int
}

func (s sample) sf(q float64) float64 {
	k := 0
	for _, v := range s.totals {
		if float64(v) > q {
			k++
		}
	}
	return float64(k) / float64(len(s.totals))
}

// drawSample plans n distinct prompts; runaways are counted, not averaged.
func drawSample(m lengthModel, n int, thinking bool) sample {
	s := sample{n: n, min: math.MaxInt}
	var sum, sum2 float64
	for i := range n {
		p := m.plan("length family prompt #"+strconv.Itoa(i), thinking)
		if thinking && p.total > 1 && (p.reasoning < 1 || p.reasoning >= p.total) {
			panic(fmt.Sprintf("reasoning %d of %d", p.reasoning, p.total))
		}
		if p.total == maxLength {
			s.runaways++
			continue
		}
		v := float64(p.total)
		sum += v
		sum2 += v * v
		s.min, s.max = min(s.min, p.total), max(s.max, p.total)
		s.totals = append(s.totals, p.total)
	}
	k := float64(len(s.totals))
	s.mean = sum / k
	s.variance = sum2/k - s.mean*s.mean
	return s
}

func within(got, want, rel float64) bool { return math.Abs(got-want) <= rel*math.Abs(want) }

func TestLengthFamilies(t *testing.T) {
	t.Parallel()
	const n = 50000
	const mean = 2500.0 // thinking on; off: mean/5
	weibullScale := func(k, mean float64) float64 { return mean / math.Gamma(1+1/k) }
	tests := []struct {
		dist string
		// check tests the shape of a thinking-on sample (mean 2500) and
		// returns what it compared, for the log.
		check     func(t *testing.T, s sample) string
		rangeMean float64 // uniform: the mean that must come out (else the configured one)
	}{
		{dist: "lognormal", check: func(t *testing.T, s sample) string {
			q := 5000.0
			want := lognormalSF(mean, 1, q)
			if got := s.sf(q); !within(got, want, 0.10) {
				t.Errorf("P(L > %v) = %.4f, want %.4f ± 10%%", q, got, want)
			}
			return fmt.Sprintf("P(L>%v) %.4f vs %.4f", q, s.sf(q), want)
		}},
		{dist: "gamma:0.7", check: gammaVariance(0.7, mean)},
		{dist: "gamma:4", check: gammaVariance(4, mean)},
		{dist: "weibull:0.8", check: weibullSF(0.8, weibullScale(0.8, mean), 5000)},
		{dist: "weibull:2", check: weibullSF(2, weibullScale(2, mean), 4000)},
		{dist: "pareto:3", check: paretoSF(3, mean)},
		{dist: "pareto:2.5", check: paretoSF(2.5, mean)},
		{dist: "bimodal:0.4:300", check: func(t *testing.T, s sample) string {
			p, short := 0.4, 300.0
			long := (mean - p*short) / (1 - p)
			q := 1000.0 // between the modes
			want := p*lognormalSF(short, 0.5, q) + (1-p)*lognormalSF(long, 1, q)
			if got := s.sf(q); !within(got, want, 0.10) {
				t.Errorf("P(L > %v) = %.4f, want %.4f ± 10%%", q, got, want)
			}
			// The short mode is really there: a lognormal of the same mean has
			// far fewer lengths below 500.
			if got, plain := 1-s.sf(500), 1-lognormalSF(mean, 1, 500); got < plain+0.2 {
				t.Errorf("P(L ≤ 500) = %.3f, a plain lognormal has %.3f: no short mode", got, plain)
			}
			return fmt.Sprintf("P(L>%v) %.4f vs %.4f (long mean %.0f)", q, s.sf(q), want, long)
		}},
		{dist: "uniform:100:4000", rangeMean: 2050, check: func(t *testing.T, s sample) string {
			if s.min != 100 || s.max != 4000 {
				t.Errorf("range [%d, %d], want [100, 4000] with both ends drawn", s.min, s.max)
			}
			w := 3901.0
			want := (w*w - 1) / 12
			if !within(s.variance, want, 0.10) {
				t.Errorf("variance %.4g, want %.4g ± 10%%", s.variance, want)
			}
			return fmt.Sprintf("range [%d, %d], variance %.4g vs %.4g", s.min, s.max, s.variance, want)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.dist, func(t *testing.T) {
			t.Parallel()
			m := resolveLengths(t, ServerConfig{OutputMean: mean, OutputDist: tt.dist}, 11)
			on, off := drawSample(m, n, true), drawSample(m, n, false)
			wantOn, wantOff := mean, mean/5
			if tt.rangeMean > 0 {
				wantOn, wantOff = tt.rangeMean, tt.rangeMean
			}
			if on.runaways+off.runaways > 0 {
				t.Errorf("%d runaways with output_runaway 0", on.runaways+off.runaways)
			}
			if !within(on.mean, wantOn, 0.03) {
				t.Errorf("thinking on: mean %.1f, want %.0f ± 3%%", on.mean, wantOn)
			}
			if !within(off.mean, wantOff, 0.03) {
				t.Errorf("thinking off: mean %.1f, want %.0f ± 3%%", off.mean, wantOff)
			}
			what := tt.check(t, on)
			t.Logf("mean on %.1f (want %.0f), off %.1f (want %.0f); %s", on.mean, wantOn, off.mean, wantOff, what)
		})
	}
}

func gammaVariance(k, mean float64) func(*testing.T, sample) string {
	return func(t *testing.T, s sample) string {
		want := mean * mean / k
		if !within(s.variance, want, 0.10) {
			t.Errorf("variance %.4g, want mean²/K = %.4g ± 10%%", s.variance, want)
		}
		return fmt.Sprintf("variance %.4g vs %.4g", s.variance, want)
	}
}

func weibullSF(k, scale, q float64) func(*testing.T, sample) string {
	return func(t *testing.T, s sample) string {
		want := math.Exp(-math.Pow(q/scale, k))
		if got := s.sf(q); !within(got, want, 0.10) {
			t.Errorf("P(L > %v) = %.4f, want %.4f ± 10%%", q, got, want)
		}
		return fmt.Sprintf("P(L>%v) %.4f vs %.4f", q, s.sf(q), want)
	}
}

// paretoSF checks the Lomax tail at its 95th percentile.
func paretoSF(a, mean float64) func(*testing.T, sample) string {
	return func(t *testing.T, s sample) string {
		scale := mean * (a - 1)
		q := scale * (math.Pow(0.05, -1/a) - 1)
		want := math.Pow(1+q/scale, -a) // 0.05
		if got := s.sf(q); !within(got, want, 0.10) {
			t.Errorf("P(L > %.0f) = %.4f, want %.4f ± 10%%", q, got, want)
		}
		return fmt.Sprintf("P(L>%.0f) %.4f vs %.4f, max %d", q, s.sf(q), want, s.max)
	}
}

func TestRunawayShare(t *testing.T) {
	t.Parallel()
	const n = 50000
	for _, dist := range []string{"gamma:0.7", "lognormal", "uniform:10:20"} {
		t.Run(dist, func(t *testing.T) {
			t.Parallel()
			m := resolveLengths(t, ServerConfig{OutputDist: dist, OutputRunaway: 0.05}, 3)
			plain := resolveLengths(t, ServerConfig{OutputDist: dist}, 3)
			runaways, same := 0, 0
			for i := range n {
				text := "runaway scan " + strconv.Itoa(i)
				p := m.plan(text, true)
				if p.total == maxLength {
					runaways++
					if p.reasoning < 1 || p.reasoning >= p.total {
						t.Fatalf("runaway reasoning %d", p.reasoning)
					}
					continue
				}
				// The runaway draw does not disturb the others' lengths.
				if p == plain.plan(text, true) {
					same++
				}
			}
			share := float64(runaways) / n
			if math.Abs(share-0.05) > 0.005 {
				t.Errorf("runaway share %.4f, want 0.05 ± 0.005", share)
			}
			if same != n-runaways {
				t.Errorf("%d of %d non-runaway plans differ from output_runaway 0", n-runaways-same, n-runaways)
			}
			s := drawSample(m, n, false)
			want := 500.0
			if dist == "uniform:10:20" {
				want = 15
			}
			if !within(s.mean, want, 0.03) {
				t.Errorf("mean of the non-runaways %.1f, want %.0f ± 3%%", s.mean, want)
			}
			t.Logf("runaway share %.4f (thinking on), %.4f (off); non-runaway mean off %.1f", share, float64(s.runaways)/n, s.mean)
		})
	}
}

func TestOutputDistErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		sc   ServerConfig
		want string // "" : valid
	}{
		{ServerConfig{OutputDist: "gamma:0.5"}, ""},
		{ServerConfig{OutputDist: "weibull:1.5"}, ""},
		{ServerConfig{OutputDist: "pareto:1.1"}, ""},
		{ServerConfig{OutputDist: "bimodal:0:100"}, ""},
		{ServerConfig{OutputDist: "uniform:1:1"}, ""},
		{ServerConfig{OutputRunaway: 0.5}, ""},
		{ServerConfig{OutputDist: "gamma:-1"}, `output_dist "gamma:-1": shape must be > 0`},
		{ServerConfig{OutputDist: "gamma:0"}, `output_dist "gamma:0": shape must be > 0`},
		{ServerConfig{OutputDist: "gamma"}, `output_dist "gamma": want gamma:K`},
		{ServerConfig{OutputDist: "gamma:x"}, `output_dist "gamma:x": "x" is not a number`},
		{ServerConfig{OutputDist: "gamma:NaN"}, `output_dist "gamma:NaN": "NaN" is not a number`},
		{ServerConfig{OutputDist: "weibull:-2"}, `output_dist "weibull:-2": shape must be > 0`},
		{ServerConfig{OutputDist: "weibull:0.001"}, `output_dist "weibull:0.001": shape too small`},
		{ServerConfig{OutputDist: "pareto:1"}, `output_dist "pareto:1": tail index must be > 1`},
		{ServerConfig{OutputDist: "pareto:2:3"}, `output_dist "pareto:2:3": want pareto:A`},
		{ServerConfig{OutputDist: "bimodal:1:100"}, `output_dist "bimodal:1:100": short share P must be in [0, 1)`},
		{ServerConfig{OutputDist: "bimodal:0.5:-3"}, `output_dist "bimodal:0.5:-3": short mean M must be > 0`},
		{ServerConfig{OutputDist: "bimodal:0.5:6000"}, `output_dist "bimodal:0.5:6000": short share × short mean = 3000 leaves a long-mode mean of -1000 for output_mean 2500`},
		{ServerConfig{OutputDist: "bimodal:0.5"}, `output_dist "bimodal:0.5": want bimodal:P:M`},
		{ServerConfig{OutputDist: "uniform:5:4"}, `output_dist "uniform:5:4": want 1 ≤ LO ≤ HI`},
		{ServerConfig{OutputDist: "uniform:0:4"}, `output_dist "uniform:0:4": want 1 ≤ LO ≤ HI`},
		{ServerConfig{OutputDist: "uniform:1.5:4"}, `output_dist "uniform:1.5:4": LO and HI must be integers`},
		{ServerConfig{OutputDist: "lognormal:2"}, `output_dist "lognormal:2": want lognormal`},
		{ServerConfig{OutputDist: "normal:3"}, `output_dist "normal:3": unknown family`},
		{ServerConfig{OutputRunaway: 0.6}, `output_runaway 0.6: must be in [0, 0.5]`},
		{ServerConfig{OutputRunaway: -0.1}, `output_runaway -0.1: must be in [0, 0.5]`},
		{ServerConfig{OutputRunaway: math.NaN()}, `output_runaway NaN: must be in [0, 0.5]`},
	}
	for _, tt := range tests {
		t.Run(tt.sc.OutputDist+"/"+strconv.FormatFloat(tt.sc.OutputRunaway, 'g', -1, 64), func(t *testing.T) {
			err := FleetConfig{Servers: []ServerConfig{tt.sc}}.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), "server gpu0: "+tt.want)):
				t.Errorf("error %v, want one containing %q", err, "server gpu0: "+tt.want)
			}
		})
	}
	// Every problem at once.
	err := FleetConfig{Servers: []ServerConfig{{OutputDist: "gamma:-1", OutputRunaway: 0.9, MemFractionStatic: 2}}}.Validate()
	for _, want := range []string{"output_dist", "output_runaway", "mem_fraction_static"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %s", err, want)
		}
	}
}

func TestScenarioOutputDist(t *testing.T) {
	t.Parallel()
	sc, err := ParseScenario([]byte("servers:\n  - output_dist: pareto:2\n    output_runaway: 0.02\n  - name: b\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := sc.Merge(FleetConfig{}, ServerConfig{OutputDist: "gamma:2", OutputRunaway: 0.01})
	if a, b := cfg.Servers[0], cfg.Servers[1]; a.OutputDist != "pareto:2" || a.OutputRunaway != 0.02 ||
		b.OutputDist != "gamma:2" || b.OutputRunaway != 0.01 {
		t.Errorf("merged %+v / %+v", a, b)
	}
}

// TestRunawayEndToEnd: a runaway prompt ends at max_tokens with finish_reason
// length, or at the context limit without one; a short one stops on its own.
func TestRunawayEndToEnd(t *testing.T) {
	t.Parallel()
	sc := ServerConfig{OutputDist: "gamma:0.7", OutputRunaway: 0.05}
	const seed = 5
	f := startFleet(t, FleetConfig{Speedup: 5000, Seed: seed, Servers: []ServerConfig{sc}})
	p, _ := sc.resolve(seed)
	var runaway, short string
	var shortLen int
	for i := 0; runaway == "" || short == ""; i++ {
		text := "Tell me about topic " + strconv.Itoa(i)
		switch plan := p.lengths.plan(text, false); {
		case plan.total == maxLength && runaway == "":
			runaway = text
		case plan.total < 300 && short == "":
			short, shortLen = text, plan.total
		}
		if i > 10000 {
			t.Fatal("no runaway prompt in 10,000 texts")
		}
	}
	type result struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	ask := func(text, extra string) result {
		t.Helper()
		res := post(context.Background(), f.URLs()[0], "/v1/chat/completions", "application/json",
			`{"model":"m","messages":[{"role":"user","content":"`+text+`"}]`+extra+`}`)
		if res.err != nil || res.status != http.StatusOK {
			t.Fatalf("status %d err %v body %s", res.status, res.err, res.body)
		}
		var r result
		if err := json.Unmarshal(res.body, &r); err != nil || len(r.Choices) != 1 {
			t.Fatalf("decode %s: %v", res.body, err)
		}
		return r
	}
	if r := ask(runaway, `,"max_tokens":512`); r.Choices[0].FinishReason != "length" || r.Usage.CompletionTokens != 512 {
		t.Errorf("runaway %q with max_tokens 512: finish %q after %d tokens, want length after 512", runaway, r.Choices[0].FinishReason, r.Usage.CompletionTokens)
	}
	if r := ask(short, `,"max_tokens":512`); r.Choices[0].FinishReason != "stop" || r.Usage.CompletionTokens != shortLen {
		t.Errorf("short %q: finish %q after %d tokens, want stop after %d", short, r.Choices[0].FinishReason, r.Usage.CompletionTokens, shortLen)
	}
	r := ask(runaway, "")
	if want := p.maxReqLen - r.Usage.PromptTokens - 1; r.Choices[0].FinishReason != "length" || r.Usage.CompletionTokens != want {
		t.Errorf("runaway without max_tokens: finish %q after %d tokens, want length at the context limit (%d)", r.Choices[0].FinishReason, r.Usage.CompletionTokens, want)
	}
}

func TestOutputLengths(t *testing.T) {
	prompts := make([]string, 20000)
	for i := range prompts {
		prompts[i] = fmt.Sprintf("prompt %d", i)
	}
	a, err := OutputLengths(ServerConfig{OutputMean: 2500, OutputSigma: 1}, 3, prompts)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := OutputLengths(ServerConfig{OutputMean: 2500, OutputSigma: 1}, 3, prompts)
	c, _ := OutputLengths(ServerConfig{OutputMean: 2500, OutputSigma: 1}, 4, prompts)
	var sum float64
	same, differ := true, false
	for i := range a {
		sum += float64(a[i])
		same = same && a[i] == b[i]
		differ = differ || a[i] != c[i]
	}
	if !same || !differ {
		t.Errorf("same seed equal: %v, another seed differs: %v; want true, true", same, differ)
	}
	// Lognormal σ 1: the mean of 20,000 is within ±4 % (5 standard errors).
	if m := sum / float64(len(a)); math.Abs(m/2500-1) > 0.04 {
		t.Errorf("mean %.0f, want 2500 ± 4 %%", m)
	}
	if _, err := OutputLengths(ServerConfig{OutputDist: "gamma:-1"}, 1, prompts); err == nil {
		t.Error("bad output_dist accepted")
	}
}
