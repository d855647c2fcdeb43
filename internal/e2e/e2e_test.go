package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gend-dev/gend/api"
)

// TestEndToEnd: gensim + gend + genctl; submit, pause (completed stops, in
// flight reaches 0), resume, resize, finish; exactly-once output; 401.
func TestEndToEnd(t *testing.T) {
	dir := t.TempDir()
	_, urls := startSim(t, "--servers", "2", "--speedup", "100", "--seed", "7")
	if len(urls) != 2 {
		t.Fatalf("gensim servers: %v", urls)
	}
	const token = "e2e-secret"
	g := startGend(t, filepath.Join(dir, "state"), writeFleet(t, dir, urls), token)
	in := writeInput(t, dir, 1200, "e2e")
	out := filepath.Join(dir, "out")
	specPath := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(specPath, []byte(jobSpec(in.path, out, "")), 0o644); err != nil {
		t.Fatal(err)
	}

	// Unauthenticated POST: 401, with the JSON error shape.
	resp, err := http.Post(g.addr+"/v1/jobs", "application/yaml", bytes.NewReader([]byte(jobSpec(in.path, out, ""))))
	if err != nil {
		t.Fatal(err)
	}
	var eb api.ErrorBody
	_ = json.NewDecoder(resp.Body).Decode(&eb)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || eb.Error.Code == "" {
		t.Fatalf("POST without token: %d %+v, want 401 with an error body", resp.StatusCode, eb)
	}
	// A bad spec is refused with every problem listed.
	o, code := genctl(t, g.addr, token, "start", "-f", writeFile(t, dir, "bad.yaml", "input: ''\norder: sideways\noutput: {dir: ''}\nmax_attempts: 0\n"))
	if code != 1 || !strings.Contains(o, "order") || !strings.Contains(o, "output.dir") || !strings.Contains(o, "input") {
		t.Fatalf("bad spec: exit %d, output %q", code, o)
	}

	o, code = genctl(t, g.addr, token, "-o", "json", "start", "-f", specPath)
	if code != 0 {
		t.Fatalf("genctl start: exit %d: %s", code, o)
	}
	var j api.Job
	if err := json.Unmarshal([]byte(o), &j); err != nil || j.ID == "" {
		t.Fatalf("genctl start -o json: %v: %q", err, o)
	}
	j = waitJob(t, g.c, j.ID, 30*time.Second, func(j api.Job) bool { return j.Progress.Completed >= 150 })

	// Pause: in_flight reaches 0 and completed stops rising.
	if o, code := genctl(t, g.addr, token, "pause", j.ID); code != 0 {
		t.Fatalf("pause: %d %s", code, o)
	}
	j = waitJob(t, g.c, j.ID, 60*time.Second, func(j api.Job) bool { return j.Status == api.StatusPaused && j.Progress.InFlight == 0 })
	before := j.Progress.Completed
	time.Sleep(1500 * time.Millisecond)
	j, _ = g.c.GetJob(context.Background(), j.ID)
	if j.Progress.Completed != before || j.Progress.InFlight != 0 {
		t.Fatalf("paused job moved: completed %d → %d, in flight %d", before, j.Progress.Completed, j.Progress.InFlight)
	}

	// Resume, then resize to static 3: the limits show it within a second.
	if o, code := genctl(t, g.addr, token, "resume", j.ID); code != 0 {
		t.Fatalf("resume: %d %s", code, o)
	}
	if o, code := genctl(t, g.addr, token, "resize", j.ID, "--static", "3"); code != 0 {
		t.Fatalf("resize: %d %s", code, o)
	}
	t0 := time.Now()
	waitJob(t, g.c, j.ID, 5*time.Second, func(j api.Job) bool {
		for _, s := range j.Servers {
			if s.Limit != 3 || s.InFlight > 3 {
				return false
			}
		}
		return len(j.Servers) == 2
	})
	if d := time.Since(t0); d > 3*time.Second {
		t.Fatalf("resize took %v to apply (in-flight drains at the attempts' pace)", d)
	}
	if o, code := genctl(t, g.addr, token, "resize", j.ID, "--adaptive"); code != 0 {
		t.Fatalf("resize adaptive: %d %s", code, o)
	}
	j = waitJob(t, g.c, j.ID, 120*time.Second, func(j api.Job) bool { return api.Terminal(j.Status) })
	if j.Status != api.StatusCompleted {
		t.Fatalf("job ended %s (%s)", j.Status, j.Reason)
	}
	recs, errs := verifyOutput(t, out, in)
	t.Logf("shards %d records, errors.jsonl %d lines (bad lines %d, duplicates)", recs, errs, in.badLines)
	if recs < 1100 {
		t.Fatalf("only %d records completed", recs)
	}

	// The plain ETA line and the metrics answer.
	o, code = genctl(t, g.addr, token, "eta", j.ID)
	if code != 0 || !strings.Contains(o, "100.0% done") {
		t.Fatalf("eta: %d %q", code, o)
	}
	resp, err = http.Get(g.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var mb bytes.Buffer
	_, _ = mb.ReadFrom(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"gend_requests_total{outcome=\"ok\",server=\"gpu0\"}", "gend_server_limit{server=\"gpu1\"}", "gend_job_progress_ratio 1"} {
		if !strings.Contains(mb.String(), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}

	// SIGTERM: exits 0 after a drain.
	g.p.signal(syscall.SIGTERM)
	if code, ok := g.p.wait(30 * time.Second); !ok || code != 0 {
		t.Fatalf("gend after SIGTERM: exit %d (exited: %v)", code, ok)
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
