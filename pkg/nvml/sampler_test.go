//go:build linux && cgo

package nvml

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	mockserver "github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/rs/zerolog"

	"github.com/gend-dev/gend/api"
)

// fakeReadings are what every fake device reports.
type fakeReadings struct {
	maxMemMHz, busBits uint32
	gpmSupported       bool
}

// gpmValues are the percentages the fake GpmMetricsGet returns, by metric id.
var gpmValues = map[uint32]float64{
	uint32(gonvml.GPM_METRIC_DRAM_BW_UTIL):    78.5,
	uint32(gonvml.GPM_METRIC_SM_UTIL):         91,
	uint32(gonvml.GPM_METRIC_SM_OCCUPANCY):    40,
	uint32(gonvml.GPM_METRIC_ANY_TENSOR_UTIL): 35,
}

// setUpFake fills the Funcs dgxh100/dgxh200 leave nil (any other call panics,
// so a call the sampler must not make fails the test).
func setUpFake(srv *mockserver.Server, r fakeReadings) {
	for _, d := range srv.Devices {
		dev := d.(*mockserver.Device)
		dev.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) {
			return gonvml.Utilization{Gpu: 100, Memory: 7}, gonvml.SUCCESS
		}
		dev.GetMemoryInfo_v2Func = func() (gonvml.Memory_v2, gonvml.Return) {
			return gonvml.Memory_v2{Total: dev.MemoryInfo.Total, Used: 60 << 30, Free: dev.MemoryInfo.Total - 60<<30}, gonvml.SUCCESS
		}
		dev.GetPowerUsageFunc = func() (uint32, gonvml.Return) { return 612_500, gonvml.SUCCESS }
		dev.GetEnforcedPowerLimitFunc = func() (uint32, gonvml.Return) { return 700_000, gonvml.SUCCESS }
		dev.GetTotalEnergyConsumptionFunc = func() (uint64, gonvml.Return) { return 3_600_000, gonvml.SUCCESS }
		dev.GetTemperatureFunc = func(gonvml.TemperatureSensors) (uint32, gonvml.Return) { return 61, gonvml.SUCCESS }
		dev.GetClockInfoFunc = func(c gonvml.ClockType) (uint32, gonvml.Return) {
			if c == gonvml.CLOCK_MEM {
				return r.maxMemMHz, gonvml.SUCCESS
			}
			return 1980, gonvml.SUCCESS
		}
		dev.GetMaxClockInfoFunc = func(c gonvml.ClockType) (uint32, gonvml.Return) {
			if c == gonvml.CLOCK_MEM {
				return r.maxMemMHz, gonvml.SUCCESS
			}
			return 0, gonvml.ERROR_NOT_SUPPORTED
		}
		dev.GetMemoryBusWidthFunc = func() (uint32, gonvml.Return) { return r.busBits, gonvml.SUCCESS }
		dev.GetCurrentClocksEventReasonsFunc = func() (uint64, gonvml.Return) {
			return gonvml.ClocksEventReasonSwPowerCap, gonvml.SUCCESS
		}
		dev.GpmQueryDeviceSupportFunc = func() (gonvml.GpmSupport, gonvml.Return) {
			if r.gpmSupported {
				return gonvml.GpmSupport{IsSupportedDevice: 1}, gonvml.SUCCESS
			}
			return gonvml.GpmSupport{IsSupportedDevice: 0}, gonvml.SUCCESS
		}
		dev.GpmSampleGetFunc = func(gonvml.GpmSample) gonvml.Return { return gonvml.SUCCESS }
	}
	srv.GpmSampleAllocFunc = func() (gonvml.GpmSample, gonvml.Return) {
		return &mock.GpmSample{FreeFunc: func() gonvml.Return { return gonvml.SUCCESS }}, gonvml.SUCCESS
	}
	srv.GpmMetricsGetFunc = func(req *gonvml.GpmMetricsGetType) gonvml.Return {
		if req.Sample1 == req.Sample2 {
			return gonvml.ERROR_INVALID_ARGUMENT
		}
		for i := range req.NumMetrics {
			m := &req.Metrics[i]
			if v, ok := gpmValues[m.MetricId]; ok {
				m.Value, m.NvmlReturn = v, uint32(gonvml.SUCCESS)
			} else {
				m.NvmlReturn = uint32(gonvml.ERROR_NOT_SUPPORTED)
			}
		}
		return gonvml.SUCCESS
	}
}

// runSampler runs a sampler on srv inside a synctest bubble and returns the
// snapshots after the first sample and after one more interval.
func runSampler(t *testing.T, lib gonvml.Interface) (first, second api.GPUs) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		s := NewSampler(Options{Interval: time.Second, Lib: lib, Logger: zerolog.Nop(),
			GPUServer: func(i int) string { return "gpu" + string(rune('0'+i)) }})
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		synctest.Wait()
		first = s.Snapshot()
		time.Sleep(time.Second)
		synctest.Wait()
		second = s.Snapshot()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return first, second
}

func TestSamplerOnFakeDGX(t *testing.T) {
	tests := []struct {
		name     string
		srv      func() *mockserver.Server
		r        fakeReadings
		gpuName  string
		wantPeak float64
		totalMiB uint64
	}{
		{"dgxh100", dgxh100.New, fakeReadings{2619, 5120, true}, "NVIDIA H100 80GB HBM3", 3.352320e12, 81920},
		{"dgxh200", dgxh200.New, fakeReadings{3201, 6144, true}, "NVIDIA H200 141GB HBM3e", 4.916736e12, 144384},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := tc.srv()
			setUpFake(srv, tc.r)
			first, second := runSampler(t, srv)

			if !first.Available || first.Source != SourceNVML || first.Driver != "550.54.15" {
				t.Fatalf("first snapshot: available=%v source=%q driver=%q", first.Available, first.Source, first.Driver)
			}
			if len(first.GPUs) != 8 || len(second.GPUs) != 8 {
				t.Fatalf("GPUs: %d then %d, want 8", len(first.GPUs), len(second.GPUs))
			}
			if first.GPUs[0].DRAMBandwidthRatio != nil {
				t.Errorf("first sample has GPM DRAM %v; GPM needs two samples", *first.GPUs[0].DRAMBandwidthRatio)
			}
			for i, g := range second.GPUs {
				checks := []struct {
					field     string
					got, want float64
				}{
					{"utilization", g.UtilizationRatio, 1},
					{"memory utilization", g.MemoryUtilRatio, 0.07},
					{"power W", g.PowerWatts, 612.5},
					{"power limit W", g.PowerLimitWatts, 700},
					{"energy J", g.EnergyJoules, 3600},
					{"temperature", g.TemperatureCelsius, 61},
					{"sm clock Hz", g.SMClockHz, 1980e6},
					{"mem clock Hz", g.MemClockHz, float64(tc.r.maxMemMHz) * 1e6},
					{"peak bandwidth", g.PeakBandwidthBytes, tc.wantPeak},
					{"memory used", float64(g.MemoryUsedBytes), 60 << 30},
					{"memory total", float64(g.MemoryTotalBytes), float64(tc.totalMiB << 20)},
				}
				for _, c := range checks {
					if !near(c.got, c.want) {
						t.Errorf("gpu %d %s = %v, want %v", i, c.field, c.got, c.want)
					}
				}
				for name, p := range map[string]*float64{"dram": g.DRAMBandwidthRatio, "sm": g.SMUtilRatio,
					"occupancy": g.SMOccupancyRatio, "tensor": g.TensorActiveRatio} {
					if p == nil {
						t.Errorf("gpu %d GPM %s is nil", i, name)
					}
				}
				if g.DRAMBandwidthRatio != nil && !near(*g.DRAMBandwidthRatio, 0.785) {
					t.Errorf("gpu %d DRAM ratio %v, want 0.785", i, *g.DRAMBandwidthRatio)
				}
				if g.Index != i || g.Name != tc.gpuName || !strings.HasPrefix(g.UUID, "GPU-") || g.Server != "gpu"+string(rune('0'+i)) {
					t.Errorf("gpu %d identity: index=%d name=%q uuid=%q server=%q", i, g.Index, g.Name, g.UUID, g.Server)
				}
				if g.ClockEventReasons != 4 || len(g.ClockEventNames) != 1 || g.ClockEventNames[0] != "sw_power_cap" {
					t.Errorf("gpu %d clock events %d %v", i, g.ClockEventReasons, g.ClockEventNames)
				}
			}
			if n := len(srv.ShutdownCalls()); n != 1 {
				t.Errorf("Shutdown called %d times, want 1", n)
			}
			for _, call := range srv.GpmMetricsGetCalls() {
				if call.GpmMetricsGetType.NumMetrics != 4 {
					t.Errorf("GpmMetricsGet with %d metrics, want 4", call.GpmMetricsGetType.NumMetrics)
				}
			}
		})
	}
}

// TestSamplerOldDriver: every optional symbol is missing, so GPM,
// MemoryInfo_v2 and the clocks-event reasons must not be called (their Funcs
// are left nil: a call panics).
func TestSamplerOldDriver(t *testing.T) {
	t.Parallel()
	srv := dgxh100.New()
	setUpFake(srv, fakeReadings{2619, 5120, true})
	for _, d := range srv.Devices {
		dev := d.(*mockserver.Device)
		dev.GetMemoryInfo_v2Func = nil
		dev.GetCurrentClocksEventReasonsFunc = nil
		dev.GpmQueryDeviceSupportFunc = nil
		dev.GpmSampleGetFunc = nil
	}
	srv.GpmSampleAllocFunc, srv.GpmMetricsGetFunc = nil, nil
	srv.LookupSymbolFunc = func(string) error { return errors.New("undefined symbol") }

	_, snap := runSampler(t, srv)
	if !snap.Available || len(snap.GPUs) != 8 {
		t.Fatalf("available=%v gpus=%d", snap.Available, len(snap.GPUs))
	}
	g := snap.GPUs[0]
	if g.DRAMBandwidthRatio != nil || g.SMUtilRatio != nil {
		t.Errorf("GPM values on an old driver: %v %v", g.DRAMBandwidthRatio, g.SMUtilRatio)
	}
	if g.MemoryTotalBytes != 81920<<20 || g.MemoryUsedBytes != 0 {
		t.Errorf("memory from GetMemoryInfo: used=%d total=%d", g.MemoryUsedBytes, g.MemoryTotalBytes)
	}
	if g.ClockEventReasons != 0 || g.ClockEventNames != nil {
		t.Errorf("clock events without the symbol: %d %v", g.ClockEventReasons, g.ClockEventNames)
	}
	if g.PowerWatts != 612.5 || g.UtilizationRatio != 1 {
		t.Errorf("base fields: power %v util %v", g.PowerWatts, g.UtilizationRatio)
	}
}

// TestSamplerUnsupportedFields: NOT_SUPPORTED leaves fields empty and the
// sample still succeeds; a device without GPM support is never GPM-sampled.
func TestSamplerUnsupportedFields(t *testing.T) {
	t.Parallel()
	srv := dgxh200.New()
	setUpFake(srv, fakeReadings{3201, 6144, false})
	for _, d := range srv.Devices {
		dev := d.(*mockserver.Device)
		dev.GetPowerUsageFunc = func() (uint32, gonvml.Return) { return 0, gonvml.ERROR_NOT_SUPPORTED }
		dev.GetTotalEnergyConsumptionFunc = func() (uint64, gonvml.Return) { return 0, gonvml.ERROR_NOT_SUPPORTED }
		dev.GetMemoryBusWidthFunc = func() (uint32, gonvml.Return) { return 0, gonvml.ERROR_NOT_SUPPORTED }
		dev.GpmSampleGetFunc = nil // must not be called: GPM unsupported on the device
	}
	_, snap := runSampler(t, srv)
	g := snap.GPUs[3]
	if !snap.Available || g.PowerWatts != 0 || g.EnergyJoules != 0 || g.PeakBandwidthBytes != 0 {
		t.Errorf("unsupported fields filled: available=%v power=%v energy=%v peak=%v", snap.Available, g.PowerWatts, g.EnergyJoules, g.PeakBandwidthBytes)
	}
	if g.DRAMBandwidthRatio != nil || g.PowerLimitWatts != 700 {
		t.Errorf("dram=%v power limit=%v", g.DRAMBandwidthRatio, g.PowerLimitWatts)
	}
}

func TestSamplerUnavailable(t *testing.T) {
	failingInit := func(ret gonvml.Return) gonvml.Interface {
		srv := dgxh100.New()
		srv.InitFunc = func() gonvml.Return { return ret }
		return srv
	}
	tests := []struct {
		name       string
		lib        gonvml.Interface
		wantReason string
	}{
		{"no library", gonvml.New(gonvml.WithLibraryPath("/nonexistent/libnvidia-ml.so.1")), "not found"},
		{"driver not loaded", failingInit(gonvml.ERROR_DRIVER_NOT_LOADED), "driver not loaded"},
		{"no permission", failingInit(gonvml.ERROR_NO_PERMISSION), "no permission"},
		{"other", failingInit(gonvml.ERROR_UNKNOWN), "NVML init"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var logs bytes.Buffer
				ctx, cancel := context.WithCancel(t.Context())
				s := NewSampler(Options{Lib: tc.lib, Logger: zerolog.New(&logs)})
				done := make(chan error, 1)
				go func() { done <- s.Run(ctx) }()
				time.Sleep(time.Minute) // many intervals: the warning must still be logged once
				synctest.Wait()
				snap := s.Snapshot()
				if snap.Available || !strings.Contains(snap.Reason, tc.wantReason) {
					t.Errorf("snapshot available=%v reason=%q, want reason containing %q", snap.Available, snap.Reason, tc.wantReason)
				}
				if snap.GPUs == nil {
					t.Error("GPUs is nil; /v1/gpus must encode []")
				}
				if n := strings.Count(logs.String(), `"level":"warn"`); n != 1 {
					t.Errorf("%d warnings logged, want 1: %s", n, logs.String())
				}
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run = %v, want nil", err)
				}
				if srv, ok := tc.lib.(*mockserver.Server); ok && len(srv.ShutdownCalls()) != 0 {
					t.Error("Shutdown called after a failed Init")
				}
			})
		})
	}
}

func TestSnapshotBeforeRun(t *testing.T) {
	t.Parallel()
	s := NewSampler(Options{Lib: dgxh100.New()})
	if snap := s.Snapshot(); snap.Available || snap.Reason == "" {
		t.Errorf("before Run: available=%v reason=%q", snap.Available, snap.Reason)
	}
}
