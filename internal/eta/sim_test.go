package eta

import (
	"math"
	"sync"
	"testing"
)

// TestSimulateAccuracy runs every simulated job, logs the checkpoint table
// (estimate, interval, error, naive error) and checks the error targets per
// job and the interval coverage over all checkpoints.
func TestSimulateAccuracy(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var covered, total int
	t.Cleanup(func() {
		frac := float64(covered) / float64(total)
		t.Logf("interval covered the truth at %d of %d checkpoints (%.0f %%)", covered, total, 100*frac)
		if frac < 0.9 {
			t.Errorf("coverage %.2f < 0.90", frac)
		}
	})
	for _, tc := range simCases() {
		t.Run(tc.cfg.Name, func(t *testing.T) {
			t.Parallel()
			cps := Simulate(tc.cfg)
			t.Logf("%s\n%s", tc.cfg.Name, Table(cps))
			if len(cps) != 7 {
				t.Fatalf("got %d checkpoints, want 7", len(cps))
			}
			mu.Lock()
			for _, c := range cps {
				total++
				if c.Covered {
					covered++
				}
			}
			mu.Unlock()
			for _, c := range cps {
				if !c.Result.OK {
					t.Errorf("%.0f %%: no estimate", 100*c.Progress)
					continue
				}
				tol := math.Inf(1)
				switch {
				case c.Progress >= 0.10-1e-9:
					tol = tc.tol10
				case c.Progress >= 0.02-1e-9:
					tol = tc.tol2
				}
				if math.Abs(c.Err) > tol {
					t.Errorf("%.0f %%: error %+.1f %% beyond ±%.0f %%", 100*c.Progress, 100*c.Err, 100*tol)
				}
			}
		})
	}
}

func TestSimulateDeterministic(t *testing.T) {
	t.Parallel()
	cfg := SimConfig{Requests: 3000, Servers: 2, Slots: 32, Lengths: LogNormal(800, 1), MaxTokens: 4000, Seed: 42}
	a, b := Simulate(cfg), Simulate(cfg)
	if len(a) != len(b) || len(a) == 0 {
		t.Fatalf("checkpoints: %d and %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("checkpoint %d differs: %+v vs %+v", i, a[i], b[i])
		}
	}
	for i := 1; i < len(a); i++ {
		if a[i].Elapsed < a[i-1].Elapsed || a[i].TrueRemaining > a[i-1].TrueRemaining {
			t.Errorf("checkpoint %d out of order: %+v after %+v", i, a[i], a[i-1])
		}
	}
}
