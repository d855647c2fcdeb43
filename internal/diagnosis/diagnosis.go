// Package diagnosis turns GPU telemetry, the servers' own gauges and the
// scheduler's state into a verdict an operator can act on (GET /v1/diagnosis,
// genctl doctor). Diagnose is a pure function: no clock, no I/O, no goroutines.
//
// The GPU utilization ratio (NVML utilization.gpu) is never used as evidence
// of saturation: it only says that some kernel ran in each sample period, and
// a decode server reads 100% at batch 4 as at batch 400. What limits decode is
// the running batch (capped by max_running_requests or by the KV cache) and,
// per step, the DRAM bytes read (all weights plus every live sequence's KV).
// docs/diagnosis.md explains each verdict and action.
package diagnosis

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gend-dev/gend/api"
)

// Thresholds. They are deliberately round: the verdict must not flip on noise.
const (
	// Eta is the achievable fraction of peak DRAM bandwidth in the roofline.
	Eta = 0.8
	// KVFull is the KV usage at which the KV cache caps the batch. SGLang admits
	// a request only while the running requests' reserve for their next tokens
	// (new_token_ratio × remaining max_new_tokens, up to 4,096 each) stays free,
	// and finished requests free their KV in bursts, so a full pool reads
	// 80–98 % used from one poll to the next (gensim: 0.79–0.98), never a steady 100 %.
	KVFull = 0.75
	// KVRoom is the KV usage below which the KV cache clearly has room for more requests.
	KVRoom = 0.7
	// KVHold is the usage a full pool sustains: the batch the KV cache would hold is running × KVHold / usage.
	KVHold = 0.9
	// BandwidthSaturated is the DRAM bandwidth ratio (of theoretical peak) treated as the practical ceiling
	// when the weights dominate each step's reads (large GEMM/GEMV reads reach ~80 % of peak).
	BandwidthSaturated = 0.75
	// KVBandwidthSaturated is the practical ceiling when the live KV cache dominates each step's reads
	// (doubling the batch would gain < MinBatchGain): paged-attention kernels reading scattered KV pages
	// reach about half of peak, and the fixed and per-sequence step overheads (launches, sampling,
	// bookkeeping) take 10-25 % of a step at batches of hundreds (gensim, 8B: H100 43-45 %, H200
	// 42-44 %, B200 36-41 % of peak at 100-560 running requests).
	KVBandwidthSaturated = 0.3
	// RetractionsFrequent (per minute) and RetractionShare (retractions per completed request, both
	// counted on gend's clock, so a simulated fleet's speed-up cancels) make a retraction storm: the
	// server admits more than its KV holds and recomputes the evicted requests.
	RetractionsFrequent = 1.0
	RetractionShare     = 0.1
	// ErroringShare is the share of failed attempts above which a server is erroring.
	ErroringShare = 0.05
	// minErrorsPerSec ignores isolated errors.
	minErrorsPerSec = 0.005
	// IdleSlotShare is the share of free running slots (with an empty queue) that makes a server client-limited.
	IdleSlotShare = 0.05
	// MinBatchGain: if doubling the running batch would raise the roofline bound by less than this
	// factor, KV reads dominate each step and the server is bandwidth-bound, not KV- or concurrency-bound.
	MinBatchGain = 1.2
	// memFractionStep is the mem-fraction-static increase the what-if assumes.
	memFractionStep = 0.05
)

// Input is everything Diagnose reads.
type Input struct {
	// Servers with state, limit, in-flight count, capacity, gauges (running,
	// queued, token_usage, retractions_total, max_running_requests,
	// max_total_num_tokens), tokens_per_sec and errors_per_sec.
	Servers []api.Server
	// RetractionsPerMin per server name, from counter deltas (the caller computes).
	RetractionsPerMin map[string]float64
	// GPUs per server name.
	GPUs map[string][]api.GPU
	// Model for the roofline: weight bytes and KV bytes per token (zero: roofline unknown).
	Model api.ModelSpec
	// PendingWork: the active job still has undispatched requests.
	PendingWork bool
	// Scheduler is the active job's scheduler (after resizes), nil if unknown.
	// A server's own Limit is the fleet controller's; a static job limit or a
	// job cap holds gend below it, and the client_limited action names which.
	Scheduler *api.SchedulerSpec
	// MeanContextTokens is the mean live context (prompt + generated so far) if
	// known, else 0. The servers' own gauges (KV tokens used / running) take
	// precedence when present.
	MeanContextTokens float64
	// At is copied to Diagnosis.At.
	At time.Time
}

// verdictOrder is the precedence for ties between equal scores (most urgent first).
func verdictOrder() []string {
	return []string{api.VerdictServerDown, api.VerdictErroring, api.VerdictClientLimited, api.VerdictKVBound,
		api.VerdictConcurrencyCapped, api.VerdictBandwidthBound, api.VerdictHealthy, api.VerdictIdle}
}

// Diagnose returns the fleet's verdict and each server's.
func Diagnose(in Input) api.Diagnosis {
	d := api.Diagnosis{At: in.At, Evidence: []string{}, Servers: make([]api.ServerDiagnosis, 0, len(in.Servers))}
	views := make([]*view, 0, len(in.Servers))
	for _, s := range in.Servers {
		v := newView(s, in)
		v.diagnose(in)
		views = append(views, v)
		d.Servers = append(d.Servers, v.out)
	}
	fleet(&d, views, in)
	return d
}

// view is one server's numbers, as read.
type view struct {
	s       api.Server
	gpus    []api.GPU
	hasG    bool
	running int     // B: the running batch (gauges, else gend's in-flight count)
	queued  int     // the server's own queue
	maxRun  int     // max_running_requests (0: unknown)
	kv      float64 // KV usage 0-1
	mtt     float64 // max_total_num_tokens (KV pool in tokens, 0: unknown)
	retr    float64 // retractions per minute
	tokps   float64 // the server's own decode rate (gen_throughput), else gend's count
	tokFrom string
	dram    *float64 // measured (GPM) DRAM bandwidth ratio, mean over the server's GPUs
	peakBW  float64  // summed over the server's GPUs
	memTot  float64  // summed GPU memory, bytes
	util    float64  // mean NVML utilization ratio (reported, never used as evidence of saturation)
	power   []string // GPUs whose clocks are held down by power or thermal limits
	ctx     float64  // mean live context tokens (0: unknown)
	ctxFrom string
	w, k    float64
	score   float64 // estimated share of this server's throughput lost to its verdict
	out     api.ServerDiagnosis
}

func newView(s api.Server, in Input) *view {
	v := &view{s: s, gpus: in.GPUs[s.Name], retr: in.RetractionsPerMin[s.Name], tokps: s.TokensPerSec,
		tokFrom: "gend's count", w: in.Model.WeightBytes, k: in.Model.KVBytesPerToken, maxRun: s.Capacity, running: s.InFlight}
	if g := s.Gauges; g != nil {
		v.hasG = true
		v.running, v.queued, v.kv, v.mtt = g.Running, g.Queued, g.TokenUsage, float64(g.MaxTotalTokens)
		if g.MaxRunning > 0 {
			v.maxRun = g.MaxRunning
		}
		// The server's own decode rate is on the server's clock, the one the
		// roofline and GPU telemetry use (gensim's simulated time, too).
		if g.GenThroughput > 0 {
			v.tokps, v.tokFrom = g.GenThroughput, "the server's gen_throughput"
		}
	}
	var dramSum float64
	var dramN int
	for _, g := range v.gpus {
		v.peakBW += g.PeakBandwidthBytes
		v.memTot += float64(g.MemoryTotalBytes)
		v.util += g.UtilizationRatio / float64(len(v.gpus))
		if g.DRAMBandwidthRatio != nil {
			dramSum += *g.DRAMBandwidthRatio
			dramN++
		}
		const limiting = 4 | 8 | 32 | 64 | 128 // power cap, HW slowdown, thermal, power brake
		if g.ClockEventReasons&limiting != 0 {
			v.power = append(v.power, fmt.Sprintf("GPU %d (%s)", g.Index, strings.Join(limitingNames(g.ClockEventNames), ", ")))
		}
	}
	if dramN > 0 {
		m := dramSum / float64(dramN)
		v.dram = &m
	}
	switch {
	case v.mtt > 0 && v.kv > 0 && v.running > 0:
		v.ctx, v.ctxFrom = v.kv*v.mtt/float64(v.running), "KV tokens in use / running requests"
	case in.MeanContextTokens > 0:
		v.ctx, v.ctxFrom = in.MeanContextTokens, "mean live context of gend's requests"
	}
	if s.State == "down" || s.State == "probing" {
		v.tokps = 0 // the last gauges and gend's decaying average are stale: it produces nothing
	}
	v.out = api.ServerDiagnosis{Name: s.Name, Evidence: []string{}, TokensPerSec: v.tokps}
	return v
}

func limitingNames(names []string) []string {
	var out []string
	for _, n := range names {
		if n != "gpu_idle" && n != "applications_clocks_setting" && n != "sync_boost" && n != "display_clock_setting" {
			out = append(out, n)
		}
	}
	return out
}

// rooflineKnown reports whether bound() can be computed.
func (v *view) rooflineKnown() bool {
	return v.w > 0 && v.k > 0 && v.peakBW > 0 && v.ctx > 0
}

// bound is the decode roofline in tok/s for batch b, weights w, KV bytes per token k:
// B·η·BW / (W + B·ctx·k).
func (v *view) bound(b, w, k float64) float64 {
	if b <= 0 {
		return 0
	}
	return b * Eta * v.peakBW / (w + b*v.ctx*k)
}

// batchGain is the roofline gain of doubling the running batch at the same dtypes.
func (v *view) batchGain() float64 {
	b := float64(max(v.running, 1))
	return v.bound(2*b, v.w, v.k) / v.bound(b, v.w, v.k)
}

// kvPoolBytes is the KV pool in bytes: from the server's max_total_num_tokens,
// else extrapolated from the KV in use.
func (v *view) kvPoolBytes() float64 {
	if v.mtt > 0 {
		return v.mtt * v.k
	}
	if v.kv > 0 {
		return float64(v.running) * v.ctx * v.k / v.kv
	}
	return 0
}

func (v *view) add(format string, args ...any) {
	v.out.Evidence = append(v.out.Evidence, fmt.Sprintf(format, args...))
}

func (v *view) set(verdict, summary, action string) {
	v.out.Verdict, v.out.Summary, v.out.Action = verdict, summary, action
}

func (v *view) diagnose(in Input) {
	s := v.s
	// Operational states first.
	switch s.State {
	case "down", "probing":
		v.add("state %s%s", s.State, reasonSuffix(s.LastReason))
		v.set(api.VerdictServerDown, fmt.Sprintf("server is %s: gend sends it nothing", s.State),
			"check the server process and its log (OOM, crash, restart); gend probes it and re-admits it by itself when it answers")
		v.score = 1
		return
	}
	if e := s.ErrorsPerSec; e >= minErrorsPerSec {
		share := e / (e + s.RatePerSec)
		if share >= ErroringShare {
			v.add("%.2f errors/s against %.2f completions/s (%.0f%% of attempts fail)%s", e, s.RatePerSec, share*100, reasonSuffix(s.LastReason))
			v.set(api.VerdictErroring, fmt.Sprintf("%.0f%% of requests to this server fail", share*100),
				"read errors.jsonl and the server log: context-length or validation errors need the input or max_tokens fixed; 5xx and timeouts point at the server")
			v.score = math.Max(share, 0.2)
			return
		}
	}
	if s.State == "draining" {
		v.add("state draining: being removed from the fleet, %d requests still in flight", s.InFlight)
		v.set(api.VerdictIdle, "draining before removal", "")
		return
	}

	demand := in.PendingWork || v.queued > 0
	if !demand {
		if v.running == 0 && s.InFlight == 0 {
			v.add("no undispatched work, nothing running")
			v.set(api.VerdictIdle, "no work", "")
			return
		}
		v.gaugeEvidence()
		v.add("no undispatched work left: %d requests still running", max(v.running, s.InFlight))
		v.set(api.VerdictHealthy, "finishing the job's last requests", "")
		v.roofline()
		return
	}

	v.gaugeEvidence()
	v.roofline()
	v.utilNote()
	known := v.rooflineKnown()
	gain := 0.0
	if known && v.running > 0 {
		gain = v.batchGain()
	}
	bwSat := v.bandwidthSaturated(known && gain > 0 && gain < MinBatchGain)
	capped := v.maxRun > 0 && v.running >= v.maxRun

	switch {
	case v.storm():
		v.kvBound(true)
	case v.clientLimited():
		v.clientLimitedVerdict(in)
	case v.kv >= KVFull && !capped:
		if bwSat && known && gain < MinBatchGain {
			v.bandwidthBound(gain)
		} else {
			v.kvBound(false)
		}
	case capped && v.kv < KVRoom:
		// The lever here is max_running_requests up to what the KV cache holds,
		// which may be more than a doubling.
		if bwSat && known && gain < MinBatchGain && v.roomGain() < MinBatchGain {
			v.bandwidthBound(gain)
		} else {
			v.concurrencyCapped()
		}
	case bwSat:
		v.bandwidthBound(gain)
	default:
		v.set(api.VerdictHealthy, "running its batch with a queue and no limit in sight", "")
		if !v.hasG {
			v.add("no server gauges: verdict from gend's own counts and GPU telemetry only")
		}
	}
}

// storm reports a retraction storm: frequent retractions, and many per completed request.
func (v *view) storm() bool {
	if v.retr < RetractionsFrequent {
		return false
	}
	perMin := v.s.RatePerSec * 60
	return perMin <= 0 || v.retr/perMin >= RetractionShare
}

func reasonSuffix(r string) string {
	if r == "" {
		return ""
	}
	return "; last reason: " + r
}

func (v *view) gaugeEvidence() {
	if !v.hasG {
		v.add("no gauges from the server; gend has %d in flight (limit %d, capacity %s)", v.s.InFlight, v.s.Limit, orUnknown(v.maxRun))
		return
	}
	retr := fmt.Sprintf("%.1f/min", v.retr)
	if v.retr > 0 && v.s.RatePerSec > 0 {
		retr += fmt.Sprintf(" (%.2f per completed request)", v.retr/(v.s.RatePerSec*60))
	}
	v.add("running %d of max_running_requests %s, queue %d, KV cache %.0f%% used%s, retractions %s",
		v.running, orUnknown(v.maxRun), v.queued, v.kv*100, poolNote(v.mtt), retr)
	v.add("gend: %d in flight, limit %d", v.s.InFlight, v.s.Limit)
}

func orUnknown(n int) string {
	if n <= 0 {
		return "unknown"
	}
	return fmt.Sprint(n)
}

func poolNote(mtt float64) string {
	if mtt <= 0 {
		return ""
	}
	return fmt.Sprintf(" of %s tokens", thousands(mtt))
}

// roofline fills the measured-vs-bound evidence and fields.
func (v *view) roofline() {
	perGPU := ""
	if n := len(v.gpus); n > 1 {
		perGPU = fmt.Sprintf(" (%s tok/s per GPU over %d GPUs)", thousands(v.tokps/float64(n)), n)
	}
	switch {
	case v.w <= 0 || v.k <= 0:
		v.add("measured %s tok/s%s; roofline unknown: set model.weight_bytes and model.kv_bytes_per_token in the fleet config", thousands(v.tokps), perGPU)
		return
	case v.peakBW <= 0:
		v.add("measured %s tok/s%s; roofline unknown: no GPU peak bandwidth for this server (no GPU telemetry mapped to it)", thousands(v.tokps), perGPU)
		return
	case v.ctx <= 0:
		v.add("measured %s tok/s%s; roofline unknown: live context length unknown (no KV gauges)", thousands(v.tokps), perGPU)
		return
	case v.running <= 0:
		return
	}
	b := float64(v.running)
	bound := v.bound(b, v.w, v.k)
	stepBytes := v.w + b*v.ctx*v.k
	v.out.RooflineTokPerSec = bound
	if bound > 0 {
		v.out.EfficiencyRatio = v.tokps / bound
	}
	v.add("measured %s tok/s (%s)%s vs roofline %s tok/s (%.0f%%): batch %d × mean context %s tokens (%s) → %.1f GB read per step (weights %.1f GB + KV %.1f GB) at %.0f%% of %s GB/s",
		thousands(v.tokps), v.tokFrom, perGPU, thousands(bound), 100*v.out.EfficiencyRatio, v.running, thousands(v.ctx), v.ctxFrom,
		stepBytes/1e9, v.w/1e9, b*v.ctx*v.k/1e9, Eta*100, thousands(v.peakBW/1e9))
}

// bandwidthSaturated uses GPM DRAM_BW_UTIL, or else the DRAM traffic the
// roofline implies at the measured tok/s. kvDominated (the live KV cache
// dominates each step's reads) lowers the practical ceiling: attention
// kernels read scattered KV pages at a lower share of peak than weight GEMMs.
func (v *view) bandwidthSaturated(kvDominated bool) bool {
	ceiling, why := BandwidthSaturated, "weights dominate each step's reads"
	if kvDominated {
		ceiling, why = KVBandwidthSaturated, "KV reads dominate each step"
	}
	if v.dram != nil {
		v.add("DRAM bandwidth %.0f%% of peak (GPM DRAM_BW_UTIL; ~%.0f%% is the practical ceiling when %s)", *v.dram*100, ceiling*100, why)
		return *v.dram >= ceiling
	}
	if !v.rooflineKnown() || v.running <= 0 {
		return false
	}
	b := float64(v.running)
	est := v.tokps / b * (v.w + b*v.ctx*v.k) / v.peakBW
	v.add("DRAM bandwidth ~%.0f%% of peak, estimated from tok/s and bytes per step (no GPM on this GPU; ~%.0f%% is the practical ceiling when %s)", est*100, ceiling*100, why)
	return est >= ceiling
}

func (v *view) utilNote() {
	if len(v.gpus) > 0 && v.util >= 0.9 {
		v.add("GPU utilization %.0f%% only means some kernel ran in every sample period; it is not evidence of saturation and is not used", v.util*100)
	}
	if len(v.power) > 0 {
		v.add("clocks held down: %s", strings.Join(v.power, "; "))
	}
}

func (v *view) clientLimited() bool {
	if !v.hasG {
		// Without gauges: gend keeps fewer in flight than the server can run.
		return v.maxRun > 0 && float64(v.maxRun-v.s.InFlight) >= math.Max(1, IdleSlotShare*float64(v.maxRun))
	}
	if v.queued > 0 || v.kv >= KVFull {
		return false
	}
	if v.maxRun <= 0 {
		return v.s.InFlight <= v.running && v.kv < KVRoom // nothing waiting anywhere, KV has room
	}
	return float64(v.maxRun-v.running) >= math.Max(1, IdleSlotShare*float64(v.maxRun))
}

// kvAllowedBatch is the batch the KV cache would hold at the current context.
func (v *view) kvAllowedBatch() float64 {
	if v.kv > 0 && v.running > 0 {
		return float64(v.running) * KVHold / v.kv
	}
	return 0
}

// clientAction says which of gend's limits keeps the server short of work.
func clientAction(sc *api.SchedulerSpec, s api.Server) string {
	const adaptive = "switch the job to adaptive mode (genctl resize ID --adaptive), which follows what the servers can run"
	switch {
	case sc == nil:
		return "gend is not sending enough: raise the job's concurrency (its static per_server, or per_server_max / total_max: genctl resize), or " +
			adaptive + "; if its limits are already high, check whether the job is paused or reads its input too slowly (gend's log)"
	case sc.Mode == api.ModeStatic:
		return fmt.Sprintf("the job's static limit (per_server %d) keeps the server short of work: raise it (genctl resize ID --static N) or %s", sc.PerServer, adaptive)
	case sc.PerServerMax > 0 && s.InFlight >= sc.PerServerMax:
		return fmt.Sprintf("the job's per_server_max (%d) caps what gend sends: raise it (genctl resize ID --per-server-max N)", sc.PerServerMax)
	case sc.TotalMax > 0:
		return fmt.Sprintf("the job's total_max (%d) may cap what gend sends: raise it (genctl resize ID --total-max N)", sc.TotalMax)
	case s.InFlight < s.Limit:
		return "gend has work but keeps fewer requests in flight than its limit: check the job (paused? input read rate?) and gend's log"
	}
	return "gend is not sending enough: raise the job's per_server_max or total_max (genctl resize)"
}

func (v *view) clientLimitedVerdict(in Input) {
	allowed := float64(v.maxRun)
	if kvb := v.kvAllowedBatch(); kvb > 0 && (allowed <= 0 || kvb < allowed) {
		allowed = kvb
	}
	idle := allowed - float64(v.running)
	if !v.hasG {
		idle = float64(v.maxRun - v.s.InFlight)
	}
	action := clientAction(in.Scheduler, v.s)
	if !v.hasG {
		v.set(api.VerdictClientLimited, fmt.Sprintf("server has ~%.0f idle slots", idle), action)
	} else {
		v.set(api.VerdictClientLimited, fmt.Sprintf("server has ~%.0f idle slots and an empty queue while the job has work", idle), action)
	}
	if allowed > 0 {
		v.score = math.Max(idle/allowed, IdleSlotShare)
	} else {
		v.score = IdleSlotShare
	}
	if v.rooflineKnown() && v.running > 0 && allowed > float64(v.running) {
		g := v.bound(allowed, v.w, v.k) / v.bound(float64(v.running), v.w, v.k)
		v.whatIf(fmt.Sprintf("fill the idle slots: running batch %d → %.0f", v.running, allowed), g)
		v.score = math.Max(1-1/g, IdleSlotShare)
	}
}

// roomGain is the roofline gain of growing the batch to what the KV cache
// would hold (1 when unknown or no larger).
func (v *view) roomGain() float64 {
	room := v.kvAllowedBatch()
	if !v.rooflineKnown() || v.running <= 0 || room <= float64(v.running) {
		return 1
	}
	return v.bound(room, v.w, v.k) / v.bound(float64(v.running), v.w, v.k)
}

func (v *view) concurrencyCapped() {
	room := v.kvAllowedBatch()
	v.set(api.VerdictConcurrencyCapped,
		fmt.Sprintf("max_running_requests (%d) caps the batch while the KV cache is only %.0f%% used", v.maxRun, v.kv*100),
		fmt.Sprintf("restart the server with a higher --max-running-requests (the KV cache would hold ~%.0f at this context length); gend follows the new capacity by itself", room))
	v.score = 0.3
	if room > float64(v.running) {
		v.add("KV cache would hold ~%.0f running requests at %.0f%% usage", room, KVHold*100)
		if v.rooflineKnown() {
			g := v.bound(room, v.w, v.k) / v.bound(float64(v.running), v.w, v.k)
			v.whatIf(fmt.Sprintf("--max-running-requests %.0f: running batch %d → %.0f", room, v.running, room), g)
			v.score = math.Max(1-1/g, 0.05)
		}
	}
}

func (v *view) kvBound(storm bool) {
	summary := fmt.Sprintf("the KV cache caps the running batch at %d requests (KV %.0f%% used)", v.running, v.kv*100)
	action := "the batch is as large as the KV cache allows: raise --mem-fraction-static, use an FP8 KV cache (--kv-cache-dtype fp8_e4m3), FP8 weights, or more GPUs per model (tensor parallelism)"
	if storm {
		summary = fmt.Sprintf("retraction storm (%.1f/min): the server admits more than its KV cache holds and recomputes evicted requests; the KV cache caps the running batch at ~%d", v.retr, v.running)
		action = "lower concurrency (the job's per_server_max near the running batch) so requests stop being retracted, then raise --mem-fraction-static or use an FP8 KV cache to grow the batch"
	}
	v.set(api.VerdictKVBound, summary, action)
	v.score = 0.3
	if !v.rooflineKnown() || v.running <= 0 {
		return
	}
	b := float64(v.running)
	base := v.bound(b, v.w, v.k)
	best := 1.0
	try := func(change string, b2, w2, k2 float64) {
		if maxB := float64(v.maxRun); maxB > 0 && b2 > maxB {
			b2 = maxB
			change += fmt.Sprintf(" (capped by max_running_requests %d)", v.maxRun)
		}
		g := v.bound(b2, w2, k2) / base
		v.whatIf(change, g)
		best = math.Max(best, g)
	}
	try(fmt.Sprintf("FP8 KV cache: KV bytes per token halve, running batch %d → ~%d", v.running, 2*v.running), 2*b, v.w, v.k/2)
	if pool := v.kvPoolBytes(); pool > 0 {
		if v.memTot > 0 {
			delta := memFractionStep * v.memTot
			b2 := b * (pool + delta) / pool
			try(fmt.Sprintf("--mem-fraction-static +%.2f: KV pool %.1f → %.1f GB, running batch %d → ~%.0f", memFractionStep, pool/1e9, (pool+delta)/1e9, v.running, b2), b2, v.w, v.k)
		}
		b2 := b * (pool + v.w/2) / pool
		try(fmt.Sprintf("FP8 weights: weights %.0f → %.0f GB, KV pool %.1f → %.1f GB, running batch %d → ~%.0f", v.w/1e9, v.w/2e9, pool/1e9, (pool+v.w/2)/1e9, v.running, b2), b2, v.w/2, v.k)
	}
	v.score = math.Max(1-1/best, 0.05)
}

func (v *view) bandwidthBound(gain float64) {
	v.set(api.VerdictBandwidthBound, "DRAM bandwidth is at its practical peak: every decode step already streams the weights and the live KV cache",
		"only fewer bytes per token help: FP8 (or smaller) weights and KV cache, or more GPUs; more concurrency mostly adds latency")
	v.score = 0.1
	if gain > 0 {
		v.add("doubling the running batch would raise the roofline only %.0f%%", (gain-1)*100)
	}
	if !v.rooflineKnown() || v.running <= 0 {
		return
	}
	b := float64(v.running)
	base := v.bound(b, v.w, v.k)
	v.whatIf("FP8 weights (same batch)", v.bound(b, v.w/2, v.k)/base)
	v.whatIf("FP8 KV cache (same batch)", v.bound(b, v.w, v.k/2)/base)
}

func (v *view) whatIf(change string, gain float64) {
	tok := v.tokps * gain
	if v.tokps <= 0 {
		tok = v.out.RooflineTokPerSec * gain
	}
	v.out.WhatIf = append(v.out.WhatIf, api.WhatIf{Change: change, TokensPerSec: tok, Gain: gain})
}

// fleet picks the top-level verdict: the one whose servers lose the most
// throughput (scores summed over servers), ties broken by urgency.
func fleet(d *api.Diagnosis, views []*view, in Input) {
	if len(views) == 0 {
		d.Verdict, d.Summary = api.VerdictIdle, "no servers in the fleet"
		d.Action = "add servers (--config or genctl servers add)"
		return
	}
	score := map[string]float64{}
	count := map[string]int{}
	for _, v := range views {
		score[v.out.Verdict] += v.score
		count[v.out.Verdict]++
	}
	top := ""
	order := verdictOrder()
	for _, verdict := range order {
		if count[verdict] == 0 {
			continue
		}
		if top == "" || score[verdict] > score[top] {
			top = verdict
		}
	}
	if score[top] == 0 {
		top = api.VerdictIdle
		if count[api.VerdictHealthy] > 0 {
			top = api.VerdictHealthy
		}
	}
	var first *view
	for _, v := range views {
		if v.out.Verdict == top {
			first = v
			break
		}
	}
	d.Verdict = top
	n := count[top]
	d.Summary = fmt.Sprintf("%s on %d of %d servers: %s", top, n, len(views), first.out.Summary)
	d.Action = first.out.Action

	var tok, roof, tokKnown float64
	known := 0
	for _, v := range views {
		tok += v.tokps
		if v.out.RooflineTokPerSec > 0 {
			roof += v.out.RooflineTokPerSec
			tokKnown += v.tokps
			known++
		}
	}
	line := fmt.Sprintf("fleet: %s tok/s measured", thousands(tok))
	if roof > 0 {
		line += fmt.Sprintf(", %s tok/s vs roofline %s tok/s (%.0f%%) on the %d servers where it is known",
			thousands(tokKnown), thousands(roof), 100*tokKnown/roof, known)
	}
	counts := make([]string, 0, len(count))
	for _, verdict := range order {
		if count[verdict] > 0 {
			counts = append(counts, fmt.Sprintf("%d %s", count[verdict], verdict))
		}
	}
	d.Evidence = append(d.Evidence, line+"; servers: "+strings.Join(counts, ", "))
	if !in.PendingWork {
		d.Evidence = append(d.Evidence, "the active job has no undispatched requests")
	}
	for _, e := range first.out.Evidence {
		d.Evidence = append(d.Evidence, first.s.Name+": "+e)
	}
	if len(first.out.WhatIf) > 0 {
		best := slices.MaxFunc(first.out.WhatIf, func(a, b api.WhatIf) int { return cmp.Compare(a.Gain, b.Gain) })
		d.Evidence = append(d.Evidence, fmt.Sprintf("%s: best what-if: %s → ~%s tok/s (×%.2f)", first.s.Name, best.Change, thousands(best.TokensPerSec), best.Gain))
	}
}

// thousands formats a non-negative number rounded to an integer with commas.
func thousands(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "?"
	}
	n := int64(math.Round(x))
	neg := n < 0
	if neg {
		n = -n
	}
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
