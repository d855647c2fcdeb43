package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gend-dev/gend/api"
	"github.com/gend-dev/gend/pkg/scheduler"
)

// metrics are gend's own series (docs/metrics.md). Event counters are
// incremented as things happen; gauges are read from live state at scrape
// time by the collector.
type metrics struct {
	requests   *prometheus.CounterVec
	prompt     *prometheus.CounterVec
	completion *prometheus.CounterVec
	decisions  *prometheus.CounterVec
}

func newMetrics(reg *prometheus.Registry, d *Daemon) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gend_requests_total",
			Help: "Generation attempts by server and outcome (ok, overload, unreachable, transient, permanent, fatal, aborted)."},
			[]string{"server", "outcome"}),
		prompt: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gend_prompt_tokens_total",
			Help: "Prompt tokens of completed requests, by server."}, []string{"server"}),
		completion: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gend_completion_tokens_total",
			Help: "Output tokens of completed requests, by server."}, []string{"server"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gend_scheduler_decisions_total",
			Help: "Control-law limit changes by server and reason."}, []string{"server", "reason"}),
	}
	reg.MustRegister(m.requests, m.prompt, m.completion, m.decisions, &collector{d: d})
	return m
}

// preCreate makes every enumerated series of a server exist at 0.
func (m *metrics) preCreate(server string) {
	for _, o := range scheduler.Outcomes() {
		m.requests.WithLabelValues(server, o)
	}
	m.prompt.WithLabelValues(server)
	m.completion.WithLabelValues(server)
	for _, r := range scheduler.Reasons {
		m.decisions.WithLabelValues(server, r)
	}
}

func (m *metrics) request(server, outcome string, prompt, completion int64) {
	m.requests.WithLabelValues(server, outcome).Inc()
	if prompt > 0 {
		m.prompt.WithLabelValues(server).Add(float64(prompt))
	}
	if completion > 0 {
		m.completion.WithLabelValues(server).Add(float64(completion))
	}
}

func (m *metrics) decision(server, reason string) {
	m.decisions.WithLabelValues(server, reason).Inc()
}

type collector struct{ d *Daemon }

var (
	descLimit       = prometheus.NewDesc("gend_server_limit", "Concurrency limit in force on the server (requests): the control law's, or a job's static or per_server_max cap when it binds.", []string{"server"}, nil)
	descInFlight    = prometheus.NewDesc("gend_server_in_flight", "Requests gend has in flight on the server.", []string{"server"}, nil)
	descQueueTarget = prometheus.NewDesc("gend_server_queue_target", "Queue length the control law keeps on the server (requests).", []string{"server"}, nil)
	descUp          = prometheus.NewDesc("gend_server_up", "1 when the server is healthy and receives work, else 0.", []string{"server"}, nil)
	descRunning     = prometheus.NewDesc("gend_server_running_requests", "Server's running batch as read from its gauges.", []string{"server"}, nil)
	descQueued      = prometheus.NewDesc("gend_server_queued_requests", "Server's waiting queue as read from its gauges.", []string{"server"}, nil)
	descKV          = prometheus.NewDesc("gend_server_kv_usage_ratio", "Server's KV cache usage (0-1) as read from its gauges.", []string{"server"}, nil)
	descRetract     = prometheus.NewDesc("gend_server_retractions_total", "Retractions/preemptions the server reported since gend started watching.", []string{"server"}, nil)
	descTokRate     = prometheus.NewDesc("gend_server_generation_tokens_per_second", "Server output tokens per second (its own counter, smoothed).", []string{"server"}, nil)
	descCapacity    = prometheus.NewDesc("gend_server_capacity_requests", "max_running_requests as the server reported it (0 unknown).", []string{"server"}, nil)
	descJobs        = prometheus.NewDesc("gend_jobs", "Jobs by status.", []string{"status"}, nil)
	descJobTotal    = prometheus.NewDesc("gend_job_requests", "Requests of the current job by state (total, completed, failed, in_flight).", []string{"state"}, nil)
	descJobProgress = prometheus.NewDesc("gend_job_progress_ratio", "Share of the current job's requests that are done (0-1).", nil, nil)
	descJobETA      = prometheus.NewDesc("gend_job_eta_seconds", "Current job's ETA, seconds (absent while unknown; 0 once it ended).", nil, nil)
	descJobETALow   = prometheus.NewDesc("gend_job_eta_low_seconds", "Lower bound of the current job's ETA interval, seconds (absent while unknown).", nil, nil)
	descJobETAHigh  = prometheus.NewDesc("gend_job_eta_high_seconds", "Upper bound of the current job's ETA interval, seconds (absent while unknown).", nil, nil)
	descJobTok      = prometheus.NewDesc("gend_job_output_tokens_per_second", "Current job's completed output tokens per second (30 s window).", nil, nil)
	descJobRate     = prometheus.NewDesc("gend_job_requests_per_second", "Current job's finished requests per second (30 s window).", nil, nil)
	descJobRetries  = prometheus.NewDesc("gend_job_retries_total", "Retried attempts of the current job.", nil, nil)
	descS3Up        = prometheus.NewDesc("gend_s3_uploaded_shards_total", "Shard objects uploaded to S3 (recorded in the manifests), all jobs with output.s3.", nil, nil)
	descS3Bytes     = prometheus.NewDesc("gend_s3_uploaded_bytes_total", "Bytes of shard objects uploaded to S3 (manifests excluded), all jobs with output.s3.", nil, nil)
	descS3Pending   = prometheus.NewDesc("gend_s3_pending_shards", "Closed shards of jobs with output.s3 not uploaded yet.", nil, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLimit, descInFlight, descQueueTarget, descUp, descRunning, descQueued, descKV, descRetract,
		descTokRate, descCapacity, descJobs, descJobTotal, descJobProgress, descJobETA, descJobETALow, descJobETAHigh, descJobTok,
		descJobRate, descJobRetries, descS3Up, descS3Bytes, descS3Pending} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	d := c.d
	stats := d.sched.ServerStats()
	rates := d.tput.perServer()
	for _, s := range d.sched.Servers() {
		g := func(desc *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, s.Name)
		}
		g(descLimit, float64(s.Limit))
		g(descInFlight, float64(s.InFlight))
		g(descQueueTarget, float64(s.QueueTarget))
		up := 0.0
		if s.State == scheduler.StateHealthy {
			up = 1
		}
		g(descUp, up)
		g(descCapacity, float64(s.Capacity))
		g(descTokRate, rates[s.Name].tokens)
		if s.Gauges != nil {
			g(descRunning, float64(s.Gauges.Running))
			g(descQueued, float64(s.Gauges.Queued))
			g(descKV, s.Gauges.TokenUsage)
		}
		ch <- prometheus.MustNewConstMetric(descRetract, prometheus.CounterValue, stats[s.Name].Retractions, s.Name)
	}
	counts := map[string]int{}
	for _, st := range []string{api.StatusQueued, api.StatusRunning, api.StatusPaused, api.StatusCompleted, api.StatusFailed, api.StatusCancelled} {
		counts[st] = 0
	}
	var up, upBytes, pending int64
	for _, j := range d.Jobs() {
		counts[j.Status]++
		if j.Spec.Output.S3 == "" {
			continue // a local-only job has nothing to upload: no backlog
		}
		up += j.Progress.S3Uploaded
		upBytes += j.Progress.S3Bytes
		pending += j.Progress.S3Pending
	}
	for st, n := range counts {
		ch <- prometheus.MustNewConstMetric(descJobs, prometheus.GaugeValue, float64(n), st)
	}
	ch <- prometheus.MustNewConstMetric(descS3Up, prometheus.CounterValue, float64(up))
	ch <- prometheus.MustNewConstMetric(descS3Bytes, prometheus.CounterValue, float64(upBytes))
	ch <- prometheus.MustNewConstMetric(descS3Pending, prometheus.GaugeValue, float64(pending))
	cur := d.currentJob()
	if cur == nil {
		return
	}
	p := cur.view().Progress
	for state, v := range map[string]int64{"total": p.Total, "completed": p.Completed, "failed": p.Failed, "in_flight": p.InFlight} {
		ch <- prometheus.MustNewConstMetric(descJobTotal, prometheus.GaugeValue, float64(v), state)
	}
	ratio := 0.0
	if p.Total > 0 {
		ratio = float64(p.Completed+p.Failed) / float64(p.Total)
	}
	ch <- prometheus.MustNewConstMetric(descJobProgress, prometheus.GaugeValue, ratio)
	// Unknown estimates (-1 in progress.json) are left out rather than
	// exported as a sentinel that would bend graphs, deriv() and alerts.
	known := func(desc *prometheus.Desc, v float64) {
		if v >= 0 {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v)
		}
	}
	known(descJobETA, p.ETASeconds)
	known(descJobETALow, p.ETALowSeconds)
	known(descJobETAHigh, p.ETAHighSeconds)
	known(descJobTok, p.TokensPerSec)
	known(descJobRate, p.RatePerSec)
	ch <- prometheus.MustNewConstMetric(descJobRetries, prometheus.CounterValue, float64(p.Retries))
}
