package eta

import "math"

// KV-cache-aware projection of the steady-state throughput.
//
// Long outputs fill a server's KV cache: the batch it runs is then capped by
// cache tokens ÷ tokens per running request (prompt + output so far), not by
// its request slots. At the start of a job every running request is young
// and short, the batch is large and the throughput high; as outputs grow the
// batch shrinks until the running requests' ages reach their steady-state
// distribution (density S(a)/E[L], mean E[L²]/(2E[L])). The throughput
// measured early is therefore far above what the job will sustain (2× on
// gensim with thinking outputs). A decode step costs a fixed part (weights,
// launch) plus a part proportional to the KV tokens read; with the cache
// full in both states the step time is unchanged and the throughput scales
// with the batch.

const (
	// kvUsePrior is the share of the KV cache in use in steady state until
	// it has been observed (SGLang keeps headroom for admissions).
	kvUsePrior = 0.9
	// kvMinUse is the cache usage above which the observed usage is taken
	// as the steady-state one (the cache is then the binding limit).
	kvMinUse = 0.75
	// kvReadShare is the share of a decode step spent reading a full KV
	// cache (prior; it only matters while the cache is still filling).
	kvReadShare = 0.5
	// kvUseAlpha is the weight of one observation in the usage EWMA.
	kvUseAlpha = 0.2
)

// kvProjection is the projected steady state relative to now.
type kvProjection struct {
	tput  float64 // steady-state tokens/s ÷ tokens/s now
	batch float64 // steady-state running requests ÷ running now
	ok    bool
}

// observeKV learns the cache usage a saturated fleet settles at.
func (e *Estimator) observeKV(s State) {
	if s.NotStarted == 0 {
		return
	}
	var used, capacity float64
	for _, sv := range s.Servers {
		if sv.KVCapacity <= 0 {
			return
		}
		// Saturated: requests wait on the server, or its slots are full.
		if sv.Queued < 1 && (sv.MaxRunning <= 0 || sv.Running < 0.95*sv.MaxRunning) {
			return
		}
		used += sv.KVUsed
		capacity += sv.KVCapacity
	}
	if capacity <= 0 {
		return
	}
	u := used / capacity
	if u < kvMinUse || u > 1 {
		return
	}
	if e.kvUse == 0 {
		e.kvUse = u
		return
	}
	e.kvUse += kvUseAlpha * (u - e.kvUse)
}

// projectKV projects the fleet's steady-state batch and throughput when the
// running requests' mean context (prompt + output so far) is ctx.
func (e *Estimator) projectKV(servers []Server, ctx float64) kvProjection {
	if len(servers) == 0 || !(ctx > 0) {
		return kvProjection{}
	}
	use := e.kvUse
	if use == 0 {
		use = kvUsePrior
	}
	var tNow, tSS, bNow, bSS float64
	for _, sv := range servers {
		if sv.TokensPerSec <= 0 || sv.Running < 1 || sv.KVCapacity <= 0 {
			return kvProjection{}
		}
		full := use * sv.KVCapacity
		b := full / ctx
		if sv.MaxRunning > 0 {
			b = math.Min(b, sv.MaxRunning)
		}
		b = math.Max(b, 1)
		// Step time now ÷ in steady state, from the KV tokens read.
		step := func(kv float64) float64 { return 1 - kvReadShare + kvReadShare*math.Min(kv/full, 1.5) }
		rho := step(sv.KVUsed) / step(b*ctx)
		v := sv.TokensPerSec / sv.Running
		tNow += sv.TokensPerSec
		tSS += b * v * rho
		bNow += sv.Running
		bSS += b
	}
	if tNow <= 0 || bNow <= 0 {
		return kvProjection{}
	}
	p := kvProjection{tput: tSS / tNow, batch: bSS / bNow, ok: true}
	// Bounded: a projection beyond 4× either way is a sign of bad gauges.
	if !(p.tput >= 0.25 && p.tput <= 4 && p.batch >= 0.25 && p.batch <= 4) {
		return kvProjection{}
	}
	return p
}

// faded weakens the projection to weight w in [0, 1] (in log terms: the
// ratios are raised to the power w).
func (p kvProjection) faded(w float64) kvProjection {
	if !p.ok || w >= 1 {
		return p
	}
	w = math.Max(w, 0)
	p.tput = math.Pow(p.tput, w)
	p.batch = math.Pow(p.batch, w)
	return p
}

// youngShare is how much of the steady state's KV context a fleet that has
// run for x tokens of per-request progress lacks: in steady state a running
// request's age has density S(a)/E[L], so the context by age is a·S(a) and
// a fleet x tokens old has none of the part above x,
// ∫_x^max a S(a) da / ∫_0^max a S(a) da = (x·area(x) + area2(x)) / area2(0).
//
// The KV projection corrects rates measured on a young fleet; once the
// rates' window begins on a fleet old enough to hold the whole
// distribution of ages, the measured rates are the steady state's and the
// projection, a model, would only add its own bias (+5 % on gensim). It is
// weighed by this share (uses the current curve: call after work).
func (e *Estimator) youngShare(x float64) float64 {
	tot := e.area2At(0)
	if !(tot > 0) || !(x > 0) {
		return 1
	}
	return math.Min(math.Max((x*e.areaAt(x)+e.area2At(x))/tot, 0), 1)
}
