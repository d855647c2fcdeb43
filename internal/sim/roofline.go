package sim

import "math"

// Roofline constants. Decode is memory-bound: every step reads all weights
// once plus each running sequence's KV cache; prefill is compute-bound.
const (
	bwEfficiency       = 0.80  // achievable fraction of peak DRAM bandwidth reading weights
	kvEfficiency       = 0.50  // achievable fraction reading paged KV in attention kernels
	perSeqOverheadS    = 20e-6 // per running sequence per decode step: sampling, bookkeeping
	decodeMFU          = 0.50  // model FLOP utilisation of a decode step
	prefillMFU         = 0.60  // model FLOP utilisation of a prefill chunk
	decodeOverheadS    = 0.005 // scheduler and kernel launches per decode step
	prefillOverheadS   = 0.005 // per prefill batch
	graphBytes         = 1.5e9 // CUDA graphs and activations outside the KV pool
	contextBytes       = 0.6e9 // CUDA context
	defaultMemFrac     = 0.90  // --mem-fraction-static default
	clipMaxNewTokens   = 4096  // SGLang CLIP_MAX_NEW_TOKENS for the admission reserve
	retractDecodeSteps = 20    // SGLANG_RETRACT_DECODE_STEPS
	ratioDecaySteps    = 600   // SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
	minRatioFactor     = 0.14  // SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
	initRatioBase      = 0.7   // SGLANG_INIT_NEW_TOKEN_RATIO
	defaultMaxPrefill  = 16384 // --max-prefill-tokens default
	logIntervalSteps   = 40    // --decode-log-interval: window of gen_throughput and num_retracted_reqs
)

// Roofline is the step-time law of one model on one GPU.
type Roofline struct {
	GPU   GPUSpec
	Model ModelSpec
}

// StepCost is the time and work of one engine step.
type StepCost struct {
	Seconds   float64
	BytesRead float64
	FLOPs     float64
}

// DecodeStep is the cost of one decode step of a batch of b sequences whose
// contexts sum to sumCtx tokens:
// max(W/(BW·η_w) + Σctx·k/(BW·η_kv), 2·P·b/(peak·MFU)) + overhead + b·per-sequence overhead.
func (r Roofline) DecodeStep(b int, sumCtx float64) StepCost {
	kv := sumCtx * r.Model.KVBytesPerToken
	flops := 2 * r.Model.Params * float64(b)
	mem := r.Model.WeightBytes/(r.GPU.BandwidthBytes*bwEfficiency) + kv/(r.GPU.BandwidthBytes*kvEfficiency)
	comp := flops / (r.GPU.PeakFLOPS * decodeMFU)
	return StepCost{
		Seconds:   math.Max(mem, comp) + decodeOverheadS + float64(b)*perSeqOverheadS,
		BytesRead: r.Model.WeightBytes + kv,
		FLOPs:     flops,
	}
}

// Prefill is the cost of one prefill batch of tokens new tokens whose
// already-cached prefixes sum to prefix tokens.
func (r Roofline) Prefill(tokens int, prefix float64) StepCost {
	bytes := r.Model.WeightBytes + (prefix+float64(tokens))*r.Model.KVBytesPerToken
	flops := 2 * r.Model.Params * float64(tokens)
	mem := bytes / (r.GPU.BandwidthBytes * bwEfficiency)
	comp := flops / (r.GPU.PeakFLOPS * prefillMFU)
	return StepCost{Seconds: math.Max(mem, comp) + prefillOverheadS, BytesRead: bytes, FLOPs: flops}
}

// KVPoolTokens is max_total_num_tokens: (memory × mem_fraction − weights) / k.
func (r Roofline) KVPoolTokens(memFraction float64) int64 {
	free := r.GPU.MemoryBytes*memFraction - r.Model.WeightBytes
	if free <= 0 {
		return 0
	}
	return int64(free / r.Model.KVBytesPerToken)
}

// BoundTokensPerSecond is the decode step-time law's throughput for a batch of b
// sequences with mean context ctx: b / step time.
func (r Roofline) BoundTokensPerSecond(b int, ctx float64) float64 {
	if b <= 0 {
		return 0
	}
	return float64(b) / r.DecodeStep(b, float64(b)*ctx).Seconds
}
