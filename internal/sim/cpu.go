package sim

import (
	"context"
	"fmt"
	"io"
	"time"
)

// CPUConfig is the CPU-share measurement: a fleet of Servers under a
// closed-loop load of PerServer in-flight requests each, for Duration.
type CPUConfig struct {
	Servers   int
	PerServer int
	Speedup   float64
	Duration  time.Duration
	Server    ServerConfig
	Thinking  bool
	// Client runs the load against urls and returns when done. Run it in a
	// child process so the fleet's CPU time is measured alone; nil runs
	// RunLoad in this process (the figure then includes the client).
	Client func(ctx context.Context, urls []string) error
}

// CPUResult is what MeasureCPU saw.
type CPUResult struct {
	Wall            time.Duration
	FleetCPUSeconds float64 // this process (the fleet, plus the client when in-process)
	ClientCPU       float64 // the child client, when there is one
	InProcess       bool
	Generated       int64 // output tokens the fleet generated
	Completed       int64
	Aborted         int64
}

// MeasureCPU starts a fleet on free ports, runs the load and measures CPU time.
func MeasureCPU(ctx context.Context, cfg CPUConfig) (CPUResult, error) {
	fc := FleetConfig{Speedup: cfg.Speedup}
	for range cfg.Servers {
		fc.Servers = append(fc.Servers, cfg.Server)
	}
	f, err := StartFleet(ctx, fc)
	if err != nil {
		return CPUResult{}, err
	}
	defer f.Close()
	res := CPUResult{InProcess: cfg.Client == nil}
	self0, child0 := CPUSeconds(false), CPUSeconds(true)
	t0 := time.Now()
	if cfg.Client != nil {
		err = cfg.Client(ctx, f.URLs())
	} else {
		_, err = RunLoad(ctx, LoadConfig{URLs: f.URLs(), PerServer: cfg.PerServer, Duration: cfg.Duration, Thinking: cfg.Thinking})
	}
	res.Wall = time.Since(t0)
	res.FleetCPUSeconds = CPUSeconds(false) - self0
	res.ClientCPU = CPUSeconds(true) - child0
	if err != nil {
		return res, fmt.Errorf("load client: %w", err)
	}
	for _, s := range f.Stats() {
		res.Generated += s.GeneratedTokens
		res.Completed += s.RequestsDone
		res.Aborted += s.Aborted
	}
	return res, nil
}

// WriteCPU prints the measurement.
func WriteCPU(w io.Writer, cfg CPUConfig, r CPUResult, cores int) error {
	wall := r.Wall.Seconds()
	who := "gensim alone (client in a child process)"
	if r.InProcess {
		who = "gensim plus its in-process client"
	}
	_, err := fmt.Fprintf(w, "gensim cpu: %d servers × %d in flight, speedup %g, %.1f s wall: %s used %.2f CPU s = %.1f%% of one core, %.1f%% of %d cores; client %.2f CPU s; fleet generated %d tokens (%.0f simulated tok/s per server), %d requests completed\n",
		cfg.Servers, cfg.PerServer, cfg.Speedup, wall, who, r.FleetCPUSeconds, 100*r.FleetCPUSeconds/wall,
		100*r.FleetCPUSeconds/wall/float64(cores), cores, r.ClientCPU, r.Generated,
		float64(r.Generated)/wall/cfg.Speedup/float64(cfg.Servers), r.Completed)
	if err != nil {
		return fmt.Errorf("write cpu: %w", err)
	}
	return nil
}
