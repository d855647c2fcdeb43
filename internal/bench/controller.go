package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gend-dev/gend/api"
	"github.com/gend-dev/gend/internal/sim"
)

// ControllerOptions configure the controller-throughput benchmark.
type ControllerOptions struct {
	Servers      int
	Prompts      int
	Speedup      float64
	ContentBytes int     // cap on each text field of a response
	OutputMean   float64 // mean output tokens (thinking on)
	Gensim       string  // gensim binary (empty: in-process fleet)
	RSSLines     int     // lines of the RSS run's input (0: skip)
	RSSFor       time.Duration
	RSSPerServer int // per_server_max of the RSS job (connections, and their buffers, scale with it)
	CPUProfile   string
	MemProfile   string // heap profile written when the throughput job ends
	Timeout      time.Duration
}

// DefaultControllerOptions is what make bench-controller runs.
func DefaultControllerOptions() ControllerOptions {
	return ControllerOptions{Servers: 8, Prompts: 100000, Speedup: 10000, ContentBytes: 4096, OutputMean: 6000,
		RSSLines: 10_000_000, RSSFor: 45 * time.Second, RSSPerServer: 128, Timeout: 5 * time.Minute}
}

// fleetHandle is a simulated fleet, in-process or in its own process.
type fleetHandle struct {
	names, urls []string
	cmd         *exec.Cmd
	fleet       *sim.Fleet
	waitErr     chan error
}

func (h *fleetHandle) close() {
	if h.fleet != nil {
		_ = h.fleet.Close()
	}
	if h.cmd != nil {
		_ = h.cmd.Process.Signal(os.Interrupt)
		select {
		case <-h.waitErr:
		case <-time.After(10 * time.Second):
			_ = h.cmd.Process.Kill()
			<-h.waitErr
		}
	}
}

// CPUSeconds reads utime+stime of a process from /proc (pid 0: self).
func CPUSeconds(pid int) (float64, error) {
	p := "/proc/self/stat"
	if pid > 0 {
		p = "/proc/" + strconv.Itoa(pid) + "/stat"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", p, err)
	}
	// Fields after the command name (which may hold spaces) start at ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse %s", p)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("parse %s", p)
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse %s", p)
	}
	const clkTck = 100 // USER_HZ on Linux
	return (ut + st) / clkTck, nil
}

// memStatus reads VmRSS and VmHWM (peak) of this process, in bytes.
func memStatus() (rss, peak int64, err error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, 0, fmt.Errorf("read /proc/self/status: %w", err)
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
		fs := strings.Fields(l)
		if len(fs) >= 2 {
			v, _ := strconv.ParseInt(fs[1], 10, 64)
			*dst = v << 10
		}
	}
	return rss, peak, sc.Err()
}

func (o ControllerOptions) serverConfig() sim.ServerConfig {
	return sim.ServerConfig{GPU: "b200", Model: "8b", OutputMean: o.OutputMean, MaxContentBytes: o.ContentBytes}
}

// startFleet starts the controller benchmark's fleet.
func startFleet(ctx context.Context, o ControllerOptions) (*fleetHandle, error) {
	sc := o.serverConfig()
	if o.Gensim == "" {
		cfg := sim.FleetConfig{Speedup: o.Speedup, Seed: 1}
		for range o.Servers {
			cfg.Servers = append(cfg.Servers, sc)
		}
		f, err := sim.StartFleet(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("start gensim: %w", err)
		}
		return &fleetHandle{names: f.Names(), urls: f.URLs(), fleet: f}, nil
	}
	cmd := exec.Command(o.Gensim, "-servers", strconv.Itoa(o.Servers), "-port", "0", "-speedup", fmt.Sprint(o.Speedup),
		"-gpu", sc.GPU, "-model", sc.Model, "-output-mean", fmt.Sprint(sc.OutputMean),
		"-max-content-bytes", strconv.Itoa(sc.MaxContentBytes), "-seed", "1", "-log-level", "warn")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("gensim stdout: %w", err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", o.Gensim, err)
	}
	h := &fleetHandle{cmd: cmd, waitErr: make(chan error, 1)}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	// reap drains what is left of its stdout (so it never blocks), then
	// waits for the process; close relies on it.
	reap := func() {
		go func() {
			for range lines {
			}
			h.waitErr <- cmd.Wait()
		}()
	}
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				reap()
				h.close()
				return nil, errors.New("gensim exited before it was ready")
			}
			// "gensim: server gpu0 listening on http://127.0.0.1:port"
			if f := strings.Fields(l); len(f) == 6 && f[1] == "server" && f[3] == "listening" {
				h.names = append(h.names, f[2])
				h.urls = append(h.urls, f[5])
			}
			if l == "gensim: ready" {
				reap()
				return h, nil
			}
		case <-deadline:
			reap()
			h.close()
			return nil, errors.New("gensim not ready within 30 s")
		case <-ctx.Done():
			reap()
			h.close()
			return nil, ctx.Err()
		}
	}
}

// writeShortPrompts writes n completion-form lines with short prompts.
func writeShortPrompts(path string, n int) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create input: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var buf []byte
	for i := range n {
		buf = buf[:0]
		buf = append(buf, `{"custom_id":"r`...)
		buf = strconv.AppendInt(buf, int64(i), 10)
		buf = append(buf, `","messages":[{"role":"user","content":"Write a short note about item `...)
		buf = strconv.AppendInt(buf, int64(i), 10)
		buf = append(buf, `."}]}`+"\n"...)
		if _, err := w.Write(buf); err != nil {
			f.Close()
			return fmt.Errorf("write input: %w", err)
		}
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

func controllerSpec(input, out string, maxTokens, perServerMax int) ([]byte, error) {
	spec := api.JobSpec{Name: "bench-controller", Input: input,
		Request: api.RequestSpec{Endpoint: "/v1/chat/completions", Model: "Qwen/Qwen3-8B",
			Params: map[string]any{"max_tokens": maxTokens, "chat_template_kwargs": map[string]any{"enable_thinking": true}}},
		Output:    api.OutputSpec{Dir: out, ShardRecords: 100000},
		Scheduler: api.SchedulerSpec{Mode: api.ModeAdaptive, PerServerMax: perServerMax}}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("job spec: %w", err)
	}
	return b, nil
}

// Controller measures gend's own throughput and memory.
func Controller(ctx context.Context, o ControllerOptions, w io.Writer) error {
	dir, err := os.MkdirTemp("", "gend-bench-ctl-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	where := "in-process (gend's CPU includes gensim's)"
	if o.Gensim != "" {
		where = "separate process " + o.Gensim
	}
	fmt.Fprintf(w, "gend controller benchmark: %d × b200 + 8B at speedup %.0f×, gensim %s, responses capped at %d bytes per text field\n",
		o.Servers, o.Speedup, where, o.ContentBytes)
	// The RSS run goes first, so the process's peak is its own.
	if o.RSSLines > 0 {
		if err := controllerRSS(ctx, o, dir, w); err != nil {
			return err
		}
	}
	if o.Prompts > 0 {
		if err := controllerThroughput(ctx, o, dir, w); err != nil {
			return err
		}
	}
	return nil
}

func controllerThroughput(ctx context.Context, o ControllerOptions, dir string, w io.Writer) error {
	input := filepath.Join(dir, "throughput.jsonl")
	if err := writeShortPrompts(input, o.Prompts); err != nil {
		return err
	}
	fh, err := startFleet(ctx, o)
	if err != nil {
		return err
	}
	defer fh.close()
	c, stop, err := startGendURLs(fh.names, fh.urls, filepath.Join(dir, "state"), 500*time.Millisecond, zerolog.Nop())
	if err != nil {
		return err
	}
	defer func() { _ = stop() }()
	if err := waitHealthy(ctx, c, len(fh.urls)); err != nil {
		return err
	}
	spec, err := controllerSpec(input, filepath.Join(dir, "out"), 16384, 0)
	if err != nil {
		return err
	}
	if o.CPUProfile != "" {
		pf, err := os.Create(o.CPUProfile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			pf.Close()
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer func() { pprof.StopCPUProfile(); pf.Close() }()
	}
	cpu0, err := CPUSeconds(0)
	if err != nil {
		return err
	}
	simPID := 0
	var sim0 float64
	if fh.cmd != nil {
		simPID = fh.cmd.Process.Pid
		sim0, _ = CPUSeconds(simPID)
	}
	t0 := time.Now()
	job, err := c.SubmitJob(ctx, spec, api.ContentTypeJSON)
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	var inflightPeak int64
	job, err = waitJob(ctx, c, job.ID, o.Timeout, func(j api.Job) { inflightPeak = max(inflightPeak, j.Progress.InFlight) })
	if err != nil {
		return err
	}
	el := time.Since(t0).Seconds()
	cpu1, _ := CPUSeconds(0)
	if o.MemProfile != "" {
		if err := writeHeapProfile(o.MemProfile); err != nil {
			return err
		}
	}
	_, peak, _ := memStatus()
	p := job.Progress
	if job.Status != api.StatusCompleted || p.Completed == 0 {
		return fmt.Errorf("throughput job ended %s with %d completed (%s)", job.Status, p.Completed, job.Reason)
	}
	bytesOut := dirBytes(filepath.Join(dir, "out", "shards"))
	fmt.Fprintf(w, "\n## controller throughput\n")
	fmt.Fprintf(w, "completed %d of %d in %.1f s wall: %.0f completions/s (target ≥ 5,000)\n", p.Completed, p.Total, el, float64(p.Completed)/el)
	fmt.Fprintf(w, "output record size: %.1f KB on average (%d bytes of shards)\n", float64(bytesOut)/float64(p.Completed)/1024, bytesOut)
	if p.Failed > 0 {
		fmt.Fprintf(w, "failed for good: %d (first: %s)\n", p.Failed, firstLine(filepath.Join(dir, "out", "errors.jsonl")))
	}
	fmt.Fprintf(w, "benchctl process CPU: %.1f s = %.3f CPU s per 1,000 completions", cpu1-cpu0, (cpu1-cpu0)/float64(p.Completed)*1000)
	if simPID > 0 {
		sim1, _ := CPUSeconds(simPID)
		fmt.Fprintf(w, " (gend only; gensim used %.1f s = %.3f per 1,000 in its own process)\n", sim1-sim0, (sim1-sim0)/float64(p.Completed)*1000)
	} else {
		fmt.Fprintf(w, " (gend + in-process gensim)\n")
	}
	fmt.Fprintf(w, "peak RSS of the benchctl process so far: %.0f MB (about %d requests in flight)\n", float64(peak)/1e6, inflightPeak)
	return nil
}

// errNotDone: the job was still running at the deadline.
var errNotDone = errors.New("not done")

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("heap profile: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	return nil
}

// waitJob polls a job until it ends (or timeout); every is called per poll.
func waitJob(ctx context.Context, c *api.Client, id string, timeout time.Duration, every func(api.Job)) (api.Job, error) {
	deadline := time.Now().Add(timeout)
	tk := time.NewTicker(50 * time.Millisecond)
	defer tk.Stop()
	for {
		j, err := c.GetJob(ctx, id)
		if err != nil {
			return j, fmt.Errorf("get job: %w", err)
		}
		if every != nil {
			every(j)
		}
		if api.Terminal(j.Status) {
			return j, nil
		}
		if time.Now().After(deadline) {
			return j, fmt.Errorf("job %s: %w after %v (%d of %d)", id, errNotDone, timeout, j.Progress.Completed, j.Progress.Total)
		}
		select {
		case <-ctx.Done():
			return j, ctx.Err()
		case <-tk.C:
		}
	}
}

func firstLine(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	if sc.Scan() {
		l := sc.Text()
		if len(l) > 300 {
			l = l[:300]
		}
		return l
	}
	return "(empty)"
}

func dirBytes(dir string) int64 {
	var n int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// controllerRSS streams a large input through gend for RSSFor and samples
// the process's resident set.
func controllerRSS(ctx context.Context, o ControllerOptions, dir string, w io.Writer) error {
	input := filepath.Join(dir, "rss.jsonl")
	t0 := time.Now()
	if err := writeShortPrompts(input, o.RSSLines); err != nil {
		return err
	}
	defer os.Remove(input)
	fi, err := os.Stat(input)
	if err != nil {
		return fmt.Errorf("stat input: %w", err)
	}
	fmt.Fprintf(w, "\n## RSS while streaming a %d-line input (%.0f MB, written in %.0f s; max_tokens 64, per_server_max %d)\n", o.RSSLines, float64(fi.Size())/1e6, time.Since(t0).Seconds(), o.RSSPerServer)
	fh, err := startFleet(ctx, o)
	if err != nil {
		return err
	}
	defer fh.close()
	c, stop, err := startGendURLs(fh.names, fh.urls, filepath.Join(dir, "state-rss"), 500*time.Millisecond, zerolog.Nop())
	if err != nil {
		return err
	}
	defer func() { _ = stop() }()
	if err := waitHealthy(ctx, c, len(fh.urls)); err != nil {
		return err
	}
	spec, err := controllerSpec(input, filepath.Join(dir, "out-rss"), 64, o.RSSPerServer)
	if err != nil {
		return err
	}
	// Reset the peak (VmHWM) so it covers this run only: "5" in
	// clear_refs resets it (Linux ≥ 4.0).
	runtime.GC()
	debug.FreeOSMemory()
	resetPeak := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	rss0, _, _ := memStatus()
	var mu sync.Mutex
	type pt struct {
		at        float64
		rss       int64
		completed int64
		total     int64
	}
	var pts []pt
	start := time.Now()
	job, err := c.SubmitJob(ctx, spec, api.ContentTypeJSON)
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	last := time.Time{}
	job, err = waitJob(ctx, c, job.ID, o.RSSFor, func(j api.Job) {
		if time.Since(last) < 2*time.Second {
			return
		}
		last = time.Now()
		rss, _, _ := memStatus()
		mu.Lock()
		pts = append(pts, pt{time.Since(start).Seconds(), rss, j.Progress.Completed, j.Progress.Total})
		mu.Unlock()
	})
	cut := errors.Is(err, errNotDone)
	if err != nil && !cut {
		return err
	}
	_, _ = c.CancelJob(context.WithoutCancel(ctx), job.ID)
	_, peak, _ := memStatus()
	mu.Lock()
	defer mu.Unlock()
	fmt.Fprintf(w, "RSS before the job %.0f MB; samples (s: RSS MB, completed):", float64(rss0)/1e6)
	for i, p := range pts {
		if i%3 == 0 {
			fmt.Fprintf(w, "\n ")
		}
		fmt.Fprintf(w, "  %4.0f s: %4.0f MB, %d", p.at, float64(p.rss)/1e6, p.completed)
	}
	fmt.Fprintln(w)
	state := "job finished"
	if cut {
		state = fmt.Sprintf("job stopped after %v with %d of %d completed (the whole input was counted and streamed from the start)", o.RSSFor, job.Progress.Completed, job.Progress.Total)
	}
	what := "peak RSS (VmHWM) of the benchctl process during this run"
	if !resetPeak {
		what = "peak RSS (VmHWM) of the benchctl process (could not reset it: includes the throughput run)"
	}
	fmt.Fprintf(w, "%s; %s: %.0f MB (target < 300 MB)\n", state, what, float64(peak)/1e6)
	return nil
}
