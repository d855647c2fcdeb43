// Command scalebench is `make bench-scale`: one gend (the real binary, in
// its own process so its CPU and memory are its own) driving simulated
// fleets of 8, 64 and 256 servers (bin/gensim, in as many processes as the
// open-file limit asks for: each holds one socket per request it serves)
// with up to ~20,000 requests in flight, printing completions/s, gend's CPU
// seconds per 1,000 completions, its RSS (and what the Go runtime says it
// is made of) and the p99 dispatch latency (from gend's
// gend_scheduler_dispatch_latency_seconds histogram on /metrics).
// docs/scale.md discusses the numbers.
//
// Goroutines: main's goroutine runs the steps in order; one goroutine per
// child process waits for it, and every child (gensim processes, gend) is
// stopped by SIGTERM and joined before the next step starts.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gend-dev/gend/api"
	gendbench "github.com/gend-dev/gend/internal/bench"
	"github.com/gend-dev/gend/internal/rlimit"
	"github.com/gend-dev/gend/pkg/scheduler"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

type options struct {
	servers      []int
	inFlight     int           // target in flight at the largest fleet (per-server cap = ⌈inFlight / max servers⌉, bounded by the fd limit)
	rate         float64       // offered completions/s the gensim speedup is sized for
	warmup       time.Duration // bound on the fill-up before measuring
	window       time.Duration // measurement window
	outputMean   float64       // mean output tokens (thinking on)
	maxTokens    int
	contentBytes int
	tick         time.Duration
	gend         string // gend binary (empty: go build ./cmd/gend)
	gensim       string // gensim binary (empty: next to gend, else go build ./cmd/gensim)
	simSockets   int    // most in-flight requests one gensim process serves
	lines        int
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("scalebench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	list := fs.String("servers", "8,64,256", "fleet sizes")
	fs.IntVar(&o.inFlight, "in-flight", 20000, "requests in flight at the largest fleet (bounded by gend's open-file limit: one socket per request)")
	fs.Float64Var(&o.rate, "rate", 3000, "offered completions/s: gensim's speedup is set so the simulated GPUs could finish this many")
	fs.DurationVar(&o.warmup, "warmup", 45*time.Second, "longest wait for the fleet to fill before measuring")
	fs.DurationVar(&o.window, "window", 25*time.Second, "measurement window")
	fs.Float64Var(&o.outputMean, "output-mean", 300, "mean output tokens")
	fs.IntVar(&o.maxTokens, "max-tokens", 1024, "max_tokens of every request")
	fs.IntVar(&o.contentBytes, "max-content-bytes", 256, "gensim's cap on each text field of a response")
	fs.DurationVar(&o.tick, "tick", 20*time.Millisecond, "gensim engine tick")
	fs.StringVar(&o.gend, "gend", "", "gend binary (default: build ./cmd/gend)")
	fs.StringVar(&o.gensim, "gensim", "", "gensim binary (default: gensim next to -gend, else build ./cmd/gensim)")
	fs.IntVar(&o.simSockets, "sim-in-flight-per-process", 6000, "most requests in flight per gensim process (the fleet is split over several)")
	fs.IntVar(&o.lines, "lines", 300000, "input lines (more than a run can finish)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	for _, f := range strings.Split(*list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(stderr, "scalebench: -servers: %q is not a positive number\n", f)
			return 2
		}
		o.servers = append(o.servers, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := bench(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "scalebench: %v\n", err)
		return 1
	}
	return 0
}

// result is one row of the table.
type result struct {
	servers, perServer int
	speedup            float64
	inFlight           float64 // mean over the window
	rate               float64 // completions/s
	cpuPer1k           float64 // gend CPU s per 1,000 completions
	cpuCores           float64 // gend CPU s per wall s
	simCores           float64 // gensim processes' CPU s per wall s
	simProcs           int
	rss, peak          int64
	mem                goMem              // gend's Go runtime at the end of the window
	fds                int                // gend's open descriptors at the end of the window
	outcomes           map[string]float64 // attempts ended in the window, by outcome
	p50, p99           float64
	dispatched         uint64
	failed             int64
}

func bench(ctx context.Context, o options, stdout, stderr io.Writer) error {
	dir, err := os.MkdirTemp("", "gend-scalebench-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	// This process starts gend and gensim: they inherit its limit and raise
	// their own as far as they may (the same as here).
	lim, limErr := rlimit.Raise()
	if limErr != nil {
		fmt.Fprintf(stderr, "scalebench: %v\n", limErr)
	}
	gend, err := binary(ctx, o.gend, dir, "gend", stderr)
	if err != nil {
		return err
	}
	if o.gensim == "" && o.gend != "" {
		if p := filepath.Join(filepath.Dir(o.gend), "gensim"); fileExists(p) {
			o.gensim = p
		}
	}
	if o.gensim, err = binary(ctx, o.gensim, dir, "gensim", stderr); err != nil {
		return err
	}
	input := filepath.Join(dir, "input.jsonl")
	if err := writePrompts(input, o.lines); err != nil {
		return err
	}
	maxServers := 0
	for _, n := range o.servers {
		maxServers = max(maxServers, n)
	}
	perServer := max(1, (o.inFlight+maxServers-1)/maxServers)
	// gend holds one socket per request in flight, plus idle keep-alive
	// connections, its listener, journals, shards and input.
	fdCap := max(1, (int(min(lim.After.Soft, 1<<30))-fdReserve)/maxServers)
	limited := ""
	if perServer > fdCap {
		perServer = fdCap
		limited = fmt.Sprintf(" (target %d; bounded by the open-file limit %d less %d for everything else", o.inFlight, lim.After.Soft, fdReserve)
		if lim.HardErr != nil {
			limited += "; the hard limit cannot be raised here: " + lim.HardErr.Error()
		}
		limited += ")"
	}
	fmt.Fprintf(stdout, "gend scale benchmark: gend in its own process, gensim (b200 + 8b, thinking, mean %.0f output tokens, responses ≤ %d bytes per text field, tick %v) in ≤ %d in flight per process\n",
		o.outputMean, o.contentBytes, o.tick, o.simSockets)
	fmt.Fprintf(stdout, "per-server cap %d (adaptive, per_server_max) = %d in flight at %d servers%s\n", perServer, perServer*maxServers, maxServers, limited)
	fmt.Fprintf(stdout, "gensim speedup sized for ~%.0f completions/s offered; window %v; open-file limit %d (hard %d)\n", o.rate, o.window, lim.After.Soft, lim.After.Hard)
	fmt.Fprintf(stdout, "machine: %d CPUs, load average before: %s\n\n", runtime.NumCPU(), loadAvg())
	var rows []result
	for _, n := range o.servers {
		r, err := runOne(ctx, o, gend, input, filepath.Join(dir, fmt.Sprintf("run-%d", n)), n, perServer, stderr)
		if err != nil {
			return fmt.Errorf("%d servers: %w", n, err)
		}
		rows = append(rows, r)
		fmt.Fprintf(stderr, "scalebench: %d servers done (load average now %s)\n", n, loadAvg())
	}
	fmt.Fprintf(stdout, "%7s %9s %8s %9s %13s %10s %8s %8s %9s %10s %10s %10s\n",
		"servers", "in flight", "speedup", "compl/s", "gend CPU s/1k", "gend cores", "RSS MB", "peak MB", "sim cores", "p50 disp", "p99 disp", "dispatches")
	for _, r := range rows {
		fmt.Fprintf(stdout, "%7d %9.0f %8.2f %9.0f %13.3f %10.2f %8.0f %8.0f %9.2f %10s %10s %10d\n",
			r.servers, r.inFlight, r.speedup, r.rate, r.cpuPer1k, r.cpuCores, float64(r.rss)/1e6, float64(r.peak)/1e6,
			r.simCores, fmtDur(r.p50), fmtDur(r.p99), r.dispatched)
	}
	fmt.Fprintf(stdout, "\ngend memory at the end of the window (Go runtime, from /metrics; heap idle = idle, not returned to the OS):\n")
	fmt.Fprintf(stdout, "%7s %9s %10s %11s %10s %9s %11s %10s %10s %9s\n",
		"servers", "in flight", "RSS KB/req", "heap in use", "heap live", "stacks", "goroutines", "gor./req", "heap idle", "gend fds")
	for _, r := range rows {
		perReq := 0.0
		if r.inFlight > 0 {
			perReq = float64(r.rss) / r.inFlight / 1e3
		}
		gpr := 0.0
		if r.inFlight > 0 {
			gpr = r.mem.goroutines / r.inFlight
		}
		fmt.Fprintf(stdout, "%7d %9.0f %10.1f %8.0f MB %7.0f MB %6.0f MB %11.0f %10.2f %7.0f MB %9d\n",
			r.servers, r.inFlight, perReq, r.mem.heapInuse/1e6, r.mem.heapLive/1e6, r.mem.stackInuse/1e6, r.mem.goroutines, gpr,
			r.mem.heapIdleKept/1e6, r.fds)
	}
	fmt.Fprintf(stdout, "\nload average after: %s (%d CPUs shared by gend, the gensim fleet and whatever else runs)\n", loadAvg(), runtime.NumCPU())
	fmt.Fprintf(stdout, "attempts ended in the window, by outcome (gend_requests_total):\n")
	for _, r := range rows {
		var parts []string
		for _, k := range []string{"ok", "overload", "unreachable", "transient", "permanent", "fatal", "aborted"} {
			if v := r.outcomes[k]; v > 0 {
				parts = append(parts, fmt.Sprintf("%s %.0f", k, v))
			}
		}
		fmt.Fprintf(stdout, "%7d servers: %s\n", r.servers, strings.Join(parts, ", "))
	}
	for _, r := range rows {
		if r.failed > 0 {
			fmt.Fprintf(stdout, "note: %d servers: %d requests failed for good\n", r.servers, r.failed)
		}
	}
	return nil
}

func fmtDur(s float64) string {
	switch {
	case s <= 0:
		return "-"
	case s < 1e-3:
		return fmt.Sprintf("%.0fµs", s*1e6)
	case s < 1:
		return fmt.Sprintf("%.1fms", s*1e3)
	default:
		return fmt.Sprintf("%.2fs", s)
	}
}

// runOne measures one fleet size.
func runOne(ctx context.Context, o options, gendBin, input, dir string, n, perServer int, stderr io.Writer) (result, error) {
	r := result{servers: n, perServer: perServer}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return r, fmt.Errorf("mkdir: %w", err)
	}
	// A request takes ≈ outputMean decode steps of ≈ 10 ms simulated (8B on
	// a B200 with a batch of ~70): size the speedup so n×perServer requests
	// in flight finish o.rate per second.
	inflight := float64(n * perServer)
	reqSim := o.outputMean * 0.010
	r.speedup = math.Max(0.05, o.rate*reqSim/inflight)
	r.simProcs = min(n, max(1, (n*perServer+o.simSockets-1)/o.simSockets))
	fleet, err := startSims(ctx, o, dir, n, r.simProcs, r.speedup)
	defer fleet.close()
	if err != nil {
		return r, err
	}

	var b strings.Builder
	b.WriteString("servers:\n")
	for i, u := range fleet.urls {
		fmt.Fprintf(&b, "  - {name: %s, url: %s}\n", fleet.names[i], u)
	}
	fleetFile := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(fleetFile, []byte(b.String()), 0o644); err != nil {
		return r, fmt.Errorf("write fleet: %w", err)
	}
	addr, err := freeAddr()
	if err != nil {
		return r, err
	}
	logf, err := os.Create(filepath.Join(dir, "gend.log"))
	if err != nil {
		return r, fmt.Errorf("gend log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(gendBin, "--listen", addr, "--state-dir", filepath.Join(dir, "state"), "--config", fleetFile,
		"--nvml", "off", "--log-level", "warn", "--drain-timeout", "1s")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return r, fmt.Errorf("start gend: %w", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-waited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-waited
		}
	}()
	base := "http://" + addr
	c := api.NewClient(base, "", nil)
	if err := waitHealthy(ctx, c, n, waited); err != nil {
		return r, err
	}
	spec := fmt.Sprintf(`{"name":"scale-%d","input":%q,"request":{"endpoint":"/v1/chat/completions","model":"Qwen/Qwen3-8B",
"params":{"max_tokens":%d,"chat_template_kwargs":{"enable_thinking":true}}},
"output":{"dir":%q,"shard_records":100000},"scheduler":{"mode":"adaptive","per_server_max":%d}}`,
		n, input, o.maxTokens, filepath.Join(dir, "out"), perServer)
	job, err := c.SubmitJob(ctx, []byte(spec), api.ContentTypeJSON)
	if err != nil {
		return r, fmt.Errorf("submit: %w", err)
	}
	defer func() { _, _ = c.CancelJob(context.WithoutCancel(ctx), job.ID) }()

	// Fill up: until in flight reaches 95% of the target (bounded).
	target := int64(0.95 * inflight)
	deadline := time.Now().Add(o.warmup)
	for {
		j, err := c.GetJob(ctx, job.ID)
		if err != nil {
			return r, fmt.Errorf("get job: %w", err)
		}
		if j.Progress.InFlight >= target || time.Now().After(deadline) || api.Terminal(j.Status) {
			fmt.Fprintf(stderr, "scalebench: %d servers: %d in flight after the fill-up\n", n, j.Progress.InFlight)
			break
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return r, err
		}
	}
	// A few seconds more so the measured window is steady state.
	if err := sleep(ctx, 3*time.Second); err != nil {
		return r, err
	}

	pid := cmd.Process.Pid
	j0, err := c.GetJob(ctx, job.ID)
	if err != nil {
		return r, fmt.Errorf("get job: %w", err)
	}
	h0, err := dispatchHistogram(ctx, base)
	if err != nil {
		return r, err
	}
	o0, err := requestOutcomes(ctx, base)
	if err != nil {
		return r, err
	}
	cpu0, err := gendbench.CPUSeconds(pid)
	if err != nil {
		return r, err
	}
	sim0, err := fleet.cpuSeconds()
	if err != nil {
		return r, err
	}
	t0 := time.Now()
	var ifSum float64
	var ifN int
	end := t0.Add(o.window)
	j1 := j0
	for time.Now().Before(end) {
		if err := sleep(ctx, time.Second); err != nil {
			return r, err
		}
		if j1, err = c.GetJob(ctx, job.ID); err != nil {
			return r, fmt.Errorf("get job: %w", err)
		}
		ifSum += float64(j1.Progress.InFlight)
		ifN++
		if api.Terminal(j1.Status) {
			break
		}
	}
	el := time.Since(t0).Seconds()
	cpu1, err := gendbench.CPUSeconds(pid)
	if err != nil {
		return r, err
	}
	sim1, err := fleet.cpuSeconds()
	if err != nil {
		return r, err
	}
	h1, err := dispatchHistogram(ctx, base)
	if err != nil {
		return r, err
	}
	o1, err := requestOutcomes(ctx, base)
	if err != nil {
		return r, err
	}
	r.outcomes = map[string]float64{}
	for k, v := range o1 {
		if d := v - o0[k]; d > 0 {
			r.outcomes[k] = d
		}
	}
	r.rss, r.peak, err = memStatus(pid)
	if err != nil {
		return r, err
	}
	if r.mem, err = goMemStats(ctx, base); err != nil {
		return r, err
	}
	if des, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd"); err == nil {
		r.fds = len(des)
	}
	done := (j1.Progress.Completed + j1.Progress.Failed) - (j0.Progress.Completed + j0.Progress.Failed)
	if done <= 0 {
		return r, fmt.Errorf("no completions in the window (job %s: %s)", j1.Status, j1.Reason)
	}
	r.failed = j1.Progress.Failed
	r.rate = float64(done) / el
	r.cpuPer1k = (cpu1 - cpu0) / float64(done) * 1000
	r.cpuCores = (cpu1 - cpu0) / el
	r.simCores = (sim1 - sim0) / el
	if ifN > 0 {
		r.inFlight = ifSum / float64(ifN)
	}
	h := h1.Sub(h0)
	r.p50, r.p99, r.dispatched = h.Quantile(0.5), h.Quantile(0.99), h.Count
	return r, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("pick a port: %w", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		return "", fmt.Errorf("pick a port: %w", err)
	}
	return addr, nil
}

// waitHealthy waits (bounded) until gend serves and has admitted every server.
func waitHealthy(ctx context.Context, c *api.Client, n int, exited <-chan error) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if ss, err := c.Servers(ctx); err == nil {
			ok := 0
			for _, s := range ss {
				if s.State == scheduler.StateHealthy {
					ok++
				}
			}
			if ok == n {
				return nil
			}
		}
		select {
		case err := <-exited:
			return fmt.Errorf("gend exited: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("gend did not admit all %d servers within 60 s", n)
}

// writePrompts writes n short chat prompts.
func writePrompts(path string, n int) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create input: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for i := range n {
		fmt.Fprintf(w, `{"custom_id":"s%d","messages":[{"role":"user","content":"Write a short note about item %d."}]}`+"\n", i, i)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write input: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write input: %w", err)
	}
	return nil
}

// dispatchHistogram reads gend_scheduler_dispatch_latency_seconds from /metrics.
func dispatchHistogram(ctx context.Context, base string) (scheduler.LatencyHistogram, error) {
	var h scheduler.LatencyHistogram
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return h, fmt.Errorf("get /metrics: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return h, fmt.Errorf("get /metrics: %w", err)
	}
	defer resp.Body.Close()
	const name = "gend_scheduler_dispatch_latency_seconds"
	var cum []uint64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, name) {
			continue
		}
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(f[0], name+"_bucket{le=\"+Inf\"}"):
			cum = append(cum, uint64(v))
		case strings.HasPrefix(f[0], name+"_bucket{le=\""):
			le, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimPrefix(f[0], name+"_bucket{le=\""), "\"}"), 64)
			if err != nil {
				return h, fmt.Errorf("parse %s: %w", f[0], err)
			}
			h.Bounds = append(h.Bounds, le)
			cum = append(cum, uint64(v))
		case f[0] == name+"_sum":
			h.SumSeconds = v
		case f[0] == name+"_count":
			h.Count = uint64(v)
		}
	}
	if err := sc.Err(); err != nil {
		return h, fmt.Errorf("read /metrics: %w", err)
	}
	if len(h.Bounds) == 0 || len(cum) != len(h.Bounds)+1 {
		return h, errors.New("/metrics has no " + name + " histogram")
	}
	h.Counts = make([]uint64, len(cum))
	prev := uint64(0)
	for i, c := range cum {
		h.Counts[i] = c - prev
		prev = c
	}
	return h, nil
}

// requestOutcomes sums gend_requests_total over servers, by outcome.
func requestOutcomes(ctx context.Context, base string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, fmt.Errorf("get /metrics: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("get /metrics: %w", err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "gend_requests_total{") {
			continue
		}
		_, rest, ok := strings.Cut(l, `outcome="`)
		if !ok {
			continue
		}
		outcome, _, _ := strings.Cut(rest, `"`)
		f := strings.Fields(l)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			out[outcome] += v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read /metrics: %w", err)
	}
	return out, nil
}

// memStatus reads VmRSS and VmHWM (peak) of a process, in bytes.
func memStatus(pid int) (rss, peak int64, err error) {
	p := "/proc/" + strconv.Itoa(pid) + "/status"
	f, err := os.Open(p)
	if err != nil {
		return 0, 0, fmt.Errorf("read %s: %w", p, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		var dst *int64
		switch {
		case strings.HasPrefix(l, "VmRSS:"):
			dst = &rss
		case strings.HasPrefix(l, "VmHWM:"):
			dst = &peak
		default:
			continue
		}
		if fs := strings.Fields(l); len(fs) >= 2 {
			v, _ := strconv.ParseInt(fs[1], 10, 64)
			*dst = v << 10
		}
	}
	return rss, peak, sc.Err()
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// fdReserve is what gend needs besides one socket per request in flight.
const fdReserve = 512

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// binary returns path, or builds ./cmd/<name> into dir when path is empty.
func binary(ctx context.Context, path, dir, name string, stderr io.Writer) (string, error) {
	if path != "" {
		return path, nil
	}
	out := filepath.Join(dir, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/"+name)
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/%s: %w", name, err)
	}
	return out, nil
}

// simFleet is a gensim fleet split over several processes.
type simFleet struct {
	procs       []*simProc
	names, urls []string
}

type simProc struct {
	cmd    *exec.Cmd
	waited chan error // receives cmd.Wait's result once
	logs   []*os.File
}

// startSims starts n simulated servers in procs gensim processes and waits
// until each has printed its servers and "gensim: ready". The returned
// fleet is never nil: close it even on error.
func startSims(ctx context.Context, o options, dir string, n, procs int, speedup float64) (*simFleet, error) {
	f := &simFleet{}
	for i := range procs {
		k := n/procs + btoi(i < n%procs)
		out, err := os.Create(filepath.Join(dir, fmt.Sprintf("gensim-%d.out", i)))
		if err != nil {
			return f, fmt.Errorf("gensim stdout: %w", err)
		}
		logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("gensim-%d.log", i)))
		if err != nil {
			out.Close()
			return f, fmt.Errorf("gensim log: %w", err)
		}
		cmd := exec.Command(o.gensim, "--servers", strconv.Itoa(k), "--port", "0", "--gpu", "b200", "--model", "8b",
			"--speedup", strconv.FormatFloat(speedup, 'g', -1, 64), "--seed", strconv.Itoa(1+i), "--tick", o.tick.String(),
			"--output-mean", strconv.FormatFloat(o.outputMean, 'g', -1, 64), "--max-content-bytes", strconv.Itoa(o.contentBytes),
			"--log-level", "warn")
		cmd.Stdout, cmd.Stderr = out, logf
		p := &simProc{cmd: cmd, waited: make(chan error, 1), logs: []*os.File{out, logf}}
		if err := cmd.Start(); err != nil {
			out.Close()
			logf.Close()
			return f, fmt.Errorf("start gensim: %w", err)
		}
		go func() { p.waited <- cmd.Wait() }()
		f.procs = append(f.procs, p)
	}
	for i, p := range f.procs {
		names, urls, err := waitReady(ctx, p, 30*time.Second)
		if err != nil {
			return f, fmt.Errorf("gensim process %d: %w", i, err)
		}
		for j := range names {
			f.names = append(f.names, fmt.Sprintf("p%d-%s", i, names[j]))
		}
		f.urls = append(f.urls, urls...)
	}
	if len(f.urls) != n {
		return f, fmt.Errorf("gensim: %d servers listening, want %d", len(f.urls), n)
	}
	return f, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// waitReady polls a gensim process's stdout file for its server list and
// "gensim: ready".
func waitReady(ctx context.Context, p *simProc, limit time.Duration) (names, urls []string, err error) {
	deadline := time.Now().Add(limit)
	path := p.logs[0].Name()
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, fmt.Errorf("read %s: %w", path, err)
		}
		if strings.Contains(string(b), "gensim: ready") {
			for _, l := range strings.Split(string(b), "\n") {
				var name, url string
				if _, err := fmt.Sscanf(l, "gensim: server %s listening on %s", &name, &url); err == nil {
					names, urls = append(names, name), append(urls, url)
				}
			}
			return names, urls, nil
		}
		if time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("not ready after %v (see %s)", limit, p.logs[1].Name())
		}
		select {
		case err := <-p.waited:
			p.waited <- err
			return nil, nil, fmt.Errorf("exited before ready: %v (see %s)", err, p.logs[1].Name())
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// cpuSeconds sums the gensim processes' CPU time.
func (f *simFleet) cpuSeconds() (float64, error) {
	var sum float64
	for _, p := range f.procs {
		s, err := gendbench.CPUSeconds(p.cmd.Process.Pid)
		if err != nil {
			return 0, err
		}
		sum += s
	}
	return sum, nil
}

// close stops every gensim process (SIGTERM, then SIGKILL after 15 s) and
// joins it.
func (f *simFleet) close() {
	for _, p := range f.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range f.procs {
		select {
		case <-p.waited:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.waited
		}
		for _, l := range p.logs {
			l.Close()
		}
	}
}

// goMem is what gend's Go runtime reports (bytes; goroutines a count).
type goMem struct {
	heapInuse, heapLive, stackInuse, heapReleased, heapIdleKept, goroutines float64
}

// goMemStats reads gend's Go collector metrics from /metrics.
func goMemStats(ctx context.Context, base string) (goMem, error) {
	var m goMem
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return m, fmt.Errorf("get /metrics: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return m, fmt.Errorf("get /metrics: %w", err)
	}
	defer resp.Body.Close()
	var heapIdle float64
	fields := map[string]*float64{
		"go_memstats_heap_inuse_bytes":    &m.heapInuse,
		"go_memstats_heap_alloc_bytes":    &m.heapLive,
		"go_memstats_stack_inuse_bytes":   &m.stackInuse,
		"go_memstats_heap_released_bytes": &m.heapReleased,
		"go_memstats_heap_idle_bytes":     &heapIdle,
		"go_goroutines":                   &m.goroutines,
	}
	seen := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		if dst, ok := fields[f[0]]; ok {
			if v, err := strconv.ParseFloat(f[1], 64); err == nil {
				*dst = v
				seen++
			}
		}
	}
	if err := sc.Err(); err != nil {
		return m, fmt.Errorf("read /metrics: %w", err)
	}
	if seen != len(fields) {
		return m, fmt.Errorf("/metrics: %d of %d Go runtime metrics", seen, len(fields))
	}
	m.heapIdleKept = heapIdle - m.heapReleased
	return m, nil
}
