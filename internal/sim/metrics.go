package sim

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics is one server's Prometheus registry with SGLang's metric names,
// types and labels. Gauges and counters are read from the engine snapshot at
// scrape time; latency histograms are observed when a request finishes.
type metrics struct {
	s      *server
	reg    *prometheus.Registry
	labels prometheus.Labels
	queue  prometheus.Histogram
	ttft   prometheus.Histogram
	itl    prometheus.Histogram
	e2e    prometheus.Histogram
	descs  map[string]*prometheus.Desc
}

type metricDef struct {
	name string
	kind prometheus.ValueType
	help string
}

func metricDefs() []metricDef {
	g, c := prometheus.GaugeValue, prometheus.CounterValue
	return []metricDef{
		{"sglang:num_running_reqs", g, "The number of running requests."},
		{"sglang:num_used_tokens", g, "The number of used tokens."},
		{"sglang:token_usage", g, "The token usage."},
		{"sglang:gen_throughput", g, "The generation throughput (token/s)."},
		{"sglang:num_queue_reqs", g, "The number of requests in the waiting queue."},
		{"sglang:num_grammar_queue_reqs", g, "The number of requests in the grammar waiting queue."},
		{"sglang:num_running_reqs_offline_batch", g, "The number of running low-priority offline batch requests."},
		{"sglang:cache_hit_rate", g, "The prefix cache hit rate."},
		{"sglang:num_retracted_reqs", g, "The number of retracted requests in the last log interval."},
		{"sglang:num_paused_reqs", g, "The number of paused requests by async weight sync."},
		{"sglang:max_total_num_tokens", g, "Maximum total number of tokens in the KV cache pool."},
		{"sglang:new_token_ratio", g, "The new token ratio."},
		{"sglang:utilization", g, "The utilization."},
		{"sglang:context_len", g, "The context length."},
		{"sglang:prompt_tokens_total", c, "Number of prefill tokens processed."},
		{"sglang:generation_tokens_total", c, "Number of generation tokens processed."},
		{"sglang:num_requests_total", c, "Number of requests processed."},
		{"sglang:num_aborted_requests_total", c, "Number of requests aborted."},
		{"sglang:num_retracted_requests_total", c, "Total number of retracted requests due to KV cache pressure."},
		{"sglang:num_retracted_input_tokens_total", c, "Total number of retracted input tokens."},
		{"sglang:num_retracted_output_tokens_total", c, "Total number of retracted output tokens."},
	}
}

func newMetrics(s *server) *metrics {
	m := &metrics{
		s:   s,
		reg: prometheus.NewRegistry(),
		labels: prometheus.Labels{
			"model_name": s.p.roof.Model.ServedName, "engine_type": "unified",
			"tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0",
		},
		descs: map[string]*prometheus.Desc{},
	}
	for _, d := range metricDefs() {
		m.descs[d.name] = prometheus.NewDesc(d.name, d.help, nil, m.labels)
	}
	latency := []float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400, 3600}
	hist := func(name, help string, buckets []float64) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: m.labels})
		m.reg.MustRegister(h)
		return h
	}
	m.queue = hist("sglang:queue_time_seconds", "Histogram of queueing time in seconds.", latency)
	m.ttft = hist("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", latency)
	m.e2e = hist("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", latency)
	m.itl = hist("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
		[]float64{0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8})
	m.reg.MustRegister(m)
	return m
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range m.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector from one engine snapshot.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	sn := m.s.eng.snapshot()
	p := m.s.p
	usage := float64(sn.used) / float64(p.pool)
	vals := map[string]float64{
		"sglang:num_running_reqs":                  float64(sn.running),
		"sglang:num_used_tokens":                   float64(sn.used),
		"sglang:token_usage":                       usage,
		"sglang:gen_throughput":                    sn.genThroughput,
		"sglang:num_queue_reqs":                    float64(sn.waiting),
		"sglang:num_retracted_reqs":                float64(sn.lastRetracted),
		"sglang:max_total_num_tokens":              float64(p.pool),
		"sglang:new_token_ratio":                   sn.ratio,
		"sglang:utilization":                       usage,
		"sglang:context_len":                       float64(p.contextLen),
		"sglang:prompt_tokens_total":               float64(sn.c.promptTokens),
		"sglang:generation_tokens_total":           float64(sn.c.genTokens),
		"sglang:num_requests_total":                float64(sn.c.requests + sn.c.aborted + sn.c.queueFull + sn.c.oom),
		"sglang:num_aborted_requests_total":        float64(sn.c.aborted + sn.c.queueFull + sn.c.oom),
		"sglang:num_retracted_requests_total":      float64(sn.c.retractions),
		"sglang:num_retracted_input_tokens_total":  float64(sn.c.retractedIn),
		"sglang:num_retracted_output_tokens_total": float64(sn.c.retractedOut),
	}
	for _, d := range metricDefs() {
		ch <- prometheus.MustNewConstMetric(m.descs[d.name], d.kind, vals[d.name])
	}
}

// observe records a finished request's latencies (simulated seconds).
func (m *metrics) observe(r *request) {
	m.e2e.Observe(r.tDone - r.tArrive)
	m.ttft.Observe(r.tFirst - r.tArrive)
	m.queue.Observe(max(r.tAdmit-r.tArrive, 0))
	if r.generated > 1 {
		m.itl.Observe((r.tDone - r.tFirst) / float64(r.generated-1))
	}
}
