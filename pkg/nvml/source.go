package nvml

import (
	"sync/atomic"

	"github.com/gend-dev/gend/api"
)

// Source gives the latest GPU telemetry snapshot. Implementations never block
// on sampling; the result is immutable (callers must not modify it).
type Source interface {
	Snapshot() api.GPUs
}

// Source names reported in api.GPUs.Source and api.GPU.Source.
const (
	SourceNVML   = "nvml"
	SourceSim    = "sim"
	SourceRemote = "remote"
)

// Unavailable returns a Source that always reports telemetry as unavailable
// for the given reason (gend --nvml off).
func Unavailable(reason string) Source {
	return unavailable{reason: reason}
}

type unavailable struct{ reason string }

func (u unavailable) Snapshot() api.GPUs {
	return api.GPUs{Available: false, Reason: u.reason, GPUs: []api.GPU{}}
}

// Combine returns a Source whose snapshot concatenates the GPUs of all the
// given sources (e.g. local NVML plus remote hosts, for the diagnosis). It is
// available when any source is; the reasons of unavailable sources are joined.
// Do not serve a combined source as this host's /v1/gpus: other controllers
// read that endpoint for this host's GPUs only.
func Combine(sources ...Source) Source {
	return combined(sources)
}

type combined []Source

func (c combined) Snapshot() api.GPUs {
	out := api.GPUs{GPUs: []api.GPU{}}
	var reasons, kinds []string
	for _, s := range c {
		snap := s.Snapshot()
		if snap.Available {
			out.Available = true
			if out.Driver == "" {
				out.Driver = snap.Driver
			}
		} else if snap.Reason != "" {
			reasons = append(reasons, snap.Reason)
		}
		if snap.Source != "" {
			kinds = appendUnique(kinds, snap.Source)
		}
		out.GPUs = append(out.GPUs, snap.GPUs...)
	}
	if !out.Available {
		out.Reason = joinReasons(reasons)
	}
	out.Source = joinReasons(kinds)
	return out
}

func appendUnique(list []string, s string) []string {
	for _, v := range list {
		if v == s {
			return list
		}
	}
	return append(list, s)
}

func joinReasons(rs []string) string {
	out := ""
	for i, r := range rs {
		if i > 0 {
			out += "; "
		}
		out += r
	}
	return out
}

// snapshotHolder publishes immutable snapshots through an atomic pointer.
type snapshotHolder struct {
	p atomic.Pointer[api.GPUs]
}

func (h *snapshotHolder) publish(g api.GPUs) {
	if g.GPUs == nil {
		g.GPUs = []api.GPU{}
	}
	h.p.Store(&g)
}

// load returns the last snapshot, or "not sampled yet" before the first one.
func (h *snapshotHolder) load(source string) api.GPUs {
	if g := h.p.Load(); g != nil {
		return *g
	}
	return api.GPUs{Available: false, Reason: "GPU telemetry not sampled yet", Source: source, GPUs: []api.GPU{}}
}

// PeakBandwidth returns the theoretical peak DRAM bandwidth in bytes/s from
// NVML's max memory clock (MHz) and bus width (bits):
// 2 × clock × 1e6 × width / 8. The factor 2 is an empirical fit that
// reproduces the data sheets (H100 SXM 2619 MHz × 5120 bit → 3.35 TB/s,
// RTX PRO 6000 14001 MHz × 512 bit → 1.792 TB/s).
func PeakBandwidth(maxMemClockMHz, busWidthBits uint32) float64 {
	return 2 * float64(maxMemClockMHz) * 1e6 * float64(busWidthBits) / 8
}
