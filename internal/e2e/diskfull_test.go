package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gend-dev/gend/api"
)

// TestDiskFull fills a small tmpfs output: the job pauses with a clear
// reason, nothing is lost; after the operator makes room (remount bigger)
// and resumes, it completes exactly once. Needs root (mount); skipped
// otherwise.
func TestDiskFull(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", out).Run(); err != nil {
		t.Skipf("cannot mount a tmpfs here (needs root): %v", err)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", out).Run() })
	_, urls := startSim(t, "--servers", "2", "--speedup", "100", "--seed", "5", "--max-content-bytes", "2000")
	g := startGend(t, filepath.Join(dir, "state"), writeFleet(t, dir, urls), "")
	in := writeInput(t, dir, 500, "full")
	j, err := g.c.SubmitJob(context.Background(), []byte(jobSpec(in.path, out, "")), api.ContentTypeYAML)
	if err != nil {
		t.Fatal(err)
	}
	j = waitJob(t, g.c, j.ID, 60*time.Second, func(j api.Job) bool { return j.Status == api.StatusPaused })
	if !strings.Contains(j.Reason, "unwritable") {
		t.Fatalf("paused with reason %q, want it to say the output is unwritable", j.Reason)
	}
	o, _ := genctl(t, g.addr, "", "status", j.ID)
	if !strings.Contains(o, "paused") || !strings.Contains(o, "unwritable") {
		t.Fatalf("genctl status does not show the pause and its reason:\n%s", o)
	}
	// Resume while still full: refused with the reason, job stays paused.
	if o, code := genctl(t, g.addr, "", "resume", j.ID); code == 0 {
		t.Fatalf("resume on a full disk succeeded: %s", o)
	}
	if err := exec.Command("mount", "-o", "remount,size=64m", out).Run(); err != nil {
		t.Fatalf("remount: %v", err)
	}
	if o, code := genctl(t, g.addr, "", "resume", j.ID); code != 0 {
		t.Fatalf("resume after making room: %d %s", code, o)
	}
	j = waitJob(t, g.c, j.ID, 120*time.Second, func(j api.Job) bool { return api.Terminal(j.Status) })
	if j.Status != api.StatusCompleted {
		t.Fatalf("job ended %s: %s", j.Status, j.Reason)
	}
	verifyOutput(t, out, in)
}
