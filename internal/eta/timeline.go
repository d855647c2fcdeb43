package eta

import "math"

// timeline splits the remaining time into the main phase (the queue is not
// empty, every slot busy, the fleet at full throughput) and the drain (the
// queue is empty, batches shrink, the longest remaining requests decide the
// finish).
type timeline struct {
	main, drain float64
}

// speedLaw is one request's decode time per token against the batch it
// runs in: 1/v(b) = a·(1 + κ·b). κ = 0 means a request is no faster alone.
type speedLaw struct{ a, kappa float64 }

// anchored returns the law with shape κ through the measured point (b, v).
func anchored(kappa, b, v float64) speedLaw {
	return speedLaw{a: 1 / (v * (1 + kappa*b)), kappa: kappa}
}

func (l speedLaw) secPerToken(b float64) float64 { return l.a * (1 + l.kappa*b) }

// kappaFor converts "a request alone decodes rho times faster than in a
// batch of full requests" into κ.
func kappaFor(rho, full float64) float64 {
	if rho <= 1 || full <= 1 {
		return 0
	}
	full = math.Max(full, rho+1)
	return (rho - 1) / (full - rho)
}

// timeline computes the remaining time for the work w.
//
// Slots hold their current request until it ends; in token time (tokens
// generated per slot) the queue empties after τ₁ = (W − W_d)/slots, where
// W_d is the work left in flight at that moment. A slot still on its current
// request then has that request's residual; a slot that took a new one has
// the steady-state (equilibrium) residual. The drain lasts
// ∫ P(some request still running at residual r) · 1/v(b(r)) dr, with b(r)
// the expected number still running.
//
// With kv.ok the drain's speed follows the KV tokens the remaining requests
// read (kvDrain) instead of the batch law.
func (e *Estimator) timeline(w workEstimate, notStarted int64, full, running, v, mainSlow float64, kappas [3]float64, kv kvDrain) [3]timeline {
	queue := notStarted > 0
	nIF := 0.0
	for j := range e.scratchC {
		nIF += e.scratchC[j]
	}
	eqSlots := 0.0
	if queue {
		eqSlots = math.Max(full-nIF, 0)
	}
	slots := math.Max(full, 1)

	// Fixed point for τ₁ (bounded iterations; it contracts quickly).
	tau := 0.0
	wd := 0.0
	for it := 0; it < 6; it++ {
		wd = eqSlots * w.eqMean
		for j := range e.scratchC {
			c := e.scratchC[j]
			if c == 0 {
				continue
			}
			l := e.scratchCX[j] / c
			sl := math.Max(e.survAt(l), 1e-12)
			alive := math.Min(e.survAt(l+tau)/sl, 1)
			wd += c * math.Min(e.areaAt(l+tau)/sl, e.b.max)
			if queue {
				wd += c * (1 - alive) * w.eqMean
			}
		}
		if !queue {
			break
		}
		next := math.Max(0, (w.total-wd)/slots)
		if math.Abs(next-tau) < 1 {
			tau = next
			break
		}
		tau = next
	}

	// The drain profile over residual levels r (every drainStride-th bin
	// edge): P(some request still running) and the expected batch then.
	// Groups: in-flight requests by bin (their alive share at τ₁ and
	// where they stand), plus the slots that will hold new requests.
	groups := e.groups[:0]
	for j := range e.scratchC {
		c := e.scratchC[j]
		if c == 0 {
			continue
		}
		l := e.scratchCX[j] / c
		sl := math.Max(e.survAt(l), 1e-12)
		alive := math.Min(e.survAt(l+tau)/sl, 1)
		if queue && alive < 1e-9 {
			// Replaced by new requests long before the queue empties:
			// the slot is in steady state, like the idle ones.
			eqSlots += c
			continue
		}
		groups = append(groups, drainGroup{c: c, l: l + tau, sl: sl, alive: alive})
	}
	e.groups = groups
	var pAny, bRun, ctxRun [numBins/drainStride + 1]float64
	var rs [numBins/drainStride + 1]float64
	n := 0
	for k := 0; k <= numBins; k += drainStride {
		r := 0.0
		if k > 0 {
			r = e.b.edges[k]
		}
		ge := 0.0
		if queue && w.mean > 0 {
			ge = e.areaAt(r) / w.mean
		}
		var logNone, bsum, csum float64
		// Σ context of the requests still running. A request taken from
		// the queue in steady state with residual above r is
		// E[(L−r)₊²/2] / E[(L−r)₊] old at τ₁ (w.eqMean at r = 0).
		newCtx := kv.prompt + w.eqMean + r
		if a := e.areaAt(r); a > 0 {
			newCtx = kv.prompt + e.area2At(r)/a + r
		}
		add := func(count, p, ctx float64) {
			p = math.Min(math.Max(p, 0), 1-1e-12)
			bsum += count * p
			csum += count * p * ctx
			logNone += count * math.Log1p(-p)
		}
		if eqSlots > 0 {
			add(eqSlots, ge, newCtx)
		}
		for _, g := range groups {
			p := e.survAt(g.l+r) / g.sl
			ctx := kv.prompt + g.l + r
			if queue {
				pn := (1 - g.alive) * ge
				if p+pn > 0 {
					ctx = (p*ctx + pn*newCtx) / (p + pn)
				}
				p += pn
			}
			if p > 0 {
				add(g.c, p, ctx)
			}
		}
		rs[n] = r
		ctxRun[n] = csum
		pAny[n] = -math.Expm1(logNone)
		if pAny[n] > 1e-15 {
			bRun[n] = math.Max(1, bsum/pAny[n])
		}
		n++
		if pAny[n-1] <= 1e-15 {
			break
		}
	}

	var out [3]timeline
	for i, kappa := range kappas {
		law := anchored(kappa, running, v)
		if queue {
			out[i].main = math.Max(0, w.total-wd) * mainSlow * law.secPerToken(slots) / slots
		}
		// KV law: a step reads the weights and the running requests' KV
		// cache; at the start of the drain a share rho of it is KV.
		rho := 0.0
		if kv.ok && n > 0 && ctxRun[0] > 0 {
			rho = kv.rho[i] * math.Min(ctxRun[0]/kv.cache, 1)
		}
		prev := 0.0
		for k := 0; k < n; k++ {
			f := 0.0
			if bRun[k] > 0 {
				if rho > 0 {
					f = pAny[k] / v * (1 - rho + rho*ctxRun[k]/ctxRun[0])
				} else {
					f = pAny[k] * law.secPerToken(bRun[k])
				}
			}
			if k > 0 {
				out[i].drain += (f + prev) / 2 * (rs[k] - rs[k-1])
			}
			prev = f
		}
	}
	return out
}

// kvDrain describes the servers' KV caches for the drain: the job's mean
// prompt, the fleet's cache size in tokens and, per scenario (point,
// fastest, slowest drain), the share of a full cache's decode step spent
// reading KV.
type kvDrain struct {
	ok            bool
	prompt, cache float64
	rho           [3]float64
}

// kvDrainFor returns the KV description of the servers, ok false unless
// every server reports its cache; share is the KV share of a full cache's
// step (the fitted step law's, or the prior).
func kvDrainFor(servers []Server, prompt, share float64) kvDrain {
	var cache float64
	for _, sv := range servers {
		if sv.KVCapacity <= 0 {
			return kvDrain{}
		}
		cache += sv.KVCapacity
	}
	if cache <= 0 {
		return kvDrain{}
	}
	return kvDrain{ok: true, prompt: prompt, cache: cache,
		rho: [3]float64{share, math.Min(share*1.5, 0.95), share * 0.5}}
}

// drainGroup is in-flight requests of one bin: count, position after τ₁,
// survival at their lower bound, and the share still on them at τ₁.
type drainGroup struct{ c, l, sl, alive float64 }

// drainStride is the step, in bins, of the drain integral's grid.
const drainStride = 4

// speedModel learns the decode-speed law from the (batch, speed) points the
// daemon reports, bucketed by log2 of the batch so memory stays bounded.
type speedModel struct {
	n    [24]float64 // observations per bucket (decayed)
	b    [24]float64 // Σ batch
	spt  [24]float64 // Σ seconds per token
	full float64     // the largest batch seen while the queue was not empty
}

func (m *speedModel) observe(running, v, full float64, draining bool) {
	if !draining {
		m.full = math.Max(m.full, full)
	}
	k := int(math.Log2(math.Max(running, 1)))
	if k >= len(m.n) {
		k = len(m.n) - 1
	}
	// Keep the most recent evidence per bucket (decay older points).
	const keep = 0.9
	m.n[k] = m.n[k]*keep + 1
	m.b[k] = m.b[k]*keep + running
	m.spt[k] = m.spt[k]*keep + 1/v
}

// kappas returns the law's shape: a point value and the values that make
// the drain slowest and fastest. With no spread of batch sizes observed it
// falls back on the prior solo speed-up, with an interval from "no speed-up"
// to twice the prior.
func (m *speedModel) kappas(priorRho, full float64) (point, slow, fast float64) {
	// Weighted least squares of seconds-per-token on batch over buckets.
	var sw, sb, ss, sbb, sbs float64
	lo, hi := math.Inf(1), 0.0
	buckets := 0
	for k := range m.n {
		if m.n[k] < 1 {
			continue
		}
		b := m.b[k] / m.n[k]
		s := m.spt[k] / m.n[k]
		w := 1.0
		sw += w
		sb += w * b
		ss += w * s
		sbb += w * b * b
		sbs += w * b * s
		lo, hi = math.Min(lo, b), math.Max(hi, b)
		buckets++
	}
	if buckets >= 2 && hi >= 4*lo {
		den := sw*sbb - sb*sb
		if den > 0 {
			c := (sw*sbs - sb*ss) / den
			a := (ss - c*sb) / sw
			if a > 0 {
				k := math.Max(c/a, 0)
				return k, k / 1.5, k * 1.5
			}
		}
	}
	return kappaFor(priorRho, full), 0, kappaFor(2*priorRho, full)
}

// ctxModel regresses one request's seconds per token, measured while the
// fleet is full, on the mean context (tokens generated so far) of the
// requests in flight: spt = α + β·ctx. O(1) memory.
type ctxModel struct {
	n, sx, sy, sxx, sxy, syy float64
}

func (m *ctxModel) observe(ctx, spt float64) {
	m.n++
	m.sx += ctx
	m.sy += spt
	m.sxx += ctx * ctx
	m.sxy += ctx * spt
	m.syy += spt * spt
}

// factor is the predicted ratio of seconds per token at the steady-state
// context eq to that at the context now, 1 when the data do not show a
// clear dependence. Bounded to [2/3, 3/2].
func (m *ctxModel) factor(now, eq float64) float64 {
	if m.n < 5 || eq <= 0 {
		return 1
	}
	mx, my := m.sx/m.n, m.sy/m.n
	vx := m.sxx/m.n - mx*mx
	vy := m.syy/m.n - my*my
	cxy := m.sxy/m.n - mx*my
	// Need a spread of contexts (the job's first minutes provide it) and a
	// strong, positive linear relation.
	if vx <= 0 || vy <= 0 || math.Sqrt(vx) < 0.1*eq || cxy <= 0 || cxy*cxy < 0.5*vx*vy {
		return 1
	}
	beta := cxy / vx
	alpha := my - beta*mx
	at := func(x float64) float64 { return alpha + beta*x }
	if at(now) <= 0 || at(eq) <= 0 {
		return 1
	}
	return math.Min(math.Max(at(eq)/at(now), 2.0/3), 1.5)
}
