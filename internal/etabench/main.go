// Command etabench (make bench-eta) runs a heavy-tailed generation job on
// gensim through gend and prints, at 1, 2, 5, 10, 25, 50 and 75 % progress,
// gend's ETA error and whether its interval covered the true finish, beside
// the naive remaining/rate ETA's error. With -suite it runs several
// configurations (lognormal sigma 1.0 and 1.5, streaming and not, two seeds)
// one after the other and prints a summary table.
//
// gend recomputes its ETA every sampling period (the control period, 250 ms
// here). A checkpoint takes the first estimate that appears (its inputs
// change) at or after the checkpoint's progress, and measures the true
// remaining time from the moment it appeared, so the error is the
// estimator's, not the age of the value read.
//
// -v prints, per checkpoint, the estimator's remaining tokens, mean output
// and main-phase throughput beside the truth (the mean of the requests
// started by then, from the output shards, separates sampling noise from
// estimator bias); -trace prints a time series of gend's throughput and
// ETA beside the throughput the simulator really ran at.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/gend-dev/gend/api"
	"github.com/gend-dev/gend/internal/daemon"
	"github.com/gend-dev/gend/internal/eta"
	"github.com/gend-dev/gend/internal/sim"
)

// config is one benchmark job.
type config struct {
	n, servers int
	speedup    float64
	sigma      float64
	mean       float64
	maxTokens  int
	stream     bool
	seed       int64
	dist       string  // gensim output_dist; "" = lognormal with sigma
	runaway    float64 // gensim output_runaway
}

func (c config) name() string {
	mode := "nonstream"
	if c.stream {
		mode = "stream"
	}
	shape := fmt.Sprintf("sigma%.1f", c.sigma)
	if c.dist != "" && c.dist != "lognormal" {
		shape = strings.ReplaceAll(c.dist, ":", "_")
	}
	if c.runaway > 0 {
		shape += fmt.Sprintf("-runaway%g", c.runaway)
	}
	return fmt.Sprintf("%s-%s-seed%d", shape, mode, c.seed)
}

// lengths describes the output-length distribution.
func (c config) lengths() string {
	d := fmt.Sprintf("lognormal mean %.0f sigma %.2f", c.mean, c.sigma)
	if c.dist != "" && c.dist != "lognormal" {
		d = fmt.Sprintf("%s mean %.0f", c.dist, c.mean)
	}
	if c.runaway > 0 {
		d += fmt.Sprintf(", %.1f%% runaways", 100*c.runaway)
	}
	return d
}

// sample is one estimate as first seen, with the simulator's truth then.
type sample struct {
	progress       float64
	at             time.Time
	eta, low, high float64
	naive          float64
	remTok         float64 // gend's estimate of the remaining output tokens
	meanTok        float64 // gend's estimate of the mean output length
	fleetTok       float64 // the throughput gend divided by
	simGen         int64   // tokens the fleet had generated then
	doneTok        int64   // output tokens of finished requests then
	started        int64   // requests finished or in flight then
}

// checkpoint is the outcome at one progress level.
type checkpoint struct {
	cp       float64
	ok       bool
	s        sample
	trueRem  float64
	err      float64 // (eta − true) / true
	naiveErr float64
	covered  bool
}

// result is one job's outcome.
type result struct {
	cfg        config
	label      string // the name when not from cfg (replays)
	wall       float64
	done       int64
	lengthHits int64
	finalGen   int64
	drain      float64 // seconds from the last dispatch to the end
	cps        []checkpoint
	trace      []tracePoint
	lengths    []int // output tokens by input line (-1: unknown)
}

// tracePoint is the job's state at one moment, for -trace.
type tracePoint struct {
	t, frac, eta, fleetTok, remTok float64
	simGen                         int64
}

var checkpoints = []float64{0.01, 0.02, 0.05, 0.10, 0.25, 0.50, 0.75}

func main() { os.Exit(run()) }

func run() int {
	var (
		// The defaults keep the job long next to one request (16,000
		// requests on ~50–80 running at once, ~250 waves), as a real job
		// is (654,676 prompts on 8 GPUs is ~2,000 waves): with fewer waves
		// the early checkpoints fall inside the first waves, where the
		// data reach only the short outputs (8,000 requests: the mean was
		// estimated 30 % low at 2 %). Speed-up 150, not more: at 300× one
		// 250 ms control period was most of a request's life (a real one
		// is 1/80), and the host's own CPU load (190 requests/s through
		// gend and gensim on 2 shared cores) decided the fleet's
		// throughput: one σ 1.5 streaming run slowed by 25 % in its second
		// half.
		n         = flag.Int("n", 16000, "requests")
		servers   = flag.Int("servers", 2, "simulated servers")
		speedup   = flag.Float64("speedup", 150, "gensim speedup")
		sigma     = flag.Float64("sigma", 1.0, "lognormal sigma of output lengths")
		mean      = flag.Float64("mean", 2500, "mean output tokens (thinking)")
		maxTokens = flag.Int("max-tokens", 8192, "max_tokens cap")
		stream    = flag.Bool("stream", false, "stream from the servers (exact in-flight token counts)")
		seed      = flag.Int64("seed", 1, "gensim seed")
		verbose   = flag.Bool("v", false, "print the ETA model's estimates beside the simulator's truth at each checkpoint")
		trace     = flag.Bool("trace", false, "print a time series of gend's throughput input and ETA beside the simulator's true throughput")
		suite     = flag.Bool("suite", false, "run sigma 1.0 and 1.5, streaming and not, at -seed, and print a summary table")
		dist      = flag.String("dist", "", "output-length family (gensim output_dist: gamma:K, weibull:K, pareto:A, bimodal:P:M, uniform:LO:HI); default lognormal with -sigma")
		dists     = flag.String("dists", "", "with -suite: also run these comma-separated output_dist families, streaming and not")
		runaway   = flag.Float64("runaway", 0, "share of requests that never stop by themselves (gensim output_runaway)")
		seeds     = flag.Int("seeds", 1, "with -suite: run seeds -seed … -seed+seeds−1")
		record    = flag.String("record", "", "write each job's ETA estimator calls to DIR/<config>.jsonl (for -replay)")
		replay    = flag.Bool("replay", false, "score recordings (the arguments: files written by -record) instead of running jobs")
		bound     = flag.Int("bound", 0, "instead of running jobs, draw N jobs' lengths from gensim's model and print how well any estimator can know the remaining work (bound.go); honours -n, -sigma, -dist, -runaway, -mean, -max-tokens, -seed, and -suite with -dists")
	)
	flag.Parse()
	if *replay {
		return replayFiles(os.Stdout, flag.Args())
	}
	if *bound > 0 {
		if err := printKVLaw(os.Stdout, *mean, *maxTokens); err != nil {
			fmt.Fprintf(os.Stderr, "etabench -bound: %v\n", err)
			return 1
		}
		c := config{n: *n, sigma: *sigma, mean: *mean, maxTokens: *maxTokens, seed: *seed, dist: *dist, runaway: *runaway}
		cs := []config{c}
		if *suite { // the suite's shapes: σ 1.0 and 1.5, then -dists
			cs = nil
			for _, sg := range []float64{1.0, 1.5} {
				c.sigma, c.dist = sg, ""
				cs = append(cs, c)
			}
			c.sigma = *sigma
			for _, ds := range strings.Split(*dists, ",") {
				if c.dist = strings.TrimSpace(ds); c.dist != "" {
					cs = append(cs, c)
				}
			}
		}
		for _, c := range cs {
			fmt.Println()
			if err := printBound(os.Stdout, c, *bound); err != nil {
				fmt.Fprintf(os.Stderr, "etabench -bound: %v\n", err)
				return 1
			}
		}
		return 0
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base := config{n: *n, servers: *servers, speedup: *speedup, sigma: *sigma, mean: *mean, maxTokens: *maxTokens, stream: *stream, seed: *seed, dist: *dist, runaway: *runaway}
	cfgs := []config{base}
	if *suite {
		cfgs = nil
		for sd := *seed; sd < *seed+int64(max(*seeds, 1)); sd++ {
			for _, sg := range []float64{1.0, 1.5} {
				for _, st := range []bool{false, true} {
					c := base
					c.sigma, c.stream, c.seed, c.dist = sg, st, sd, ""
					cfgs = append(cfgs, c)
				}
			}
			for _, ds := range strings.Split(*dists, ",") {
				if ds = strings.TrimSpace(ds); ds == "" {
					continue
				}
				for _, st := range []bool{false, true} {
					c := base
					c.dist, c.stream, c.seed = ds, st, sd
					cfgs = append(cfgs, c)
				}
			}
		}
	}
	var results []result
	for _, c := range cfgs {
		r, err := runJob(ctx, c, *record)
		if err != nil {
			fmt.Fprintf(os.Stderr, "etabench %s: %v\n", c.name(), err)
			return 1
		}
		printResult(os.Stdout, r, *verbose)
		if *trace {
			printTrace(os.Stdout, r)
		}
		results = append(results, r)
	}
	if len(results) > 1 {
		printSummary(os.Stdout, results)
	}
	return 0
}

// runJob starts gensim and gend in-process, runs one job to the end and
// scores the ETA at the checkpoints.
func runJob(ctx context.Context, cfg config, recordDir string) (result, error) {
	res := result{cfg: cfg}
	var rec *os.File
	if recordDir != "" {
		if err := os.MkdirAll(recordDir, 0o755); err != nil {
			return res, err
		}
		f, err := os.Create(filepath.Join(recordDir, cfg.name()+".jsonl"))
		if err != nil {
			return res, err
		}
		defer f.Close()
		rec = f
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dir, err := os.MkdirTemp("", "etabench")
	if err != nil {
		return res, fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	scs := make([]sim.ServerConfig, cfg.servers)
	for i := range scs {
		scs[i] = sim.ServerConfig{OutputMean: cfg.mean, OutputSigma: cfg.sigma, OutputDist: cfg.dist, OutputRunaway: cfg.runaway, MaxContentBytes: 512}
	}
	fleet, err := sim.StartFleet(ctx, sim.FleetConfig{Speedup: cfg.speedup, Seed: cfg.seed, Servers: scs})
	if err != nil {
		return res, fmt.Errorf("start gensim: %w", err)
	}
	defer fleet.Close()
	var dcfg api.Config
	for i, u := range fleet.URLs() {
		dcfg.Servers = append(dcfg.Servers, api.ServerSpec{Name: fmt.Sprintf("gpu%d", i), URL: u})
	}
	in := filepath.Join(dir, "in.jsonl")
	var b strings.Builder
	for i := 0; i < cfg.n; i++ {
		content, _ := json.Marshal(benchPrompt(i)) // a string always encodes
		fmt.Fprintf(&b, `{"custom_id":"q%06d","messages":[{"role":"user","content":%s}]}`+"\n", i, content)
	}
	if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
		return res, fmt.Errorf("write input: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return res, fmt.Errorf("listen: %w", err)
	}
	d, err := daemon.New(daemon.Options{Listener: ln, StateDir: filepath.Join(dir, "state"), Config: dcfg, NVML: "off",
		Logger: zerolog.Nop(), ControlPeriod: 250 * time.Millisecond, ETARecord: writerOrNil(rec)})
	if err != nil {
		ln.Close()
		return res, fmt.Errorf("start gend: %w", err)
	}
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		_ = d.Run(ctx)
	}()
	defer func() {
		cancel()
		<-runDone
	}()
	c := api.NewClient("http://"+ln.Addr().String(), "", nil)
	spec, err := json.Marshal(map[string]any{
		"name": "eta-bench", "input": in,
		"request": map[string]any{"stream": cfg.stream, "params": map[string]any{"max_tokens": cfg.maxTokens, "temperature": 0.6,
			"chat_template_kwargs": map[string]any{"enable_thinking": true}}},
		"output": map[string]any{"dir": filepath.Join(dir, "out")},
	})
	if err != nil {
		return res, fmt.Errorf("encode job: %w", err)
	}
	// gend runs before the job arrives, as in production: give it a few
	// gauge samples of the idle fleet.
	time.Sleep(2500 * time.Millisecond)
	var j api.Job
	for try := 0; ; try++ {
		j, err = c.SubmitJob(ctx, spec, api.ContentTypeJSON)
		if err == nil {
			break
		}
		if try >= 50 {
			return res, fmt.Errorf("submit job: %w", err)
		}
		time.Sleep(100 * time.Millisecond) // the daemon is still starting
	}
	start := time.Now()
	got := map[float64]sample{}
	type estKey struct{ rem, mean, fleet float64 }
	var last estKey
	var drainStart time.Time
	// Bounded: a job that does not finish in an hour of wall time is a bug.
	deadline := start.Add(time.Hour)
	for time.Now().Before(deadline) {
		cur, err := c.GetJob(ctx, j.ID)
		if err != nil {
			return res, fmt.Errorf("get job: %w", err)
		}
		now := time.Now()
		p := cur.Progress
		frac := 0.0
		if p.Total > 0 {
			frac = float64(p.Completed+p.Failed) / float64(p.Total)
		}
		if drainStart.IsZero() && p.Total > 0 && p.Completed+p.Failed+p.InFlight >= p.Total {
			drainStart = now
		}
		k := estKey{p.EstRemainingTokens, p.EstMeanOutputTokens, p.FleetTokensPerSec}
		if p.ETASeconds >= 0 && k != last {
			last = k
			s := sample{progress: frac, at: now, eta: p.ETASeconds, low: p.ETALowSeconds, high: p.ETAHighSeconds,
				naive: p.NaiveETASeconds, remTok: p.EstRemainingTokens, meanTok: p.EstMeanOutputTokens,
				fleetTok: p.FleetTokensPerSec, simGen: fleetGenerated(fleet), doneTok: p.TotalOutputTokens,
				started: p.Completed + p.Failed + p.InFlight}
			for _, cp := range checkpoints {
				if _, ok := got[cp]; !ok && frac >= cp {
					got[cp] = s
				}
			}
		}
		if nt := len(res.trace); nt == 0 || now.Sub(start).Seconds()-res.trace[nt-1].t >= 0.25 {
			res.trace = append(res.trace, tracePoint{t: now.Sub(start).Seconds(), frac: frac, eta: p.ETASeconds,
				fleetTok: p.FleetTokensPerSec, remTok: p.EstRemainingTokens, simGen: fleetGenerated(fleet)})
		}
		if api.Terminal(cur.Status) {
			res.done = p.Completed
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	end := time.Now()
	if res.done == 0 {
		return res, fmt.Errorf("job did not finish")
	}
	res.wall = end.Sub(start).Seconds()
	if !drainStart.IsZero() {
		res.drain = end.Sub(drainStart).Seconds()
	}
	res.finalGen = fleetGenerated(fleet)
	res.lengthHits = countLengthHits(filepath.Join(dir, "out", "shards"))
	res.lengths = readLengths(filepath.Join(dir, "out", "shards"), cfg.n)
	for _, cp := range checkpoints {
		s, ok := got[cp]
		pt := checkpoint{cp: cp, ok: ok, s: s}
		if ok {
			pt.trueRem = end.Sub(s.at).Seconds()
			pt.err = (s.eta - pt.trueRem) / pt.trueRem
			pt.naiveErr = (s.naive - pt.trueRem) / pt.trueRem
			pt.covered = s.low <= pt.trueRem && pt.trueRem <= s.high
		}
		res.cps = append(res.cps, pt)
	}
	return res, nil
}

// benchPrompt is input line i's prompt (gensim draws its output length
// from this text and the seed).
func benchPrompt(i int) string {
	return fmt.Sprintf("Prompt %d: reason step by step about topic %d.", i, i%97)
}

// writerOrNil keeps a nil *os.File from becoming a non-nil io.Writer.
func writerOrNil(f *os.File) io.Writer {
	if f == nil {
		return nil
	}
	return f
}

// replayFiles scores recordings (-record) with the estimator as built now
// and prints the per-checkpoint table and the summary.
func replayFiles(w io.Writer, files []string) int {
	if len(files) == 0 {
		fmt.Fprintln(os.Stderr, "etabench -replay: name the recordings (files written by -record)")
		return 2
	}
	var rs []result
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintf(os.Stderr, "etabench: %v\n", err)
			return 1
		}
		rp, err := eta.Replay(f, checkpoints)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "etabench: %s: %v\n", name, err)
			return 1
		}
		r := result{label: strings.TrimSuffix(filepath.Base(name), ".jsonl"), done: rp.Requests}
		fmt.Fprintf(w, "%s: %d requests, mean output %.0f, %.1f s running\n", r.label, rp.Requests, rp.MeanOutput, rp.End)
		fmt.Fprintf(w, "%-9s %-8s %-9s %-9s %-9s %-20s %-8s %-9s %s\n", "checkpt", "at", "true_rem", "gend_eta", "gend_err", "interval", "covered", "naive_err", "mean est / tok/s main")
		for i, c := range rp.Checkpoints {
			pt := checkpoint{cp: checkpoints[i], ok: rp.Reached[i]}
			if pt.ok {
				res := c.Result
				pt.s = sample{progress: c.Progress, eta: res.Seconds, low: res.LowSeconds, high: res.HighSeconds, naive: res.Naive,
					remTok: res.RemainingTokens, meanTok: res.MeanOutputTokens, fleetTok: res.MainTokensPerSec}
				pt.trueRem, pt.err, pt.naiveErr, pt.covered = c.TrueRemaining, c.Err, c.NaiveErr, c.Covered
				fmt.Fprintf(w, "%-9s %-8s %-9s %-9s %+8.1f%% %-20s %-8v %+8.1f%% %.0f / %.0f\n", fmt.Sprintf("%.0f%%", pt.cp*100),
					fmt.Sprintf("%.1f%%", 100*c.Progress), fmt.Sprintf("%.1fs", c.TrueRemaining), fmt.Sprintf("%.1fs", res.Seconds), 100*c.Err,
					fmt.Sprintf("[%.1fs, %.1fs]", res.LowSeconds, res.HighSeconds), c.Covered, 100*c.NaiveErr, res.MeanOutputTokens, res.MainTokensPerSec)
			}
			r.cps = append(r.cps, pt)
		}
		fmt.Fprintln(w)
		rs = append(rs, r)
	}
	printSummary(w, rs)
	return 0
}

func fleetGenerated(f *sim.Fleet) int64 {
	var n int64
	for _, s := range f.Stats() {
		n += s.GeneratedTokens
	}
	return n
}

// score returns whether the targets hold: |error| ≤ 10 % from 2 %, ≤ 5 %
// from 10 %, and the number of covered checkpoints out of those reached.
func (r result) score() (ok10, ok5 bool, covered, total int) {
	ok10, ok5 = true, true
	for _, pt := range r.cps {
		if !pt.ok {
			if pt.cp >= 0.02 {
				ok10 = false
			}
			if pt.cp >= 0.10 {
				ok5 = false
			}
			continue
		}
		total++
		if pt.covered {
			covered++
		}
		if pt.cp >= 0.02 && math.Abs(pt.err) > 0.10 {
			ok10 = false
		}
		if pt.cp >= 0.10 && math.Abs(pt.err) > 0.05 {
			ok5 = false
		}
	}
	return ok10, ok5, covered, total
}

func printResult(w io.Writer, r result, verbose bool) {
	c := r.cfg
	fmt.Fprintf(w, "ETA benchmark %s: %d requests, %d × rtx-pro-6000 27B (gensim, speedup %.0f×), thinking, %s, max_tokens %d, stream=%v, seed %d\n",
		c.name(), c.n, c.servers, c.speedup, c.lengths(), c.maxTokens, c.stream, c.seed)
	fmt.Fprintf(w, "job finished in %.1fs wall (%.0f simulated s); %d completed, %d (%.1f%%) hit max_tokens, mean output %.0f tokens\n\n",
		r.wall, r.wall*c.speedup, r.done, r.lengthHits, 100*float64(r.lengthHits)/math.Max(1, float64(r.done)),
		float64(r.finalGen)/math.Max(1, float64(r.done)))
	fmt.Fprintf(w, "%-9s %-8s %-9s %-9s %-9s %-20s %-8s %-9s %s\n", "checkpt", "at", "true_rem", "gend_eta", "gend_err", "interval", "covered", "naive", "naive_err")
	for _, pt := range r.cps {
		if !pt.ok {
			fmt.Fprintf(w, "%-9s (no estimate reached this checkpoint)\n", fmt.Sprintf("%.0f%%", pt.cp*100))
			continue
		}
		s := pt.s
		fmt.Fprintf(w, "%-9s %-8s %-9s %-9s %+8.1f%% %-20s %-8v %-9s %+.1f%%\n", fmt.Sprintf("%.0f%%", pt.cp*100),
			fmt.Sprintf("%.1f%%", 100*s.progress), fmt.Sprintf("%.1fs", pt.trueRem), fmt.Sprintf("%.1fs", s.eta), 100*pt.err,
			fmt.Sprintf("[%.1fs, %.1fs]", s.low, s.high), pt.covered, fmt.Sprintf("%.1fs", s.naive), 100*pt.naiveErr)
		if verbose {
			trueTok := float64(r.finalGen - s.simGen)
			trueRate := trueTok / pt.trueRem
			fmt.Fprintf(w, "          tokens: est %.3g true %.3g (%+.1f%%); mean est %.0f true %.0f (of the %d started: %.0f); tok/s: used %.0f true-avg %.0f (%+.1f%%); in-flight generated %d\n",
				s.remTok, trueTok, 100*(s.remTok-trueTok)/trueTok, s.meanTok, float64(r.finalGen)/float64(r.done), s.started, prefixMean(r.lengths, int(s.started)),
				s.fleetTok, trueRate, 100*(s.fleetTok-trueRate)/trueRate, s.simGen-s.doneTok)
		}
	}
	if verbose && r.drain > 0 {
		fmt.Fprintf(w, "drain (every request dispatched → end): %.1fs of %.1fs\n", r.drain, r.wall)
	}
	ok10, ok5, cov, total := r.score()
	fmt.Fprintf(w, "\ntargets: |error| ≤ 10%% from 2%%: %s; ≤ 5%% from 10%%: %s; interval covers ≥ 90%% of checkpoints: %d/%d %s\n\n",
		passFail(ok10), passFail(ok5), cov, total, passFail(total > 0 && float64(cov) >= 0.9*float64(total)))
}

func printSummary(w io.Writer, rs []result) {
	fmt.Fprintf(w, "summary: gend ETA error at each checkpoint (* = interval missed the true finish)\n")
	fmt.Fprintf(w, "%-34s", "config")
	for _, cp := range checkpoints {
		fmt.Fprintf(w, " %8s", fmt.Sprintf("%.0f%%", cp*100))
	}
	fmt.Fprintf(w, "  %-6s %-6s %s\n", "≤10%", "≤5%", "covered")
	allCov, allTotal := 0, 0
	all10, all5 := true, true
	for _, r := range rs {
		name := r.label
		if name == "" {
			name = r.cfg.name()
		}
		fmt.Fprintf(w, "%-34s", name)
		for _, pt := range r.cps {
			if !pt.ok {
				fmt.Fprintf(w, " %8s", "-")
				continue
			}
			mark := ""
			if !pt.covered {
				mark = "*"
			}
			fmt.Fprintf(w, " %8s", fmt.Sprintf("%+.1f%%%s", 100*pt.err, mark))
		}
		ok10, ok5, cov, total := r.score()
		all10, all5 = all10 && ok10, all5 && ok5
		allCov += cov
		allTotal += total
		fmt.Fprintf(w, "  %-6s %-6s %d/%d\n", passFail(ok10), passFail(ok5), cov, total)
	}
	fmt.Fprintf(w, "\nall: |error| ≤ 10%% from 2%%: %s; ≤ 5%% from 10%%: %s; interval covers ≥ 90%%: %d/%d %s\n",
		passFail(all10), passFail(all5), allCov, allTotal, passFail(allTotal > 0 && float64(allCov) >= 0.9*float64(allTotal)))
}

// printTrace prints, about every second, gend's throughput input, its ETA
// and the throughput the simulator really ran at over the last second and
// over the rest of the job.
func printTrace(w io.Writer, r result) {
	fmt.Fprintf(w, "%-7s %-7s %-10s %-10s %-10s %-9s %-9s %-9s\n", "t", "done", "gend_tok/s", "sim_1s", "sim_rest", "gend_eta", "true_rem", "imp_tok/s")
	last := -1.0
	end := r.trace[len(r.trace)-1]
	for i, p := range r.trace {
		// Every sample for the first 5 s, then about every second.
		if p.t > 5 && p.t-last < 1 {
			continue
		}
		last = p.t
		k := i
		for k > 0 && p.t-r.trace[k].t < 1 {
			k--
		}
		s1 := 0.0
		if dt := p.t - r.trace[k].t; dt > 0 {
			s1 = float64(p.simGen-r.trace[k].simGen) / dt
		}
		rest := 0.0
		if dt := end.t - p.t; dt > 0 {
			rest = float64(r.finalGen-p.simGen) / dt
		}
		imp := 0.0
		if p.eta > 0 {
			imp = p.remTok / p.eta
		}
		fmt.Fprintf(w, "%-7.1f %-7.3f %-10.0f %-10.0f %-10.0f %-9.1f %-9.1f %-9.0f\n", p.t, p.frac, p.fleetTok, s1, rest, p.eta, end.t-p.t, imp)
	}
}

func passFail(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// readLengths returns each input line's output tokens from the job's
// output shards (-1 where not found).
func readLengths(dir string, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = -1
	}
	files, _ := filepath.Glob(filepath.Join(dir, "part-*.jsonl"))
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(raw), "\n") {
			var id, tok int
			i := strings.Index(line, `"custom_id":"q`)
			j := strings.Index(line, `"completion_tokens":`)
			if i < 0 || j < 0 {
				continue
			}
			if _, err := fmt.Sscanf(line[i+len(`"custom_id":"q`):], "%d", &id); err != nil {
				continue
			}
			if _, err := fmt.Sscanf(line[j+len(`"completion_tokens":`):], "%d", &tok); err != nil {
				continue
			}
			if id >= 0 && id < n {
				out[id] = tok
			}
		}
	}
	return out
}

// prefixMean is the mean output of the first k input lines (the requests
// dispatched first), 0 when unknown.
func prefixMean(lengths []int, k int) float64 {
	var sum, n float64
	for i := 0; i < k && i < len(lengths); i++ {
		if lengths[i] >= 0 {
			sum += float64(lengths[i])
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / n
}

func countLengthHits(dir string) int64 {
	files, _ := filepath.Glob(filepath.Join(dir, "part-*.jsonl"))
	var n int64
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		n += int64(strings.Count(string(raw), `"finish_reason":"length"`))
	}
	return n
}
