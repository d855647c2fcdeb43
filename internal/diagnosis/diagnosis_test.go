package diagnosis

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gend-dev/gend/api"
)

func ptr(v float64) *float64 { return &v }

// GPU presets (peak bandwidth from NVML max memory clock × bus width).
func rtxPro6000(i int, util float64, dram *float64) api.GPU {
	return api.GPU{Index: i, Name: "NVIDIA RTX PRO 6000 Blackwell", UtilizationRatio: util, MemoryUtilRatio: 0.3,
		DRAMBandwidthRatio: dram, MemoryTotalBytes: 97887 << 20, PeakBandwidthBytes: 1.792e12}
}

func h100(i int, dram *float64) api.GPU {
	return api.GPU{Index: i, Name: "NVIDIA H100 80GB HBM3", UtilizationRatio: 1, MemoryUtilRatio: 0.1,
		DRAMBandwidthRatio: dram, MemoryTotalBytes: 81559 << 20, PeakBandwidthBytes: 3.35232e12}
}

func h200(i int, dram *float64) api.GPU {
	return api.GPU{Index: i, Name: "NVIDIA H200", UtilizationRatio: 1, MemoryUtilRatio: 0.09,
		DRAMBandwidthRatio: dram, MemoryTotalBytes: 143771 << 20, PeakBandwidthBytes: 4.916736e12}
}

// Models.
var (
	qwen27B = api.ModelSpec{WeightBytes: 54e9, KVBytesPerToken: 262144} // 27B bf16, 256 KiB/token
	llama8B = api.ModelSpec{WeightBytes: 16e9, KVBytesPerToken: 131072} // 8B bf16, 128 KiB/token
	none    = api.ModelSpec{}
)

type srvOpt func(*api.Server)

func server(name string, running, queued, maxRun int, kv float64, mtt int64, tokps float64, opts ...srvOpt) api.Server {
	s := api.Server{
		ServerSpec: api.ServerSpec{Name: name, URL: "http://127.0.0.1:30000"},
		State:      "healthy", Limit: running + queued, InFlight: running + queued, Capacity: maxRun,
		TokensPerSec: tokps, RatePerSec: tokps / 2500,
		Gauges: &api.Gauges{Source: "sglang-loads", Running: running, Queued: queued, TokenUsage: kv,
			MaxRunning: maxRun, MaxTotalTokens: mtt},
	}
	for _, o := range opts {
		o(&s)
	}
	return s
}

// seedFleet is the seed set-up: 8 × RTX PRO 6000 (96 GB, 1.792 TB/s), Qwen 27B
// bf16 (54 GB weights, 256 KiB/token KV), thinking mode, ~2,500-token outputs:
// a ~30 GB KV pool (115k tokens) holds ~36 requests at ~3k tokens of live
// context; each GPU makes ~485 tok/s and reads 100% "utilization".
func seedFleet(n int, dram *float64) ([]api.Server, map[string][]api.GPU, map[string]float64) {
	var servers []api.Server
	gpus := map[string][]api.GPU{}
	retr := map[string]float64{}
	for i := range n {
		name := fmt.Sprintf("gpu%d", i)
		servers = append(servers, server(name, 36, 18, 256, 0.96, 115000, 485))
		gpus[name] = []api.GPU{rtxPro6000(i, 1.0, dram)}
		retr[name] = 0.2
	}
	return servers, gpus, retr
}

func TestDiagnoseSeedIsKVBound(t *testing.T) {
	t.Parallel()
	for _, dram := range []*float64{nil, ptr(0.78)} { // without GPM, and with DRAM near its ceiling
		servers, gpus, retr := seedFleet(8, dram)
		d := Diagnose(Input{Servers: servers, GPUs: gpus, RetractionsPerMin: retr, Model: qwen27B, PendingWork: true})
		if d.Verdict != api.VerdictKVBound {
			t.Fatalf("dram %v: verdict %s (%s), want kv_bound; evidence %q", dram, d.Verdict, d.Summary, d.Evidence)
		}
		all := d.Summary + " " + d.Action + " " + strings.Join(d.Evidence, " ")
		for _, want := range []string{"KV cache caps the running batch at 36", "8 of 8", "mem-fraction-static", "FP8",
			"not evidence of saturation"} {
			if !strings.Contains(all, want) {
				t.Errorf("dram %v: %q missing from %s", dram, want, all)
			}
		}
		if strings.Contains(d.Summary, "100") || strings.Contains(strings.ToLower(d.Summary), "busy") {
			t.Errorf("summary leans on utilization: %s", d.Summary)
		}
		s := d.Servers[0]
		// Roofline: 36 × 0.8 × 1.792e12 / (54e9 + 36 × 3067 × 262144) ≈ 622 tok/s.
		if math.Abs(s.RooflineTokPerSec-622) > 10 || math.Abs(s.EfficiencyRatio-0.78) > 0.03 {
			t.Errorf("roofline %.0f tok/s, efficiency %.2f; want ~622, ~0.78", s.RooflineTokPerSec, s.EfficiencyRatio)
		}
		gains := map[string]float64{}
		for _, w := range s.WhatIf {
			gains[strings.SplitN(w.Change, ":", 2)[0]] = w.Gain
			if w.TokensPerSec <= s.TokensPerSec {
				t.Errorf("what-if %q gives %.0f tok/s, not above %.0f", w.Change, w.TokensPerSec, s.TokensPerSec)
			}
		}
		// FP8 KV: twice the batch reading the same KV bytes per step → ×2.
		if g := gains["FP8 KV cache"]; math.Abs(g-2) > 0.01 {
			t.Errorf("FP8 KV gain %.2f, want 2", g)
		}
		if g := gains["FP8 weights"]; math.Abs(g-1.92) > 0.05 {
			t.Errorf("FP8 weights gain %.2f, want ~1.92 (half the weight bytes, the freed 27 GB as KV)", g)
		}
		if g := gains["--mem-fraction-static +0.05"]; g < 1.1 || g > 1.3 {
			t.Errorf("mem-fraction gain %.2f, want ~1.17", g)
		}
	}
}

func TestDiagnoseVerdicts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		servers []api.Server
		gpus    map[string][]api.GPU
		retr    map[string]float64
		model   api.ModelSpec
		pending bool
		want    string
		server  []string // per-server verdicts, in order (nil: same as want for every server)
		contain []string // in summary + action + evidence
	}{
		{
			name:    "retraction storm",
			servers: []api.Server{server("gpu0", 60, 40, 256, 0.99, 115000, 300)},
			gpus:    map[string][]api.GPU{"gpu0": {rtxPro6000(0, 1, nil)}},
			retr:    map[string]float64{"gpu0": 14},
			model:   qwen27B, pending: true, want: api.VerdictKVBound,
			contain: []string{"retraction storm (14.0/min)", "lower concurrency"},
		},
		{
			name: "max_running_requests reached with KV room",
			// 8B on H200: 64 running = max 64, queue 200, KV 35% of 800k tokens.
			servers: []api.Server{server("gpu0", 64, 200, 64, 0.35, 800000, 2900)},
			gpus:    map[string][]api.GPU{"gpu0": {h200(0, ptr(0.45))}},
			model:   llama8B, pending: true, want: api.VerdictConcurrencyCapped,
			contain: []string{"max_running_requests (64) caps the batch", "--max-running-requests", "KV cache would hold ~165"},
		},
		{
			name:    "concurrency capped without a model",
			servers: []api.Server{server("gpu0", 128, 30, 128, 0.4, 500000, 2000)},
			model:   none, pending: true, want: api.VerdictConcurrencyCapped,
			contain: []string{"roofline unknown: set model.weight_bytes"},
		},
		{
			name:    "gend keeps too few in flight",
			servers: []api.Server{server("gpu0", 20, 0, 256, 0.2, 115000, 400)},
			gpus:    map[string][]api.GPU{"gpu0": {rtxPro6000(0, 1, ptr(0.7))}},
			model:   qwen27B, pending: true, want: api.VerdictClientLimited,
			contain: []string{"idle slots", "per_server_max", "not evidence of saturation"},
		},
		{
			name: "no gauges, gend below capacity",
			servers: []api.Server{{ServerSpec: api.ServerSpec{Name: "vllm0"}, State: "healthy", Limit: 16, InFlight: 16,
				Capacity: 256, TokensPerSec: 900, RatePerSec: 0.4}},
			pending: true, want: api.VerdictClientLimited,
			contain: []string{"no gauges from the server"},
		},
		{
			name: "small model, KV full, KV reads dominate",
			// 8B on H100: 400 running, KV 93% of 500k tokens: ~61 GB of KV per step vs 16 GB of weights.
			servers: []api.Server{server("gpu0", 400, 30, 512, 0.93, 500000, 17000)},
			gpus:    map[string][]api.GPU{"gpu0": {h100(0, ptr(0.82))}},
			model:   llama8B, pending: true, want: api.VerdictBandwidthBound,
			contain: []string{"DRAM bandwidth 82% of peak", "doubling the running batch would raise the roofline only", "FP8"},
		},
		{
			name:    "DRAM at the ceiling with KV room and a queue",
			servers: []api.Server{server("gpu0", 200, 10, 512, 0.6, 500000, 12000)},
			gpus:    map[string][]api.GPU{"gpu0": {h100(0, ptr(0.8))}},
			model:   llama8B, pending: true, want: api.VerdictBandwidthBound,
		},
		{
			name: "one server down, the rest healthy",
			servers: []api.Server{
				server("gpu0", 150, 4, 256, 0.6, 500000, 3000),
				server("gpu1", 0, 0, 256, 0, 500000, 0, func(s *api.Server) { s.State, s.LastReason, s.Gauges = "down", "connection refused", nil }),
				server("gpu2", 150, 4, 256, 0.6, 500000, 3000),
			},
			model: none, pending: true, want: api.VerdictServerDown,
			server:  []string{api.VerdictHealthy, api.VerdictServerDown, api.VerdictHealthy},
			contain: []string{"server_down on 1 of 3 servers", "connection refused"},
		},
		{
			name: "erroring",
			servers: []api.Server{server("gpu0", 40, 5, 256, 0.5, 115000, 400, func(s *api.Server) {
				s.ErrorsPerSec, s.RatePerSec, s.LastReason = 0.5, 0.2, "HTTP 400: prompt too long"
			})},
			pending: true, want: api.VerdictErroring,
			contain: []string{"71% of requests", "prompt too long", "errors.jsonl"},
		},
		{
			name: "isolated errors are not erroring",
			servers: []api.Server{server("gpu0", 150, 4, 256, 0.6, 500000, 3000, func(s *api.Server) {
				s.ErrorsPerSec, s.RatePerSec = 0.002, 1.2
			})},
			pending: true, want: api.VerdictHealthy,
		},
		{
			name: "healthy: queue kept, KV and max_running have room, DRAM moderate",
			// 27B on H200: weights dominate each step, so 55% of peak is below the ~75% ceiling.
			servers: []api.Server{server("gpu0", 40, 4, 256, 0.6, 311000, 900)},
			gpus:    map[string][]api.GPU{"gpu0": {h200(0, ptr(0.55))}},
			model:   qwen27B, pending: true, want: api.VerdictHealthy,
		},
		{
			name: "small model, KV reads dominate, DRAM at the paged-attention ceiling",
			// 8B on H200 as gensim runs it: 300 running, KV 88% of 913k tokens (105 GB per step
			// vs 16 GB of weights); attention reads make the step, DRAM 43% of peak.
			servers: []api.Server{server("gpu0", 300, 12, 4096, 0.88, 913080, 5000)},
			gpus:    map[string][]api.GPU{"gpu0": {h200(0, ptr(0.43))}},
			model:   llama8B, pending: true, want: api.VerdictBandwidthBound,
			contain: []string{"~30% is the practical ceiling when KV reads dominate", "raise the roofline only"},
		},
		{
			name:    "small model, KV reads dominate, DRAM low: not bandwidth-bound",
			servers: []api.Server{server("gpu0", 300, 12, 4096, 0.88, 913080, 2000)},
			gpus:    map[string][]api.GPU{"gpu0": {h200(0, ptr(0.2))}},
			model:   llama8B, pending: true, want: api.VerdictKVBound,
		},
		{
			name: "seed set-up as SGLang holds it: KV 89% with a queue is full",
			// SGLang keeps the running requests' reserve free: a full pool reads 85-90%.
			servers: []api.Server{server("gpu0", 40, 12, 2287, 0.89, 146399, 490)},
			gpus:    map[string][]api.GPU{"gpu0": {rtxPro6000(0, 1, ptr(0.6))}},
			model:   qwen27B, pending: true, want: api.VerdictKVBound,
			contain: []string{"KV cache caps the running batch at 40"},
		},
		{
			name: "occasional retractions are not a storm",
			// 3 retractions/min against 60 completions/min: 5% of requests.
			servers: []api.Server{server("gpu0", 40, 12, 2287, 0.89, 146399, 490, func(s *api.Server) { s.RatePerSec = 1 })},
			gpus:    map[string][]api.GPU{"gpu0": {rtxPro6000(0, 1, ptr(0.6))}},
			retr:    map[string]float64{"gpu0": 3},
			model:   qwen27B, pending: true, want: api.VerdictKVBound,
			contain: []string{"the KV cache caps the running batch at 40", "0.05 per completed request"},
		},
		{
			name: "gen_throughput is the server's clock: a sped-up simulation keeps its efficiency",
			// gensim at speed-up 100: gend counts 100× the simulated tok/s; the roofline is simulated.
			servers: []api.Server{server("gpu0", 40, 12, 2287, 0.89, 146399, 49000, func(s *api.Server) { s.Gauges.GenThroughput = 490 })},
			gpus:    map[string][]api.GPU{"gpu0": {rtxPro6000(0, 1, ptr(0.6))}},
			model:   qwen27B, pending: true, want: api.VerdictKVBound,
			contain: []string{"measured 490 tok/s (the server's gen_throughput) vs roofline 650 tok/s (75%)"},
		},
		{
			name:    "idle: no work",
			servers: []api.Server{server("gpu0", 0, 0, 256, 0, 500000, 0)},
			pending: false, want: api.VerdictIdle,
		},
		{
			name:    "job tail: no pending work, still running",
			servers: []api.Server{server("gpu0", 12, 0, 256, 0.3, 500000, 300)},
			pending: false, want: api.VerdictHealthy,
			contain: []string{"no undispatched work left"},
		},
		{
			name: "7 KV-bound servers outweigh 1 down",
			servers: func() []api.Server {
				s, _, _ := seedFleet(8, nil)
				s[7].State = "down"
				return s
			}(),
			gpus:  func() map[string][]api.GPU { _, g, _ := seedFleet(8, nil); return g }(),
			model: qwen27B, pending: true, want: api.VerdictKVBound,
			server: []string{"kv_bound", "kv_bound", "kv_bound", "kv_bound", "kv_bound", "kv_bound", "kv_bound", "server_down"},
		},
		{
			name:    "tensor-parallel server sums GPU bandwidth",
			servers: []api.Server{server("tp2", 36, 18, 256, 0.96, 115000, 970)},
			gpus:    map[string][]api.GPU{"tp2": {rtxPro6000(0, 1, nil), rtxPro6000(1, 1, nil)}},
			model:   qwen27B, pending: true, want: api.VerdictKVBound,
			contain: []string{"485 tok/s per GPU over 2 GPUs", "3,584 GB/s"},
		},
		{name: "no servers", want: api.VerdictIdle, contain: []string{"no servers"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := Input{Servers: tc.servers, GPUs: tc.gpus, RetractionsPerMin: tc.retr, Model: tc.model, PendingWork: tc.pending}
			d := Diagnose(in)
			all := d.Summary + " | " + d.Action + " | " + strings.Join(d.Evidence, " | ")
			if d.Verdict != tc.want {
				t.Fatalf("verdict %s, want %s: %s", d.Verdict, tc.want, all)
			}
			for i, s := range d.Servers {
				want := tc.want
				if tc.server != nil {
					want = tc.server[i]
				}
				if s.Verdict != want {
					t.Errorf("server %s verdict %s, want %s: %s %q", s.Name, s.Verdict, want, s.Summary, s.Evidence)
				}
				if len(s.Evidence) == 0 || s.Summary == "" {
					t.Errorf("server %s without evidence or summary", s.Name)
				}
			}
			for _, w := range tc.contain {
				if !strings.Contains(all, w) {
					t.Errorf("%q missing from: %s", w, all)
				}
			}
			if d.Verdict != api.VerdictHealthy && d.Verdict != api.VerdictIdle && d.Action == "" {
				t.Errorf("verdict %s without an action", d.Verdict)
			}
		})
	}
}

func TestThousands(t *testing.T) {
	t.Parallel()
	for in, want := range map[float64]string{0: "0", 485.4: "485", 1234: "1,234", 1234567.8: "1,234,568", -4200: "-4,200"} {
		if got := thousands(in); got != want {
			t.Errorf("thousands(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestClientAction(t *testing.T) {
	t.Parallel()
	srv := func(inFlight, limit int) api.Server { return api.Server{InFlight: inFlight, Limit: limit} }
	tests := []struct {
		name string
		sc   *api.SchedulerSpec
		s    api.Server
		want string
	}{
		{"job unknown", nil, srv(2, 79), "static per_server, or per_server_max / total_max"},
		{"static job", &api.SchedulerSpec{Mode: api.ModeStatic, PerServer: 2}, srv(2, 79), "static limit (per_server 2)"},
		{"per_server_max reached", &api.SchedulerSpec{Mode: api.ModeAdaptive, PerServerMax: 16}, srv(16, 79), "per_server_max (16) caps"},
		{"total_max set", &api.SchedulerSpec{Mode: api.ModeAdaptive, TotalMax: 10}, srv(5, 79), "total_max (10)"},
		{"below gend's own limit", &api.SchedulerSpec{Mode: api.ModeAdaptive}, srv(5, 79), "paused? input read rate?"},
		{"at gend's own limit", &api.SchedulerSpec{Mode: api.ModeAdaptive}, srv(79, 79), "raise the job's per_server_max or total_max"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := clientAction(tc.sc, tc.s); !strings.Contains(got, tc.want) {
				t.Errorf("clientAction = %q, want it to contain %q", got, tc.want)
			}
		})
	}
}
