// Command gensim serves a simulated fleet of SGLang servers with a roofline
// performance model. See docs/gensim.md.
//
//	gensim [flags]            serve the fleet until SIGINT/SIGTERM
//	gensim bench [flags]      throughput table and CPU-share measurement
//	gensim loadgen [flags]    closed-loop load client (used by bench)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/gend-dev/gend/internal/rlimit"
	"github.com/gend-dev/gend/internal/sim"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(args) > 0 {
		switch args[0] {
		case "bench":
			return runBench(ctx, args[1:], stdout, stderr)
		case "loadgen":
			return runLoadgen(ctx, args[1:], stderr)
		}
	}
	return runServe(ctx, args, stdout, stderr)
}

// serverFlags registers the flags that describe one simulated server.
func serverFlags(fs *flag.FlagSet, sc *sim.ServerConfig) {
	fs.StringVar(&sc.GPU, "gpu", "rtx-pro-6000", "GPU preset: "+strings.Join(sim.GPUKeys(), "|"))
	fs.StringVar(&sc.Model, "model", "27b", "model preset: "+strings.Join(sim.ModelKeys(), "|"))
	fs.IntVar(&sc.MaxRunningRequests, "max-running-requests", 0, "cap on the running batch (0: derived from the KV pool like SGLang)")
	fs.Float64Var(&sc.MemFractionStatic, "mem-fraction-static", 0.9, "fraction of GPU memory for weights and KV pool")
	fs.IntVar(&sc.MaxQueuedRequests, "max-queued-requests", 0, "waiting-queue cap; over it requests get 503 (0: unbounded)")
	fs.Float64Var(&sc.ScheduleConservativeness, "schedule-conservativeness", 1.0, "scales the admission reserve (new_token_ratio starts at 0.7×this)")
	fs.IntVar(&sc.ContextLength, "context-length", 0, "context length (0: the model's, 32768)")
	fs.IntVar(&sc.ChunkedPrefillSize, "chunked-prefill-size", 0, "prefill chunk in tokens (0: 8192, 16384 on GPUs ≥ 160 GB)")
	fs.Float64Var(&sc.OutputMean, "output-mean", sim.DefaultOutputMean, "mean output tokens with thinking on")
	fs.Float64Var(&sc.OutputSigma, "output-sigma", sim.DefaultOutputSigma, "lognormal sigma of output lengths")
	fs.Float64Var(&sc.OutputMeanNoThink, "output-mean-nothink", 0, "mean output tokens with thinking off (0: output-mean/5)")
	fs.StringVar(&sc.OutputDist, "output-dist", "lognormal", "output-length family: lognormal|gamma:K|weibull:K|pareto:A|bimodal:P:M|uniform:LO:HI")
	fs.Float64Var(&sc.OutputRunaway, "output-runaway", 0, "share (0–0.5) of prompts that never stop on their own (end at max_tokens or the context)")
	fs.IntVar(&sc.MaxContentBytes, "max-content-bytes", sim.DefaultMaxContentBytes, "cap on the bytes of each text field of a response; usage still counts every token (negative: no cap)")
}

type faultFlags struct {
	errorRate, dropRate          float64
	slowAt, slowFactor, slowFor  float64
	deathAt, reviveAfter, warmup float64
	servers                      string
}

func (ff *faultFlags) register(fs *flag.FlagSet) {
	fs.Float64Var(&ff.errorRate, "error-rate", 0, "share of requests answered with a 500")
	fs.Float64Var(&ff.dropRate, "drop-rate", 0, "share of responses whose connection is cut mid-body")
	fs.Float64Var(&ff.slowAt, "slowdown-at", -1, "simulated second at which steps slow down (-1: never)")
	fs.Float64Var(&ff.slowFactor, "slowdown-factor", 2, "step-time multiplier of the slowdown")
	fs.Float64Var(&ff.slowFor, "slowdown-duration", 0, "simulated seconds the slowdown lasts (0: for good)")
	fs.Float64Var(&ff.deathAt, "death-at", -1, "simulated second at which the server dies (-1: never)")
	fs.Float64Var(&ff.reviveAfter, "revive-after", 0, "simulated seconds until a dead server listens again (0: never)")
	fs.Float64Var(&ff.warmup, "warmup", 0, "simulated seconds a revived server answers /health with 503")
	fs.StringVar(&ff.servers, "fault-servers", "", "comma-separated server names the fault flags apply to (default: all)")
}

func (ff *faultFlags) apply(cfg *sim.FleetConfig) {
	only := map[string]bool{}
	for _, n := range strings.Split(ff.servers, ",") {
		if n = strings.TrimSpace(n); n != "" {
			only[n] = true
		}
	}
	for i := range cfg.Servers {
		s := &cfg.Servers[i]
		name := s.Name
		if name == "" {
			name = "gpu" + strconv.Itoa(i)
		}
		if len(only) > 0 && !only[name] {
			continue
		}
		if ff.errorRate > 0 {
			s.Faults.ErrorRate = ff.errorRate
		}
		if ff.dropRate > 0 {
			s.Faults.DropRate = ff.dropRate
		}
		if ff.slowAt >= 0 {
			s.Faults.Slowdown = &sim.Slowdown{AtS: ff.slowAt, Factor: ff.slowFactor, DurationS: ff.slowFor}
		}
		if ff.deathAt >= 0 {
			s.Faults.Death = &sim.Death{AtS: ff.deathAt, ReviveAfterS: ff.reviveAfter, WarmupS: ff.warmup}
		}
	}
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gensim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg sim.FleetConfig
	var tmpl sim.ServerConfig
	var ff faultFlags
	var n int
	var scenario, logLevel string
	fs.IntVar(&n, "servers", 4, "number of servers (a scenario's server list replaces it)")
	fs.IntVar(&cfg.Port, "port", 30000, "port of the first server; server i listens on port+i (0: free ports)")
	fs.StringVar(&cfg.Host, "host", "127.0.0.1", "listen host")
	fs.Float64Var(&cfg.Speedup, "speedup", 1, "simulated seconds per wall-clock second")
	fs.Int64Var(&cfg.Seed, "seed", 0, "seed of output lengths, ids and fault draws")
	fs.DurationVar(&cfg.Tick, "tick", 5*time.Millisecond, "engine wake-up period while busy")
	fs.StringVar(&scenario, "scenario", "", "scenario file (JSON or YAML): per-server settings and faults")
	fs.StringVar(&logLevel, "log-level", "info", "log level (debug, info, warn, error)")
	serverFlags(fs, &tmpl)
	ff.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gensim: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	lvl, err := zerolog.ParseLevel(logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "gensim: --log-level: %v\n", err)
		return 2
	}
	cfg.Logger = zerolog.New(stderr).Level(lvl).With().Timestamp().Logger()
	// One socket per request served: raise the open-file limit as far as we may.
	lim, err := rlimit.Raise()
	lim.Log(cfg.Logger, err)
	for range n {
		cfg.Servers = append(cfg.Servers, tmpl)
	}
	if scenario != "" {
		sc, err := sim.LoadScenario(scenario)
		if err != nil {
			fmt.Fprintf(stderr, "gensim: %v\n", err)
			return 1
		}
		cfg = sc.Merge(cfg, tmpl)
	}
	ff.apply(&cfg)
	fleet, err := sim.StartFleet(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "gensim: %v\n", err)
		return 1
	}
	defer fleet.Close()
	for i, u := range fleet.URLs() {
		fmt.Fprintf(stdout, "gensim: server %s listening on %s\n", fleet.Names()[i], u)
	}
	fmt.Fprintln(stdout, "gensim: ready")
	cfg.Logger.Info().Int("servers", len(cfg.Servers)).Float64("speedup", cfg.Speedup).Msg("gensim started")
	<-ctx.Done()
	cfg.Logger.Info().Msg("gensim stopping")
	return 0
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gensim bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var bc sim.BenchConfig
	var levels string
	var cpuServers, cpuPer int
	var cpuSpeed float64
	var cpuFor time.Duration
	var noThink bool
	serverFlags(fs, &bc.Server)
	fs.StringVar(&levels, "concurrency", "8,16,32,64,128,256,512,1024", "client concurrency levels")
	fs.Float64Var(&bc.WarmupS, "warmup-s", 1200, "simulated warm-up seconds per level")
	fs.Float64Var(&bc.MeasureS, "measure-s", 3600, "simulated measured seconds per level")
	fs.IntVar(&bc.MaxTokens, "max-tokens", 16384, "max_completion_tokens per request")
	fs.BoolVar(&noThink, "no-thinking", false, "use thinking-off output lengths")
	fs.Int64Var(&bc.Seed, "seed", 0, "seed")
	fs.IntVar(&cpuServers, "cpu-servers", 8, "servers in the CPU-share measurement (0: skip it)")
	fs.IntVar(&cpuPer, "cpu-per-server", 512, "in-flight requests per server in the CPU-share measurement")
	fs.Float64Var(&cpuSpeed, "cpu-speedup", 100, "speedup in the CPU-share measurement")
	fs.DurationVar(&cpuFor, "cpu-duration", 20*time.Second, "wall time of the CPU-share measurement")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	bc.Thinking = !noThink
	for _, l := range strings.Split(levels, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(l))
		if err != nil || c <= 0 {
			fmt.Fprintf(stderr, "gensim bench: --concurrency: bad level %q\n", l)
			return 2
		}
		bc.Concurrency = append(bc.Concurrency, c)
	}
	rows, err := sim.Bench(bc)
	if err != nil {
		fmt.Fprintf(stderr, "gensim bench: %v\n", err)
		return 1
	}
	if err := sim.WriteBench(stdout, bc, rows); err != nil {
		fmt.Fprintf(stderr, "gensim bench: %v\n", err)
		return 1
	}
	if cpuServers <= 0 {
		return 0
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "gensim bench: find own binary: %v\n", err)
		return 1
	}
	cc := sim.CPUConfig{Servers: cpuServers, PerServer: cpuPer, Speedup: cpuSpeed, Duration: cpuFor,
		Server: bc.Server, Thinking: bc.Thinking,
		Client: func(ctx context.Context, urls []string) error {
			cmd := exec.CommandContext(ctx, self, "loadgen", "--urls", strings.Join(urls, ","),
				"--per-server", strconv.Itoa(cpuPer), "--duration", cpuFor.String(),
				"--thinking="+strconv.FormatBool(bc.Thinking))
			cmd.Stderr = stderr
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("run loadgen: %w", err)
			}
			return nil
		}}
	res, err := sim.MeasureCPU(ctx, cc)
	if err != nil {
		fmt.Fprintf(stderr, "gensim bench: %v\n", err)
		return 1
	}
	if err := sim.WriteCPU(stdout, cc, res, runtime.NumCPU()); err != nil {
		fmt.Fprintf(stderr, "gensim bench: %v\n", err)
		return 1
	}
	return 0
}

func runLoadgen(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("gensim loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var lc sim.LoadConfig
	var urls string
	fs.StringVar(&urls, "urls", "", "comma-separated server URLs")
	fs.IntVar(&lc.PerServer, "per-server", 64, "in-flight requests per server")
	fs.DurationVar(&lc.Duration, "duration", 10*time.Second, "how long to run")
	fs.IntVar(&lc.MaxTokens, "max-tokens", 16384, "max_completion_tokens")
	fs.BoolVar(&lc.Thinking, "thinking", true, "enable_thinking")
	fs.BoolVar(&lc.Stream, "stream", false, "use SSE")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	lc.URLs = strings.Split(urls, ",")
	res, err := sim.RunLoad(ctx, lc)
	if err != nil {
		fmt.Fprintf(stderr, "gensim loadgen: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "gensim loadgen: %d requests ok, %d errors, %d completion tokens\n", res.Requests, res.Errors, res.CompletionTokens)
	return 0
}
