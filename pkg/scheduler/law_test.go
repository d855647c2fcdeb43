package scheduler

import "testing"

func TestInitialLimit(t *testing.T) {
	cfg := DefaultLawConfig()
	tests := []struct {
		name      string
		o         Observation
		wantLimit int
	}{
		{"capacity only", Observation{Capacity: 48}, 48 + 12},
		{"kv smaller than capacity", Observation{Capacity: 1024, KVTokens: 123_000, TokensPerRequest: 2048}, 60 + 15},
		{"capacity smaller than kv", Observation{Capacity: 32, KVTokens: 1_000_000, TokensPerRequest: 2048}, 32 + 8},
		{"small server: queue no longer than the batch", Observation{Capacity: 4}, 4 + 4},
		{"queue cap halves the queue", Observation{Capacity: 48, MaxQueued: 16}, 48 + 8},
		{"nothing known", Observation{}, 64 + 16},
		{"capped by max", Observation{Capacity: 4096}, 1024},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := InitialLimit(cfg, tt.o)
			if got != tt.wantLimit {
				t.Fatalf("InitialLimit = %d, want %d", got, tt.wantLimit)
			}
		})
	}
}

func TestStep(t *testing.T) {
	cfg := DefaultLawConfig()
	started := func(limit int) LawState { return LawState{Limit: limit, QueueTarget: 4, Started: true} }
	tests := []struct {
		name       string
		st         LawState
		o          Observation
		wantLimit  int
		wantReason string
	}{
		{"first period fills capacity", LawState{}, Observation{Capacity: 40, HasGauges: true}, 50, "start"},
		{"grow while queue short and KV has room", started(40),
			Observation{Fresh: true, HasGauges: true, Running: 40, Queued: 0, TokenUsage: 0.5, InFlight: 40}, 50, "grow"},
		{"no growth when gend does not use its limit", started(40),
			Observation{Fresh: true, HasGauges: true, Running: 10, Queued: 0, TokenUsage: 0.2, InFlight: 10}, 40, "hold"},
		{"KV full: keep only a one-request queue", started(40),
			Observation{Fresh: true, HasGauges: true, Running: 36, Queued: 0, TokenUsage: 0.97, InFlight: 40}, 41, "grow"},
		{"KV full with a queue: hold", started(40),
			Observation{Fresh: true, HasGauges: true, Running: 36, Queued: 3, TokenUsage: 0.97, InFlight: 40}, 40, "hold"},
		{"long queue is trimmed toward running+target", started(200),
			Observation{Fresh: true, HasGauges: true, Running: 40, Queued: 160, TokenUsage: 0.95, InFlight: 200}, 125, "trim_queue"},
		{"a queue within TrimFactor × target stays", started(60),
			Observation{Fresh: true, HasGauges: true, Running: 40, Queued: 20, TokenUsage: 0.95, InFlight: 60}, 60, "hold"},
		{"trim never below running+target", started(55),
			Observation{Fresh: true, HasGauges: true, Running: 40, Queued: 35, TokenUsage: 0.95, InFlight: 75}, 50, "trim_queue"},
		{"503 cuts multiplicatively", started(100),
			Observation{Fresh: true, HasGauges: true, Running: 60, Queued: 40, Overloads: 3, InFlight: 100}, 70, "overload"},
		{"error burst cuts", started(100),
			Observation{Fresh: true, HasGauges: true, Running: 60, Errors: 10, Successes: 5, InFlight: 100}, 70, "errors"},
		{"sparse errors are ignored", started(100),
			Observation{Fresh: true, HasGauges: true, Running: 96, Queued: 10, Errors: 1, Successes: 50, TokenUsage: 0.95, InFlight: 100}, 100, "hold"},
		{"retraction storm cuts multiplicatively", started(100),
			Observation{Fresh: true, HasGauges: true, Running: 80, Queued: 20, Retractions: 25, TokenUsage: 0.99, InFlight: 100}, 70, "retractions"},
		{"some retractions trim the queue, not the batch", started(100),
			Observation{Fresh: true, HasGauges: true, Running: 80, Queued: 20, Retractions: 12, TokenUsage: 0.99, InFlight: 100}, 88, "retractions"},
		{"some retractions with a short queue: hold", started(30),
			Observation{Fresh: true, HasGauges: true, Running: 27, Queued: 3, Retractions: 3, TokenUsage: 0.95, InFlight: 30}, 30, "hold"},
		{"some retractions block growth", started(30),
			Observation{Fresh: true, HasGauges: true, Running: 30, Queued: 0, Retractions: 3, TokenUsage: 0.5, InFlight: 30}, 30, "hold"},
		{"one retraction is not a storm", started(44),
			Observation{Fresh: true, HasGauges: true, Running: 40, Queued: 4, Retractions: 1, TokenUsage: 0.95, InFlight: 44}, 44, "hold"},
		{"stale gauges never raise", started(40),
			Observation{Fresh: false, HasGauges: true, Running: 0, Queued: 0, InFlight: 40}, 40, "stale"},
		{"capacity caps growth", started(44),
			Observation{Fresh: true, HasGauges: true, Capacity: 40, Running: 40, Queued: 0, TokenUsage: 0.3, InFlight: 44}, 50, "grow"},
		{"a capped server queue is kept under half its cap", started(60),
			Observation{Fresh: true, HasGauges: true, MaxQueued: 16, Running: 40, Queued: 14, TokenUsage: 0.8, InFlight: 60}, 54, "trim_queue"},
		{"no growth past half the queue cap", started(48),
			Observation{Fresh: true, HasGauges: true, MaxQueued: 16, Running: 40, Queued: 8, TokenUsage: 0.5, InFlight: 48}, 48, "hold"},
		{"cooldown blocks growth after a cut", LawState{Limit: 40, QueueTarget: 4, Started: true, Cooldown: 2},
			Observation{Fresh: true, HasGauges: true, Running: 40, Queued: 0, TokenUsage: 0.5, InFlight: 40}, 40, "hold"},
		{"max caps everything", started(1024),
			Observation{Fresh: true, HasGauges: true, Running: 1024, Queued: 0, TokenUsage: 0.5, InFlight: 1024}, 1024, "grow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, d := Step(cfg, tt.st, tt.o)
			if d.Limit != tt.wantLimit || d.Reason != tt.wantReason {
				t.Fatalf("Step = limit %d reason %q, want %d %q", d.Limit, d.Reason, tt.wantLimit, tt.wantReason)
			}
		})
	}
}

// A server whose running batch is capped by KV at 40 settles at a bounded
// queue (at most TrimFactor × the target of 10), whatever the starting limit.
func TestStepConvergesToSmallQueue(t *testing.T) {
	cfg := DefaultLawConfig()
	for _, start := range []int{8, 40, 300, 1024} {
		st := LawState{Limit: start, QueueTarget: 4, Started: true}
		for i := 0; i < 200; i++ {
			inflight := st.Limit
			running := inflight
			if running > 40 {
				running = 40
			}
			queued := inflight - running
			usage := float64(running) / 42
			st, _ = Step(cfg, st, Observation{Fresh: true, HasGauges: true, Running: running, Queued: queued, TokenUsage: usage, InFlight: inflight})
		}
		if st.Limit < 41 || st.Limit > 40+cfg.TrimFactor*10 {
			t.Errorf("start %d: settled at limit %d, want 41..%d (batch 40 plus a bounded queue)", start, st.Limit, 40+cfg.TrimFactor*10)
		}
	}
}

func TestHillClimbWithoutGauges(t *testing.T) {
	cfg := DefaultLawConfig()
	st := LawState{Limit: 20, Started: true}
	// Throughput rises with the limit up to 60, then is flat.
	tput := func(l int) float64 { return float64(min(l, 60)) * 10 }
	for i := 0; i < 400; i++ {
		st, _ = Step(cfg, st, Observation{HasGauges: false, Throughput: tput(st.Limit), InFlight: st.Limit})
	}
	if st.Limit < 55 {
		t.Fatalf("hill climb stopped at %d, want near the knee (>= 55)", st.Limit)
	}
}
