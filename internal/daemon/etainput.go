package daemon

import (
	"math"
	"sort"
	"time"

	"github.com/gend-dev/gend/api"
	"github.com/gend-dev/gend/internal/eta"
	"github.com/gend-dev/gend/pkg/scheduler"
)

// The ETA's inputs from the servers' gauges (docs/eta.md, "Inputs"):
//
//   - per server, a history of the tokens one running request has made
//     (Σ Δgeneration_tokens_total / running) and of cumulative admissions
//     (attempts ended + running), from which each in-flight attempt's output
//     so far is estimated when the job does not stream;
//   - per server, the batch and KV cache now, from which the estimator
//     projects the throughput the fleet settles at.

// progSample is one point of a server's progress history.
type progSample struct {
	at       time.Time
	progress float64 // cumulative tokens made by one running request
	done     float64 // attempts ended on the server (cumulative)
	queued   float64 // requests waiting in the server's queue
	// For the windowed rates: cumulative tokens generated since the first
	// sample, the batch and KV cache in use, and whether the interval
	// ending here began with the server busy.
	gen, running, kvUsed float64
	busy                 bool
}

// maxProgHist bounds a server's history (one sample per throughput tick:
// about 4.5 hours at 1 s; older attempts are extrapolated).
const maxProgHist = 1 << 14

// minRateSamples is how many counter deltas over busy intervals a server
// needs before its rates are used for the ETA. The first one may span the
// prefill of a fresh batch (few tokens made): on gensim (sigma 1.5, many
// tiny outputs finishing in the first interval) it once gave an ETA of
// 19,000 s for a 45 s job.
const minRateSamples = 2

// observeGauges records a server's batch and KV cache from its gauges.
func (r *srvRate) observeGauges(g *api.Gauges) {
	r.queued = g.Queued
	r.maxRunning = g.MaxRunning
	r.kvCap = float64(g.MaxTotalTokens)
	r.kvUsed = g.TokenUsage * float64(g.MaxTotalTokens)
	// Until the generation counter first moves, the history is one
	// sample, the latest reading: interpolating from an older one would
	// spread the first interval's progress over the idle time before it
	// (the first wave's requests were credited a third too little).
	if len(r.hist) == 0 || (!r.seen && len(r.hist) == 1 && g.GenTokensTotal == 0) {
		r.hist = append(r.hist[:0], progSample{at: g.At, progress: r.progress, done: float64(r.doneReq + r.errs), queued: float64(g.Queued),
			running: float64(g.Running), kvUsed: g.TokenUsage * float64(g.MaxTotalTokens)})
	}
}

// observeProgress adds one counter delta (dGen tokens since the last
// gauges) to the progress history.
func (r *srvRate) observeProgress(g *api.Gauges, prevRunning int, dGen float64) {
	dt := g.At.Sub(r.lastAt).Seconds()
	if dt <= 0 || dGen < 0 {
		return
	}
	run := (float64(prevRunning) + float64(g.Running)) / 2
	if run >= 0.5 {
		step := dGen / run
		r.progress += step
		inst := step / dt
		// The first delta may span the server's start: only intervals
		// that began busy count.
		if prevRunning > 0 {
			if r.rateSamples < minRateSamples {
				// The first busy interval may be mostly prefill (a
				// few tokens): it is replaced, not averaged in.
				r.perReqRate = inst
			} else {
				a := ewmaWeight(etaRateWeight, dt)
				r.perReqRate = a*inst + (1-a)*r.perReqRate
			}
			r.rateSamples++
		}
	}
	gen := dGen
	if n := len(r.hist); n > 0 {
		gen += r.hist[n-1].gen
	}
	r.hist = append(r.hist, progSample{at: g.At, progress: r.progress, done: float64(r.doneReq + r.errs), queued: float64(g.Queued),
		gen: gen, running: float64(g.Running), kvUsed: g.TokenUsage * float64(g.MaxTotalTokens), busy: prevRunning > 0 && run >= 0.5})
	if len(r.hist) > maxProgHist {
		r.hist = append(r.hist[:0], r.hist[len(r.hist)-maxProgHist/2:]...)
	}
}

// etaWindow bounds the window over which the servers' rates are averaged
// for the ETA (half the job's running time until then).
const etaWindow = 30 * time.Second

// etaStale is how old a server's last gauges may be for its rates to count.
const etaStale = 5 * time.Second

// etaFallbackAfter is the running time after which, when the servers
// export no token counters, the ETA divides by gend's own completed tokens/s.
const etaFallbackAfter = 10.0

// etaRateWeight is the EWMA weight of a one-second per-request rate: the
// ETA compares it with the gauges of now, so it must not lag them.
const etaRateWeight = 0.6

// progressAt is the server's cumulative per-request progress at t,
// interpolated in the history and extrapolated at the current rate outside
// it (at most 10 s past the last sample).
func (r *srvRate) progressAt(t time.Time) float64 {
	n := len(r.hist)
	last := r.hist[n-1]
	if !t.Before(last.at) {
		return last.progress + r.perReqRate*math.Min(t.Sub(last.at).Seconds(), 10)
	}
	first := r.hist[0]
	if !t.After(first.at) {
		if first.running < 0.5 {
			// Idle then: a request sent earlier had not started.
			return first.progress
		}
		return first.progress - r.perReqRate*first.at.Sub(t).Seconds()
	}
	i := sort.Search(n, func(i int) bool { return r.hist[i].at.After(t) })
	a, b := r.hist[i-1], r.hist[i]
	f := t.Sub(a.at).Seconds() / b.at.Sub(a.at).Seconds()
	return a.progress + f*(b.progress-a.progress)
}

// stateAt is the server's cumulative ended attempts (interpolated) and its
// queue (the last sample's) at t.
func (r *srvRate) stateAt(t time.Time) (done, queued float64) {
	n := len(r.hist)
	if !t.After(r.hist[0].at) {
		return r.hist[0].done, r.hist[0].queued
	}
	if !t.Before(r.hist[n-1].at) {
		return r.hist[n-1].done, r.hist[n-1].queued
	}
	i := sort.Search(n, func(i int) bool { return r.hist[i].at.After(t) })
	a, b := r.hist[i-1], r.hist[i]
	f := t.Sub(a.at).Seconds() / b.at.Sub(a.at).Seconds()
	return a.done + f*(b.done-a.done), a.queued
}

// doneTime is when the server's cumulative ended attempts reached n (the
// history's end if never).
func (r *srvRate) doneTime(n float64) time.Time {
	h := len(r.hist)
	if n <= r.hist[0].done {
		return r.hist[0].at
	}
	if n >= r.hist[h-1].done {
		return r.hist[h-1].at
	}
	i := sort.Search(h, func(i int) bool { return r.hist[i].done >= n })
	a, b := r.hist[i-1], r.hist[i]
	f := (n - a.done) / (b.done - a.done)
	return a.at.Add(time.Duration(f * float64(b.at.Sub(a.at))))
}

// inflightTokens estimates, per in-flight attempt of a job, its output
// tokens so far. A server's queue is first-in first-out and, while it is
// full, admits one request per request that ends: an attempt sent when q
// requests waited there started decoding once q more attempts had ended
// on the server (or at once when none waited). Its tokens are the server's
// per-request progress since then. Streamed counts, when larger, win.
//
// The youngest attempts, as many as the server reports queued, are waiting.
// The server's KV cache bounds the sum over its running requests: their
// output tokens are at most the cache tokens in use. own and all are this
// job's and all jobs' in-flight attempts per server (the queue and cache
// are shared in that ratio).
func (t *throughput) inflightTokens(ages []scheduler.InFlightAge, own, all map[string]int, now time.Time) []float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]float64, len(ages))
	// The server's queue holds the youngest attempts (first in, first out).
	byServer := map[string][]int{}
	for i, a := range ages {
		byServer[a.Server] = append(byServer[a.Server], i)
	}
	queuedNow := map[int]bool{}
	for name, idx := range byServer {
		r := t.srv[name]
		if r == nil {
			continue
		}
		sort.Slice(idx, func(x, y int) bool { return ages[idx[x]].Seconds < ages[idx[y]].Seconds })
		share := 1.0
		if a, o := all[name], own[name]; a > 0 && o > 0 && o < a {
			share = float64(o) / float64(a)
		}
		q := int(math.Round(float64(r.queued) * share))
		for k := 0; k < q && k < len(idx); k++ {
			queuedNow[idx[k]] = true
		}
	}
	for i, a := range ages {
		if a.Exact {
			// The server's own count: nothing to estimate. (The progress
			// model below can run ahead of a request that was retracted
			// or admitted late, and a censoring point above the truth
			// makes the tail look heavier than it is: +22 % on the mean
			// at 2 % of a gensim job.)
			out[i] = float64(a.Streamed)
			continue
		}
		r := t.srv[a.Server]
		if r == nil || len(r.hist) < 2 || r.rateSamples == 0 {
			// No history: time in flight × the per-request rate, halved
			// for the time it may have queued.
			v := 0.0
			if r != nil && r.running > 0 {
				v = r.genRate / float64(r.running)
			}
			out[i] = math.Max(float64(a.Streamed), 0.5*a.Seconds*v)
			continue
		}
		doneNow := float64(r.doneReq + r.errs)
		sent := now.Add(-time.Duration(a.Seconds * float64(time.Second)))
		d0, q0 := r.stateAt(sent)
		est := 0.0
		if need := d0 + q0; (need <= doneNow && !queuedNow[i]) || a.Streamed > 0 {
			start := sent
			if q0 > 0 {
				if at := r.doneTime(need); at.After(start) {
					start = at
				}
			}
			est = math.Max(1, r.progressAt(now)-r.progressAt(start))
		}
		out[i] = math.Max(float64(a.Streamed), est)
	}
	// The running requests' outputs fit in the KV cache in use: the
	// server's `running` largest estimates (this job's share) sum to at
	// most that. (The gauges are a little older than now; while the cache
	// is full its use stays level as requests end and others grow.)
	for name, idx := range byServer {
		r := t.srv[name]
		if r == nil || r.kvUsed <= 0 || r.running <= 0 {
			continue
		}
		share := 1.0
		if a, o := all[name], own[name]; a > 0 && o > 0 && o < a {
			share = float64(o) / float64(a)
		}
		// The gauges were read a sample period ago, and a running request
		// has made lag more tokens since: the bound holds for the
		// outputs then. (At a simulator's speed-up one period is a good
		// part of a request's life; comparing today's outputs with the
		// last period's cache cut them by a third.)
		lag := 0.0
		if len(r.hist) > 0 {
			lag = math.Max(0, r.progressAt(now)-r.hist[len(r.hist)-1].progress)
		}
		sort.Slice(idx, func(x, y int) bool { return out[idx[x]] > out[idx[y]] })
		n := min(len(idx), int(math.Ceil(float64(r.running)*share)))
		var sum float64
		for _, i := range idx[:n] {
			sum += math.Max(out[i]-lag, 0)
		}
		hi := r.kvUsed * share
		if sum <= hi || sum <= 0 {
			continue
		}
		for _, i := range idx[:n] {
			if then := out[i] - lag; then > 0 {
				out[i] = math.Max(float64(ages[i].Streamed), then*hi/sum+lag)
			}
		}
	}
	return out
}

// rampIntervals is how many intervals at the start of a busy run the
// windowed rates leave out.
const rampIntervals = 2

// windowed returns the server's rates averaged over the last window of
// busy intervals (at most window long, not the first rampIntervals of the
// busy run): output tokens/s, the mean batch and the mean KV cache tokens
// in use. ok is false when fewer than two such intervals end the history.
//
// A continuous-batching server's throughput swings by ±10–20 % from one
// second to the next (requests end and are admitted in waves, prefill
// steals decode time) and the gauges' timestamps jitter against the
// counters they are read with; the ETA divides by this rate for the rest
// of the job, so it wants the level, not the latest swing.
func (r *srvRate) windowed(window time.Duration) (tok, running, kvUsed float64, ok bool) {
	n := len(r.hist)
	if n < 3 {
		return 0, 0, 0, false
	}
	end := r.hist[n-1]
	s := n - 1
	for s > 0 && r.hist[s].busy && end.at.Sub(r.hist[s-1].at) <= window {
		s--
	}
	// The first intervals of a busy run are the ramp (prefill of a fresh
	// batch, gend raising its limit): few tokens, no rate to plan with.
	b := n - 1
	for b > 0 && r.hist[b].busy {
		b--
	}
	s = max(s, b+rampIntervals)
	if n-1-s < 2 {
		return 0, 0, 0, false
	}
	dt := end.at.Sub(r.hist[s].at).Seconds()
	if dt <= 0 {
		return 0, 0, 0, false
	}
	for i := s + 1; i < n; i++ {
		a, b := r.hist[i-1], r.hist[i]
		w := b.at.Sub(a.at).Seconds() / dt / 2
		running += w * (a.running + b.running)
		kvUsed += w * (a.kvUsed + b.kvUsed)
	}
	// The rate is the least-squares slope of the cumulative tokens over
	// the window's samples, not the difference of its end points: a
	// sample's timestamp is taken before the counter is read, and on a
	// loaded host the delay between them varies by tens of milliseconds.
	var mt, mg float64
	for i := s; i < n; i++ {
		mt += r.hist[i].at.Sub(r.hist[s].at).Seconds()
		mg += r.hist[i].gen
	}
	k := float64(n - s)
	mt, mg = mt/k, mg/k
	var stg, stt float64
	for i := s; i < n; i++ {
		d := r.hist[i].at.Sub(r.hist[s].at).Seconds() - mt
		stg += d * (r.hist[i].gen - mg)
		stt += d * d
	}
	if stt <= 0 {
		return 0, 0, 0, false
	}
	return stg / stt, running, kvUsed, true
}

// servers returns the servers' gauges for the estimator (all if only is
// empty), leaving out servers whose rates are not established yet. A
// server's running cap is the lower of its own and gend's limit on it.
// Throughput, batch and KV cache use are averages over the last window
// (windowed); a server without two busy intervals in it, or whose last
// gauges are older than etaStale, is left out.
func (t *throughput) servers(only []string, limits map[string]int, window time.Duration, now time.Time) []eta.Server {
	t.mu.Lock()
	defer t.mu.Unlock()
	allow := map[string]bool{}
	for _, n := range only {
		allow[n] = true
	}
	names := make([]string, 0, len(t.srv))
	for n := range t.srv {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []eta.Server
	for _, n := range names {
		if len(allow) > 0 && !allow[n] {
			continue
		}
		r := t.srv[n]
		if r.rateSamples < minRateSamples || r.perReqRate <= 0 || r.running <= 0 {
			continue
		}
		// A server whose gauges stopped (lost, unreachable) no longer
		// counts: the ETA moves within seconds.
		if n := len(r.hist); n == 0 || now.Sub(r.hist[n-1].at) > etaStale {
			continue
		}
		maxRun := r.maxRunning
		if l := limits[n]; l > 0 && (maxRun <= 0 || l < maxRun) {
			maxRun = l
		}
		// Not before two busy intervals: the first ones after a server
		// starts may be mostly prefill (a few tokens), and one interval
		// is one swing of the batch.
		tok, running, kvUsed, ok := r.windowed(window)
		if !ok || tok <= 0 || running < 1 {
			continue
		}
		out = append(out, eta.Server{Name: n, TokensPerSec: tok, Running: running, Queued: float64(r.queued),
			MaxRunning: float64(maxRun), KVCapacity: r.kvCap, KVUsed: kvUsed})
	}
	return out
}

// counting reports whether any of the servers (all if only is empty)
// exports a generated-tokens counter.
func (t *throughput) counting(only []string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	allow := map[string]bool{}
	for _, n := range only {
		allow[n] = true
	}
	for n, r := range t.srv {
		if (len(allow) == 0 || allow[n]) && r.seen {
			return true
		}
	}
	return false
}

// coveringServers checks that the servers with rates (servers) cover every
// server holding the job's requests (own: in flight per server, inflight in
// all): one server's rate is not the fleet's (a gensim job's first estimate
// divided by half the fleet's throughput: +43 % at 2 %). Within the first
// etaFallbackAfter seconds of running time it returns none until they do;
// after that a server still without rates (its counters stopped) is left
// out and the returned scale (≥ 1) is the factor that brings the covered
// servers' rate up to the job's in-flight requests.
func coveringServers(servers []eta.Server, own map[string]int, inflight int, elapsed float64) ([]eta.Server, float64) {
	covered := 0
	for _, sv := range servers {
		covered += own[sv.Name]
	}
	switch {
	case covered >= inflight || len(servers) == 0:
		return servers, 1
	case elapsed < etaFallbackAfter || covered == 0:
		return nil, 1
	}
	return servers, float64(inflight) / float64(covered)
}
