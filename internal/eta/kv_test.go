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
