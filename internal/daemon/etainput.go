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
	if len(r.hist) == 0 {
		r.hist = append(r.hist, progSample{at: g.At, done: float64(r.doneReq + r.errs), queued: float64(g.Queued)})
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
	r.hist = append(r.hist, progSample{at: g.At, progress: r.progress, done: float64(r.doneReq + r.errs), queued: float64(g.Queued)})
	if len(r.hist) > maxProgHist {
		r.hist = append(r.hist[:0], r.hist[len(r.hist)-maxProgHist/2:]...)
	}
}

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
		sort.Slice(idx, func(x, y int) bool { return out[idx[x]] > out[idx[y]] })
		n := min(len(idx), int(math.Ceil(float64(r.running)*share)))
		var sum float64
		for _, i := range idx[:n] {
			sum += out[i]
		}
		hi := r.kvUsed * share
		if sum <= hi || sum <= 0 {
			continue
		}
		for _, i := range idx[:n] {
			out[i] = math.Max(float64(ages[i].Streamed), out[i]*hi/sum)
		}
	}
	return out
}

// servers returns the servers' gauges for the estimator (all if only is
// empty), leaving out servers whose rates are not established yet. A
// server's running cap is the lower of its own and gend's limit on it.
func (t *throughput) servers(only []string, limits map[string]int) []eta.Server {
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
		maxRun := r.maxRunning
		if l := limits[n]; l > 0 && (maxRun <= 0 || l < maxRun) {
			maxRun = l
		}
		out = append(out, eta.Server{TokensPerSec: r.perReqRate * float64(r.running), Running: float64(r.running), Queued: float64(r.queued),
			MaxRunning: float64(maxRun), KVCapacity: r.kvCap, KVUsed: r.kvUsed})
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
