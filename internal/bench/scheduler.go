package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strings"
	"text/tabwriter"
	"time"
)

// SchedulerOptions configure the scheduler benchmark.
type SchedulerOptions struct {
	Scenarios    []string
	Static       []int // static per-server limits swept
	Prompts      int
	MeanOut      float64
	MaxTokens    int
	Speedup      float64
	Period       time.Duration
	Seed         int64
	Stagger      float64 // old script: simulated seconds between launches
	OldPerServer int
	Parallel     int     // runs at once
	StopFactor   float64 // stop a run this many times slower than the best finished (0: never)
	RampSpeedup  float64 // speedup of the ramp runs that measure t90 (0: none)
	RampSeconds  float64 // simulated seconds a ramp run lasts
	Exe          string  // benchctl binary, re-executed as "run-one" per run
	Log          io.Writer
}

// DefaultSchedulerOptions is what make bench-scheduler runs.
func DefaultSchedulerOptions() SchedulerOptions {
	return SchedulerOptions{
		Scenarios: ScenarioNames(), Static: []int{8, 16, 32, 64, 128, 256, 512, 1024},
		Prompts: 4000, MeanOut: 2500, MaxTokens: 16384, Speedup: 50, Period: 250 * time.Millisecond,
		Seed: 1, Stagger: 0.5, OldPerServer: 32, Parallel: 3, StopFactor: 1.6, RampSpeedup: 5, RampSeconds: 40,
	}
}

// ScenarioReport is one scenario's runs.
type ScenarioReport struct {
	Scenario string      `json:"scenario"`
	Note     string      `json:"note"`
	Changes  bool        `json:"changes"`
	Runs     []RunResult `json:"runs"`
}

// Target is one checked target.
type Target struct {
	Scenario string `json:"scenario"`
	Name     string `json:"name"`
	Pass     bool   `json:"pass"`
	Detail   string `json:"detail"`
}

// SchedulerReport is the whole benchmark.
type SchedulerReport struct {
	Options   SchedulerOptions `json:"options"`
	Scenarios []ScenarioReport `json:"scenarios"`
	Targets   []Target         `json:"targets"`
}

// Scheduler runs every scenario with every policy and prints one table per
// scenario, then the targets of issue 4 with PASS/FAIL.
func Scheduler(ctx context.Context, o SchedulerOptions, w io.Writer) (*SchedulerReport, error) {
	if o.Speedup <= 0 || o.Speedup > 50 {
		return nil, fmt.Errorf("speedup %v: must be in (0, 50]", o.Speedup)
	}
	if o.Parallel < 1 {
		o.Parallel = 1
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	rep := &SchedulerReport{Options: o}
	fmt.Fprintf(w, "gend scheduler benchmark: %d prompts per run (mean %.0f output tokens, thinking on, max_tokens %d), gensim speedup %.0f×, gend control period %v (%.1f simulated s), seed %d\n",
		o.Prompts, o.MeanOut, o.MaxTokens, o.Speedup, o.Period, o.Period.Seconds()*o.Speedup, o.Seed)
	fmt.Fprintf(w, "old script: %d per server, prompts dealt round-robin up front, one launch every %.1f simulated s, no retries\n", o.OldPerServer, o.Stagger)
	if o.StopFactor > 0 {
		fmt.Fprintf(w, "a run still going at %.1f× the best finished makespan is stopped as dominated (shown as >N)\n", o.StopFactor)
	}
	fmt.Fprintln(w, "times are simulated seconds from job submission; out tok/s = useful output tokens / makespan; steady = median fleet generation rate (10 s windows) over 10–50 % of the makespan")
	if o.RampSpeedup > 0 {
		fmt.Fprintf(w, "t90 = first time the fleet's generation rate (2 s window) reached 90 %% of steady, measured by a separate %.0f s run at %.0f× (at %.0f× the first 10 simulated s are %.0f ms of wall time, less than this shared 2-core machine needs to open hundreds of connections; t90@%.0f× shows that)\n",
			o.RampSeconds, o.RampSpeedup, o.Speedup, 10/o.Speedup*1000, o.Speedup)
	}
	var scs []Scenario
	for _, name := range o.Scenarios {
		sc, err := MakeScenario(name, o.Prompts, o.MeanOut)
		if err != nil {
			return rep, err
		}
		scs = append(scs, sc)
	}
	ramps := map[string]map[string]RunResult{}
	if o.RampSpeedup > 0 {
		var err error
		if ramps, err = rampRuns(ctx, o, scs); err != nil {
			return rep, err
		}
	}
	for _, sc := range scs {
		sr, err := runScenario(ctx, o, sc, ramps[sc.Name])
		rep.Scenarios = append(rep.Scenarios, sr)
		printScenario(w, o, sr)
		if err != nil {
			return rep, err
		}
	}
	rep.Targets = checkTargets(rep.Scenarios)
	printTargets(w, rep.Targets)
	return rep, nil
}

// child is one running run-one process.
type child struct {
	rc      RunConfig
	cmd     *exec.Cmd
	out     bytes.Buffer
	start   time.Time
	stopped bool
	done    chan error
}

func baseRun(o SchedulerOptions, sc Scenario) RunConfig {
	return RunConfig{Scenario: sc.Name, Prompts: o.Prompts, MeanOut: o.MeanOut, MaxTokens: o.MaxTokens,
		Speedup: o.Speedup, Seed: o.Seed, Period: o.Period, Stagger: o.Stagger,
		// A hung run ends at 30× the expected makespan.
		Limit: 30 * float64(o.Prompts) * o.MeanOut / (fleetSize * rtxTokensPerSec)}
}

// rampRuns measures the start of the adaptive and old-script runs of every
// scenario at a low speedup, two runs at a time so the machine is quiet.
func rampRuns(ctx context.Context, o SchedulerOptions, scs []Scenario) (map[string]map[string]RunResult, error) {
	out := map[string]map[string]RunResult{}
	var runs []RunConfig
	for _, sc := range scs {
		for _, p := range []Policy{{Kind: KindAdaptive}, {Kind: KindOld, PerServer: o.OldPerServer}} {
			rc := baseRun(o, sc)
			rc.Policy, rc.Ramp, rc.Speedup, rc.Limit = p, true, o.RampSpeedup, o.RampSeconds
			runs = append(runs, rc)
		}
	}
	res, err := runChildren(ctx, o.Exe, runs, 2, 0, o.Speedup, nil)
	for _, r := range res {
		if out[r.Scenario] == nil {
			out[r.Scenario] = map[string]RunResult{}
		}
		out[r.Scenario][r.Policy] = r
	}
	return out, err
}

func runScenario(ctx context.Context, o SchedulerOptions, sc Scenario, ramps map[string]RunResult) (ScenarioReport, error) {
	sr := ScenarioReport{Scenario: sc.Name, Note: sc.Note, Changes: sc.Changes}
	base := baseRun(o, sc)
	var runs []RunConfig
	add := func(p Policy) {
		rc := base
		rc.Policy = p
		runs = append(runs, rc)
	}
	add(Policy{Kind: KindAdaptive})
	add(Policy{Kind: KindOld, PerServer: o.OldPerServer})
	// Large static limits first: they finish early and set the bar.
	for i := len(o.Static) - 1; i >= 0; i-- {
		add(Policy{Kind: KindStatic, PerServer: o.Static[i]})
	}
	log := func(r RunResult) { fmt.Fprintf(o.Log, "  %s / %s: %s\n", sc.Name, r.Policy, brief(r)) }
	list, err := runChildren(ctx, o.Exe, runs, o.Parallel, o.StopFactor, o.Speedup, log)
	results := map[string]RunResult{}
	for _, r := range list {
		results[r.Policy] = r
	}
	for name, rr := range ramps {
		r, ok := results[name]
		if !ok || rr.Err != "" || r.SteadyTokS <= 0 {
			continue
		}
		smp := make([]sample, len(rr.Samples))
		for i, x := range rr.Samples {
			smp[i] = sample{x[0], int64(x[1])}
		}
		r.TT90Ramp = tt90(smp, r.SteadyTokS)
		results[name] = r
	}
	for _, p := range append([]Policy{{Kind: KindAdaptive}}, staticPolicies(o.Static)...) {
		if r, ok := results[p.String()]; ok {
			sr.Runs = append(sr.Runs, r)
		}
	}
	if r, ok := results[Policy{Kind: KindOld, PerServer: o.OldPerServer}.String()]; ok {
		sr.Runs = append(sr.Runs, r)
	}
	return sr, err
}

// runChildren runs each config in its own child process, at most parallel
// at once. With stopFactor > 0 a child still running at stopFactor × the
// best finished makespan is interrupted (it reports what it reached).
func runChildren(ctx context.Context, exe string, pending []RunConfig, parallel int, stopFactor, speedup float64, log func(RunResult)) ([]RunResult, error) {
	best := math.Inf(1)
	var running []*child
	var out []RunResult
	var firstErr error
	tk := time.NewTicker(200 * time.Millisecond)
	defer tk.Stop()
	for len(pending) > 0 || len(running) > 0 {
		for len(pending) > 0 && len(running) < parallel && ctx.Err() == nil {
			c, err := startChild(exe, pending[0])
			pending = pending[1:]
			if err != nil {
				for _, c := range running {
					_ = c.cmd.Process.Signal(os.Interrupt)
					<-c.done
				}
				return out, err
			}
			running = append(running, c)
		}
		if ctx.Err() != nil {
			pending = nil
		}
		select {
		case <-tk.C:
		case <-ctx.Done():
		}
		keep := running[:0]
		for _, c := range running {
			select {
			case err := <-c.done:
				r, perr := parseChild(c, err)
				if perr != nil && firstErr == nil {
					firstErr = perr
				}
				out = append(out, r)
				if !r.Stopped && r.Err == "" && r.Makespan < best {
					best = r.Makespan
				}
				if log != nil {
					log(r)
				}
				continue
			default:
			}
			el := time.Since(c.start).Seconds() * speedup
			if !c.stopped && (ctx.Err() != nil || (stopFactor > 0 && el > stopFactor*best)) {
				c.stopped = true
				_ = c.cmd.Process.Signal(os.Interrupt)
			}
			keep = append(keep, c)
		}
		running = keep
	}
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	return out, firstErr
}

func staticPolicies(v []int) []Policy {
	out := make([]Policy, len(v))
	for i, n := range v {
		out[i] = Policy{Kind: KindStatic, PerServer: n}
	}
	return out
}

func startChild(exe string, rc RunConfig) (*child, error) {
	b, err := json.Marshal(rc)
	if err != nil {
		return nil, fmt.Errorf("run config: %w", err)
	}
	c := &child{rc: rc, done: make(chan error, 1)}
	c.cmd = exec.Command(exe, "run-one", "-config", string(b))
	c.cmd.Stdout = &c.out
	c.cmd.Stderr = os.Stderr
	c.start = time.Now()
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start run %s/%s: %w", rc.Scenario, rc.Policy, err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	return c, nil
}

func parseChild(c *child, waitErr error) (RunResult, error) {
	var r RunResult
	if err := json.Unmarshal(c.out.Bytes(), &r); err != nil {
		r = RunResult{Scenario: c.rc.Scenario, Policy: c.rc.Policy.String(), Kind: c.rc.Policy.Kind, Err: fmt.Sprintf("no result (%v)", waitErr)}
		return r, fmt.Errorf("run %s/%s: %s", c.rc.Scenario, c.rc.Policy, r.Err)
	}
	if r.Err != "" {
		return r, fmt.Errorf("run %s/%s: %s", c.rc.Scenario, c.rc.Policy, r.Err)
	}
	if c.stopped {
		r.Stopped = true
	}
	return r, nil
}

func brief(r RunResult) string {
	if r.Err != "" {
		return "error: " + r.Err
	}
	return fmt.Sprintf("makespan %s s, %.0f tok/s, lost %d", fmtMakespan(r), r.TokensPerSec, r.Lost)
}

func fmtMakespan(r RunResult) string {
	if r.Stopped {
		return fmt.Sprintf(">%.0f", r.Makespan)
	}
	return fmt.Sprintf("%.0f", r.Makespan)
}

func printScenario(w io.Writer, o SchedulerOptions, sr ScenarioReport) {
	fmt.Fprintf(w, "\n## %s: %s\n", sr.Scenario, sr.Note)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "policy\tmakespan s\twall s\tout tok/s\tsteady tok/s\tt90 s\tt90@%.0f× s\tretractions\t503s\terrors\tretries\tlost\t\n", o.Speedup)
	for _, r := range sr.Runs {
		if r.Err != "" {
			fmt.Fprintf(tw, "%s\terror: %s\t\t\t\t\t\t\t\t\t\t\n", r.Policy, r.Err)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.0f\t%.0f\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t\n", r.Policy, fmtMakespan(r), r.MakespanWall,
			r.TokensPerSec, r.SteadyTokS, fmtT90(r.TT90Ramp), fmtT90(r.TT90), r.Retractions, r.QueueFull, r.Errors, r.Retries, r.Lost)
	}
	_ = tw.Flush()
}

func fmtT90(v float64) string {
	switch {
	case v == -2:
		return "-"
	case v < 0:
		return "never"
	}
	return fmt.Sprintf("%.1f", v)
}

// checkTargets evaluates issue 4's targets.
func checkTargets(scs []ScenarioReport) []Target {
	var out []Target
	for _, sr := range scs {
		var ad, old *RunResult
		var statics []RunResult
		for i := range sr.Runs {
			r := &sr.Runs[i]
			if r.Err != "" {
				continue
			}
			switch r.Kind {
			case KindAdaptive:
				ad = r
			case KindOld:
				old = r
			case KindStatic:
				statics = append(statics, *r)
			}
		}
		add := func(name string, pass bool, format string, args ...any) {
			out = append(out, Target{Scenario: sr.Scenario, Name: name, Pass: pass, Detail: fmt.Sprintf(format, args...)})
		}
		if ad == nil {
			add("adaptive ran", false, "no adaptive result")
			continue
		}
		if ad.Stopped {
			add("adaptive finished", false, "adaptive was stopped at %.0f s", ad.Makespan)
			continue
		}
		var bestStatic *RunResult
		for i := range statics {
			s := &statics[i]
			if !s.Stopped && (bestStatic == nil || s.Makespan < bestStatic.Makespan) {
				bestStatic = s
			}
		}
		if bestStatic != nil {
			ratio := ad.Makespan / bestStatic.Makespan
			add("adaptive ≤ 1.03 × best static", ratio <= 1.03, "adaptive %.0f s vs best %s %.0f s: %.3f×", ad.Makespan, bestStatic.Policy, bestStatic.Makespan, ratio)
		} else if len(statics) > 0 {
			// Every static run was stopped as dominated: their makespans
			// are lower bounds.
			low := statics[0]
			for _, s := range statics {
				if s.Makespan < low.Makespan {
					low = s
				}
			}
			ratio := ad.Makespan / low.Makespan
			add("adaptive ≤ 1.03 × best static", ratio <= 1.03, "every static run was stopped as dominated; adaptive %.0f s vs the lowest bound (%s >%.0f s): < %.3f×", ad.Makespan, low.Policy, low.Makespan, ratio)
		}
		if sr.Changes {
			var worse []string
			for _, s := range statics {
				if ad.Makespan >= s.Makespan && !s.Stopped {
					worse = append(worse, fmt.Sprintf("%s %.0f s", s.Policy, s.Makespan))
				}
			}
			add("adaptive below every static", len(worse) == 0 && len(statics) > 0, "adaptive %.0f s; not below: %s", ad.Makespan, orNone(worse))
		}
		if old != nil {
			// Makespans compare when both did the whole job; when the old
			// script lost prompts it did less work, so compare useful
			// output tokens per second instead.
			speed, how := math.Inf(1), ""
			switch {
			case old.Lost > 0 && old.TokensPerSec > 0:
				speed = ad.TokensPerSec / old.TokensPerSec
				how = fmt.Sprintf("useful tok/s %.0f vs old %.0f (old script lost %d prompts)", ad.TokensPerSec, old.TokensPerSec, old.Lost)
			case ad.Makespan > 0:
				speed = old.Makespan / ad.Makespan
				how = fmt.Sprintf("makespan old %s s / adaptive %.0f s", fmtMakespan(*old), ad.Makespan)
				if old.Stopped {
					how += " (old script stopped: lower bound)"
				}
			}
			add("never slower than the old script", speed >= 1, "%s = %.2f×", how, speed)
			if sr.Scenario == ScHeterogeneous || sr.Scenario == ScSlowdown {
				add("≥ 1.5 × faster than the old script", speed >= 1.5, "%.2f×", speed)
			}
			if sr.Scenario == ScDeath || sr.Scenario == ScFlaky {
				add("no prompt lost (old script loses some)", ad.Lost == 0, "adaptive lost %d, old script lost %d", ad.Lost, old.Lost)
			}
		}
		if sr.Scenario == ScQueueCap {
			add("no request lost to 503", ad.Lost == 0, "adaptive lost %d (%d 503s answered, all retried)", ad.Lost, ad.QueueFull)
		}
		if (sr.Scenario == ScSmallKV || sr.Scenario == ScQueueCap) && bestStatic != nil {
			add("retractions ≤ best static's", ad.Retractions <= bestStatic.Retractions, "adaptive %d vs %s %d", ad.Retractions, bestStatic.Policy, bestStatic.Retractions)
		}
		t90 := ad.TT90Ramp
		how := "ramp run"
		if t90 == -2 {
			t90, how = ad.TT90, "main run"
		}
		add("90 % of steady throughput within 10 s", t90 >= 0 && t90 <= 10, "t90 %s s (%s; steady %.0f tok/s; in the main run %s s)", fmtT90(t90), how, ad.SteadyTokS, fmtT90(ad.TT90))
	}
	return out
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func printTargets(w io.Writer, ts []Target) {
	fmt.Fprintln(w, "\n## targets (issue 4)")
	pass := 0
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, t := range ts {
		v := "FAIL"
		if t.Pass {
			v = "PASS"
			pass++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v, t.Scenario, t.Name, t.Detail)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "%d of %d targets pass\n", pass, len(ts))
}
