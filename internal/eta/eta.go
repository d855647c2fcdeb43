package eta

import (
	"encoding/json"
	"io"
	"math"
)

// Options configure an Estimator.
type Options struct {
	// MaxTokens is the job's cap on output tokens (0 = unknown); no output is
	// longer, and requests that reach it finish with finish_reason "length".
	MaxTokens int
	// SoloSpeedup is the prior ratio of one request's decode speed when it
	// runs alone to its speed in a full batch, used for the end of the job
	// until the speeds measured while the fleet drains replace it. 0 means 1.5.
	SoloSpeedup float64
	// Record, when set, receives every call as a JSON line, to be replayed
	// offline (Replay; etabench -record). Benchmarks only.
	Record io.Writer `json:"-"`
}

// State is what the daemon knows right now.
type State struct {
	Elapsed    float64 // seconds of running time so far (paused time excluded)
	NotStarted int64   // requests not yet dispatched (including queued retries)
	// InFlight holds, per in-flight request, a lower bound on its output
	// tokens so far (tokens streamed, or time decoding × per-request rate).
	InFlight     []float64
	TokensPerSec float64 // fleet output throughput now (smoothed counters)
	Concurrency  float64 // fleet running-batch capacity (requests the servers run at once)
	// PerRequestTokPerSec is one request's decode speed at the current batch
	// (TokensPerSec / running), 0 if unknown.
	PerRequestTokPerSec float64
	// Servers, when known, are the servers' own gauges. With their KV
	// caches the estimator projects the throughput the fleet settles at
	// once the running requests' contexts reach their steady-state size
	// (long outputs fill the KV cache, which then caps the batch).
	Servers []Server
	// PromptTokens is the job's mean prompt length in tokens (0 = unknown).
	PromptTokens float64
	// RateWindow is how many seconds of running time TokensPerSec and the
	// servers' rates are averaged over (0 = they are the latest values).
	RateWindow float64
}

// Server is one server's gauges.
type Server struct {
	// Name identifies the server across calls (its step-time law is
	// learnt per server); "" = not identified.
	Name         string
	TokensPerSec float64 // the server's output tokens/s (all its requests)
	Running      float64 // requests decoding now
	Queued       float64 // requests waiting in the server's own queue
	MaxRunning   float64 // the server's cap on running requests (0 = unknown)
	KVCapacity   float64 // KV cache size in tokens (0 = unknown)
	KVUsed       float64 // KV cache tokens in use now
}

// Result is one estimate. Seconds are from now.
type Result struct {
	Seconds, LowSeconds, HighSeconds float64 // point and a ~90 % interval
	RemainingTokens                  float64
	MeanOutputTokens                 float64 // estimated mean of the output-length distribution
	Naive                            float64 // remaining requests / completion rate so far
	// DrainSeconds is the part of Seconds spent after the queue empties,
	// when fewer requests remain than the fleet runs at once.
	DrainSeconds float64
	// MainTokensPerSec is the fleet throughput the main phase (until the
	// queue empties) is projected at; 0 once the queue is empty.
	MainTokensPerSec float64
	OK               bool // false until there is enough signal (then Seconds etc. are 0)
}

const (
	// minCompleted finished requests before an estimate is offered.
	minCompleted = 20
	// minAtRisk is the number of requests still at risk below which the
	// nonparametric body hands over to the fitted tail.
	minAtRisk = 40
	// z90 is the two-sided 90 % normal quantile.
	z90 = 1.645
	// modelShare is the relative sd given to the part of the mean that
	// lies beyond the data (the fitted tail), for the chance that the tail
	// is not lognormal.
	modelShare = 0.25
	// truncAt is the quantile above which the tail is fitted; minTailEvents
	// finished requests above it are needed, else everything is fitted.
	truncAt       = 0.3
	minTailEvents = 30
	// settleSeconds after the fleet fills, throughput samples are trusted.
	settleSeconds = 30.0
	// heavySigma is the σ of the heavy-tail scenario that bounds the
	// interval from above (lognormal output lengths of reasoning models
	// have σ ≈ 0.5 … 1.5).
	heavySigma = 1.5
	// speedTau is the longest time constant (s) of the throughput-
	// variability EWMA; speedLifetimes request lifetimes when shorter: a
	// level change older than that is in the windowed rate already, and a
	// longer memory (at a simulator's speed-up 120 s is the whole job) keeps
	// the young fleet's transient, which the KV projection handles, in the
	// interval to the end.
	speedTau       = 120.0
	speedLifetimes = 4.0
	// minSpeedSD is the least relative sd given to the main phase's
	// throughput: the level the rest of the job runs at moves by a few
	// per cent over the job (gensim: −2.5 % from its first to its second
	// quarter) in ways no gauge foretells.
	minSpeedSD = 0.05
)

// Estimator estimates a job's remaining time. Create it with New; it is not
// safe for concurrent use (see the package doc).
type Estimator struct {
	opts Options
	b    bins
	hist [numBins]lengthBin

	completed int64
	tokens    float64 // Σ output tokens of completed requests

	// Throughput variability: EWMA of ln(TokensPerSec) and of its squared
	// deviation.
	lastElapsed     float64
	lnTMean, lnTVar float64
	haveT           bool
	fit, fitAll     lognormal // the last fits (upper part, everything): warm starts
	speed           speedModel
	ctx             ctxModel
	saturatedSince  float64          // running time since when the fleet is full, -1 when not
	scratchC        [numBins]float64 // in-flight count per bin
	scratchCX       [numBins]float64 // Σ lower bound per bin
	scratchCY       [numBins]float64 // Σ ln lower bound per bin
	samples         []fitSample
	surv            [numBins + 1]float64
	area            [numBins + 1]float64 // area[j] = ∫_{edge j}^{max} S
	area2           [numBins + 1]float64 // area2[j] = ∫_{edge j}^{max} area
	spliceBin       int
	kvUse           float64 // KV cache usage of the saturated fleet (EWMA), 0 until seen
	// The main phase's (projected) fleet throughput, smoothed over about
	// half a request's lifetime, and the EWMA of its squared log deviation; 0 when not known. mainAt is the running
	// time of the last sample, mainCap the fleet capacity it was taken at.
	mainT, mainAt, mainCap, mainVar float64
	mainN                           int // servers then
	groups                          []drainGroup
	// Per server, the fitted decode step-time law (kv.go).
	steps    map[string]*stepFit
	lifetime float64     // mean request lifetime (s) at the last estimate
	rec      *recorder   // nil unless Options.Record
	cal      calibration // the KV projection's bias once settled (kv.go)
}

// New returns an Estimator for one job.
func New(opts Options) *Estimator {
	max := float64(opts.MaxTokens)
	if max <= 1 {
		max = uncappedMax
	}
	if opts.SoloSpeedup < 1 {
		opts.SoloSpeedup = 1.5
	}
	e := &Estimator{opts: opts, b: newBins(max), samples: make([]fitSample, 0, 3*numBins), saturatedSince: -1}
	if opts.Record != nil {
		e.rec = &recorder{enc: json.NewEncoder(opts.Record)}
		e.rec.write(event{K: "o", Opts: &opts})
	}
	return e
}

// Completed records one finished request: its output tokens and whether it
// stopped at the length cap.
func (e *Estimator) Completed(outputTokens int, finishedByLength bool) {
	e.rec.write(event{K: "c", Tokens: outputTokens, Length: finishedByLength})
	x := float64(outputTokens)
	if x < 0 {
		x = 0
	}
	if x > e.b.max {
		x = e.b.max
	}
	j := e.b.index(x)
	y := logLen(x)
	hb := &e.hist[j]
	if finishedByLength || (e.opts.MaxTokens > 0 && outputTokens >= e.opts.MaxTokens) {
		hb.lenN++
		hb.lenSY += y
		hb.lenSX += x
	} else {
		hb.n++
		hb.sy += y
		hb.syy += y * y
		hb.sx += x
	}
	e.completed++
	e.tokens += x
}

// Estimate returns the remaining time given the job's state now. It costs
// O(len(s.InFlight)) plus a bounded amount of work on the length summary.
func (e *Estimator) Estimate(s State) Result {
	e.rec.write(event{K: "s", State: &s})
	var res Result
	nIF := float64(len(s.InFlight))
	remainingReq := float64(s.NotStarted) + nIF
	if e.completed > 0 && s.Elapsed > 0 {
		res.Naive = remainingReq / (float64(e.completed) / s.Elapsed)
	}
	if remainingReq == 0 {
		res.OK = e.completed > 0
		res.MeanOutputTokens = e.meanCompleted()
		return res
	}
	// Speed now: the current batch and one request's decode speed in it.
	running := nIF
	v := s.PerRequestTokPerSec
	if v > 0 && s.TokensPerSec > 0 {
		running = s.TokensPerSec / v
	} else if running > 0 {
		v = s.TokensPerSec / running
	}
	// The fleet's running capacity. In-flight requests may exceed it
	// (the daemon keeps a small queue on each server).
	full := s.Concurrency
	if full <= 0 {
		full = running
	}
	ctxNow := meanOf(s.InFlight)
	e.observeKV(s)
	e.observeSteps(s.Servers)
	if running >= 1 && v > 0 {
		saturated := s.NotStarted > 0 && running >= 0.9*full
		if !saturated {
			e.saturatedSince = -1
		} else if e.saturatedSince < 0 {
			e.saturatedSince = s.Elapsed
		}
		// Skip the first settleSeconds of a full fleet: the daemon's
		// smoothed throughput still remembers the ramp.
		settled := saturated && s.Elapsed-e.saturatedSince >= settleSeconds
		if settled {
			e.ctx.observe(ctxNow, 1/v)
		}
		// How far the measured rate moves from one call to the next is
		// the uncertainty of the level the main phase will run at; from
		// the start, so the first estimates' intervals say so too.
		if s.NotStarted > 0 {
			e.observeThroughput(s)
		}
		// The speed law is learnt from a full fleet and from the drain,
		// never from the ramp at the start.
		if settled || s.NotStarted == 0 {
			e.speed.observe(running, v, full, s.NotStarted == 0)
		}
	}
	if e.completed < minCompleted || s.TokensPerSec <= 0 || s.Elapsed <= 0 || running < 1 || v <= 0 {
		return res
	}
	e.binInFlight(s.InFlight)
	// Two extrapolations: a lognormal fitted to the upper part (the point)
	// and one fitted to everything; how far apart they are is model risk.
	fit, ok := e.fitTail(e.fit, true, 0)
	if !ok {
		return res
	}
	fitAll, ok := e.fitTail(e.fitAll, false, 0)
	if !ok {
		fitAll = fit
	}
	e.fit, e.fitAll = fit, fitAll
	altW := e.work(fitAll, s.NotStarted).total
	w := e.work(e.fit, s.NotStarted)
	res.MeanOutputTokens = w.mean
	res.RemainingTokens = w.total

	// Seconds per token grow with the context the batch reads (KV): a
	// young job decodes faster than the same job in steady state, when the
	// mean age of a running request is w.eqMean.
	//
	// With the servers' KV caches known, the batch and throughput the
	// fleet settles at are projected from the steady-state context instead
	// (kv.go).
	ctxFactor := 1.0
	kvFactor := 1.0
	fullT, runT, vT := math.Max(e.speed.full, full), running, v
	var proj kvProjection // the steady state projected from now, unfaded
	if s.NotStarted > 0 {
		proj = e.projectKV(s.Servers, s.PromptTokens+w.eqMean)
		if p := proj.faded(projWeight(e.youngShare((s.Elapsed - s.RateWindow) * v))); p.ok {
			runT = running * p.batch
			fullT = runT
			vT = v * p.tput / p.batch
			kvFactor = p.tput
		} else {
			ctxFactor = e.ctx.factor(ctxNow, w.eqMean)
		}
	}
	if v > 0 && w.mean > 0 {
		e.lifetime = w.mean / v
	}
	if s.NotStarted > 0 && w.mean > 0 {
		// Smooth the measured rate (it swings with admission waves), not
		// the projection: the projection's steady-state context moves as
		// the length model learns (the tail early on), and an average
		// would carry a first estimate's poorer model for a lifetime
		// (−18 % instead of −5 % at 2 % of a gensim job).
		vT *= e.smoothMain(s, running*v, w.mean/v)
		// Once the fleet has settled, the projection calibrated against
		// the rates measured since (kv.go, calibrated) replaces them.
		if proj.ok && runT > 0 {
			if tp, ok := e.calibrated(s, running*v*proj.tput, proj.tput, v); ok {
				vT = tp / runT
			}
		}
	} else {
		e.mainT = 0
	}
	kappa, kSlow, kFast := e.speed.kappas(e.opts.SoloSpeedup, fullT)
	kvd := kvDrainFor(s.Servers, s.PromptTokens, e.fleetKVShare(s.Servers))
	ts := e.timeline(w, s.NotStarted, fullT, runT, vT, ctxFactor, [3]float64{kappa, kFast, kSlow}, kvd)
	t, tFast, tSlow := ts[0], ts[1], ts[2]

	// Uncertainty of the remaining work: parameter uncertainty of the tail
	// (delta method), the nonparametric body (Greenwood), the model risk
	// of the extrapolated tail, and the randomness of the lengths to come.
	varW := e.paramVarW(s.NotStarted, w.total)
	q := float64(s.NotStarted)
	varW += q * q * e.bodyVarMean()
	ext := modelShare * e.area[e.spliceBin] / w.mean
	varW += ext * ext * w.total * w.total
	varW += (q + nIF) * w.varLen
	varW += (altW - w.total) * (altW - w.total) / 4
	sdW := 0.0
	if w.total > 0 {
		sdW = math.Sqrt(varW) / w.total
	}
	// Throughput variability: over minutes (lnTVar) and within a request
	// lifetime (how far the level now may sit from the main phase's).
	sdT := math.Max(math.Sqrt(math.Max(e.lnTVar, e.mainVar)), minSpeedSD)
	// A model's correction is uncertain by half its size: the context
	// drift factor and the KV projection alike. (A quarter for the KV
	// projection let the first estimate of a cap-dominated gensim job —
	// max_tokens 2048, 38 % of requests hit it — miss: the projection
	// assumed the prior cache share 0.9 where the fleet kept 0.82, +18 %
	// on the throughput, and the interval's top fell 2.5 % short.)
	sdC := math.Abs(math.Log(ctxFactor))/2 + math.Abs(math.Log(kvFactor))/2
	sd := math.Sqrt(sdW*sdW + sdT*sdT + sdC*sdC + 0.03*0.03)

	lo := math.Min(t.main, tFast.main)*math.Exp(-z90*sd) + math.Min(t.drain, tFast.drain)*math.Exp(-z90*sd)
	hi := math.Max(t.main, tSlow.main)*math.Exp(z90*sd) + math.Max(t.drain, tSlow.drain)*math.Exp(z90*sd)

	// A heavy-tail scenario for the upper end: the same data with σ held
	// at no less than heavySigma (μ refitted). Where the data reach far
	// into the distribution it changes little; early, when they reach only
	// its short outputs, the tail beyond them (and the KV-bound batch it
	// implies) is unknown and this is what a heavy one would take.
	//
	// μ is at least the value that puts the scenario's survival at the
	// point where the data end (the splice) where the data put it: the
	// body's shape (a mixture of short answers, say) must not pull the
	// heavy tail down.
	sigH := math.Max(e.fit.sigma, heavySigma)
	if fh, ok := e.fitTail(lognormal{mu: e.fit.mu, sigma: e.fit.sigma, ok: true}, true, sigH); ok {
		if sp := e.spliceBin; sp > 0 && sp < numBins {
			if sc := e.surv[sp]; sc > 1e-6 && sc < 1-1e-6 {
				// ln c = μ + σ Φ⁻¹(1 − S(c)), Φ⁻¹(p) = √2 erfinv(2p − 1).
				fh.mu = math.Max(fh.mu, math.Log(e.b.edges[sp])-sigH*sqrt2*math.Erfinv(1-2*sc))
			}
		}
		wh := e.work(fh, s.NotStarted)
		fullH, runH, vH, ctxH := math.Max(e.speed.full, full), running, v, 1.0
		if s.NotStarted > 0 {
			if p := e.projectKV(s.Servers, s.PromptTokens+wh.eqMean).faded(projWeight(e.youngShare((s.Elapsed - s.RateWindow) * v))); p.ok {
				runH = running * p.batch
				fullH = runH
				vH = v * p.tput / p.batch
			} else {
				ctxH = e.ctx.factor(ctxNow, wh.eqMean)
			}
		}
		th := e.timeline(wh, s.NotStarted, fullH, runH, vH, ctxH, [3]float64{kSlow, kSlow, kSlow}, kvd)[0]
		sdH := math.Sqrt(sdW*sdW + sdT*sdT + 0.03*0.03)
		hi = math.Max(hi, (th.main+th.drain)*math.Exp(z90*sdH))
		e.work(e.fit, s.NotStarted) // restore the point curve
	}

	res.Seconds = t.main + t.drain
	res.DrainSeconds = t.drain
	if s.NotStarted > 0 {
		res.MainTokensPerSec = runT * vT / ctxFactor
	}
	res.LowSeconds = math.Min(lo, res.Seconds)
	res.HighSeconds = math.Max(hi, res.Seconds)
	res.OK = true
	return res
}

func meanOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

func (e *Estimator) meanCompleted() float64 {
	if e.completed == 0 {
		return 0
	}
	return e.tokens / float64(e.completed)
}

// observeThroughput tracks how much ln(TokensPerSec) varies over time.
func (e *Estimator) observeThroughput(s State) {
	if s.TokensPerSec <= 0 {
		return
	}
	x := math.Log(s.TokensPerSec)
	if !e.haveT {
		e.lnTMean, e.lnTVar, e.haveT = x, 0.01, true
		e.lastElapsed = s.Elapsed
		return
	}
	dt := s.Elapsed - e.lastElapsed
	if dt <= 0 {
		return
	}
	e.lastElapsed = s.Elapsed
	tau := speedTau
	if e.lifetime > 0 {
		tau = math.Min(tau, speedLifetimes*e.lifetime)
	}
	a := 1 - math.Exp(-dt/tau)
	d := x - e.lnTMean
	e.lnTMean += a * d
	e.lnTVar = (1 - a) * (e.lnTVar + a*d*d)
}

// binInFlight bins the in-flight lower bounds.
func (e *Estimator) binInFlight(inFlight []float64) {
	e.scratchC = [numBins]float64{}
	e.scratchCX = [numBins]float64{}
	e.scratchCY = [numBins]float64{}
	for _, l := range inFlight {
		if !(l > 0) {
			l = 0
		}
		if l >= e.b.max {
			l = e.b.max * (1 - 1e-9)
		}
		j := e.b.index(l)
		e.scratchC[j]++
		e.scratchCX[j] += l
		e.scratchCY[j] += logLen(l)
	}
}

// fitTail fits the censored lognormal to everything known; with sigma > 0
// only μ is fitted (σ held at sigma).
func (e *Estimator) fitTail(prev lognormal, truncate bool, sigma float64) (lognormal, bool) {
	e.samples = e.samples[:0]
	start := 0
	if truncate {
		var above float64
		start, above = e.truncationBin()
		if start > 0 {
			e.samples = append(e.samples, fitSample{n: -above, sy: -above * math.Log(e.b.edges[start]), censored: true})
		}
	}
	var n, sy, syy float64
	for j := start; j < numBins; j++ {
		hb := &e.hist[j]
		if hb.n > 0 {
			e.samples = append(e.samples, fitSample{n: float64(hb.n), sy: hb.sy, syy: hb.syy})
			n += float64(hb.n)
			sy += hb.sy
			syy += hb.syy
		}
		if hb.lenN > 0 {
			e.samples = append(e.samples, fitSample{n: float64(hb.lenN), sy: hb.lenSY, censored: true})
		}
		// In-flight requests below one token carry no information.
		if c := e.scratchC[j]; c > 0 && e.b.edges[j+1] > 1 {
			e.samples = append(e.samples, fitSample{n: c, sy: e.scratchCY[j], censored: true})
		}
	}
	mu0, sig0 := prev.mu, prev.sigma
	if !prev.ok {
		if n < 2 {
			return lognormal{}, false
		}
		mu0 = sy / n
		sig0 = math.Sqrt(math.Max(syy/n-mu0*mu0, 0.01))
	}
	if sigma > 0 {
		f := fitMu(e.samples, mu0, sigma)
		return f, f.ok
	}
	f := fitLognormal(e.samples, mu0, sig0)
	return f, f.ok
}

// truncationBin returns the first bin at or above the truncAt quantile of
// the actuarial estimate and the number of observations from it on; 0 when
// too few finished requests lie above it to fit.
func (e *Estimator) truncationBin() (int, float64) {
	if truncAt <= 0 {
		return 0, 0
	}
	var atRisk, events [numBins + 1]float64
	for j := numBins - 1; j >= 0; j-- {
		hb := &e.hist[j]
		events[j] = events[j+1] + float64(hb.n+hb.lenN)
		atRisk[j] = atRisk[j+1] + float64(hb.n+hb.lenN) + e.scratchC[j]
	}
	surv := 1.0
	for j := 0; j < numBins; j++ {
		if surv <= 1-truncAt {
			if events[j] < minTailEvents {
				return 0, 0
			}
			return j, atRisk[j]
		}
		hb := &e.hist[j]
		n := atRisk[j] - e.scratchC[j]/2
		if n <= 0 {
			break
		}
		surv *= math.Max(0, 1-float64(hb.n+hb.lenN)/n)
	}
	return 0, 0
}

// workEstimate is the remaining work under one fitted tail.
type workEstimate struct {
	mean   float64 // E[min(L, cap)]
	varLen float64 // Var[min(L, cap)]
	total  float64 // remaining tokens: queue × mean + Σ in-flight residuals
	eqMean float64 // mean residual of a request in flight in steady state
}

// work builds the survival curve (actuarial body, fitted tail) into
// e.surv/e.area and returns the remaining work.
func (e *Estimator) work(f lognormal, notStarted int64) workEstimate {
	// At-risk counts from the top.
	var atRisk [numBins + 1]float64
	for j := numBins - 1; j >= 0; j-- {
		hb := &e.hist[j]
		atRisk[j] = atRisk[j+1] + float64(hb.n+hb.lenN) + e.scratchC[j]
	}
	e.surv[0] = 1
	splice := numBins
	for j := 0; j < numBins; j++ {
		hb := &e.hist[j]
		d := float64(hb.n + hb.lenN)
		n := atRisk[j] - e.scratchC[j]/2
		if n < minAtRisk {
			splice = j
			break
		}
		e.surv[j+1] = e.surv[j] * math.Max(0, 1-d/n)
	}
	e.spliceBin = splice
	if splice < numBins {
		base := f.survival(e.b.edges[splice])
		for j := splice + 1; j <= numBins; j++ {
			r := 0.0
			if base > 0 {
				r = f.survival(e.b.edges[j]) / base
			}
			e.surv[j] = e.surv[splice] * r
		}
	}
	// Areas (trapezoid in each bin; the cap mass sits at max, so ∫_0^max S
	// is E[min(L, max)]) and the second moment for the variance.
	e.area[numBins] = 0
	e.area2[numBins] = 0
	var m2 float64 // ∫ 2x S(x) dx = E[min(L,max)²]
	var eq float64 // ∫ area(x) dx = E[min(L,max)²]/2
	for j := numBins - 1; j >= 0; j-- {
		w := e.b.edges[j+1] - e.b.edges[j]
		a := (e.surv[j] + e.surv[j+1]) / 2 * w
		e.area[j] = e.area[j+1] + a
		m2 += 2 * e.b.centers[j] * a
		eq += (e.area[j] + e.area[j+1]) / 2 * w
		e.area2[j] = eq
	}
	mean := e.area[0]
	out := workEstimate{mean: mean, varLen: math.Max(m2-mean*mean, 0)}
	if mean > 0 {
		out.eqMean = eq / mean
	}
	out.total = float64(notStarted) * mean
	for j := 0; j < numBins; j++ {
		if c := e.scratchC[j]; c > 0 {
			out.total += c * e.residual(e.scratchCX[j]/c)
		}
	}
	return out
}

// survAt is S(x) from the current curve (linear within a bin).
func (e *Estimator) survAt(x float64) float64 {
	if x >= e.b.max {
		return 0
	}
	if x <= 0 {
		return 1
	}
	j := e.b.index(x)
	lo, hi := e.b.edges[j], e.b.edges[j+1]
	f := (x - lo) / (hi - lo)
	return e.surv[j] + f*(e.surv[j+1]-e.surv[j])
}

// areaAt is ∫_x^max S.
func (e *Estimator) areaAt(x float64) float64 {
	if x >= e.b.max {
		return 0
	}
	if x <= 0 {
		return e.area[0]
	}
	j := e.b.index(x)
	hi := e.b.edges[j+1]
	return e.area[j+1] + (e.survAt(x)+e.surv[j+1])/2*(hi-x)
}

// area2At is ∫_x^max area = E[(min(L,max) − x)₊²]/2.
func (e *Estimator) area2At(x float64) float64 {
	if x >= e.b.max {
		return 0
	}
	if x <= 0 {
		return e.area2[0]
	}
	j := e.b.index(x)
	hi := e.b.edges[j+1]
	return e.area2[j+1] + (e.areaAt(x)+e.area[j+1])/2*(hi-x)
}

// residual is E[min(L,max) − l | L > l].
func (e *Estimator) residual(l float64) float64 {
	sl := e.survAt(l)
	if sl < 1e-12 {
		// Beyond everything seen and fitted: assume it ends soon, but
		// not later than the cap.
		return math.Min(e.b.max-l, math.Max(1, 0.1*l))
	}
	return math.Min(e.areaAt(l)/sl, e.b.max-l)
}

// paramVarW is the delta-method variance of the remaining work from the
// covariance of the fitted (μ, σ). It rebuilds the curve, so it restores
// it at the end.
func (e *Estimator) paramVarW(notStarted int64, w0 float64) float64 {
	f := e.fit
	hm := math.Max(math.Sqrt(f.cov[0]), 1e-3)
	hs := math.Max(math.Sqrt(f.cov[2]), 1e-3)
	diff := func(dmu, dsig float64) float64 {
		p := f
		p.mu += dmu
		p.sigma = math.Max(p.sigma+dsig, 0.02)
		m := f
		m.mu -= dmu
		m.sigma = math.Max(m.sigma-dsig, 0.02)
		return e.work(p, notStarted).total - e.work(m, notStarted).total
	}
	gm := diff(hm, 0) / (2 * hm)
	gs := diff(0, hs) / (2 * hs)
	e.work(f, notStarted) // restore the point curve
	v := gm*gm*f.cov[0] + 2*gm*gs*f.cov[1] + gs*gs*f.cov[2]
	if !(v >= 0) {
		return w0 * w0
	}
	return v
}

// bodyVarMean is the Greenwood-type variance of the mean's nonparametric
// part: Σ area-to-the-right² × d / (n (n − d)).
func (e *Estimator) bodyVarMean() float64 {
	var atRisk float64
	for j := numBins - 1; j >= e.spliceBin && j >= 0; j-- {
		hb := &e.hist[j]
		atRisk += float64(hb.n+hb.lenN) + e.scratchC[j]
	}
	var v float64
	for j := e.spliceBin - 1; j >= 0; j-- {
		hb := &e.hist[j]
		d := float64(hb.n + hb.lenN)
		atRisk += d + e.scratchC[j]
		n := atRisk - e.scratchC[j]/2
		if d == 0 || n <= d {
			continue
		}
		a := e.area[j+1]
		v += a * a * d / (n * (n - d))
	}
	return v
}

// smoothMain smooths the fleet's measured throughput tput (tokens/s) and
// returns smoothed ÷ tput. A continuous-batching fleet's throughput swings
// by ±20 % over seconds as requests end and are admitted in waves; the
// main phase lasts many request lifetimes, so what it runs at is the
// average, not the latest sample. The time constant is half the mean
// request lifetime (mean output ÷ per-request speed; longer carried the
// young fleet's rates too far, shorter and longer both measured worse on
// recorded gensim jobs); a change of the fleet (servers lost or added, a
// resize) restarts the average, so the ETA moves at once.
func (e *Estimator) smoothMain(s State, tput, lifetime float64) float64 {
	if !(tput > 0) || !(lifetime > 0) {
		return 1
	}
	// The fleet's size: its servers' KV caches (or request slots) when
	// known, else its running capacity (which varies more by itself).
	capacity, tol := s.Concurrency, 0.25
	if len(s.Servers) > 0 {
		var kv, slots float64
		for _, sv := range s.Servers {
			kv += sv.KVCapacity
			slots += sv.MaxRunning
		}
		capacity, tol = slots, 0.05
		if kv > 0 {
			capacity = kv
		}
	}
	dt := s.Elapsed - e.mainAt
	changed := len(s.Servers) != e.mainN || math.Abs(capacity-e.mainCap) > tol*math.Min(capacity, e.mainCap)
	if e.mainT <= 0 || changed || dt < 0 {
		e.mainT, e.mainAt, e.mainCap, e.mainN, e.mainVar = tput, s.Elapsed, capacity, len(s.Servers), 0
		e.cal = calibration{}
		return 1
	}
	a := 1 - math.Exp(-dt/math.Max(lifetime/2, 1e-3))
	d := math.Log(tput / e.mainT)
	e.mainVar = (1 - a) * (e.mainVar + a*d*d)
	e.mainT += a * (tput - e.mainT)
	e.mainAt = s.Elapsed
	return e.mainT / tput
}
