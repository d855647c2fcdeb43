package daemon

import (
	"math"
	"testing"
	"time"

	"github.com/gend-dev/gend/api"
	"github.com/gend-dev/gend/internal/eta"
	"github.com/gend-dev/gend/pkg/scheduler"
)

// history builds a server whose requests each make 10 tokens/s, with one
// sample a second over the last 60 s; done(t) and queued(t) give its
// cumulative ended attempts and its queue t seconds before now.
func history(now time.Time, running int, done func(ago float64) float64, queued func(ago float64) float64) *srvRate {
	r := &srvRate{perReqRate: 10, rateSamples: 60, running: running, genRate: 10 * float64(running), seen: true}
	for ago := 60; ago >= 0; ago-- {
		a := float64(ago)
		r.hist = append(r.hist, progSample{at: now.Add(-time.Duration(ago) * time.Second), progress: 10 * (60 - a), done: done(a), queued: queued(a)})
	}
	r.lastAt = r.hist[len(r.hist)-1].at
	r.doneReq = int64(done(0))
	r.queued = int(queued(0))
	return r
}

func TestInflightTokens(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	zero := func(float64) float64 { return 0 }
	// One attempt ends per second.
	steady := func(ago float64) float64 { return 100 - ago }
	tests := []struct {
		name string
		srv  *srvRate // nil: the server is unknown
		kv   float64  // KV cache tokens in use (0 = unknown)
		ages []scheduler.InFlightAge
		want []float64
	}{
		{"no queue: decoding since sent", history(now, 2, steady, zero), 0,
			[]scheduler.InFlightAge{{Server: "a", Seconds: 10}, {Server: "a", Seconds: 30}}, []float64{100, 300}},
		// Sent 30 s ago behind 5 waiting requests, one ending a second:
		// admitted 25 s ago.
		{"queued when sent", history(now, 2, steady, func(ago float64) float64 {
			if ago >= 29 {
				return 5
			}
			return 0
		}), 0, []scheduler.InFlightAge{{Server: "a", Seconds: 30}}, []float64{250}},
		// Sent 10 s ago behind 20 waiting, none ended since: still queued.
		{"still waiting", history(now, 2, func(ago float64) float64 {
			if ago > 12 {
				return 50 - ago
			}
			return 38
		}, func(float64) float64 { return 20 }), 0, []scheduler.InFlightAge{{Server: "a", Seconds: 10}}, []float64{0}},
		// The server reports 1 queued now: the youngest waits.
		{"youngest queued now", history(now, 1, steady, func(ago float64) float64 {
			if ago == 0 {
				return 1
			}
			return 0
		}), 0, []scheduler.InFlightAge{{Server: "a", Seconds: 2}, {Server: "a", Seconds: 20}}, []float64{0, 200}},
		{"streamed wins when larger", history(now, 2, steady, zero), 0,
			[]scheduler.InFlightAge{{Server: "a", Seconds: 10, Streamed: 500}, {Server: "a", Seconds: 10, Streamed: 50}}, []float64{500, 100}},
		// The server's own count is the truth, even below the model's
		// estimate (a request retracted or admitted late).
		{"exact streamed count as is", history(now, 2, steady, zero), 0,
			[]scheduler.InFlightAge{{Server: "a", Seconds: 10, Streamed: 50, Exact: true}, {Server: "a", Seconds: 10, Streamed: 50}}, []float64{50, 100}},
		// Estimates 100 + 300 but only 200 cache tokens in use.
		{"KV cache bounds the sum", history(now, 2, steady, zero), 200,
			[]scheduler.InFlightAge{{Server: "a", Seconds: 10}, {Server: "a", Seconds: 30}}, []float64{50, 150}},
		// The gauges are 1 s old: the bound holds for the outputs then
		// (90 + 290, scaled to 200), plus the 10 tokens made since.
		{"KV cache bounds the sum at the gauges' time", history(now.Add(-time.Second), 2, steady, zero), 200,
			[]scheduler.InFlightAge{{Server: "a", Seconds: 10}, {Server: "a", Seconds: 30}}, []float64{90*200.0/380 + 10, 290*200.0/380 + 10}},
		{"unknown server", nil, 0, []scheduler.InFlightAge{{Server: "a", Seconds: 10, Streamed: 7}}, []float64{7}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tp := &throughput{srv: map[string]*srvRate{}}
			if tc.srv != nil {
				tc.srv.kvUsed, tc.srv.kvCap = tc.kv, 1000
				tp.srv["a"] = tc.srv
			}
			own := map[string]int{"a": len(tc.ages)}
			got := tp.inflightTokens(tc.ages, own, own, now)
			for i := range got {
				if math.Abs(got[i]-tc.want[i]) > 1e-6 {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestThroughputSampleProgress(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_000_000, 0)
	var tp throughput
	// Gauges every second: 4 running requests, 40 tokens/s in all, half
	// the 1,000-token cache in use, 2 queued.
	for i := 0; i <= 5; i++ {
		g := &api.Gauges{At: t0.Add(time.Duration(i) * time.Second), Running: 4, Queued: 2, GenTokensTotal: float64(1 + 40*i),
			MaxRunning: 8, MaxTotalTokens: 1000, TokenUsage: 0.5}
		tp.sample([]api.Server{{ServerSpec: api.ServerSpec{Name: "a"}, Gauges: g}}, 1)
	}
	r := tp.srv["a"]
	if len(r.hist) != 6 {
		t.Fatalf("history has %d samples, want 6", len(r.hist))
	}
	// Five deltas over busy intervals, 10 tokens/s per request.
	if r.rateSamples != 5 || math.Abs(r.perReqRate-10) > 1e-9 || math.Abs(r.progress-50) > 1e-9 {
		t.Fatalf("rate samples %d, per-request rate %v, progress %v; want 5, 10, 50", r.rateSamples, r.perReqRate, r.progress)
	}
	// Too short a window (under two intervals): no server; a 10 s window:
	// the averages over the five busy seconds.
	if srv := tp.servers(nil, nil, time.Second, t0.Add(5*time.Second)); len(srv) != 0 {
		t.Fatalf("1 s window: %+v, want none", srv)
	}
	for _, window := range []time.Duration{10 * time.Second} {
		srv := tp.servers(nil, map[string]int{"a": 6}, window, t0.Add(5*time.Second))
		if len(srv) != 1 {
			t.Fatalf("servers: %+v", srv)
		}
		s := srv[0]
		if math.Abs(s.TokensPerSec-40) > 1e-9 || math.Abs(s.Running-4) > 1e-9 || s.Queued != 2 || s.MaxRunning != 6 || s.KVCapacity != 1000 || math.Abs(s.KVUsed-500) > 1e-9 {
			t.Fatalf("window %v: server %+v", window, s)
		}
	}
	if tok, running, _ := tp.fleet(nil); tok <= 0 || running != 4 {
		t.Fatalf("fleet = %v, %v", tok, running)
	}
}

// TestServersWindowed checks that the servers' rates for the ETA are
// averaged over the window: a throughput alternating between 30 and 50
// tokens/s per second reads 40 over an even window, not the last swing;
// the window starts after the server was last idle and its ramp; a sample
// whose counter was read late moves the rate less than an end point would.
func TestServersWindowed(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_000_000, 0)
	var tp throughput
	gen := 1.0
	for i := 0; i <= 20; i++ {
		running := 4
		if i == 10 {
			running = 0 // idle: the window must not reach back past here
		}
		if i > 0 && i != 11 {
			if i%2 == 0 {
				gen += 30
			} else {
				gen += 50
			}
		}
		g := &api.Gauges{At: t0.Add(time.Duration(i) * time.Second), Running: running, GenTokensTotal: gen, MaxRunning: 8, MaxTotalTokens: 1000, TokenUsage: 0.5}
		tp.sample([]api.Server{{ServerSpec: api.ServerSpec{Name: "a"}, Gauges: g}}, 1)
	}
	// The short EWMA follows the swings; the window does not.
	if r := tp.srv["a"]; math.Abs(r.perReqRate*4-40) < 2 {
		t.Fatalf("EWMA: %v tok/s, want a swing away from 40", r.perReqRate*4)
	}
	now := t0.Add(20 * time.Second)
	if srv := tp.servers(nil, nil, 8*time.Second, now.Add(etaStale+time.Second)); len(srv) != 0 {
		t.Fatalf("gauges %v old: %+v, want the server left out", etaStale+time.Second, srv)
	}
	s := tp.servers(nil, nil, 6*time.Second, now)[0]
	if math.Abs(s.TokensPerSec-40) > 1e-9 || math.Abs(s.Running-4) > 1e-9 {
		t.Fatalf("6 s window: %+v, want 40 tok/s over 4 running", s)
	}
	// The estimator learns each server's step-time law by name.
	if s.Name != "a" {
		t.Fatalf("server name %q, want %q", s.Name, "a")
	}
	// A 60 s window stops where the server was idle (the interval ending
	// at second 11 began idle) and leaves out the busy run's first two
	// intervals (the ramp): seconds 13 … 20, cumulative tokens 0, 30, 80,
	// 110, 160, 190, 240, 270, whose least-squares slope is 1660/42.
	r := tp.srv["a"]
	tok, running, _, ok := r.windowed(60 * time.Second)
	if !ok || math.Abs(tok-1660.0/42) > 1e-9 || math.Abs(running-4) > 1e-9 {
		t.Fatalf("60 s window: %v tok/s, %v running, ok %v", tok, running, ok)
	}
	// One counter read 0.2 s late at the window's end (its timestamp is
	// early, the tokens of 0.2 s more are in it): the end-point rate would
	// read 40 + 8/6; the slope reads less.
	var late throughput
	for i := 0; i <= 10; i++ {
		g := &api.Gauges{At: t0.Add(time.Duration(i) * time.Second), Running: 4, GenTokensTotal: float64(1 + 40*i), MaxRunning: 8, MaxTotalTokens: 1000, TokenUsage: 0.5}
		if i == 10 {
			g.GenTokensTotal += 8
		}
		late.sample([]api.Server{{ServerSpec: api.ServerSpec{Name: "a"}, Gauges: g}}, 1)
	}
	// (Over 7 points the slope moves 8 × 3/28 = 0.86, the end points 1.33.)
	if tok, _, _, ok := late.srv["a"].windowed(6 * time.Second); !ok || math.Abs(tok-(40+8*3.0/28)) > 1e-9 {
		t.Fatalf("late counter: %v tok/s, want %v (end points: %v)", tok, 40+8*3.0/28, 40+8.0/6)
	}
	// Two intervals into a busy run there is no rate yet.
	var fresh throughput
	for i := 0; i <= 3; i++ {
		running := 4
		if i == 0 {
			running = 0
		}
		g := &api.Gauges{At: t0.Add(time.Duration(i) * time.Second), Running: running, GenTokensTotal: float64(1 + 40*i), MaxRunning: 8, MaxTotalTokens: 1000, TokenUsage: 0.5}
		fresh.sample([]api.Server{{ServerSpec: api.ServerSpec{Name: "a"}, Gauges: g}}, 1)
	}
	if _, _, _, ok := fresh.srv["a"].windowed(time.Minute); ok {
		t.Fatalf("rates after %d samples of a busy run", len(fresh.srv["a"].hist))
	}
}

// TestSampleCadence checks the sampling period's bounds and that the rate
// EWMAs weigh a sample by its length: two half-second samples move the
// average as far as one one-second sample.
func TestSampleCadence(t *testing.T) {
	periods := []struct {
		control, want time.Duration
	}{
		{0, 100 * time.Millisecond},
		{250 * time.Millisecond, 250 * time.Millisecond},
		{500 * time.Millisecond, 500 * time.Millisecond},
		{5 * time.Second, time.Second},
	}
	for _, tc := range periods {
		if got := samplePeriod(tc.control); got != tc.want {
			t.Errorf("samplePeriod(%v) = %v, want %v", tc.control, got, tc.want)
		}
	}
	weights := []struct {
		w, dt, want float64
	}{
		{0.3, 1, 0.3},
		{0.6, 1, 0.6},
		{0.3, 0, 0},
		{0.3, 2, 1 - 0.7*0.7},
	}
	for _, tc := range weights {
		if got := ewmaWeight(tc.w, tc.dt); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("ewmaWeight(%v, %v) = %v, want %v", tc.w, tc.dt, got, tc.want)
		}
	}
	half := ewmaWeight(0.3, 0.5)
	x := 0.0
	for i := 0; i < 2; i++ {
		x += half * (1 - x)
	}
	if math.Abs(x-0.3) > 1e-12 {
		t.Errorf("two half-second samples moved the EWMA %v, one second sample 0.3", x)
	}
}

func TestCoveringServers(t *testing.T) {
	t.Parallel()
	a, b := eta.Server{Name: "a", TokensPerSec: 100}, eta.Server{Name: "b", TokensPerSec: 100}
	own := map[string]int{"a": 30, "b": 10}
	tests := []struct {
		name    string
		servers []eta.Server
		el      float64
		want    int // servers returned
		scale   float64
	}{
		{"all covered", []eta.Server{a, b}, 2, 2, 1},
		{"one missing early: wait", []eta.Server{a}, 2, 0, 1},
		{"one missing later: scale up", []eta.Server{a}, etaFallbackAfter + 1, 1, 40.0 / 30},
		{"none", nil, 2, 0, 1},
	}
	for _, tc := range tests {
		got, scale := coveringServers(tc.servers, own, 40, tc.el)
		if len(got) != tc.want || math.Abs(scale-tc.scale) > 1e-9 {
			t.Errorf("%s: %d servers, scale %v; want %d, %v", tc.name, len(got), scale, tc.want, tc.scale)
		}
	}
}

// TestThroughputFreshServer: a fresh server's generation counter reads 0
// until it has generated; the tokens of the first interval after that 0
// count toward the running requests' progress (over the batch then), so
// the first wave's requests are not credited a quarter too little.
func TestThroughputFreshServer(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_000_000, 0)
	var tp throughput
	feed := func(i int, running int, gen float64) {
		g := &api.Gauges{At: t0.Add(time.Duration(i) * 250 * time.Millisecond), Running: running, GenTokensTotal: gen,
			MaxRunning: 64, MaxTotalTokens: 100000, TokenUsage: 0.1}
		tp.sample([]api.Server{{ServerSpec: api.ServerSpec{Name: "a"}, Gauges: g}}, 0.25)
	}
	for i := 0; i < 8; i++ {
		feed(i, 0, 0) // idle, fresh: 1.75 s of zero readings
	}
	feed(8, 10, 2500) // the job's first wave: 10 requests, 250 tokens each
	feed(9, 10, 5000)
	r := tp.srv["a"]
	if math.Abs(r.progress-500) > 1e-9 {
		t.Fatalf("progress %v after two intervals of 250 tokens per request, want 500", r.progress)
	}
	// A request sent at the last idle reading has made all of it; one
	// sent a second earlier made no more (the server was idle).
	lastIdle := t0.Add(7 * 250 * time.Millisecond)
	now := t0.Add(9 * 250 * time.Millisecond)
	for _, sent := range []time.Time{lastIdle, lastIdle.Add(-time.Second)} {
		if got := r.progressAt(now) - r.progressAt(sent); math.Abs(got-500) > 1e-9 {
			t.Errorf("progress since %v: %v, want 500", sent.Sub(t0), got)
		}
	}
	// A server whose counter is nonzero from the first reading (it ran
	// before) starts counting at that reading, as before.
	var tp2 throughput
	for i, gen := range []float64{7000, 9500, 12000} {
		g := &api.Gauges{At: t0.Add(time.Duration(i) * 250 * time.Millisecond), Running: 10, GenTokensTotal: gen,
			MaxRunning: 64, MaxTotalTokens: 100000, TokenUsage: 0.1}
		tp2.sample([]api.Server{{ServerSpec: api.ServerSpec{Name: "a"}, Gauges: g}}, 0.25)
	}
	if p := tp2.srv["a"].progress; math.Abs(p-500) > 1e-9 {
		t.Fatalf("progress %v for a server that ran before, want 500", p)
	}
}
