package eta

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestFitLognormalCensored(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		mu, sigma      float64
		censorQuantile float64 // share of the sample observed exactly
	}{
		{"uncensored", 7.3, 1.0, 1},
		{"censored at the median", 7.3, 1.0, 0.5},
		{"censored at 30 %", 7.0, 0.5, 0.3},
		{"wide, censored at 70 %", 7.5, 1.5, 0.7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(1, 2))
			// Type I censoring at the given quantile.
			c := math.Inf(1)
			if tc.censorQuantile < 1 {
				c = tc.mu + tc.sigma*normQuantile(tc.censorQuantile)
			}
			var ex fitSample
			var cens float64
			for i := 0; i < 20000; i++ {
				y := tc.mu + tc.sigma*r.NormFloat64()
				if y > c {
					cens++
					continue
				}
				ex.n++
				ex.sy += y
				ex.syy += y * y
			}
			samples := []fitSample{ex}
			if cens > 0 {
				samples = append(samples, fitSample{n: cens, sy: cens * c, censored: true})
			}
			f := fitLognormal(samples, 6, 2)
			if !f.ok {
				t.Fatal("fit failed")
			}
			if math.Abs(f.mu-tc.mu) > 0.05 || math.Abs(f.sigma-tc.sigma) > 0.05 {
				t.Errorf("fit μ=%.3f σ=%.3f, want μ=%.3f σ=%.3f", f.mu, f.sigma, tc.mu, tc.sigma)
			}
			if !(f.cov[0] > 0 && f.cov[2] > 0 && f.cov[0] < 0.01 && f.cov[2] < 0.01) {
				t.Errorf("covariance %v not small and positive", f.cov)
			}
		})
	}
}

// normQuantile inverts normQ's complement by bisection (test helper).
func normQuantile(p float64) float64 {
	lo, hi := -10.0, 10.0
	for i := 0; i < 100; i++ {
		m := (lo + hi) / 2
		if 1-normQ(m) < p {
			lo = m
		} else {
			hi = m
		}
	}
	return (lo + hi) / 2
}

func TestTailFunctionsStable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		z             float64
		wantMillsNear float64 // 0: only finiteness and ordering are checked
	}{
		{-5, 1.5e-6}, {0, 0.7978845608}, {1, 1.5251352}, {5, 5.1865}, {9, 9.1084}, {40, 40.025}, {200, 200.005},
	}
	for _, tc := range tests {
		m := mills(tc.z)
		lq := logNormQ(tc.z)
		if math.IsNaN(m) || math.IsInf(m, 0) || math.IsNaN(lq) || math.IsInf(lq, 0) {
			t.Errorf("z=%v: mills %v, ln Q %v", tc.z, m, lq)
			continue
		}
		if math.Abs(m-tc.wantMillsNear) > 1e-3*math.Max(1, tc.wantMillsNear) {
			t.Errorf("mills(%v) = %v, want ≈ %v", tc.z, m, tc.wantMillsNear)
		}
		if m < tc.z {
			t.Errorf("mills(%v) = %v below z", tc.z, m)
		}
	}
}

func TestBinsIndex(t *testing.T) {
	t.Parallel()
	for _, max := range []float64{4096, 12000, uncappedMax} {
		b := newBins(max)
		r := rand.New(rand.NewPCG(3, 4))
		for i := 0; i < 10000; i++ {
			x := math.Exp(r.Float64() * math.Log(max))
			if i%100 == 0 {
				x = b.edges[1+r.IntN(numBins-1)] // exact edges too
			}
			j := b.index(x)
			if x < b.edges[j] || (x >= b.edges[j+1] && j != numBins-1) {
				t.Fatalf("max %v: x=%v in bin %d [%v, %v)", max, x, j, b.edges[j], b.edges[j+1])
			}
		}
		if j := b.index(max); j != numBins-1 {
			t.Errorf("max %v: the cap lands in bin %d", max, j)
		}
		if j := b.index(0); j != 0 {
			t.Errorf("0 lands in bin %d", j)
		}
	}
}

func TestEstimateNeedsSignal(t *testing.T) {
	t.Parallel()
	e := New(Options{MaxTokens: 8000})
	st := State{Elapsed: 10, NotStarted: 1000, InFlight: []float64{10, 20}, TokensPerSec: 100, Concurrency: 2}
	if r := e.Estimate(st); r.OK || r.Seconds != 0 || r.Naive != 0 {
		t.Errorf("no completions: %+v, want not OK and zeros", r)
	}
	for i := 0; i < minCompleted-1; i++ {
		e.Completed(100+i, false)
	}
	r := e.Estimate(st)
	if r.OK {
		t.Errorf("%d completions: OK, want not yet", minCompleted-1)
	}
	// Naive = remaining requests / completion rate.
	want := 1002 / (float64(minCompleted-1) / 10)
	if math.Abs(r.Naive-want) > 1e-9 {
		t.Errorf("naive = %v, want %v", r.Naive, want)
	}
	st.TokensPerSec = 0
	e.Completed(100, false)
	if r := e.Estimate(st); r.OK {
		t.Error("OK with no throughput")
	}
}

func TestEstimateDone(t *testing.T) {
	t.Parallel()
	e := New(Options{})
	for i := 0; i < 50; i++ {
		e.Completed(1000, false)
	}
	r := e.Estimate(State{Elapsed: 100, TokensPerSec: 500})
	if !r.OK || r.Seconds != 0 || r.HighSeconds != 0 || r.MeanOutputTokens != 1000 {
		t.Errorf("finished job: %+v, want OK, zero seconds, mean 1000", r)
	}
}

// steadyEstimator has seen many completions from a known distribution
// (no cap hits), as late in a big job.
func steadyEstimator(t *testing.T, maxTokens int) (*Estimator, float64) {
	t.Helper()
	e := New(Options{MaxTokens: maxTokens})
	r := rand.New(rand.NewPCG(5, 6))
	d := LogNormal(1000, 0.8)
	var sum float64
	n := 50000
	for i := 0; i < n; i++ {
		x := math.Min(math.Round(d(r)), float64(maxTokens))
		e.Completed(int(x), x >= float64(maxTokens))
		sum += x
	}
	return e, sum / float64(n)
}

func TestEstimateSteadyState(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		notStarted int64
		tput       float64
	}{
		{"big queue", 200000, 10000},
		{"small queue", 2000, 10000},
		{"slow fleet", 200000, 2000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, mean := steadyEstimator(t, 20000)
			inFlight := make([]float64, 100)
			for i := range inFlight {
				inFlight[i] = float64(10 * i)
			}
			st := State{Elapsed: 1000, NotStarted: tc.notStarted, InFlight: inFlight, TokensPerSec: tc.tput,
				Concurrency: 100, PerRequestTokPerSec: tc.tput / 100}
			r := e.Estimate(st)
			if !r.OK {
				t.Fatal("not OK")
			}
			if math.Abs(r.MeanOutputTokens/mean-1) > 0.01 {
				t.Errorf("mean %v, sample mean %v", r.MeanOutputTokens, mean)
			}
			// The main phase alone takes about queue × mean / throughput.
			lower := float64(tc.notStarted) * mean / tc.tput * 0.97
			if r.Seconds < lower || r.Seconds < r.DrainSeconds {
				t.Errorf("seconds %v below the queue's work %v (drain %v)", r.Seconds, lower, r.DrainSeconds)
			}
			if !(r.LowSeconds <= r.Seconds && r.Seconds <= r.HighSeconds && r.LowSeconds > 0) {
				t.Errorf("interval [%v, %v] around %v", r.LowSeconds, r.HighSeconds, r.Seconds)
			}
		})
	}
}

func TestEstimateFollowsThroughput(t *testing.T) {
	t.Parallel()
	e, _ := steadyEstimator(t, 20000)
	inFlight := make([]float64, 100)
	st := State{Elapsed: 1000, NotStarted: 500000, InFlight: inFlight, TokensPerSec: 10000, Concurrency: 100, PerRequestTokPerSec: 100}
	a := e.Estimate(st)
	// A server lost: half the throughput, half the batch, same speed each.
	st.Elapsed++
	st.TokensPerSec, st.Concurrency = 5000, 50
	b := e.Estimate(st)
	if ratio := b.Seconds / a.Seconds; ratio < 1.9 || ratio > 2.1 {
		t.Errorf("halving the fleet moved the ETA %.2f×, want ≈2× (%v → %v)", ratio, a.Seconds, b.Seconds)
	}
}

func TestEstimateCapBoundsResidual(t *testing.T) {
	t.Parallel()
	e, _ := steadyEstimator(t, 4000)
	inFlight := []float64{3990, 3999, 3500, 4200}
	r := e.Estimate(State{Elapsed: 1000, InFlight: inFlight, TokensPerSec: 400, Concurrency: 100, PerRequestTokPerSec: 100})
	if !r.OK {
		t.Fatal("not OK")
	}
	var bound float64
	for _, l := range inFlight {
		bound += math.Max(4000-l, 0)
	}
	if r.RemainingTokens > bound+1 || r.RemainingTokens <= 0 {
		t.Errorf("remaining tokens %v, cap allows at most %v", r.RemainingTokens, bound)
	}
	// With only the drain left, the finish is bounded by the longest
	// residual (≤ 500 tokens) at the slowest per-request speed.
	if r.Seconds > 500.0/100*1.01 || r.DrainSeconds != r.Seconds {
		t.Errorf("drain %v s of %v s; want all drain, ≤ 5 s", r.DrainSeconds, r.Seconds)
	}
}

func TestSpeedLaw(t *testing.T) {
	t.Parallel()
	tests := []struct{ rho, full float64 }{{1, 512}, {1.5, 512}, {3, 64}, {2, 8}}
	for _, tc := range tests {
		law := anchored(kappaFor(tc.rho, tc.full), tc.full, 20)
		if got := law.secPerToken(tc.full); math.Abs(got-1.0/20) > 1e-12 {
			t.Errorf("ρ=%v: not anchored: %v s/token at full batch", tc.rho, got)
		}
		if got := law.secPerToken(tc.full) / law.secPerToken(1); math.Abs(got-tc.rho) > 1e-9 {
			t.Errorf("ρ=%v full=%v: solo speed-up %v", tc.rho, tc.full, got)
		}
	}
	var m speedModel
	// Learnt from points on 1/v = 0.02 + 0.0001·b.
	for _, b := range []float64{512, 512, 256, 100, 30, 8, 2} {
		m.observe(b, 1/(0.02+0.0001*b), 512, b < 512)
	}
	k, slow, fast := m.kappas(1.5, 512)
	if math.Abs(k-0.005) > 1e-6 || !(slow < k && k < fast) {
		t.Errorf("learnt κ = %v (%v, %v), want 0.005 inside", k, slow, fast)
	}
}

func TestCtxModelFactor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		spt  func(ctx float64) float64
		want float64
	}{
		{"grows with context", func(c float64) float64 { return 0.03 + 0.00001*c }, (0.03 + 0.00001*3000) / (0.03 + 0.00001*1000)},
		{"flat", func(c float64) float64 { return 0.03 }, 1},
		{"capped", func(c float64) float64 { return 0.001 + 0.0001*c }, 1.5},
	}
	for _, tc := range tests {
		var m ctxModel
		for c := 0.0; c <= 1000; c += 50 {
			m.observe(c, tc.spt(c))
		}
		if got := m.factor(1000, 3000); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: factor %v, want %v", tc.name, got, tc.want)
		}
	}
}

func BenchmarkEstimate(b *testing.B) {
	e := New(Options{MaxTokens: 16384})
	r := rand.New(rand.NewPCG(7, 8))
	d := LogNormal(2500, 1)
	for i := 0; i < 5000; i++ {
		x := math.Min(math.Round(d(r)), 16384)
		e.Completed(int(x), x >= 16384)
	}
	inFlight := make([]float64, 1024)
	for i := range inFlight {
		inFlight[i] = float64(r.IntN(8000))
	}
	st := State{Elapsed: 600, NotStarted: 100000, InFlight: inFlight, TokensPerSec: 30000, Concurrency: 1024, PerRequestTokPerSec: 30}
	for b.Loop() {
		st.Elapsed++
		e.Estimate(st)
	}
}
