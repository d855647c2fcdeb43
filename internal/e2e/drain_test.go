package e2e

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gend-dev/gend/api"
)

// TestSigtermDrain: SIGTERM stops dispatching, lets in-flight requests
// finish up to --drain-timeout, exits 0; what was still in flight is redone
// after a restart and nothing is written twice.
func TestSigtermDrain(t *testing.T) {
	dir := t.TempDir()
	_, urls := startSim(t, "--servers", "2", "--speedup", "20", "--seed", "3")
	fleet := writeFleet(t, dir, urls)
	state := filepath.Join(dir, "state")
	in := writeInput(t, dir, 300, "drain")
	out := filepath.Join(dir, "out")
	g := startGend(t, state, fleet, "", "--drain-timeout", "1s")
	spec := jobSpec(in.path, out, "") + "scheduler: {mode: static, per_server: 20}\n"
	j, err := g.c.SubmitJob(context.Background(), []byte(spec), api.ContentTypeYAML)
	if err != nil {
		t.Fatal(err)
	}
	cur := waitJob(t, g.c, j.ID, 30*time.Second, func(j api.Job) bool { return j.Progress.Completed >= 10 && j.Progress.InFlight >= 20 })
	t0 := time.Now()
	g.p.signal(syscall.SIGTERM)
	code, ok := g.p.wait(20 * time.Second)
	if !ok || code != 0 {
		t.Fatalf("SIGTERM: exit %d, exited %v", code, ok)
	}
	took := time.Since(t0)
	t.Logf("SIGTERM with %d in flight: exited 0 after %v (drain timeout 1s)", cur.Progress.InFlight, took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Fatalf("shutdown took %v with a 1s drain timeout", took)
	}
	// Restart: the job carries on from its state and completes exactly once.
	g = startGend(t, state, fleet, "", "--drain-timeout", "30s")
	j = waitJob(t, g.c, j.ID, 180*time.Second, func(j api.Job) bool { return api.Terminal(j.Status) })
	if j.Status != api.StatusCompleted {
		t.Fatalf("job ended %s: %s", j.Status, j.Reason)
	}
	verifyOutput(t, out, in)
	// A drain long enough for every in-flight request: exit 0 with nothing in flight lost.
	g.p.signal(syscall.SIGTERM)
	if code, ok := g.p.wait(40 * time.Second); !ok || code != 0 {
		t.Fatalf("second SIGTERM: exit %d, exited %v", code, ok)
	}
}
