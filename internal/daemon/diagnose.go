package daemon

import (
	"time"

	"github.com/gend-dev/gend/api"
	"github.com/gend-dev/gend/internal/diagnosis"
)

// Diagnosis implements httpapi.Service: telemetry + server gauges +
// scheduler state → a verdict.
func (d *Daemon) Diagnosis() api.Diagnosis {
	servers := d.Servers()
	gpus := d.gpus.Snapshot()
	byServer := map[string][]api.GPU{}
	for _, g := range gpus.GPUs {
		if g.Server != "" {
			byServer[g.Server] = append(byServer[g.Server], g)
		}
	}
	// Local GPUs named by index in the fleet config.
	for _, s := range servers {
		if len(byServer[s.Name]) > 0 || s.Host != "" {
			continue
		}
		for _, idx := range s.GPUs {
			for _, g := range gpus.GPUs {
				if g.Index == idx && g.Source == "nvml" {
					byServer[s.Name] = append(byServer[s.Name], g)
				}
			}
		}
	}
	// Rates in the server's own time (gensim runs faster than the wall clock).
	retr := d.retractionRates()
	for i := range servers {
		if k := servers[i].TimeScale; k > 0 && k != 1 {
			servers[i].TokensPerSec /= k
			servers[i].RatePerSec /= k
			servers[i].ErrorsPerSec /= k
			if r, ok := retr[servers[i].Name]; ok {
				retr[servers[i].Name] = r / k
			}
		}
	}
	in := diagnosis.Input{Servers: servers, GPUs: byServer, RetractionsPerMin: retr, PendingWork: d.pendingWork()}
	if j := d.currentJob(); j != nil {
		j.mu.Lock()
		if j.rec.Status == api.StatusRunning {
			sc := j.rec.Scheduler
			in.Scheduler = &sc
		}
		j.mu.Unlock()
	}
	if m := d.opts.Config.Model; m != nil {
		in.Model = *m
	}
	dg := diagnosis.Diagnose(in)
	dg.At = time.Now().UTC()
	return dg
}

// pendingWork reports whether a running job still has undispatched requests.
func (d *Daemon) pendingWork() bool {
	d.mu.Lock()
	js := make([]*job, 0, len(d.jobs))
	for _, j := range d.jobs {
		js = append(js, j)
	}
	d.mu.Unlock()
	for _, j := range js {
		j.mu.Lock()
		sj, st := j.sj, j.rec.Status
		j.mu.Unlock()
		if sj == nil || st != api.StatusRunning {
			continue
		}
		if sj.Snapshot(time.Now()).Queued > 0 || !sj.InputEnded() {
			return true
		}
	}
	return false
}

// retractionRates are per-server retractions per minute over the last
// sampling window of the throughput tracker.
func (d *Daemon) retractionRates() map[string]float64 {
	return d.tput.retractionRates()
}
