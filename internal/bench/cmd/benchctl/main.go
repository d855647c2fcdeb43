// Command benchctl runs gend's benchmarks and prints their numbers.
//
//	benchctl scheduler [flags]   adaptive vs static sweep vs old script on gensim scenarios (issue 4);
//	                             -quick: 1,200 prompts and static 16,32,64,128,512
//	benchctl controller [flags]  gend's completions/s, CPU per 1,000 completions and RSS (issue 2)
//	benchctl run-one -config JSON  one scheduler run (used by scheduler; prints JSON)
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/gend-dev/gend/internal/bench"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

const usage = "usage: benchctl scheduler|controller|run-one [flags] (-h for each)"

func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	switch args[0] {
	case "scheduler":
		return runScheduler(ctx, args[1:], stdout, stderr)
	case "controller":
		return runController(ctx, args[1:], stdout, stderr)
	case "run-one":
		return runOne(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprintln(stderr, usage)
	return 2
}

func runOne(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run-one", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := fs.String("config", "", "the run as JSON (bench.RunConfig)")
	prof := fs.String("cpuprofile", "", "write a CPU profile of the run here")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *prof != "" {
		f, err := os.Create(*prof)
		if err != nil {
			fmt.Fprintf(stderr, "benchctl run-one: %v\n", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "benchctl run-one: %v\n", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	var rc bench.RunConfig
	dec := json.NewDecoder(strings.NewReader(*cfg))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rc); err != nil {
		fmt.Fprintf(stderr, "benchctl run-one: -config: %v\n", err)
		return 2
	}
	res, err := bench.RunOne(ctx, rc)
	if err != nil {
		res.Err = err.Error()
	}
	if err := json.NewEncoder(stdout).Encode(res); err != nil {
		fmt.Fprintf(stderr, "benchctl run-one: %v\n", err)
		return 1
	}
	if res.Err != "" {
		return 1
	}
	return 0
}

func runScheduler(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("scheduler", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := bench.DefaultSchedulerOptions()
	quick := fs.Bool("quick", false, "smaller variant: fewer prompts and static values")
	scenarios := fs.String("scenarios", strings.Join(bench.ScenarioNames(), ","), "comma-separated scenarios")
	statics := fs.String("static", "8,16,32,64,128,256,512,1024", "static per-server limits swept")
	fs.IntVar(&o.Prompts, "prompts", o.Prompts, "prompts per run")
	fs.Float64Var(&o.Speedup, "speedup", o.Speedup, "gensim speedup (≤ 50 keeps gend's control period short next to requests)")
	fs.DurationVar(&o.Period, "period", o.Period, "gend's control period (wall)")
	fs.IntVar(&o.MaxTokens, "max-tokens", o.MaxTokens, "max_tokens of every request")
	fs.Float64Var(&o.MeanOut, "output-mean", o.MeanOut, "mean output tokens (thinking on)")
	fs.Int64Var(&o.Seed, "seed", o.Seed, "gensim seed (output lengths, fault draws)")
	fs.Float64Var(&o.Stagger, "stagger", o.Stagger, "old script: simulated seconds between task launches")
	fs.IntVar(&o.OldPerServer, "old-per-server", o.OldPerServer, "old script: requests per server")
	fs.IntVar(&o.Parallel, "parallel", o.Parallel, "runs at once (each in its own process)")
	fs.Float64Var(&o.StopFactor, "stop-factor", o.StopFactor, "stop a run once it is this many times slower than the best finished one (0: never)")
	fs.Float64Var(&o.RampSpeedup, "ramp-speedup", o.RampSpeedup, "speedup of the separate runs that measure the time to 90 % of steady throughput (0: none)")
	fs.Float64Var(&o.RampSeconds, "ramp-seconds", o.RampSeconds, "simulated seconds of each ramp run")
	jsonOut := fs.String("json", "", "also write every run's result to this file as JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *quick {
		if !flagSet(fs, "prompts") {
			o.Prompts = 1200
		}
		if !flagSet(fs, "static") {
			*statics = "16,32,64,128,512"
		}
	}
	var err error
	if o.Static, err = bench.ParseList(*statics); err != nil {
		fmt.Fprintf(stderr, "benchctl scheduler: -static: %v\n", err)
		return 2
	}
	o.Scenarios = splitList(*scenarios)
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "benchctl scheduler: %v\n", err)
		return 1
	}
	o.Exe = exe
	o.Log = stderr
	rep, err := bench.Scheduler(ctx, o, stdout)
	if *jsonOut != "" && rep != nil {
		if b, jerr := json.MarshalIndent(rep, "", "  "); jerr == nil {
			if werr := os.WriteFile(*jsonOut, b, 0o644); werr != nil {
				fmt.Fprintf(stderr, "benchctl scheduler: %v\n", werr)
			}
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "benchctl scheduler: %v\n", err)
		return 1
	}
	return 0
}

func runController(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := bench.DefaultControllerOptions()
	fs.IntVar(&o.Servers, "servers", o.Servers, "simulated servers")
	fs.IntVar(&o.Prompts, "prompts", o.Prompts, "prompts of the throughput job")
	fs.Float64Var(&o.Speedup, "speedup", o.Speedup, "gensim speedup (GPUs must not be the limit)")
	fs.IntVar(&o.ContentBytes, "content-bytes", o.ContentBytes, "cap on each text field of a response (response ≈ 2× this)")
	fs.StringVar(&o.Gensim, "gensim", "auto", "gensim binary to run the fleet in its own process (auto: bin/gensim if built; empty: in-process)")
	fs.IntVar(&o.RSSLines, "rss-lines", o.RSSLines, "input lines of the RSS run (0: skip it)")
	fs.DurationVar(&o.RSSFor, "rss-for", o.RSSFor, "how long the RSS run streams before it stops the job")
	fs.IntVar(&o.RSSPerServer, "rss-per-server-max", o.RSSPerServer, "per_server_max of the RSS job")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the throughput run here")
	fs.StringVar(&o.MemProfile, "memprofile", "", "write a heap profile when the throughput job ends")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "bound on each run")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.Gensim == "auto" {
		o.Gensim = ""
		if fi, err := os.Stat("bin/gensim"); err == nil && !fi.IsDir() {
			o.Gensim = "bin/gensim"
		}
	}
	if err := bench.Controller(ctx, o, stdout); err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(stderr, "benchctl controller: interrupted")
		} else {
			fmt.Fprintf(stderr, "benchctl controller: %v\n", err)
		}
		return 1
	}
	return 0
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
