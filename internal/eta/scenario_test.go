package eta

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestFitMu checks the profile fit of μ with σ held: with σ at its true
// value it recovers μ from censored data; with σ held higher it moves μ
// down (the same short outputs, a heavier tail).
func TestFitMu(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		mu, sigma float64
		hold      float64 // σ held in the fit
		censorQ   float64 // share observed exactly
		wantMu    func(mu float64) bool
	}{
		{"true sigma, censored at 30 %", 7.3, 1.0, 1.0, 0.3, func(m float64) bool { return math.Abs(m-7.3) < 0.05 }},
		{"true sigma, uncensored", 6.0, 0.5, 0.5, 1, func(m float64) bool { return math.Abs(m-6.0) < 0.02 }},
		{"heavier sigma held, censored at 10 %", 7.3, 1.0, 1.5, 0.1, func(m float64) bool { return m > 7.3+0.3 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(3, 4))
			c := math.Inf(1)
			if tc.censorQ < 1 {
				c = tc.mu + tc.sigma*normQuantile(tc.censorQ)
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
			f := fitMu(samples, 5, tc.hold)
			if !f.ok || f.sigma != tc.hold {
				t.Fatalf("fit %+v", f)
			}
			if !tc.wantMu(f.mu) {
				t.Errorf("mu %.3f (true %.3f, sigma held %.2f)", f.mu, tc.mu, tc.hold)
			}
		})
	}
	if f := fitMu([]fitSample{{n: 1, sy: 5, syy: 25}}, 5, 1); f.ok {
		t.Errorf("one observation: fit %+v, want not ok", f)
	}
}

// TestSmoothMain checks the main-phase throughput average: it damps the
// swings of a steady fleet and restarts when the fleet changes.
func TestSmoothMain(t *testing.T) {
	t.Parallel()
	srv := func(n int) []Server {
		out := make([]Server, n)
		for i := range out {
			out[i] = Server{KVCapacity: 100000, MaxRunning: 100}
		}
		return out
	}
	tests := []struct {
		name    string
		servers []Server // second sample's servers (the first has 4)
		conc    float64  // second sample's concurrency
		want    float64  // ratio returned for the second sample
		tol     float64
	}{
		// 100 s lifetime (time constant 50 s), 1 s later, throughput
		// +20 %: barely moves.
		{"swing damped", srv(4), 400, 1 / 1.2 * (1 + 0.2*(1-math.Exp(-0.02))), 1e-9},
		{"server lost", srv(3), 300, 1, 0},
		{"no servers, fleet halved", nil, 200, 1, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := New(Options{})
			first := State{Elapsed: 100, Concurrency: 400, Servers: srv(4)}
			if tc.servers == nil {
				first.Servers = nil
			}
			if got := e.smoothMain(first, 1000, 100); got != 1 {
				t.Fatalf("first sample ratio %v, want 1", got)
			}
			got := e.smoothMain(State{Elapsed: 101, Concurrency: tc.conc, Servers: tc.servers}, 1200, 100)
			if math.Abs(got-tc.want) > tc.tol {
				t.Errorf("ratio %v, want %v", got, tc.want)
			}
		})
	}
}

// TestKVDrain checks the drain under the KV law: the remaining requests
// speed up as the KV they read shrinks, never beyond the weights-bound
// speed, and a larger KV share makes the drain shorter.
func TestKVDrain(t *testing.T) {
	t.Parallel()
	e, _ := steadyEstimator(t, 20000)
	inFlight := make([]float64, 100)
	for i := range inFlight {
		inFlight[i] = float64(20 * i)
	}
	st := State{Elapsed: 1000, NotStarted: 0, InFlight: inFlight, TokensPerSec: 10000, Concurrency: 100, PerRequestTokPerSec: 100}
	if r := e.Estimate(st); !r.OK {
		t.Fatal("not OK")
	}
	w := e.work(e.fit, 0)
	drain := func(kv kvDrain) [3]timeline {
		return e.timeline(w, 0, 100, 100, 100, 1, [3]float64{}, kv)
	}
	flat := drain(kvDrain{})[0].drain // κ = 0: no speed-up at all
	var ctx0 float64
	for _, l := range inFlight {
		ctx0 += l + 500
	}
	kv := kvDrain{ok: true, prompt: 500, cache: ctx0, rho: [3]float64{0.5, 0.75, 0.25}}
	ts := drain(kv)
	if !(ts[0].drain < flat && ts[0].drain > 0.5*flat) {
		t.Errorf("KV drain %v, want in (%v, %v)", ts[0].drain, 0.5*flat, flat)
	}
	if !(ts[1].drain < ts[0].drain && ts[0].drain < ts[2].drain) {
		t.Errorf("drain by KV share 0.75/0.5/0.25: %v %v %v, want increasing", ts[1].drain, ts[0].drain, ts[2].drain)
	}
	// A cache much larger than the requests' contexts: KV is a small part
	// of the step, so the drain is close to the flat one.
	kv.cache = 100 * ctx0
	if d := drain(kv)[0].drain; d < 0.98*flat || d > flat {
		t.Errorf("KV drain with a mostly empty cache %v, want ≈ %v", d, flat)
	}
}
