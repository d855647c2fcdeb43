package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gend-dev/gend/pkg/scheduler"
)

var descDispatchLatency = prometheus.NewDesc("gend_scheduler_dispatch_latency_seconds",
	"Time from a slot freeing (an attempt ending) to the next attempt being sent: the controller's own delay.", nil, nil)

// dispatchCollector exports the scheduler's dispatch-latency histogram.
type dispatchCollector struct{ s *scheduler.Scheduler }

func (c dispatchCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descDispatchLatency }

func (c dispatchCollector) Collect(ch chan<- prometheus.Metric) {
	h := c.s.DispatchLatency()
	buckets := make(map[float64]uint64, len(h.Bounds))
	var cum uint64
	for i, b := range h.Bounds {
		cum += h.Counts[i]
		buckets[b] = cum
	}
	ch <- prometheus.MustNewConstHistogram(descDispatchLatency, h.Count, h.SumSeconds, buckets)
}
