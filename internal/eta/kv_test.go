package eta

import (
	"math"
	"testing"
)

func TestProjectKV(t *testing.T) {
	t.Parallel()
	// One server with a 100k-token cache; 10 tok/s per running request.
	srv := func(running, used, maxRunning float64) Server {
		return Server{TokensPerSec: 10 * running, Running: running, Queued: 5, MaxRunning: maxRunning, KVCapacity: 100000, KVUsed: used}
	}
	tests := []struct {
		name      string
		servers   []Server
		ctx       float64
		wantTput  float64 // steady-state tok/s ÷ now
		wantBatch float64
		wantOK    bool
	}{
		// Full cache (90 %) at 1,000 tokens per request; steady state
		// 2,000: half the batch, same step time, half the throughput.
		{"cache full, contexts double", []Server{srv(90, 90000, 0)}, 2000, 0.5, 0.5, true},
		{"cache full, steady already", []Server{srv(45, 90000, 0)}, 2000, 1, 1, true},
		// Slots bind before the cache: batch 50, contexts 1,000 of a
		// 90k cache, so the step reads more KV than now (45k):
		// step now/steady = (0.5+0.25)/(0.5+0.5·50000/90000).
		{"slots bind", []Server{srv(50, 45000, 50)}, 1000, 0.75 / (0.5 + 0.5*50000.0/90000), 1, true},
		// Cache filling (45 %) with young requests: batch 90 → 45, and
		// the step slows from 0.75 to 1 (relative).
		{"cache filling", []Server{srv(90, 45000, 0)}, 2000, 0.5 * 0.75, 0.5, true},
		{"no cache size", []Server{{TokensPerSec: 100, Running: 10}}, 2000, 0, 0, false},
		{"no servers", nil, 2000, 0, 0, false},
		{"implausible", []Server{srv(90, 90000, 0)}, 100000, 0, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := New(Options{MaxTokens: 8192})
			p := e.projectKV(tc.servers, tc.ctx)
			if p.ok != tc.wantOK {
				t.Fatalf("ok = %v, want %v", p.ok, tc.wantOK)
			}
			if !p.ok {
				return
			}
			if math.Abs(p.tput-tc.wantTput) > 1e-9 || math.Abs(p.batch-tc.wantBatch) > 1e-9 {
				t.Fatalf("tput %.4f batch %.4f, want %.4f %.4f", p.tput, p.batch, tc.wantTput, tc.wantBatch)
			}
		})
	}
}

func TestObserveKV(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		notStarted int64
		servers    []Server
		want       float64
	}{
		{"saturated", 100, []Server{{Running: 40, Queued: 3, KVCapacity: 1000, KVUsed: 850}}, 0.85},
		{"slots full", 100, []Server{{Running: 40, MaxRunning: 40, KVCapacity: 1000, KVUsed: 800}}, 0.8},
		{"not saturated", 100, []Server{{Running: 40, MaxRunning: 64, KVCapacity: 1000, KVUsed: 850}}, 0},
		{"still filling", 100, []Server{{Running: 40, Queued: 3, KVCapacity: 1000, KVUsed: 500}}, 0},
		{"draining", 0, []Server{{Running: 40, Queued: 3, KVCapacity: 1000, KVUsed: 850}}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := New(Options{})
			e.observeKV(State{NotStarted: tc.notStarted, Servers: tc.servers})
			if math.Abs(e.kvUse-tc.want) > 1e-12 {
				t.Fatalf("kvUse = %v, want %v", e.kvUse, tc.want)
			}
		})
	}
}

// TestEstimateKVProjection: a young job on a full cache runs twice as fast
// as it will once contexts reach steady state; the ETA must use the
// steady-state throughput, not the one measured now.
func TestEstimateKVProjection(t *testing.T) {
	t.Parallel()
	mk := func(withServers bool) Result {
		e := New(Options{MaxTokens: 8192})
		// Lengths all 2,000 tokens: steady-state mean age ≈ 1,000.
		for i := 0; i < 200; i++ {
			e.Completed(2000, false)
		}
		inflight := make([]float64, 100)
		for i := range inflight {
			inflight[i] = 250 // young: mean context 250 now
		}
		// 25 s at 10 tok/s: the running requests are young (the
		// equilibrium mean age, ~1,000 tokens, takes ~100 s).
		s := State{Elapsed: 25, NotStarted: 10000, InFlight: inflight, TokensPerSec: 1000, Concurrency: 100, PerRequestTokPerSec: 10}
		if withServers {
			// 100 running × 250 tokens fill 90 % of a 27,778-token cache.
			s.Servers = []Server{{TokensPerSec: 1000, Running: 100, Queued: 10, KVCapacity: 25000 / 0.9, KVUsed: 25000}}
		}
		return e.Estimate(s)
	}
	plain, kv := mk(false), mk(true)
	if !plain.OK || !kv.OK {
		t.Fatalf("estimates not OK: %+v %+v", plain, kv)
	}
	// Steady-state context ≈ 1,000 (+1 bin): the batch shrinks ~4×.
	if r := kv.Seconds / plain.Seconds; r < 3.3 || r > 4.5 {
		t.Fatalf("KV projection ratio %.2f (plain %.0fs, kv %.0fs), want ≈ 4", r, plain.Seconds, kv.Seconds)
	}
	if !(kv.LowSeconds <= kv.Seconds && kv.Seconds <= kv.HighSeconds) {
		t.Fatalf("interval [%v, %v] does not hold %v", kv.LowSeconds, kv.HighSeconds, kv.Seconds)
	}
}

func TestKVProjectionFades(t *testing.T) {
	p := kvProjection{tput: 0.5, batch: 0.25, ok: true}
	if q := p.faded(1); q != p {
		t.Fatalf("weight 1: %+v, want the projection unchanged", q)
	}
	q := p.faded(0.5)
	if math.Abs(q.tput-math.Sqrt(0.5)) > 1e-12 || math.Abs(q.batch-0.5) > 1e-12 || !q.ok {
		t.Fatalf("weight ½: %+v", q)
	}
	if q := p.faded(0); q.tput != 1 || q.batch != 1 {
		t.Fatalf("weight 0: %+v, want no projection", q)
	}

	// Every output 2,000 tokens: a fleet x tokens old lacks
	// (x(2000 − x) + (2000 − x)²/2) / (2000²/2) of the steady context.
	e := New(Options{MaxTokens: 8192})
	for i := 0; i < 200; i++ {
		e.Completed(2000, false)
	}
	e.binInFlight(nil)
	e.work(lognormal{mu: math.Log(2000), sigma: 0.1, ok: true}, 0)
	for _, x := range []float64{0, 500, 1000, 1900, 3000} {
		want := 0.0
		if x < 2000 {
			want = (x*(2000-x) + (2000-x)*(2000-x)/2) / (2000 * 2000 / 2)
		}
		if x == 0 {
			want = 1
		}
		// The curve is binned (~5 % bins): compare loosely.
		if got := e.youngShare(x); math.Abs(got-want) > 0.06 {
			t.Errorf("youngShare(%v) = %.3f, want %.3f", x, got, want)
		}
	}
}

// TestStepLawFit checks the per-server fit of step time on KV in use: it
// recovers a known law from windows that span the cache, and falls back on
// the prior when the cache use has not moved or the relation is not clear.
func TestStepLawFit(t *testing.T) {
	t.Parallel()
	const capacity = 100000.0
	// step = 40 ms + 1 µs per KV token: a full (90 %) cache is 90 ms of KV.
	law := func(kv float64) float64 { return 0.040 + 1e-6*kv }
	srv := func(kv, step float64) Server {
		running := 64.0
		return Server{Name: "a", Running: running, TokensPerSec: running / step, KVCapacity: capacity, KVUsed: kv}
	}
	tests := []struct {
		name  string
		kvs   []float64
		step  func(i int, kv float64) float64
		share float64 // want kvShare at 90 %
	}{
		{"spans the cache", []float64{10e3, 20e3, 30e3, 40e3, 50e3, 60e3, 70e3, 80e3, 90e3, 90e3},
			func(_ int, kv float64) float64 { return law(kv) }, 0.090 / 0.130},
		{"cache always full", []float64{88e3, 89e3, 90e3, 91e3, 90e3, 89e3, 90e3, 91e3, 90e3, 90e3},
			func(_ int, kv float64) float64 { return law(kv) }, kvReadShare},
		// Prefill at the start: the emptiest windows are the slowest.
		{"slope negative", []float64{10e3, 20e3, 30e3, 40e3, 50e3, 60e3, 70e3, 80e3, 90e3, 90e3},
			func(_ int, kv float64) float64 { return 0.2 - 1e-6*kv }, kvReadShare},
		{"too few windows", []float64{10e3, 50e3, 90e3},
			func(_ int, kv float64) float64 { return law(kv) }, kvReadShare},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := New(Options{})
			for i, kv := range tc.kvs {
				e.observeSteps([]Server{srv(kv, tc.step(i, kv))})
			}
			got := e.stepLaw(Server{Name: "a", KVCapacity: capacity}).kvShare(0.9*capacity, 64)
			if math.Abs(got-tc.share) > 1e-6 {
				t.Fatalf("kvShare = %.4f, want %.4f", got, tc.share)
			}
			if other := e.stepLaw(Server{Name: "b", KVCapacity: capacity}).kvShare(0.9*capacity, 64); other != kvReadShare {
				t.Fatalf("unseen server: kvShare = %.4f, want the prior", other)
			}
		})
	}
}

// TestStepLawBatchTerm checks that per-sequence work (a step cost that
// grows with the batch) is separated from the KV term when the batch and
// the KV in use vary independently, so the projection's step ratio
// follows both.
func TestStepLawBatchTerm(t *testing.T) {
	t.Parallel()
	const capacity = 100000.0
	law := stepLawFit{a: 0.02, b: 5e-7, c: 2e-4}
	e := New(Options{})
	for i := 0; i < 40; i++ {
		kv := 10000 + float64(i%8)*10000
		batch := 40 + float64((i*3)%7)*20
		e.observeSteps([]Server{{Name: "a", Running: batch, TokensPerSec: batch / law.step(kv, batch), KVCapacity: capacity, KVUsed: kv}})
	}
	got := e.stepLaw(Server{Name: "a", KVCapacity: capacity})
	if math.Abs(got.a-law.a) > 1e-9 || math.Abs(got.b-law.b) > 1e-12 || math.Abs(got.c-law.c) > 1e-9 {
		t.Fatalf("fit %+v, want %+v", got, law)
	}
	// KV share of a step with 90k KV tokens at batch 100: 0.045/0.085.
	if s := got.kvShare(90000, 100); math.Abs(s-0.045/0.085) > 1e-6 {
		t.Fatalf("kvShare %.4f, want %.4f", s, 0.045/0.085)
	}
}

// TestCalibrated: nothing before the fleet has settled and a request
// lifetime of settled time has passed; then the projection divided by the
// time-weighted geometric mean of projected ÷ measured.
func TestCalibrated(t *testing.T) {
	t.Parallel()
	e := New(Options{MaxTokens: 1000})
	e.area2[0] = 1 // a curve whose ages all lie below one token: old at any age
	e.lifetime = 1
	state := func(el float64) State { return State{Elapsed: el} }
	if _, ok := e.calibrated(State{Elapsed: 0.5}, 110, 1.1, 1000); ok {
		t.Fatal("calibrated on the first call")
	}
	if _, ok := e.calibrated(state(1), 110, 1.1, 1000); ok {
		t.Fatal("calibrated before a lifetime of settled time")
	}
	got, ok := e.calibrated(state(2), 110, 1.1, 1000)
	if !ok || math.Abs(got-100) > 1e-9 {
		t.Fatalf("got %v %v, want 100", got, ok)
	}
	// Ratios 1.1 for 1.5 s and 0.9 for 1.5 s: geometric mean √0.99.
	got, ok = e.calibrated(state(3.5), 90, 0.9, 1000)
	want := e.cal.tput / math.Sqrt(1.1*0.9)
	if !ok || math.Abs(got-want) > 1e-9 {
		t.Fatalf("got %v %v, want %v", got, ok, want)
	}
	// A young fleet's samples do not count (the rates' window starts at 0).
	secs := e.cal.secs
	if _, ok := e.calibrated(State{Elapsed: 4, RateWindow: 4}, 90, 0.5, 1000); ok || e.cal.secs != secs {
		t.Fatalf("a young sample was counted: secs %v → %v", secs, e.cal.secs)
	}
}
