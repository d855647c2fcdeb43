package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gend-dev/gend/internal/sim"
)

// RunConfig is one run: one scenario, one policy.
type RunConfig struct {
	Scenario  string        `json:"scenario"`
	Policy    Policy        `json:"policy"`
	Prompts   int           `json:"prompts"`
	MeanOut   float64       `json:"mean_out"`   // mean output tokens (thinking on)
	MaxTokens int           `json:"max_tokens"` // max_tokens of every request
	Speedup   float64       `json:"speedup"`
	Seed      int64         `json:"seed"`
	Period    time.Duration `json:"period"`  // gend's control period (wall)
	Stagger   float64       `json:"stagger"` // old script: simulated seconds between task launches
	// Limit bounds the run in simulated seconds (0: none); a run cut by it
	// or by ctx reports Stopped.
	Limit float64 `json:"limit,omitempty"`
	// Ramp: the run only measures the start (until Limit) and reports its
	// samples, for the time to 90 % of steady throughput at a low speedup.
	Ramp bool `json:"ramp,omitempty"`
	// LogLevel, when set, sends gend's log to stderr at that level.
	LogLevel string `json:"log_level,omitempty"`
}

// RunResult is what one run measured. Times are simulated seconds unless
// named wall.
type RunResult struct {
	Scenario     string  `json:"scenario"`
	Policy       string  `json:"policy"`
	Kind         string  `json:"kind"`
	PerServer    int     `json:"per_server,omitempty"`
	Makespan     float64 `json:"makespan_s"`
	MakespanWall float64 `json:"makespan_wall_s"`
	Stopped      bool    `json:"stopped,omitempty"` // cut before the end: Makespan is a lower bound
	Total        int64   `json:"total"`
	Completed    int64   `json:"completed"`
	Lost         int64   `json:"lost"` // prompts without a result (failed for good or dropped)
	OutputTokens int64   `json:"output_tokens"`
	TokensPerSec float64 `json:"tokens_per_sec"` // useful output tokens / makespan
	SteadyTokS   float64 `json:"steady_tokens_per_sec"`
	TT90         float64 `json:"tt90_s"` // first time the fleet's rate reached 90 % of steady (-1: never)
	// TT90Ramp is TT90 measured by a separate run at a low speedup (Ramp),
	// against this run's steady rate; -1: never, -2: not measured.
	TT90Ramp    float64 `json:"tt90_ramp_s"`
	Retractions int64   `json:"retractions"`
	QueueFull   int64   `json:"queue_full_503"`
	Errors      int64   `json:"errors"` // 500s and cut connections, as the servers count them
	Aborted     int64   `json:"aborted"`
	Retries     int64   `json:"retries,omitempty"`
	Err         string  `json:"error,omitempty"`
	// Ramp is the fleet's generation rate (tok/s) in 5 s windows over the
	// first two minutes.
	Ramp []float64 `json:"ramp,omitempty"`
	// Samples are (simulated s, generated tokens) of a Ramp run.
	Samples [][2]float64 `json:"samples,omitempty"`
}

// tt90 is the first sample time at which the rate over the preceding 2 s
// reached 90 % of steady (-1: never).
func tt90(samples []sample, steady float64) float64 {
	if steady <= 0 {
		return -1
	}
	for i := range samples {
		j := i
		for j > 0 && samples[i].t-samples[j].t < 2 {
			j--
		}
		if dt := samples[i].t - samples[j].t; dt >= 1.6 && float64(samples[i].gen-samples[j].gen)/dt >= 0.9*steady {
			return samples[i].t
		}
	}
	return -1
}

// ramp returns the rate in windows of w seconds up to end.
func ramp(samples []sample, w, end float64) []float64 {
	var out []float64
	j := 0
	for t := w; t <= end; t += w {
		i := j
		for i < len(samples)-1 && samples[i+1].t <= t {
			i++
		}
		if i >= len(samples) || samples[i].t < t-w/2 || i == j {
			break
		}
		out = append(out, math.Round(float64(samples[i].gen-samples[j].gen)/(samples[i].t-samples[j].t)))
		j = i
	}
	return out
}

// promptLine is one chat input line.
type promptLine struct {
	CustomID string    `json:"custom_id"`
	Messages []message `json:"messages"`
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// promptText is the i-th deterministic prompt: 200–1,200 bytes (50–300
// simulated tokens).
func promptText(i int) string {
	x := uint64(i)*0x9e3779b97f4a7c15 + 0x632be59bd9b4e019
	x ^= x >> 29
	n := 200 + int(x%1000)
	var b strings.Builder
	fmt.Fprintf(&b, "Prompt %d. ", i)
	const pad = "Explain the following topic carefully, with worked examples and the caveats a practitioner meets. "
	for b.Len() < n {
		b.WriteString(pad)
	}
	return b.String()[:n]
}

// writePrompts writes n chat lines to path.
func writePrompts(path string, n int) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create prompts: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	enc := json.NewEncoder(w)
	for i := range n {
		l := promptLine{CustomID: fmt.Sprintf("p%07d", i), Messages: []message{{Role: "user", Content: promptText(i)}}}
		if err := enc.Encode(l); err != nil {
			f.Close()
			return fmt.Errorf("write prompts: %w", err)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write prompts: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write prompts: %w", err)
	}
	return nil
}

// sample is the fleet's cumulative generated tokens at a simulated time.
type sample struct {
	t   float64
	gen int64
}

// sampler reads the fleet's counters once per simulated second.
type sampler struct {
	mu      sync.Mutex
	samples []sample
}

func (s *sampler) run(ctx context.Context, f *sim.Fleet, start time.Time, speedup float64) {
	every := time.Duration(0.5 * float64(time.Second) / speedup)
	if every < 20*time.Millisecond {
		every = 20 * time.Millisecond
	}
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		var gen int64
		for _, st := range f.Stats() {
			gen += st.GeneratedTokens
		}
		t := time.Since(start).Seconds() * speedup
		s.mu.Lock()
		s.samples = append(s.samples, sample{t, gen})
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
	}
}

// rampAndSteady computes the steady rate (median of 10 s windows in the
// [10 %, 50 %] span of the makespan) and the first time a 2 s window reached
// 90 % of it.
func rampAndSteady(samples []sample, makespan float64) (steady, t90 float64) {
	rate := func(i int, w float64) (float64, bool) {
		j := i
		for j > 0 && samples[i].t-samples[j].t < w {
			j--
		}
		dt := samples[i].t - samples[j].t
		if dt < w*0.8 {
			return 0, false
		}
		return float64(samples[i].gen-samples[j].gen) / dt, true
	}
	var rates []float64
	for i := range samples {
		if t := samples[i].t; t >= 0.1*makespan && t <= 0.5*makespan {
			if r, ok := rate(i, 10); ok {
				rates = append(rates, r)
			}
		}
	}
	if len(rates) == 0 {
		return 0, -1
	}
	sort.Float64s(rates)
	steady = rates[len(rates)/2]
	return steady, tt90(samples, steady)
}

// RunOne runs one scenario with one policy on a fresh simulated fleet and
// measures it. ctx cancelled: the run stops and reports what it reached.
func RunOne(ctx context.Context, rc RunConfig) (RunResult, error) {
	res := RunResult{Scenario: rc.Scenario, Policy: rc.Policy.String(), Kind: rc.Policy.Kind, PerServer: rc.Policy.PerServer,
		Total: int64(rc.Prompts), TT90Ramp: -2}
	sc, err := MakeScenario(rc.Scenario, rc.Prompts, rc.MeanOut)
	if err != nil {
		return res, err
	}
	dir, err := os.MkdirTemp("", "gend-bench-")
	if err != nil {
		return res, fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	input := filepath.Join(dir, "prompts.jsonl")
	if err := writePrompts(input, rc.Prompts); err != nil {
		return res, err
	}
	fleetCtx, stopFleet := context.WithCancel(context.WithoutCancel(ctx))
	defer stopFleet()
	fleet, err := sim.StartFleet(fleetCtx, sim.FleetConfig{Speedup: rc.Speedup, Seed: rc.Seed, Servers: sc.Servers, Tick: 10 * time.Millisecond})
	if err != nil {
		return res, fmt.Errorf("start gensim: %w", err)
	}
	defer fleet.Close()
	fleetStart := time.Now()

	sctx, stopSampler := context.WithCancel(context.Background())
	smp := &sampler{}
	sdone := make(chan struct{})
	go func() { defer close(sdone); smp.run(sctx, fleet, fleetStart, rc.Speedup) }()
	defer func() { stopSampler(); <-sdone }()

	runCtx := ctx
	if rc.Limit > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, time.Duration(rc.Limit/rc.Speedup*float64(time.Second)))
		defer cancel()
	}
	var out runOutcome
	switch rc.Policy.Kind {
	case KindOld:
		out, err = runOld(runCtx, rc, fleet, input)
	case KindAdaptive, KindStatic:
		out, err = runGend(runCtx, rc, fleet, input, dir)
	default:
		err = fmt.Errorf("unknown policy %q", rc.Policy.Kind)
	}
	if err != nil {
		return res, err
	}
	stopSampler()
	<-sdone
	res.Stopped = out.stopped
	res.MakespanWall = out.end.Sub(out.start).Seconds()
	res.Makespan = res.MakespanWall * rc.Speedup
	res.Completed, res.OutputTokens, res.Retries = out.completed, out.tokens, out.retries
	res.Lost = out.lost
	if res.Makespan > 0 {
		res.TokensPerSec = float64(res.OutputTokens) / res.Makespan
	}
	// Sample times are since the fleet started; shift them to the job start.
	off := out.start.Sub(fleetStart).Seconds() * rc.Speedup
	smp.mu.Lock()
	shifted := make([]sample, 0, len(smp.samples))
	for _, s := range smp.samples {
		if s.t >= off {
			shifted = append(shifted, sample{s.t - off, s.gen})
		}
	}
	smp.mu.Unlock()
	if rc.Ramp {
		for _, x := range shifted {
			res.Samples = append(res.Samples, [2]float64{math.Round(x.t*100) / 100, float64(x.gen)})
		}
	} else {
		res.SteadyTokS, res.TT90 = rampAndSteady(shifted, res.Makespan)
		res.Ramp = ramp(shifted, 5, 120)
	}
	for _, st := range fleet.Stats() {
		res.Retractions += st.Retractions
		res.QueueFull += st.QueueFull
		res.Errors += st.Errors500 + st.Dropped
		res.Aborted += st.Aborted
	}
	return res, nil
}

// runOutcome is what a policy runner reports.
type runOutcome struct {
	start, end time.Time
	stopped    bool
	completed  int64
	lost       int64
	tokens     int64
	retries    int64
}
