package nvml

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports a Source's latest snapshot as gend_gpu_* metrics. It reads
// the snapshot at scrape time; register it on the daemon's own registry.
type Collector struct {
	src Source

	available, util, memUtil, dram, smUtil, smOcc, tensor *prometheus.Desc
	memUsed, memTotal, power, powerLimit, energy, temp    *prometheus.Desc
	smClock, memClock, peakBW, reasons, reasonActive      *prometheus.Desc
}

// NewCollector returns a prometheus.Collector over src. Labels: gpu (NVML
// index), uuid, name, and server (the fleet server on the GPU, "" if none);
// gend_gpu_clock_event_reason_active also has reason (a fixed set).
func NewCollector(src Source) *Collector {
	l := []string{"gpu", "uuid", "name", "server"}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("gend_gpu_"+name, help, labels, nil)
	}
	return &Collector{
		src:          src,
		available:    d("telemetry_available", "1 when GPU telemetry is available (NVML, gensim or remote gends), 0 when not.", "source"),
		util:         d("utilization_ratio", "Share of the last sample period in which at least one kernel ran (NVML utilization.gpu / 100). A liveness signal, not saturation.", l...),
		memUtil:      d("memory_utilization_ratio", "Share of the sample period in which device memory was read or written (NVML utilization.memory / 100): a duty cycle, not bandwidth.", l...),
		dram:         d("dram_bandwidth_utilization_ratio", "GPM DRAM_BW_UTIL: achieved DRAM bandwidth as a ratio of the theoretical peak (about 0.8 is the practical ceiling).", l...),
		smUtil:       d("sm_utilization_ratio", "GPM SM_UTIL: share of SMs busy, 0-1.", l...),
		smOcc:        d("sm_occupancy_ratio", "GPM SM_OCCUPANCY: resident warps as a ratio of the maximum, 0-1.", l...),
		tensor:       d("tensor_active_ratio", "GPM ANY_TENSOR_UTIL: share of cycles any tensor pipe was active, 0-1.", l...),
		memUsed:      d("memory_used_bytes", "Device memory in use, bytes.", l...),
		memTotal:     d("memory_total_bytes", "Device memory total, bytes.", l...),
		power:        d("power_watts", "Power draw, watts.", l...),
		powerLimit:   d("power_limit_watts", "Enforced power limit, watts.", l...),
		energy:       d("energy_joules_total", "Energy consumed since the driver loaded, joules.", l...),
		temp:         d("temperature_celsius", "GPU core temperature, degrees Celsius.", l...),
		smClock:      d("sm_clock_hertz", "Current SM clock, hertz.", l...),
		memClock:     d("memory_clock_hertz", "Current memory clock, hertz.", l...),
		peakBW:       d("peak_dram_bandwidth_bytes_per_second", "Theoretical peak DRAM bandwidth from max memory clock and bus width, bytes per second.", l...),
		reasons:      d("clock_event_reasons", "NVML clocks-event (throttle) reasons bitmask: 4 power cap, 8 HW slowdown, 32/64 thermal, 128 power brake.", l...),
		reasonActive: d("clock_event_reason_active", "1 while this clocks-event (throttle) reason holds the clocks below max, else 0.", append(l, "reason")...),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.available, c.util, c.memUtil, c.dram, c.smUtil, c.smOcc, c.tensor,
		c.memUsed, c.memTotal, c.power, c.powerLimit, c.energy, c.temp, c.smClock, c.memClock, c.peakBW,
		c.reasons, c.reasonActive} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	snap := c.src.Snapshot()
	avail := 0.0
	if snap.Available {
		avail = 1
	}
	ch <- prometheus.MustNewConstMetric(c.available, prometheus.GaugeValue, avail, snap.Source)
	seen := make(map[[4]string]bool, len(snap.GPUs))
	for i := range snap.GPUs {
		g := &snap.GPUs[i]
		key := [4]string{strconv.Itoa(g.Index), g.UUID, g.Name, g.Server}
		if seen[key] { // a duplicate label set would fail the whole scrape
			continue
		}
		seen[key] = true
		lv := key[:]
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
		}
		opt := func(d *prometheus.Desc, v *float64) {
			if v != nil {
				gauge(d, *v)
			}
		}
		pos := func(d *prometheus.Desc, v float64) { // 0 means "not read" for these fields
			if v > 0 {
				gauge(d, v)
			}
		}
		gauge(c.util, g.UtilizationRatio)
		gauge(c.memUtil, g.MemoryUtilRatio)
		opt(c.dram, g.DRAMBandwidthRatio)
		opt(c.smUtil, g.SMUtilRatio)
		opt(c.smOcc, g.SMOccupancyRatio)
		opt(c.tensor, g.TensorActiveRatio)
		if g.MemoryTotalBytes > 0 {
			gauge(c.memUsed, float64(g.MemoryUsedBytes))
			gauge(c.memTotal, float64(g.MemoryTotalBytes))
		}
		pos(c.power, g.PowerWatts)
		pos(c.powerLimit, g.PowerLimitWatts)
		if g.EnergyJoules > 0 {
			ch <- prometheus.MustNewConstMetric(c.energy, prometheus.CounterValue, g.EnergyJoules, lv...)
		}
		pos(c.temp, g.TemperatureCelsius)
		pos(c.smClock, g.SMClockHz)
		pos(c.memClock, g.MemClockHz)
		pos(c.peakBW, g.PeakBandwidthBytes)
		gauge(c.reasons, float64(g.ClockEventReasons))
		for _, r := range clockEventReasons {
			v := 0.0
			if g.ClockEventReasons&r.Bit != 0 {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.reasonActive, prometheus.GaugeValue, v, append(lv, r.Name)...)
		}
	}
}
