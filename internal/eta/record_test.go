package eta

import (
	"bytes"
	"strings"
	"testing"
)

// TestReplayReproducesSimulate records a simulated job's estimator calls and
// replays them: every checkpoint's estimate must come out the same, and the
// truth (from the recorded end) too.
func TestReplayReproducesSimulate(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	cfg := SimConfig{Name: "replay", Requests: 3000, Servers: 2, Slots: 64, MaxTokens: 8192,
		Lengths: LogNormal(2500, 1.0), Seed: 3, EstimateEvery: 5, Record: &buf}
	cps := Simulate(cfg)
	marks := []float64{0.01, 0.02, 0.05, 0.10, 0.25, 0.50, 0.75}
	rp, err := Replay(bytes.NewReader(buf.Bytes()), marks)
	if err != nil {
		t.Fatal(err)
	}
	if rp.Requests != 3000 {
		t.Errorf("replayed %d completions, want 3000", rp.Requests)
	}
	if len(rp.Checkpoints) != len(cps) {
		t.Fatalf("replay has %d checkpoints, the simulation %d", len(rp.Checkpoints), len(cps))
	}
	for i, c := range cps {
		r := rp.Checkpoints[i]
		if c.Result.OK != rp.Reached[i] {
			t.Errorf("checkpoint %v: simulation OK=%v, replay reached=%v", marks[i], c.Result.OK, rp.Reached[i])
			continue
		}
		if !c.Result.OK {
			continue
		}
		if r.Result.Seconds != c.Result.Seconds || r.Result.HighSeconds != c.Result.HighSeconds || r.TrueRemaining != c.TrueRemaining {
			t.Errorf("checkpoint %v: replay %.3f s [.., %.3f] true %.3f; simulation %.3f s [.., %.3f] true %.3f", marks[i],
				r.Result.Seconds, r.Result.HighSeconds, r.TrueRemaining, c.Result.Seconds, c.Result.HighSeconds, c.TrueRemaining)
		}
	}
}

func TestReplayErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"", "empty recording"},
		{`{"k":"c","n":5}` + "\n", "line 1: a recording starts with the options"},
		{`{"k":"o","o":{"MaxTokens":100}}` + "\n" + `{"k":"x"}` + "\n", `line 2: unknown event kind "x"`},
		{`{"k":"o","o":{"MaxTokens":100}}` + "\n" + `{"k":"c","n":5}` + "\n", "no end"},
		{`{"k":"o","o":{"MaxTokens":100}}` + "\n" + "{oops\n", "line 2:"},
	} {
		_, err := Replay(strings.NewReader(tc.in), []float64{0.5})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Replay(%q) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
}
