package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gend-dev/gend/api"
)

// sglangVersion is the version gensim reports.
const sglangVersion = "0.5.9"

const gib = 1 << 30

func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.generate(w, r, true) })
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.generate(w, r, false) })
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("GET /health_generate", s.health)
	mux.HandleFunc("GET /server_info", s.serverInfo)
	mux.HandleFunc("GET /get_server_info", s.serverInfo)
	mux.HandleFunc("GET /v1/loads", s.loads)
	mux.HandleFunc("GET /get_load", s.getLoad)
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("POST /abort_request", s.abortRequest)
	mux.HandleFunc("GET /sim/gpu", s.gpu)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, []byte(`{"detail":"Not Found"}`))
	})
	return mux
}

// health is SGLang's /health and /health_generate: 200 with an empty body
// when the server serves, 503 while it starts.
func (s *server) health(w http.ResponseWriter, _ *http.Request) {
	if s.eng.snapshot().state != stateAlive {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }

func nullIfZero(v int) any {
	if v == 0 {
		return nil
	}
	return v
}

func (s *server) port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, p, _ := net.SplitHostPort(s.addr)
	n, _ := strconv.Atoi(p)
	return n
}

// serverInfo is /server_info: server arguments, scheduler info,
// internal_states and version in one flat object.
func (s *server) serverInfo(w http.ResponseWriter, _ *http.Request) {
	p, c := s.p, s.cfg
	sn := s.eng.snapshot()
	host, _, _ := net.SplitHostPort(strings.TrimPrefix(s.url(), "http://"))
	var ctxLen any
	if p.contextSet {
		ctxLen = p.contextLen
	}
	name := p.roof.Model.ServedName
	info := map[string]any{
		"model_path": name, "tokenizer_path": name, "served_model_name": name,
		"host": host, "port": s.port(), "context_length": ctxLen,
		"max_running_requests": nullIfZero(c.MaxRunningRequests),
		"max_queued_requests":  nullIfZero(c.MaxQueuedRequests),
		"max_total_tokens":     nil, "mem_fraction_static": p.memFraction,
		"chunked_prefill_size": p.chunk, "max_prefill_tokens": p.maxPrefill,
		"schedule_policy": "fcfs", "schedule_conservativeness": p.conservative,
		"tp_size": 1, "dp_size": 1, "pp_size": 1, "ep_size": 1, "page_size": 1,
		"dtype": "auto", "kv_cache_dtype": "auto", "device": "cuda",
		"reasoning_parser": "qwen3", "random_seed": s.f.seed, "stream_interval": 1,
		"enable_metrics": true, "disable_radix_cache": false, "enable_mixed_chunk": false,
		"allow_auto_truncate": false, "enable_priority_scheduling": false,
		"attention_backend": "flashinfer", "log_level": "info", "skip_server_warmup": false,
		"status": "ready", "max_total_num_tokens": p.pool, "max_req_input_len": p.maxReqInputLen,
		"internal_states": []map[string]any{{
			"attention_backend":                     "flashinfer",
			"effective_max_running_requests_per_dp": p.maxRunning,
			"last_gen_throughput":                   sn.genThroughput,
			"memory_usage": map[string]any{
				"weight":         round2(p.roof.Model.WeightBytes / gib),
				"kvcache":        round2(float64(p.pool) * p.roof.Model.KVBytesPerToken / gib),
				"token_capacity": p.pool,
				"graph":          round2(graphBytes / gib),
			},
		}},
		"version": sglangVersion,
		// Not an SGLang field: simulated seconds per wall second, so a
		// client can read the server's rates in the GPU's own time.
		"gensim_speedup": s.f.speedup,
	}
	writeJSON(w, http.StatusOK, marshal(info))
}

type loadEntry struct {
	Timestamp                float64     `json:"timestamp"`
	DPRank                   int         `json:"dp_rank"`
	NumRunningReqs           int         `json:"num_running_reqs"`
	NumWaitingReqs           int         `json:"num_waiting_reqs"`
	NumWaitingUncachedTokens int64       `json:"num_waiting_uncached_tokens"`
	NumUsedTokens            int64       `json:"num_used_tokens"`
	NumTotalTokens           int64       `json:"num_total_tokens"`
	MaxTotalNumTokens        int64       `json:"max_total_num_tokens"`
	MaxRunningRequests       int         `json:"max_running_requests"`
	TokenUsage               float64     `json:"token_usage"`
	GenThroughput            float64     `json:"gen_throughput"`
	CacheHitRate             float64     `json:"cache_hit_rate"`
	Utilization              float64     `json:"utilization"`
	Memory                   *loadMemory `json:"memory,omitempty"`
	Queues                   *loadQueues `json:"queues,omitempty"`
}

type loadQueues struct {
	Waiting   int `json:"waiting"`
	Grammar   int `json:"grammar"`
	Paused    int `json:"paused"`
	Retracted int `json:"retracted"`
}

type loadMemory struct {
	WeightGB      float64 `json:"weight_gb"`
	KVCacheGB     float64 `json:"kv_cache_gb"`
	GraphGB       float64 `json:"graph_gb"`
	TokenCapacity int64   `json:"token_capacity"`
}

func (s *server) load(include string) loadEntry {
	sn := s.eng.snapshot()
	p := s.p
	usage := math.Round(float64(sn.used)/float64(p.pool)*1e4) / 1e4
	e := loadEntry{
		Timestamp: float64(time.Now().UnixMicro()) / 1e6, NumRunningReqs: sn.running, NumWaitingReqs: sn.waiting,
		NumWaitingUncachedTokens: sn.waitingTokens, NumUsedTokens: sn.used, NumTotalTokens: p.pool,
		MaxTotalNumTokens: p.pool, MaxRunningRequests: p.maxRunning, TokenUsage: usage,
		GenThroughput: math.Round(sn.genThroughput*10) / 10, Utilization: usage,
	}
	parts := map[string]bool{}
	for _, v := range strings.Split(include, ",") {
		parts[strings.TrimSpace(v)] = true
	}
	if parts["all"] || parts["memory"] {
		e.Memory = &loadMemory{WeightGB: round2(p.roof.Model.WeightBytes / gib),
			KVCacheGB: round2(float64(p.pool) * p.roof.Model.KVBytesPerToken / gib),
			GraphGB:   round2(graphBytes / gib), TokenCapacity: p.pool}
	}
	if parts["all"] || parts["queues"] {
		e.Queues = &loadQueues{Waiting: sn.waiting, Retracted: sn.waitingRetracted}
	}
	return e
}

// loads is /v1/loads?include=...&format=json|prometheus.
func (s *server) loads(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	include := strings.Join(q["include"], ",")
	e := s.load(include)
	if q.Get("format") == "prometheus" {
		var b strings.Builder
		for _, kv := range []struct {
			k string
			v float64
		}{
			{"num_running_reqs", float64(e.NumRunningReqs)}, {"num_waiting_reqs", float64(e.NumWaitingReqs)},
			{"num_used_tokens", float64(e.NumUsedTokens)}, {"max_total_num_tokens", float64(e.MaxTotalNumTokens)},
			{"token_usage", e.TokenUsage}, {"gen_throughput", e.GenThroughput},
		} {
			fmt.Fprintf(&b, "sglang:%s{dp_rank=\"0\"} %g\n", kv.k, kv.v)
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = io.WriteString(w, b.String())
		return
	}
	body := struct {
		Timestamp string      `json:"timestamp"`
		Version   string      `json:"version"`
		Loads     []loadEntry `json:"loads"`
	}{time.Now().UTC().Format("2006-01-02T15:04:05.000000+00:00"), sglangVersion, []loadEntry{e}}
	writeJSON(w, http.StatusOK, marshal(body))
}

// getLoad is the older /get_load: a list per DP rank.
func (s *server) getLoad(w http.ResponseWriter, _ *http.Request) {
	sn := s.eng.snapshot()
	type rank struct {
		DPRank           int     `json:"dp_rank"`
		NumReqs          int     `json:"num_reqs"`
		NumWaitingReqs   int     `json:"num_waiting_reqs"`
		NumTokens        int64   `json:"num_tokens"`
		NumPendingTokens int64   `json:"num_pending_tokens"`
		TsTic            float64 `json:"ts_tic"`
	}
	body := []rank{{NumReqs: sn.running + sn.waiting, NumWaitingReqs: sn.waiting, NumTokens: sn.used,
		NumPendingTokens: sn.waitingTokens, TsTic: float64(time.Now().UnixMicro()) / 1e6}}
	writeJSON(w, http.StatusOK, marshal(body))
}

func (s *server) models(w http.ResponseWriter, _ *http.Request) {
	name := s.p.roof.Model.ServedName
	type model struct {
		ID          string  `json:"id"`
		Object      string  `json:"object"`
		Created     int64   `json:"created"`
		OwnedBy     string  `json:"owned_by"`
		Root        string  `json:"root"`
		Parent      *string `json:"parent"`
		MaxModelLen int     `json:"max_model_len"`
	}
	body := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{"list", []model{{ID: name, Object: "model", Created: s.f.start.Unix(), OwnedBy: "sglang", Root: name, MaxModelLen: s.p.contextLen}}}
	writeJSON(w, http.StatusOK, marshal(body))
}

// abortRequest is POST /abort_request {"rid": "..."}: the request ends with
// finish_reason "abort" on HTTP 200.
func (s *server) abortRequest(w http.ResponseWriter, r *http.Request) {
	if !jsonContentType(r) {
		s.writeError(w, http.StatusBadRequest, typeValidation, msgContentType)
		return
	}
	var body struct {
		Rid      string `json:"rid"`
		AbortAll bool   `json:"abort_all"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body); err != nil {
		s.writeError(w, http.StatusBadRequest, typeValidation, "JSON decode error: "+err.Error())
		return
	}
	if body.AbortAll {
		s.rmu.Lock()
		reqs := make([]*request, 0, len(s.rids))
		for _, q := range s.rids {
			reqs = append(reqs, q)
		}
		s.rmu.Unlock()
		for _, q := range reqs {
			s.eng.abort(q)
		}
	} else if q := s.lookup(body.Rid); q != nil {
		s.eng.abort(q)
	}
	w.WriteHeader(http.StatusOK)
}

// gpu is GET /sim/gpu: what NVML would report for this server's GPU.
func (s *server) gpu(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, marshal(s.gpuSnapshot()))
}

func (s *server) gpuSnapshot() api.GPU {
	sn := s.eng.snapshot()
	g := s.p.roof.GPU
	out := api.GPU{
		Index: s.idx, UUID: s.uuid, Name: g.Name, Server: s.name, Source: "sim",
		MemoryTotalBytes: uint64(g.MemoryBytes), PowerLimitWatts: g.PowerLimitW,
		MemClockHz: g.MemClockHz, PeakBandwidthBytes: g.BandwidthBytes, SampledAt: time.Now().UTC(),
	}
	if sn.state == stateDead {
		// The process is gone: no memory in use, an idle GPU.
		out.PowerWatts, out.TemperatureCelsius, out.SMClockHz = g.IdlePowerW, 32, g.SMClockHz*0.1
		zero := 0.0
		out.DRAMBandwidthRatio, out.SMUtilRatio, out.SMOccupancyRatio, out.TensorActiveRatio = &zero, &zero, &zero, &zero
		out.ClockEventReasons, out.ClockEventNames = 1, []string{"gpu_idle"}
		return out
	}
	m := s.p.roof.Model
	out.MemoryUsedBytes = uint64(m.WeightBytes + float64(s.p.pool)*m.KVBytesPerToken + graphBytes + contextBytes)
	bw, sm, tn := sn.bwRatio, sn.smRatio, sn.tensorRatio
	if sn.busy {
		out.UtilizationRatio = 1 // any kernel running reads 100 %
	} else {
		// The engine sleeps while idle: decay the averages to now.
		k := math.Exp(-math.Max(s.f.simNow()-sn.simNow, 0) / telemetryTau)
		bw, sm, tn = bw*k, sm*k, tn*k
	}
	occ := sm * 0.35
	out.DRAMBandwidthRatio, out.SMUtilRatio, out.SMOccupancyRatio, out.TensorActiveRatio = &bw, &sm, &occ, &tn
	out.MemoryUtilRatio = math.Round(bw*0.14*100) / 100 // NVML's duty cycle reads far below the bandwidth share
	load := math.Max(bw/bwEfficiency, tn*2)
	out.PowerWatts = math.Min(g.PowerLimitW, g.IdlePowerW+(g.PowerLimitW-g.IdlePowerW)*math.Min(load, 1)*0.95)
	out.TemperatureCelsius = math.Round(34 + 44*out.PowerWatts/g.PowerLimitW)
	out.SMClockHz = g.SMClockHz
	out.EnergyJoules = math.Round(s.f.simNow()*g.IdlePowerW + sn.c.busySeconds*(g.PowerLimitW-g.IdlePowerW)*0.6)
	switch {
	case sn.slow > 1:
		out.ClockEventReasons, out.ClockEventNames = 8, []string{"hw_slowdown"}
		out.SMClockHz = g.SMClockHz / sn.slow
	case !sn.busy && sm < 0.01:
		out.ClockEventReasons, out.ClockEventNames = 1, []string{"gpu_idle"}
	}
	return out
}
