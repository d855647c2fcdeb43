// Command etabench (make bench-eta) runs a heavy-tailed generation job on
// gensim through gend and prints, at 1, 2, 5, 10, 25, 50 and 75 % progress,
// gend's ETA error and whether its interval covered the true finish, beside
// the naive remaining/rate ETA's error.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/gend-dev/gend/api"
	"github.com/gend-dev/gend/internal/daemon"
	"github.com/gend-dev/gend/internal/sim"
)

type sample struct {
	progress          float64
	wall              time.Time
	eta, low, high    float64
	naive             float64
	ok                bool
	completed, failed int64
	remTok, meanTok, fleetTok float64
}

func main() { os.Exit(run()) }

func run() int {
	var (
		n         = flag.Int("n", 3000, "requests")
		servers   = flag.Int("servers", 4, "simulated servers")
		speedup   = flag.Float64("speedup", 50, "gensim speedup")
		sigma     = flag.Float64("sigma", 1.0, "lognormal sigma of output lengths")
		mean      = flag.Float64("mean", 2500, "mean output tokens (thinking)")
		maxTokens = flag.Int("max-tokens", 8192, "max_tokens cap")
		stream    = flag.Bool("stream", false, "stream from the servers (exact in-flight token counts)")
		seed      = flag.Int64("seed", 1, "gensim seed")
		verbose   = flag.Bool("v", false, "print the ETA model's estimates at each checkpoint")
	)
	flag.Parse()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "etabench")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	scs := make([]sim.ServerConfig, *servers)
	for i := range scs {
		scs[i] = sim.ServerConfig{OutputMean: *mean, OutputSigma: *sigma, MaxContentBytes: 512}
	}
	fleet, err := sim.StartFleet(ctx, sim.FleetConfig{Speedup: *speedup, Seed: *seed, Servers: scs})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer fleet.Close()
	var cfg api.Config
	for i, u := range fleet.URLs() {
		cfg.Servers = append(cfg.Servers, api.ServerSpec{Name: fmt.Sprintf("gpu%d", i), URL: u})
	}
	in := filepath.Join(dir, "in.jsonl")
	var b strings.Builder
	for i := 0; i < *n; i++ {
		fmt.Fprintf(&b, `{"custom_id":"q%06d","messages":[{"role":"user","content":"Prompt %d: reason step by step about topic %d."}]}`+"\n", i, i, i%97)
	}
	if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	d, err := daemon.New(daemon.Options{Listener: ln, StateDir: filepath.Join(dir, "state"), Config: cfg, NVML: "off",
		Logger: zerolog.Nop(), ControlPeriod: 250 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go d.Run(ctx)
	c := api.NewClient("http://"+ln.Addr().String(), "", nil)
	time.Sleep(300 * time.Millisecond)
	spec, _ := json.Marshal(map[string]any{
		"name": "eta-bench", "input": in,
		"request": map[string]any{"stream": *stream, "params": map[string]any{"max_tokens": *maxTokens, "temperature": 0.6,
			"chat_template_kwargs": map[string]any{"enable_thinking": true}}},
		"output": map[string]any{"dir": filepath.Join(dir, "out")},
	})
	j, err := c.SubmitJob(ctx, spec, api.ContentTypeJSON)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	start := time.Now()
	fmt.Printf("ETA benchmark: %d requests, %d × rtx-pro-6000 27B (gensim, speedup %.0f×), thinking, lognormal mean %.0f sigma %.2f, max_tokens %d, stream=%v\n",
		*n, *servers, *speedup, *mean, *sigma, *maxTokens, *stream)
	checkpoints := []float64{0.01, 0.02, 0.05, 0.10, 0.25, 0.50, 0.75}
	got := map[float64]sample{}
	var lengthHits, done int64
	for {
		cur, err := c.GetJob(ctx, j.ID)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		p := cur.Progress
		frac := 0.0
		if p.Total > 0 {
			frac = float64(p.Completed+p.Failed) / float64(p.Total)
		}
		for _, cp := range checkpoints {
			if _, ok := got[cp]; !ok && frac >= cp && p.ETASeconds >= 0 {
				got[cp] = sample{progress: frac, wall: time.Now(), eta: p.ETASeconds, low: p.ETALowSeconds, high: p.ETAHighSeconds,
					naive: p.NaiveETASeconds, ok: true, completed: p.Completed, failed: p.Failed,
					remTok: p.EstRemainingTokens, meanTok: p.EstMeanOutputTokens, fleetTok: p.FleetTokensPerSec}
			}
		}
		if api.Terminal(cur.Status) {
			done = p.Completed
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	end := time.Now()
	lengthHits = countLengthHits(filepath.Join(dir, "out", "shards"))
	fmt.Printf("job finished in %.1fs wall (%.0f simulated s); %d completed, %d (%.1f%%) hit max_tokens\n\n",
		end.Sub(start).Seconds(), end.Sub(start).Seconds()**speedup, done, lengthHits, 100*float64(lengthHits)/math.Max(1, float64(done)))
	fmt.Printf("%-9s %-9s %-11s %-11s %-22s %-9s %-9s %s\n", "progress", "true_rem", "gend_eta", "gend_err", "interval", "covered", "naive", "naive_err")
	coveredN, total := 0, 0
	ok10, ok5 := true, true
	for _, cp := range checkpoints {
		s, ok := got[cp]
		if !ok {
			fmt.Printf("%-9s (no estimate reached this checkpoint)\n", fmt.Sprintf("%.0f%%", cp*100))
			if cp >= 0.02 {
				ok10 = false
			}
			continue
		}
		trueRem := end.Sub(s.wall).Seconds()
		e := (s.eta - trueRem) / trueRem
		ne := (s.naive - trueRem) / trueRem
		cov := s.low <= trueRem && trueRem <= s.high
		total++
		if cov {
			coveredN++
		}
		if cp >= 0.02 && math.Abs(e) > 0.10 {
			ok10 = false
		}
		if cp >= 0.10 && math.Abs(e) > 0.05 {
			ok5 = false
		}
		fmt.Printf("%-9s %-9s %-11s %+10.1f%% %-22s %-9v %-9s %+.1f%%\n", fmt.Sprintf("%.0f%%", cp*100), fmt.Sprintf("%.1fs", trueRem),
			fmt.Sprintf("%.1fs", s.eta), 100*e, fmt.Sprintf("[%.1fs, %.1fs]", s.low, s.high), cov, fmt.Sprintf("%.1fs", s.naive), 100*ne)
		if *verbose {
			fmt.Printf("          est mean %.0f tok, remaining %.3g tok, fleet %.0f tok/s\n", s.meanTok, s.remTok, s.fleetTok)
		}
	}
	fmt.Printf("\ntargets: |error| ≤ 10%% from 2%%: %s; ≤ 5%% from 10%%: %s; interval covers ≥ 90%% of checkpoints: %d/%d %s\n",
		passFail(ok10), passFail(ok5), coveredN, total, passFail(total > 0 && float64(coveredN) >= 0.9*float64(total)))
	return 0
}

func passFail(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
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
