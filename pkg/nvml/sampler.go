//go:build linux && cgo

package nvml

import (
	"context"
	"errors"
	"fmt"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/rs/zerolog"

	"github.com/gend-dev/gend/api"
)

// DefaultInterval is the sampling period when Options.Interval is zero.
const DefaultInterval = 5 * time.Second

// minInterval keeps GPM samples more than 100 ms apart.
const minInterval = 200 * time.Millisecond

// minGPMGap is the least time between the two GPM samples a metric is computed from.
const minGPMGap = 100 * time.Millisecond

// Options configure a Sampler.
type Options struct {
	// Interval between samples; 0 means DefaultInterval. Values below 200 ms are raised to it.
	Interval time.Duration
	// Lib is the NVML library; nil means gonvml.New() (libnvidia-ml.so.1).
	Lib gonvml.Interface
	// Logger gets component=nvml.
	Logger zerolog.Logger
	// GPUServer names the fleet server running on the GPU with this NVML
	// index ("" if none). May be nil.
	GPUServer func(index int) string
}

// Sampler samples the local GPUs through NVML on one goroutine (Run) and
// publishes immutable snapshots.
type Sampler struct {
	opts    Options
	lib     gonvml.Interface
	realLib bool // lib is go-nvml's own library (not a fake): GetTemperatureV is callable
	log     zerolog.Logger
	snap    snapshotHolder

	// Owned by the Run goroutine.
	syms    symbols
	driver  string
	devices []*gpuState
}

// symbols records which optional NVML entry points the driver exports.
type symbols struct {
	gpm           bool // nvmlGpmSampleGet, nvmlGpmMetricsGet, nvmlGpmQueryDeviceSupport, nvmlGpmSampleAlloc
	memoryInfoV2  bool // nvmlDeviceGetMemoryInfo_v2
	temperatureV  bool // nvmlDeviceGetTemperatureV
	clockEvents   bool // nvmlDeviceGetCurrentClocksEventReasons
	clockThrottle bool // nvmlDeviceGetCurrentClocksThrottleReasons (older name)
}

// gpuState is what the sampler keeps per GPU between samples.
type gpuState struct {
	index   int
	dev     gonvml.Device
	name    string
	uuid    string
	peakBW  float64
	gpm     bool                // GPM supported on this device and samples allocated
	samples [2]gonvml.GpmSample // rolling pair: prev, cur
	prevAt  time.Time           // when samples[0] was taken (zero: none yet)
}

// NewSampler returns a Sampler; it starts nothing and does not load NVML.
func NewSampler(opts Options) *Sampler {
	if opts.Interval == 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Interval < minInterval {
		opts.Interval = minInterval
	}
	s := &Sampler{opts: opts, lib: opts.Lib, log: opts.Logger.With().Str("component", "nvml").Logger()}
	if s.lib == nil {
		s.lib = gonvml.New()
		s.realLib = true
	}
	return s
}

// Snapshot returns the latest published snapshot.
func (s *Sampler) Snapshot() api.GPUs { return s.snap.load(SourceNVML) }

// Run initialises NVML and samples every Interval until ctx is done, then
// shuts NVML down. When NVML cannot be initialised (no library, driver not
// loaded, no permission, ...) it publishes {Available: false, Reason}, logs
// once at Warn and waits for ctx: gend keeps serving. It returns nil when ctx
// is done.
func (s *Sampler) Run(ctx context.Context) error {
	if ret := s.lib.Init(); ret != gonvml.SUCCESS {
		reason := initFailureReason(ret)
		s.snap.publish(api.GPUs{Available: false, Reason: reason, Source: SourceNVML})
		s.log.Warn().Str("reason", reason).Msg("GPU telemetry disabled; gend runs without it")
		<-ctx.Done()
		return nil
	}
	defer s.shutdown()
	s.probe()
	s.sample(time.Now())

	t := time.NewTicker(s.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			s.sample(now)
		}
	}
}

func initFailureReason(ret gonvml.Return) string {
	switch {
	case errors.Is(ret, gonvml.ERROR_LIBRARY_NOT_FOUND):
		return "NVML library (libnvidia-ml.so.1) not found: no NVIDIA driver on this host"
	case errors.Is(ret, gonvml.ERROR_DRIVER_NOT_LOADED):
		return "NVIDIA kernel driver not loaded"
	case errors.Is(ret, gonvml.ERROR_NO_PERMISSION):
		return "no permission to access the NVIDIA device"
	default:
		return fmt.Sprintf("NVML init: %s", gonvml.ErrorString(ret))
	}
}

func (s *Sampler) shutdown() {
	for _, g := range s.devices {
		if g.gpm {
			for _, smp := range g.samples {
				if smp != nil {
					_ = smp.Free()
				}
			}
		}
	}
	if ret := s.lib.Shutdown(); ret != gonvml.SUCCESS {
		s.log.Warn().Str("error", gonvml.ErrorString(ret)).Msg("NVML shutdown")
	}
}

// has reports whether the driver exports symbol; a missing symbol must never
// be called (the process would abort).
func (s *Sampler) has(symbol string) bool {
	ext := s.lib.Extensions()
	if ext == nil {
		return false
	}
	return ext.LookupSymbol(symbol) == nil
}

// probe runs once after Init: optional symbols, devices and their static facts.
func (s *Sampler) probe() {
	s.syms = symbols{
		gpm: s.has("nvmlGpmSampleGet") && s.has("nvmlGpmMetricsGet") &&
			s.has("nvmlGpmQueryDeviceSupport") && s.has("nvmlGpmSampleAlloc") && s.has("nvmlGpmSampleFree"),
		memoryInfoV2:  s.has("nvmlDeviceGetMemoryInfo_v2"),
		temperatureV:  s.realLib && s.has("nvmlDeviceGetTemperatureV"),
		clockEvents:   s.has("nvmlDeviceGetCurrentClocksEventReasons"),
		clockThrottle: s.has("nvmlDeviceGetCurrentClocksThrottleReasons"),
	}
	if v, ret := s.lib.SystemGetDriverVersion(); ret == gonvml.SUCCESS {
		s.driver = v
	}
	n, ret := s.lib.DeviceGetCount()
	if ret != gonvml.SUCCESS {
		s.log.Warn().Str("error", gonvml.ErrorString(ret)).Msg("NVML device count")
		return
	}
	for i := range n {
		dev, ret := s.lib.DeviceGetHandleByIndex(i)
		if ret != gonvml.SUCCESS {
			s.log.Warn().Int("gpu", i).Str("error", gonvml.ErrorString(ret)).Msg("NVML device handle; GPU skipped")
			continue
		}
		g := &gpuState{index: i, dev: dev}
		if v, ret := dev.GetName(); ret == gonvml.SUCCESS {
			g.name = v
		}
		if v, ret := dev.GetUUID(); ret == gonvml.SUCCESS {
			g.uuid = v
		}
		maxMem, r1 := dev.GetMaxClockInfo(gonvml.CLOCK_MEM)
		bus, r2 := dev.GetMemoryBusWidth()
		if r1 == gonvml.SUCCESS && r2 == gonvml.SUCCESS {
			g.peakBW = PeakBandwidth(maxMem, bus)
		}
		g.gpm = s.syms.gpm && s.setupGPM(g)
		s.log.Info().Int("gpu", i).Str("uuid", g.uuid).Str("name", g.name).
			Uint32("max_mem_clock_mhz", maxMem).Uint32("memory_bus_width_bits", bus).
			Float64("peak_dram_bandwidth_bytes_per_second", g.peakBW).Bool("gpm", g.gpm).
			Msg("GPU found")
		s.devices = append(s.devices, g)
	}
	s.log.Info().Str("driver_version", s.driver).Int("gpus", len(s.devices)).
		Bool("gpm_symbols", s.syms.gpm).Bool("memory_info_v2", s.syms.memoryInfoV2).
		Bool("temperature_v", s.syms.temperatureV).Msg("NVML initialised")
}

// setupGPM checks device support and allocates the rolling sample pair.
func (s *Sampler) setupGPM(g *gpuState) bool {
	sup, ret := g.dev.GpmQueryDeviceSupport()
	if ret != gonvml.SUCCESS || sup.IsSupportedDevice == 0 {
		return false
	}
	for i := range g.samples {
		smp, ret := s.lib.GpmSampleAlloc()
		if ret != gonvml.SUCCESS {
			for _, prev := range g.samples[:i] {
				_ = prev.Free()
			}
			g.samples = [2]gonvml.GpmSample{}
			return false
		}
		g.samples[i] = smp
	}
	return true
}

// sample reads every GPU once and publishes the snapshot.
func (s *Sampler) sample(now time.Time) {
	out := api.GPUs{Available: true, Source: SourceNVML, Driver: s.driver, GPUs: make([]api.GPU, 0, len(s.devices))}
	for _, g := range s.devices {
		out.GPUs = append(out.GPUs, s.sampleGPU(g, now))
	}
	s.snap.publish(out)
}

func (s *Sampler) sampleGPU(g *gpuState, now time.Time) api.GPU {
	dev := g.dev
	gpu := api.GPU{
		Index: g.index, UUID: g.uuid, Name: g.name, Source: SourceNVML,
		PeakBandwidthBytes: g.peakBW, SampledAt: now,
	}
	if s.opts.GPUServer != nil {
		gpu.Server = s.opts.GPUServer(g.index)
	}
	if u, ret := dev.GetUtilizationRates(); ret == gonvml.SUCCESS {
		gpu.UtilizationRatio = float64(u.Gpu) / 100
		gpu.MemoryUtilRatio = float64(u.Memory) / 100
	}
	if s.syms.memoryInfoV2 {
		if m, ret := dev.GetMemoryInfo_v2(); ret == gonvml.SUCCESS {
			gpu.MemoryUsedBytes, gpu.MemoryTotalBytes = m.Used, m.Total
		}
	}
	if gpu.MemoryTotalBytes == 0 {
		if m, ret := dev.GetMemoryInfo(); ret == gonvml.SUCCESS {
			gpu.MemoryUsedBytes, gpu.MemoryTotalBytes = m.Used, m.Total
		}
	}
	if mw, ret := dev.GetPowerUsage(); ret == gonvml.SUCCESS {
		gpu.PowerWatts = float64(mw) / 1000
	}
	if mw, ret := dev.GetEnforcedPowerLimit(); ret == gonvml.SUCCESS {
		gpu.PowerLimitWatts = float64(mw) / 1000
	}
	if mj, ret := dev.GetTotalEnergyConsumption(); ret == gonvml.SUCCESS {
		gpu.EnergyJoules = float64(mj) / 1000
	}
	gpu.TemperatureCelsius = s.temperature(dev)
	if mhz, ret := dev.GetClockInfo(gonvml.CLOCK_SM); ret == gonvml.SUCCESS {
		gpu.SMClockHz = float64(mhz) * 1e6
	}
	if mhz, ret := dev.GetClockInfo(gonvml.CLOCK_MEM); ret == gonvml.SUCCESS {
		gpu.MemClockHz = float64(mhz) * 1e6
	}
	var (
		mask uint64
		ret  gonvml.Return = gonvml.ERROR_NOT_SUPPORTED
	)
	switch {
	case s.syms.clockEvents:
		mask, ret = dev.GetCurrentClocksEventReasons()
	case s.syms.clockThrottle:
		mask, ret = dev.GetCurrentClocksThrottleReasons()
	}
	if ret == gonvml.SUCCESS {
		gpu.ClockEventReasons = mask
		gpu.ClockEventNames = ClockEventNames(mask)
	}
	if g.gpm {
		s.sampleGPM(g, &gpu, now)
	}
	return gpu
}

func (s *Sampler) temperature(dev gonvml.Device) float64 {
	if s.syms.temperatureV {
		if t, ret := dev.GetTemperatureV().V1(); ret == gonvml.SUCCESS {
			return float64(t.Temperature)
		}
	}
	if t, ret := dev.GetTemperature(gonvml.TEMPERATURE_GPU); ret == gonvml.SUCCESS {
		return float64(t)
	}
	return 0
}

// gpmMetricIDs are the GPM metrics read, in the order of their ratio fields.
func gpmMetricIDs() [4]gonvml.GpmMetricId {
	return [4]gonvml.GpmMetricId{gonvml.GPM_METRIC_DRAM_BW_UTIL, gonvml.GPM_METRIC_SM_UTIL,
		gonvml.GPM_METRIC_SM_OCCUPANCY, gonvml.GPM_METRIC_ANY_TENSOR_UTIL}
}

// sampleGPM takes the current GPM sample into the older slot and, if the
// previous one is more than 100 ms old, computes the metrics from the pair.
func (s *Sampler) sampleGPM(g *gpuState, gpu *api.GPU, now time.Time) {
	cur := g.samples[1]
	if ret := g.dev.GpmSampleGet(cur); ret != gonvml.SUCCESS {
		return
	}
	prev, prevAt := g.samples[0], g.prevAt
	// Rotate: the sample just taken becomes the previous one for the next tick.
	g.samples[0], g.samples[1], g.prevAt = cur, prev, now
	if prevAt.IsZero() || now.Sub(prevAt) <= minGPMGap {
		return
	}
	ids := gpmMetricIDs()
	req := gonvml.GpmMetricsGetType{NumMetrics: uint32(len(ids)), Sample1: prev, Sample2: cur}
	for i, id := range ids {
		req.Metrics[i].MetricId = uint32(id) // by index: the array length changes between go-nvml releases
	}
	if ret := s.lib.GpmMetricsGet(&req); ret != gonvml.SUCCESS {
		return
	}
	fields := [4]**float64{&gpu.DRAMBandwidthRatio, &gpu.SMUtilRatio, &gpu.SMOccupancyRatio, &gpu.TensorActiveRatio}
	for i := range ids {
		m := req.Metrics[i]
		if gonvml.Return(m.NvmlReturn) != gonvml.SUCCESS {
			continue
		}
		v := clamp01(m.Value / 100)
		*fields[i] = &v
	}
}

func clamp01(v float64) float64 {
	switch {
	case v < 0:
		return 0
	case v > 1:
		return 1
	}
	return v
}
