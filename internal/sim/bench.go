package sim

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// BenchConfig describes the throughput-versus-concurrency table.
type BenchConfig struct {
	Server      ServerConfig // the simulated server (GPU, model, limits)
	Concurrency []int        // closed-loop client concurrency levels; default 8, 16, …, 1024
	WarmupS     float64      // simulated seconds before measuring; default 900
	MeasureS    float64      // simulated seconds measured; default 1800
	MaxTokens   int          // max_completion_tokens per request; default 16384
	Thinking    bool         // thinking-mode lengths (OutputMean); default plain when false
	Seed        int64
}

// BenchRow is one concurrency level's result; times are simulated.
type BenchRow struct {
	Concurrency    int
	TokensPerSec   float64 // output tokens per second
	RequestsPerSec float64
	AvgRunning     float64 // time-weighted running batch
	AvgQueue       float64
	AvgTokenUsage  float64 // KV pool fraction in use
	Retractions    int64
	RetractPerMin  float64
	MeanLatencyS   float64 // arrival to completion
}

// Bench drives one simulated server's scheduler with a closed-loop client in
// virtual time (no HTTP, no wall clock), one level at a time.
func Bench(cfg BenchConfig) ([]BenchRow, error) {
	if len(cfg.Concurrency) == 0 {
		for c := 8; c <= 1024; c *= 2 {
			cfg.Concurrency = append(cfg.Concurrency, c)
		}
	}
	cfg.WarmupS = orF(cfg.WarmupS, 900)
	cfg.MeasureS = orF(cfg.MeasureS, 1800)
	cfg.MaxTokens = orI(cfg.MaxTokens, 16384)
	p, errs := cfg.Server.resolve(cfg.Seed)
	if len(errs) > 0 {
		return nil, fmt.Errorf("bench config: %w", errors.Join(errs...))
	}
	rows := make([]BenchRow, 0, len(cfg.Concurrency))
	for _, conc := range cfg.Concurrency {
		rows = append(rows, benchLevel(cfg, p, conc))
	}
	return rows, nil
}

// benchPrompt is a deterministic prompt of 200–1200 bytes (50–300 tokens).
func benchPrompt(level, i int, pad string) string {
	n := 200 + int(splitmix64(uint64(level)<<32|uint64(i))%1000)
	head := fmt.Sprintf("bench %d %d: ", level, i)
	return head + pad[:max(n-len(head), 0)]
}

func benchLevel(cfg BenchConfig, p params, conc int) BenchRow {
	var finished []*request
	c := newCore(coreConfig{roof: p.roof, pool: p.pool, maxRunning: p.maxRunning, chunk: p.chunk,
		maxPrefill: p.maxPrefill, maxQueued: cfg.Server.MaxQueuedRequests, conservativeness: p.conservative},
		func(r *request) { finished = append(finished, r) })
	pad := strings.Repeat("Explain the following topic in detail with examples. ", 30)
	next := 0
	submit := func() {
		text := benchPrompt(conc, next, pad)
		next++
		plan := p.lengths.plan(text, cfg.Thinking)
		r := newRequest()
		r.prompt = promptTokens(text)
		r.maxNew = min(cfg.MaxTokens, p.maxReqLen-r.prompt-1)
		r.target, r.reason = plan.total, "stop"
		if plan.total >= r.maxNew {
			r.target, r.reason = r.maxNew, "length"
		}
		c.submit(r)
	}
	for range conc {
		submit()
	}
	const dt = 0.25 // simulated seconds per client round trip
	var row BenchRow
	row.Concurrency = conc
	var gen0, ret0 int64
	var done int64
	var latency float64
	var samples float64
	steps := int((cfg.WarmupS + cfg.MeasureS) / dt)
	for i := 1; i <= steps; i++ {
		t := float64(i) * dt
		c.advance(t)
		measuring := t > cfg.WarmupS
		if !measuring {
			gen0, ret0 = c.c.genTokens, c.c.retractions
		}
		for _, r := range finished {
			if measuring {
				done++
				latency += r.tDone - r.tArrive
			}
			submit()
		}
		finished = finished[:0]
		if measuring {
			samples++
			row.AvgRunning += float64(len(c.running))
			row.AvgQueue += float64(len(c.waiting))
			row.AvgTokenUsage += float64(c.used()) / float64(p.pool)
		}
	}
	row.TokensPerSec = float64(c.c.genTokens-gen0) / cfg.MeasureS
	row.RequestsPerSec = float64(done) / cfg.MeasureS
	row.Retractions = c.c.retractions - ret0
	row.RetractPerMin = float64(row.Retractions) / cfg.MeasureS * 60
	if samples > 0 {
		row.AvgRunning /= samples
		row.AvgQueue /= samples
		row.AvgTokenUsage /= samples
	}
	if done > 0 {
		row.MeanLatencyS = latency / float64(done)
	}
	return row
}

// WriteBench prints the table.
func WriteBench(w io.Writer, cfg BenchConfig, rows []BenchRow) error {
	p, _ := cfg.Server.resolve(cfg.Seed)
	mode := "thinking off"
	if cfg.Thinking {
		mode = "thinking on"
	}
	if _, err := fmt.Fprintf(w, "gensim bench: %s + %s, KV pool %d tokens, max_running_requests %d, %s, max_tokens %d, %.0f s warm-up + %.0f s measured (simulated)\n",
		p.roof.GPU.Key, p.roof.Model.Key, p.pool, p.maxRunning, mode, orI(cfg.MaxTokens, 16384), orF(cfg.WarmupS, 900), orF(cfg.MeasureS, 1800)); err != nil {
		return fmt.Errorf("write bench: %w", err)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "in flight\tout tok/s\treq/s\trunning\tqueued\tKV usage\tretractions\tretract/min\tmean latency s\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%.0f\t%.3f\t%.1f\t%.1f\t%.2f\t%d\t%.2f\t%.0f\t\n", r.Concurrency, r.TokensPerSec,
			r.RequestsPerSec, r.AvgRunning, r.AvgQueue, r.AvgTokenUsage, r.Retractions, r.RetractPerMin, r.MeanLatencyS)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write bench: %w", err)
	}
	return nil
}
