package eta

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
)

// Recording and replay. The estimator is a pure function of the calls it
// receives, so a job's calls, written down as they happen
// (Options.Record), replay offline to the same estimates; a change to the
// estimator is then measured on real gend + gensim runs in seconds instead
// of re-running the jobs (etabench -record, -replay).

// event is one line of a recording (JSON lines).
type event struct {
	// K is the kind: "o" the options (first line), "c" a completed
	// request, "s" an estimate's state, "end" the job finished.
	K      string   `json:"k"`
	Opts   *Options `json:"o,omitempty"`
	Tokens int      `json:"n,omitempty"`
	Length bool     `json:"l,omitempty"`
	State  *State   `json:"s,omitempty"`
	// End is the job's running time when it finished.
	End float64 `json:"t,omitempty"`
}

// recorder writes events; errors are kept, not returned (the estimator's
// calls do not fail), and stop the recording.
type recorder struct {
	mu  sync.Mutex
	enc *json.Encoder
	err error
}

func (r *recorder) write(ev event) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = r.enc.Encode(ev)
	}
}

// Finished records that the job finished after elapsed seconds of running
// time (the truth a replay scores against). It does nothing unless the
// estimator records.
func (e *Estimator) Finished(elapsed float64) { e.rec.write(event{K: "end", End: elapsed}) }

// Replayed is the outcome of a replay: the checkpoints (Checkpoint as
// from Simulate; TrueDrain and TrueRemainingTokens are not known; one per
// progress level asked for, Reached false where no estimate reached it)
// and the job's final figures.
type Replayed struct {
	Checkpoints []Checkpoint
	Reached     []bool
	// Requests and MeanOutput are the job's completed requests and their
	// mean output tokens; End its running time.
	Requests   int64
	MeanOutput float64
	End        float64
}

// Replay feeds a recording to a new estimator and scores it at the
// progress levels in cps (completed ÷ total requests): each checkpoint
// takes the first estimate offered at or after it, as gend's API would
// show it.
func Replay(r io.Reader, cps []float64) (Replayed, error) {
	var out Replayed
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	var est *Estimator
	var tokens float64
	type hit struct {
		at  float64
		res Result
		p   float64
	}
	hits := make([]*hit, len(cps))
	line := 0
	for sc.Scan() {
		line++
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return out, fmt.Errorf("line %d: %w", line, err)
		}
		if est == nil {
			if ev.K != "o" || ev.Opts == nil {
				return out, fmt.Errorf("line %d: a recording starts with the options (k \"o\")", line)
			}
			est = New(*ev.Opts)
			continue
		}
		switch ev.K {
		case "c":
			est.Completed(ev.Tokens, ev.Length)
			out.Requests++
			tokens += float64(ev.Tokens)
		case "s":
			if ev.State == nil {
				return out, fmt.Errorf("line %d: estimate without a state", line)
			}
			s := *ev.State
			res := est.Estimate(s)
			total := float64(est.completed) + float64(len(s.InFlight)) + float64(s.NotStarted)
			if !res.OK || total <= 0 {
				continue
			}
			p := float64(est.completed) / total
			for i, cp := range cps {
				if hits[i] == nil && p >= cp {
					hits[i] = &hit{at: s.Elapsed, res: res, p: p}
				}
			}
		case "end":
			out.End = ev.End
		default:
			return out, fmt.Errorf("line %d: unknown event kind %q", line, ev.K)
		}
	}
	if err := sc.Err(); err != nil {
		return out, err
	}
	if est == nil {
		return out, errors.New("empty recording")
	}
	if out.End <= 0 {
		return out, errors.New("the recording has no end (the job did not finish)")
	}
	if out.Requests > 0 {
		out.MeanOutput = tokens / float64(out.Requests)
	}
	for _, h := range hits {
		out.Reached = append(out.Reached, h != nil)
		if h == nil {
			out.Checkpoints = append(out.Checkpoints, Checkpoint{})
			continue
		}
		c := Checkpoint{Progress: h.p, Elapsed: h.at, TrueRemaining: out.End - h.at, Result: h.res}
		if c.TrueRemaining > 0 {
			c.Err = (h.res.Seconds - c.TrueRemaining) / c.TrueRemaining
			c.NaiveErr = (h.res.Naive - c.TrueRemaining) / c.TrueRemaining
		} else {
			c.Err, c.NaiveErr = math.NaN(), math.NaN()
		}
		c.Covered = h.res.LowSeconds <= c.TrueRemaining && c.TrueRemaining <= h.res.HighSeconds
		out.Checkpoints = append(out.Checkpoints, c)
	}
	return out, nil
}
