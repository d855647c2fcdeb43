package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/gend-dev/gend/api"
	"github.com/gend-dev/gend/internal/daemon"
	"github.com/gend-dev/gend/internal/sim"
)

// startGendURLs runs a gend daemon in-process on 127.0.0.1:0 for the given
// servers. stop shuts it down and waits for it.
func startGendURLs(names, urls []string, stateDir string, period time.Duration, log zerolog.Logger) (c *api.Client, stop func() error, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("listen: %w", err)
	}
	var cfg api.Config
	for i, u := range urls {
		cfg.Servers = append(cfg.Servers, api.ServerSpec{Name: names[i], URL: u})
	}
	d, err := daemon.New(daemon.Options{Listener: ln, StateDir: stateDir, Config: cfg, NVML: "off",
		Logger: log, ControlPeriod: period, DrainTimeout: 2 * time.Second})
	if err != nil {
		ln.Close()
		return nil, nil, fmt.Errorf("gend: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	stop = func() error {
		cancel()
		if err := <-done; err != nil {
			return fmt.Errorf("gend run: %w", err)
		}
		return nil
	}
	return api.NewClient("http://"+ln.Addr().String(), "", nil), stop, nil
}

// waitHealthy waits until gend has admitted every server (bounded).
func waitHealthy(ctx context.Context, c *api.Client, n int) error {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		ss, err := c.Servers(ctx)
		if err == nil {
			ok := 0
			for _, s := range ss {
				if s.State == "healthy" {
					ok++
				}
			}
			if ok == n {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return errors.New("gend: servers not admitted within 20 s")
}

// jobSpec is the benchmark job.
func jobSpec(rc RunConfig, input, out string) ([]byte, error) {
	sched := api.SchedulerSpec{Mode: api.ModeAdaptive}
	if rc.Policy.Kind == KindStatic {
		sched = api.SchedulerSpec{Mode: api.ModeStatic, PerServer: rc.Policy.PerServer}
	}
	spec := api.JobSpec{
		Name:  "bench-" + rc.Scenario,
		Input: input,
		Request: api.RequestSpec{Endpoint: "/v1/chat/completions", Model: "Qwen/Qwen3.6-27B",
			Params: map[string]any{"max_tokens": rc.MaxTokens, "temperature": 0.6,
				"chat_template_kwargs": map[string]any{"enable_thinking": true}}},
		Output:      api.OutputSpec{Dir: out},
		Scheduler:   sched,
		MaxAttempts: 5,
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("job spec: %w", err)
	}
	return b, nil
}

// runGend runs the job through gend with the run's scheduler policy.
func runGend(ctx context.Context, rc RunConfig, fleet *sim.Fleet, input, dir string) (runOutcome, error) {
	var out runOutcome
	log := zerolog.Nop()
	if rc.LogLevel != "" {
		lvl, err := zerolog.ParseLevel(rc.LogLevel)
		if err != nil {
			return out, fmt.Errorf("log level: %w", err)
		}
		log = zerolog.New(os.Stderr).Level(lvl).With().Timestamp().Logger()
	}
	c, stop, err := startGendURLs(fleet.Names(), fleet.URLs(), filepath.Join(dir, "state"), rc.Period, log)
	if err != nil {
		return out, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = stop()
		}
	}()
	if err := waitHealthy(ctx, c, len(fleet.URLs())); err != nil {
		return out, err
	}
	spec, err := jobSpec(rc, input, filepath.Join(dir, "out"))
	if err != nil {
		return out, err
	}
	// The API's own calls must outlive ctx so a stopped run still reads
	// its job and cancels it.
	actx := context.WithoutCancel(ctx)
	out.start = time.Now()
	job, err := c.SubmitJob(actx, spec, api.ContentTypeJSON)
	if err != nil {
		return out, fmt.Errorf("submit job: %w", err)
	}
	// Poll slowly (the API is part of what is measured); the end time comes
	// from the job's own finished_at.
	tk := time.NewTicker(100 * time.Millisecond)
	defer tk.Stop()
	for !api.Terminal(job.Status) {
		select {
		case <-ctx.Done():
			out.stopped = true
		case <-tk.C:
		}
		if out.stopped {
			break
		}
		j, err := c.GetJob(actx, job.ID)
		if err != nil {
			return out, fmt.Errorf("get job: %w", err)
		}
		job = j
	}
	out.end = time.Now()
	if out.stopped {
		if j, err := c.CancelJob(actx, job.ID); err == nil {
			job = j
		}
	} else if job.Status != api.StatusCompleted {
		return out, fmt.Errorf("job ended %s: %s", job.Status, job.Reason)
	} else if job.FinishedAt != nil && job.FinishedAt.After(out.start) {
		out.end = *job.FinishedAt
	}
	p := job.Progress
	out.completed, out.tokens, out.retries = p.Completed, p.TotalOutputTokens, p.Retries
	out.lost = p.Failed
	if !out.stopped && p.Completed+p.Failed != int64(rc.Prompts) {
		return out, fmt.Errorf("job completed with %d results and %d failures for %d prompts", p.Completed, p.Failed, rc.Prompts)
	}
	stopped = true
	if err := stop(); err != nil {
		return out, err
	}
	return out, nil
}
