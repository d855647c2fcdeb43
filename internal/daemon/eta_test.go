package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gend-dev/gend/api"
	"github.com/gend-dev/gend/internal/eta"
)

// TestETAWaitsForEveryServer adds a second server while a streaming job
// runs: until the new server's rates are established (or the first
// seconds have passed), the ETA must not divide by the first server's
// throughput alone. The estimator's inputs are read back from its
// recording (Options.ETARecord).
func TestETAWaitsForEveryServer(t *testing.T) {
	urls := startFleet(t, 2, 10)
	dir := t.TempDir()
	rec, err := os.Create(filepath.Join(dir, "record.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	r := startDaemon(t, filepath.Join(dir, "state"), api.Config{Servers: []api.ServerSpec{{Name: "a", URL: urls[0]}}},
		func(o *Options) { o.ETARecord = rec })
	ctx := context.Background()
	spec := fmt.Sprintf(`{"name":"eta","input":%q,"request":{"endpoint":"/v1/completions","stream":true,"params":{"max_tokens":512}},"output":{"dir":%q},"scheduler":{"mode":"static","per_server":48}}`,
		writePrompts(t, dir, "eta", 3000), filepath.Join(dir, "out"))
	j, err := r.c.SubmitJob(ctx, []byte(spec), api.ContentTypeJSON)
	if err != nil {
		t.Fatal(err)
	}
	// Add the second server once the first has run for a while.
	var addedAt float64
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		cur, err := r.c.GetJob(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if addedAt == 0 && cur.Progress.ElapsedSeconds >= 1.5 {
			if _, err := r.c.AddServer(ctx, api.ServerSpec{Name: "b", URL: urls[1]}); err != nil {
				t.Fatal(err)
			}
			cur, _ = r.c.GetJob(ctx, j.ID)
			addedAt = cur.Progress.ElapsedSeconds
		}
		if api.Terminal(cur.Status) {
			if cur.Status != api.StatusCompleted {
				t.Fatalf("job %s: %s", cur.Status, cur.Reason)
			}
			t.Logf("job completed in %.1f s of running time; second server added at %.1f s", cur.Progress.ElapsedSeconds, addedAt)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if addedAt == 0 {
		t.Fatal("the job ended before the second server was added")
	}
	// Every estimate attempted (a throughput known) after the second
	// server has had time to receive requests, within the first seconds
	// and while requests wait, covers both servers.
	f, err := os.Open(rec.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	var checked, both int
	for sc.Scan() {
		var ev struct {
			K string     `json:"k"`
			S *eta.State `json:"s"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("%v: %.200s", err, sc.Bytes())
		}
		// While requests wait to be sent, both servers hold some.
		if ev.K != "s" || ev.S.TokensPerSec <= 0 || ev.S.NotStarted == 0 || ev.S.Elapsed < addedAt+0.5 || ev.S.Elapsed >= etaFallbackAfter {
			continue
		}
		checked++
		if len(ev.S.Servers) == 2 {
			both++
		} else {
			t.Logf("el %.2f: servers %+v", ev.S.Elapsed, ev.S.Servers)
		}
	}
	if checked == 0 {
		t.Fatalf("no estimate between %.1f s and %.0f s", addedAt+0.5, etaFallbackAfter)
	}
	t.Logf("%d estimates checked", checked)
	if both != checked {
		t.Errorf("%d of %d estimates after the second server joined divided by one server's rate", checked-both, checked)
	}
}
