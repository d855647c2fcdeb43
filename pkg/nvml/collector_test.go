package nvml

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gend-dev/gend/api"
)

// staticSource is a Source with a fixed snapshot.
type staticSource api.GPUs

func (s staticSource) Snapshot() api.GPUs { return api.GPUs(s) }

func ptr(v float64) *float64 { return &v }

func TestCollector(t *testing.T) {
	t.Parallel()
	h200 := api.GPU{
		Index: 0, UUID: "GPU-0a", Name: "NVIDIA H200", Server: "gpu0", Source: SourceNVML,
		UtilizationRatio: 1, MemoryUtilRatio: 0.07, DRAMBandwidthRatio: ptr(0.785), SMUtilRatio: ptr(0.91),
		SMOccupancyRatio: ptr(0.4), TensorActiveRatio: ptr(0.35),
		MemoryUsedBytes: 60 << 30, MemoryTotalBytes: 141 << 30, PowerWatts: 612.5, PowerLimitWatts: 700,
		EnergyJoules: 3600, TemperatureCelsius: 61, SMClockHz: 1.98e9, MemClockHz: 3.201e9,
		ClockEventReasons: 4 | 64, PeakBandwidthBytes: 4.916736e12, SampledAt: time.Unix(0, 0),
	}
	noGPM := h200
	noGPM.Index, noGPM.UUID, noGPM.Server = 1, "GPU-1b", ""
	noGPM.DRAMBandwidthRatio, noGPM.SMUtilRatio, noGPM.SMOccupancyRatio, noGPM.TensorActiveRatio = nil, nil, nil, nil
	noGPM.EnergyJoules = 0

	tests := []struct {
		name  string
		src   Source
		want  string   // expected exposition for the metrics in names
		names []string // metrics compared
		count int      // series in total
	}{
		{
			name: "two GPUs",
			src:  staticSource{Available: true, Source: SourceNVML, GPUs: []api.GPU{h200, noGPM}},
			want: `
# HELP gend_gpu_dram_bandwidth_utilization_ratio GPM DRAM_BW_UTIL: achieved DRAM bandwidth as a ratio of the theoretical peak (about 0.8 is the practical ceiling).
# TYPE gend_gpu_dram_bandwidth_utilization_ratio gauge
gend_gpu_dram_bandwidth_utilization_ratio{gpu="0",name="NVIDIA H200",server="gpu0",uuid="GPU-0a"} 0.785
# HELP gend_gpu_energy_joules_total Energy consumed since the driver loaded, joules.
# TYPE gend_gpu_energy_joules_total counter
gend_gpu_energy_joules_total{gpu="0",name="NVIDIA H200",server="gpu0",uuid="GPU-0a"} 3600
# HELP gend_gpu_power_watts Power draw, watts.
# TYPE gend_gpu_power_watts gauge
gend_gpu_power_watts{gpu="0",name="NVIDIA H200",server="gpu0",uuid="GPU-0a"} 612.5
gend_gpu_power_watts{gpu="1",name="NVIDIA H200",server="",uuid="GPU-1b"} 612.5
# HELP gend_gpu_telemetry_available 1 when GPU telemetry is available (NVML, gensim or remote gends), 0 when not.
# TYPE gend_gpu_telemetry_available gauge
gend_gpu_telemetry_available{source="nvml"} 1
`,
			names: []string{"gend_gpu_dram_bandwidth_utilization_ratio", "gend_gpu_energy_joules_total",
				"gend_gpu_power_watts", "gend_gpu_telemetry_available"},
			// 1 available + GPU0: 16 gauges + 11 reasons; GPU1: 11 gauges (no GPM, no energy) + 11 reasons.
			count: 1 + 16 + 11 + 11 + 11,
		},
		{
			name: "unavailable",
			src:  Unavailable("--nvml off"),
			want: `
# HELP gend_gpu_telemetry_available 1 when GPU telemetry is available (NVML, gensim or remote gends), 0 when not.
# TYPE gend_gpu_telemetry_available gauge
gend_gpu_telemetry_available{source=""} 0
`,
			names: []string{"gend_gpu_telemetry_available", "gend_gpu_power_watts"},
			count: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := NewCollector(tc.src)
			if err := testutil.CollectAndCompare(c, strings.NewReader(tc.want), tc.names...); err != nil {
				t.Error(err)
			}
			if n := testutil.CollectAndCount(c); n != tc.count {
				t.Errorf("%d series, want %d", n, tc.count)
			}
			problems, err := testutil.CollectAndLint(c)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range problems {
				t.Errorf("lint %s: %s", p.Metric, p.Text)
			}
			reg := prometheus.NewPedanticRegistry()
			if err := reg.Register(c); err != nil {
				t.Fatalf("register: %v", err)
			}
			if _, err := reg.Gather(); err != nil {
				t.Errorf("gather: %v", err)
			}
		})
	}
}

func TestCollectorReasonsAndDuplicates(t *testing.T) {
	t.Parallel()
	g := api.GPU{Index: 0, UUID: "GPU-x", Name: "n", ClockEventReasons: 4 | 64}
	c := NewCollector(staticSource{Available: true, GPUs: []api.GPU{g, g}}) // duplicate label set
	want := map[string]float64{"sw_power_cap": 1, "hw_thermal_slowdown": 1, "gpu_idle": 0, "hw_slowdown": 0}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather with a duplicate GPU: %v", err)
	}
	found := 0
	for _, mf := range mfs {
		if mf.GetName() != "gend_gpu_clock_event_reason_active" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if w, ok := want[lp.GetValue()]; ok && lp.GetName() == "reason" {
					found++
					if got := m.GetGauge().GetValue(); got != w {
						t.Errorf("reason %s = %v, want %v", lp.GetValue(), got, w)
					}
				}
			}
		}
	}
	if found != len(want) {
		t.Errorf("found %d of %d reasons", found, len(want))
	}
	if got := ClockEventNames(4 | 64 | 1<<40); strings.Join(got, ",") != "sw_power_cap,hw_thermal_slowdown" {
		t.Errorf("ClockEventNames = %v", got)
	}
}

func TestPeakBandwidth(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		mhz, width uint32
		want       float64
	}{
		{"RTX PRO 6000", 14001, 512, 1.792128e12},
		{"H100 SXM", 2619, 5120, 3.35232e12},
		{"H200", 3201, 6144, 4.916736e12},
		{"L40S", 9001, 384, 0.864096e12},
		{"unknown", 0, 512, 0},
	}
	for _, tc := range tests {
		if got := PeakBandwidth(tc.mhz, tc.width); !near(got, tc.want) {
			t.Errorf("%s: PeakBandwidth = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestCombine(t *testing.T) {
	t.Parallel()
	local := Unavailable("no driver")
	remote := staticSource{Available: true, Source: SourceRemote, GPUs: []api.GPU{{Index: 0, Server: "a"}, {Index: 1, Server: "b"}}}
	got := Combine(local, remote).Snapshot()
	if !got.Available || len(got.GPUs) != 2 || got.Source != SourceRemote {
		t.Errorf("combined: %+v", got)
	}
	got = Combine(local, Unavailable("off")).Snapshot()
	if got.Available || got.Reason != "no driver; off" {
		t.Errorf("combined unavailable: %+v", got)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
