package e2e

import (
	"bufio"
	"context"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gend-dev/gend/api"
)

// serverCompletions sums gensim's finished (non-aborted) requests.
func serverCompletions(t *testing.T, urls []string) int {
	t.Helper()
	total := 0.0
	for _, u := range urls {
		resp, err := http.Get(u + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			for name, sign := range map[string]float64{"sglang:num_requests_total": 1, "sglang:num_aborted_requests_total": -1} {
				if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
					f := strings.Fields(line)
					v, _ := strconv.ParseFloat(f[len(f)-1], 64)
					total += sign * v
				}
			}
		}
		resp.Body.Close()
	}
	return int(total)
}

// TestCrashRecovery SIGKILLs gend at random moments during a job on a
// faulty fleet, restarts it each time, and checks the output is exactly once
// and that only in-flight requests were generated twice.
func TestCrashRecovery(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("GEND_CRASH_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("seed %d (GEND_CRASH_SEED to replay)", seed)
	dir := t.TempDir()
	_, urls := startSim(t, "--servers", "2", "--speedup", "100", "--seed", "11", "--error-rate", "0.03")
	fleet := writeFleet(t, dir, urls)
	state := filepath.Join(dir, "state")
	in := writeInput(t, dir, 1500, "crash")
	out := filepath.Join(dir, "out")
	g := startGend(t, state, fleet, "")
	j, err := g.c.SubmitJob(context.Background(), []byte(jobSpec(in.path, out, "")), api.ContentTypeYAML)
	if err != nil {
		t.Fatal(err)
	}
	kills, inflightAtKills := 0, 0
	for kills < 6 {
		time.Sleep(time.Duration(300+rng.IntN(2200)) * time.Millisecond)
		cur, err := g.c.GetJob(context.Background(), j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if api.Terminal(cur.Status) {
			break
		}
		g.p.signal(syscall.SIGKILL)
		if _, ok := g.p.wait(10 * time.Second); !ok {
			t.Fatal("gend did not die on SIGKILL")
		}
		kills++
		inflightAtKills += int(cur.Progress.InFlight)
		t.Logf("kill %d at %d/%d done, %d in flight", kills, cur.Progress.Completed+cur.Progress.Failed, cur.Progress.Total, cur.Progress.InFlight)
		g = startGend(t, state, fleet, "")
	}
	if kills < 5 {
		t.Fatalf("only %d kills before the job ended; make the job longer", kills)
	}
	j = waitJob(t, g.c, j.ID, 180*time.Second, func(j api.Job) bool { return api.Terminal(j.Status) })
	if j.Status != api.StatusCompleted {
		t.Fatalf("job ended %s: %s", j.Status, j.Reason)
	}
	recs, errs := verifyOutput(t, out, in)
	generated := serverCompletions(t, urls)
	regenerated := generated - recs
	t.Logf("kills %d; records %d, errors %d; server completions %d → regenerated %d (in flight at the kills: %d)",
		kills, recs, errs, generated, regenerated, inflightAtKills)
	// In-flight requests at a kill may be generated twice; requests that
	// were already recorded must not be. Allow for completions that landed
	// between the last status read and the kill.
	if regenerated > inflightAtKills+kills*20 {
		t.Fatalf("regenerated %d requests, but only %d were in flight at the kills", regenerated, inflightAtKills)
	}
}
