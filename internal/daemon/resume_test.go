package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gend-dev/gend/api"
)

// TestResumeClosesPendingShard: the output breaks while a shard is due to
// close, the job pauses, the operator repairs it and resumes. The resume
// retries the output, which closes the pending shard and calls back into
// the job (onShardClosed); resume used to hold the job's lock across the
// retry and hung there for good (TestDiskFull's resume timed out).
func TestResumeClosesPendingShard(t *testing.T) {
	urls := startFleet(t, 1, 50)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	r := startDaemon(t, filepath.Join(dir, "state"), api.Config{Servers: []api.ServerSpec{{Name: "a", URL: urls[0]}}})
	ctx := context.Background()
	spec := fmt.Sprintf(`{"name":"resume","input":%q,"request":{"endpoint":"/v1/completions","params":{"max_tokens":64}},"output":{"dir":%q,"shard_records":10},"scheduler":{"mode":"static","per_server":4}}`,
		writePrompts(t, dir, "resume", 200), out)
	j, err := r.c.SubmitJob(ctx, []byte(spec), api.ContentTypeJSON)
	if err != nil {
		t.Fatal(err)
	}
	wait := func(what string, limit time.Duration, ok func(api.Job) bool) api.Job {
		t.Helper()
		deadline := time.Now().Add(limit)
		for {
			got, err := r.c.GetJob(ctx, j.ID)
			if err != nil {
				t.Fatal(err)
			}
			if ok(got) {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s: job %s, %+v", what, got.Status, got.Progress)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	wait("a first shard", 30*time.Second, func(j api.Job) bool { return j.Progress.Completed >= 15 })
	// Break the output: shards/ becomes a file, so the open shard can be
	// written (its file is open) but not renamed into place, and no new
	// shard can be created.
	shards := filepath.Join(out, "shards")
	if err := os.Rename(shards, shards+".away"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(shards, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got := wait("the pause", 30*time.Second, func(j api.Job) bool { return j.Status == api.StatusPaused && j.Progress.InFlight == 0 })
	if !strings.Contains(got.Reason, "unwritable") {
		t.Fatalf("paused with reason %q, want it to say the output is unwritable", got.Reason)
	}
	// Repair, then resume: it must answer, not hang.
	if err := os.Remove(shards); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(shards+".away", shards); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := r.c.ResumeJob(rctx, j.ID); err != nil {
		t.Fatalf("resume after repairing the output: %v", err)
	}
	got = wait("completion", 60*time.Second, func(j api.Job) bool { return api.Terminal(j.Status) })
	if got.Status != api.StatusCompleted || got.Progress.Completed != 200 {
		t.Fatalf("job ended %s (%s) with %d completed, want completed with 200", got.Status, got.Reason, got.Progress.Completed)
	}
	// Each line once in the shards.
	seen := map[string]int{}
	files, _ := filepath.Glob(filepath.Join(shards, "*.jsonl"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			if i := strings.Index(line, `"custom_id":"`); i >= 0 {
				id := line[i+len(`"custom_id":"`):]
				seen[id[:strings.IndexByte(id, '"')]]++
			}
		}
	}
	if len(seen) != 200 {
		t.Errorf("%d distinct custom_ids in %d shards, want 200", len(seen), len(files))
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s written %d times", id, n)
		}
	}
}
