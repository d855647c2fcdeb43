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
		// Step time now ÷ in steady state, from the KV tokens read (and
		// the batch): the server's fitted step law when it is
		// identified, else the prior.
		var rho float64
		if law := e.stepLaw(sv); law.ok() {
			rho = law.step(sv.KVUsed, sv.Running) / law.step(math.Min(b*ctx, 1.5*full), b)
		} else {
			step := func(kv float64) float64 { return 1 - kvReadShare + kvReadShare*math.Min(kv/full, 1.5) }
			rho = step(sv.KVUsed) / step(b*ctx)
		}
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

// projWeight is the weight of the KV projection before the fleet has
// settled, given youngShare at the rates' window start: √young, not young.
// Between the first wave and settling the fleet sits in a trough (the
// first wave's survivors are its long requests, the batch is small): the
// measured rate there ran 6–26 % under the rest of the job on σ 1.5 gensim
// jobs, and weighing the projection, which sees the trough, by young alone
// corrected too little. Replayed on 12 recorded σ 1.0/1.5 jobs, the error
// at 5 % went from +5 … +14 % to −1 … +11.5 % for σ 1.5 (σ 1.0 within
// ±1.6 points); on six other shapes (not used to choose it) the sum of
// |errors| at 5 % was unchanged (22.3 → 21.9 points). Full weight
// (young⁰) pushed σ 1.0 at 5 % to −8 … −14 %.
func projWeight(young float64) float64 { return math.Sqrt(math.Max(young, 0)) }

// calibration learns how far the KV projection's steady-state throughput
// sits from the throughput the settled fleet really runs at.
//
// Once the fleet has settled (it holds every age of the steady state:
// youngShare ≈ 0 at the rates' window start), the measured rate is the
// steady state's, but only of the requests run lately: a stretch of short
// outputs raises it (more of them fit in the KV cache) just as it lowers
// the estimated mean output, and both move the ETA the same way (−5 …
// −8 % at 25 % on gensim with one seed; the windowed rate at 10 % of nine
// recorded jobs read +2 … +7 % above the rest of the job). The projection
// follows the length model fitted to everything instead, but is biased:
// the running set is older than renewal theory says (SGLang retracts the
// least-progressed requests), and the fitted tail errs: +3 … +7 % on
// gensim jobs recorded before the streaming fixes, ~+0.5 % after. So the
// projection is used divided by its bias, the time-weighted geometric mean
// of projected ÷ measured over the settled running time (so far), and
// averaged from the moment the fleet settled (a running mean, then an EWMA
// over calLifetimes request lifetimes). Replayed on recorded gensim jobs: the worst error at
// 25 % 4.1 % (was 7.8 %) and at 10 % 5.0 % (was 6.8 %) on nine jobs
// recorded before the streaming fixes; 6.4 % at 25 % on five recorded
// after them (was 7.8 %).
type calibration struct {
	sumLog, secs float64 // ∫ ln(projected ÷ measured) dt, ∫ dt, settled
	at, tput     float64 // last call; smoothed projected tokens/s
}

const (
	// settledShare is the youngShare below which the fleet has settled.
	settledShare = 0.02
	// calLifetimes is the smoothing time constant of the calibrated
	// projection, in request lifetimes (3 … 20 measured alike; 10 a little
	// better at 25 %).
	calLifetimes = 10.0
)

// calibrated records one estimate's projection (tproj tokens/s, ratio =
// projected ÷ measured, v one request's speed) and returns the calibrated
// steady-state throughput once a request lifetime of settled running time
// has been seen.
func (e *Estimator) calibrated(s State, tproj, ratio, v float64) (float64, bool) {
	c := &e.cal
	dt := s.Elapsed - c.at
	settled := c.at > 0 && dt > 0 && ratio > 0 && e.youngShare((s.Elapsed-s.RateWindow)*v) < settledShare
	c.at = s.Elapsed
	if !settled {
		return 0, false
	}
	c.sumLog += dt * math.Log(ratio)
	c.secs += dt
	// The smoothed projection starts with the settled fleet: a running
	// mean, then an EWMA over calLifetimes request lifetimes.
	c.tput += dt / math.Max(math.Min(c.secs, calLifetimes*e.lifetime), dt) * (tproj - c.tput)
	if c.secs < e.lifetime {
		return 0, false
	}
	return c.tput / math.Exp(c.sumLog/c.secs), true
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

// Step-time law. A decode step reads the weights once and every running
// request's KV cache, so its time is about a + b·Σctx (roofline: weights
// and per-step overhead in a, KV bandwidth in b). Each server's gauges
// give, per window, its batch, tokens/s and KV tokens in use, so
// step = batch ÷ tokens/s and Σctx = KV in use; a and b are fitted by
// least squares over the windows seen (O(1) memory per server). The fit
// is used once it is identified: the cache use has spanned a fifth of the
// cache and the relation is clear and positive. Until then (and where it
// is not, e.g. prefill at the start of a job makes the emptiest windows the
// slowest) the prior kvReadShare holds.

// stepFit accumulates one server's (KV in use, batch, step time) points.
type stepFit struct {
	n, sk, sb, ss, skk, sbb, skb, sks, sbs, sss float64
	lo, hi                                      float64 // range of KV in use
}

func (f *stepFit) observe(kv, batch, step float64) {
	if f.n == 0 {
		f.lo, f.hi = kv, kv
	}
	f.n++
	f.sk += kv
	f.sb += batch
	f.ss += step
	f.skk += kv * kv
	f.sbb += batch * batch
	f.skb += kv * batch
	f.sks += kv * step
	f.sbs += batch * step
	f.sss += step * step
	f.lo, f.hi = math.Min(f.lo, kv), math.Max(f.hi, kv)
}

// stepLawFit is a fitted step time a + b·kv + c·batch (b = 0: not
// identified).
type stepLawFit struct{ a, b, c float64 }

func (l stepLawFit) ok() bool { return l.b > 0 }

func (l stepLawFit) step(kv, batch float64) float64 { return l.a + l.b*kv + l.c*batch }

// law returns the fitted law, zero unless identified on a cache of size
// capacity. The batch term (per-sequence work) is kept only when the data
// separate it from the KV term and it comes out positive.
func (f *stepFit) law(capacity float64) stepLawFit {
	if f.n < stepFitMin || f.hi-f.lo < 0.2*capacity {
		return stepLawFit{}
	}
	n := f.n
	mk, mb, ms := f.sk/n, f.sb/n, f.ss/n
	vk := f.skk/n - mk*mk
	vb := f.sbb/n - mb*mb
	vs := f.sss/n - ms*ms
	ckb := f.skb/n - mk*mb
	cks := f.sks/n - mk*ms
	cbs := f.sbs/n - mb*ms
	if vk <= 0 || vs <= 0 {
		return stepLawFit{}
	}
	var b, c float64
	if det := vk*vb - ckb*ckb; vb > 0 && det > 0.05*vk*vb {
		b = (cks*vb - cbs*ckb) / det
		c = (cbs*vk - cks*ckb) / det
	}
	if !(c > 0) {
		b, c = cks/vk, 0
	}
	// r² of the fit.
	if b <= 0 || (b*cks+c*cbs) < stepFitR2*vs {
		return stepLawFit{}
	}
	a := ms - b*mk - c*mb
	if a <= 0 {
		return stepLawFit{}
	}
	return stepLawFit{a: a, b: b, c: c}
}

// kvShare is the share of a step with full KV tokens in use (at the batch
// given) spent reading KV: b·full ÷ step, the prior when not identified.
func (l stepLawFit) kvShare(full, batch float64) float64 {
	if !l.ok() || !(full > 0) {
		return kvReadShare
	}
	return math.Min(math.Max(l.b*full/l.step(full, batch), 0.05), 0.95)
}

const (
	// stepFitMin windows before a server's step law is used.
	stepFitMin = 8
	// stepFitR2 is the least r² of step time on KV in use.
	stepFitR2 = 0.5
	// maxStepFits bounds the servers tracked.
	maxStepFits = 4096
)

// observeSteps adds the servers' windows to their step-law fits.
func (e *Estimator) observeSteps(servers []Server) {
	for _, sv := range servers {
		if sv.Name == "" || sv.TokensPerSec <= 0 || sv.Running < 1 || sv.KVCapacity <= 0 || sv.KVUsed <= 0 {
			continue
		}
		f := e.steps[sv.Name]
		if f == nil {
			if len(e.steps) >= maxStepFits {
				continue
			}
			if e.steps == nil {
				e.steps = map[string]*stepFit{}
			}
			f = &stepFit{}
			e.steps[sv.Name] = f
		}
		f.observe(sv.KVUsed, sv.Running, sv.Running/sv.TokensPerSec)
	}
}

// stepLaw is the server's fitted step law (zero: use the prior).
func (e *Estimator) stepLaw(sv Server) stepLawFit {
	if f := e.steps[sv.Name]; f != nil && sv.Name != "" {
		return f.law(sv.KVCapacity)
	}
	return stepLawFit{}
}

// fleetKVShare is the servers' KV share of a step at their steady-state
// cache use, weighted by cache size (the prior where not identified).
func (e *Estimator) fleetKVShare(servers []Server) float64 {
	use := e.kvUse
	if use == 0 {
		use = kvUsePrior
	}
	var w, sum float64
	for _, sv := range servers {
		if sv.KVCapacity <= 0 {
			continue
		}
		w += sv.KVCapacity
		sum += sv.KVCapacity * e.stepLaw(sv).kvShare(use*sv.KVCapacity, sv.Running)
	}
	if w <= 0 {
		return kvReadShare
	}
	return sum / w
}
