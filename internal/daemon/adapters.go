package daemon

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/gend-dev/gend/api"
	"github.com/gend-dev/gend/internal/backend"
	"github.com/gend-dev/gend/pkg/scheduler"
)

// sender adapts the backend client to scheduler.Sender.
type sender struct{ d *Daemon }

func (s sender) Send(ctx context.Context, srv api.ServerSpec, t *scheduler.Task) scheduler.Result {
	p := t.Payload.(*payload)
	d := s.d
	rid := fmt.Sprintf("%s-%s-%d", p.item.CustomID, d.boot, t.Attempts+t.Bounces+1)
	j := d.jobOfTask(ctx)
	stream := j != nil && j.spec.Request.Stream
	req := backend.Request{BaseURL: srv.URL, Endpoint: p.item.Endpoint, Body: p.item.Body, RID: rid, Stream: stream}
	if stream {
		req.OnTokens = func(n int, exact bool) { t.Streamed(int64(n), exact) }
	}
	resp, err := d.be.Generate(ctx, req)
	if err == nil {
		if resp.RequestID == "" {
			resp.RequestID = rid
		}
		d.met.request(srv.Name, "ok", resp.PromptTokens, resp.CompletionTokens)
		d.tput.done(srv.Name, resp.CompletionTokens, false)
		return scheduler.Result{Outcome: scheduler.OK, PromptTokens: resp.PromptTokens, CompletionTokens: resp.CompletionTokens, Value: resp}
	}
	var be *backend.Error
	if !errors.As(err, &be) {
		be = &backend.Error{Class: backend.Transient, Err: err}
	}
	out := scheduler.Transient
	switch be.Class {
	case backend.Overload:
		out = scheduler.Overload
	case backend.Unreachable:
		out = scheduler.Unreachable
	case backend.Permanent:
		out = scheduler.Permanent
	case backend.Fatal:
		out = scheduler.Fatal
	}
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
		out = scheduler.Aborted
	}
	d.met.request(srv.Name, out.String(), 0, 0)
	d.tput.done(srv.Name, 0, out != scheduler.Aborted)
	if out != scheduler.Aborted {
		d.log.Debug().Str("server", srv.Name).Str("custom_id", p.item.CustomID).Str("class", be.Class.String()).Err(err).Msg("attempt failed")
	}
	return scheduler.Result{Outcome: out, Err: be}
}

// jobOfTask finds the job whose context ctx derives from (only the spec's
// stream flag is needed; jobs are few).
func (d *Daemon) jobOfTask(ctx context.Context) *job {
	if v, ok := ctx.Value(jobKey{}).(*job); ok {
		return v
	}
	return nil
}

type jobKey struct{}

// prober adapts the backend client to scheduler.Prober.
type prober struct{ be *backend.Client }

func (p prober) Capacity(ctx context.Context, s api.ServerSpec) (scheduler.Capacity, error) {
	c, err := p.be.Capacity(ctx, s.URL)
	if err != nil {
		return scheduler.Capacity{}, err
	}
	return scheduler.Capacity{MaxRunning: c.MaxRunning, MaxTotalTokens: c.MaxTotalTokens, ContextLength: c.ContextLength, MaxQueued: c.MaxQueuedRequests, TimeScale: c.TimeScale}, nil
}

func (p prober) Gauges(ctx context.Context, s api.ServerSpec) (api.Gauges, error) {
	return p.be.Gauges(ctx, s.URL)
}

func (p prober) Health(ctx context.Context, s api.ServerSpec) error { return p.be.Health(ctx, s.URL) }

// events logs and counts scheduler decisions.
type events struct{ d *Daemon }

func (e events) LimitChanged(server string, old, new int, reason string) {
	e.d.met.decision(server, reason)
	ev := e.d.log.Debug()
	if reason == "start" || reason == "overload" || reason == "retractions" || reason == "errors" {
		ev = e.d.log.Info()
	}
	ev.Str("component", "scheduler").Str("server", server).Int("old", old).Int("limit", new).Str("reason", reason).Msg("limit changed")
}

func (e events) ServerState(server, state, reason string) {
	ev := e.d.log.Info()
	if state == scheduler.StateDown {
		ev = e.d.log.Warn()
	}
	ev.Str("component", "scheduler").Str("server", server).Str("state", state).Str("reason", reason).Msg("server state")
}

// throughput tracks per-server rates: generation tokens from the servers'
// own counters (what the GPUs produce, including unfinished requests) and
// completions seen by gend.
type throughput struct {
	mu  sync.Mutex
	srv map[string]*srvRate
}

type srvRate struct {
	lastGen  float64
	lastAt   time.Time
	genRate  float64 // EWMA tok/s from generation_tokens_total
	doneTok  int64
	doneReq  int64
	errs     int64
	lastDone [3]int64
	tokens   float64 // EWMA of completed tokens/s
	requests float64
	errors   float64
	running  int
	seen     bool
	// zeroAt is the last gauges' time while the generation counter has
	// only read 0 (a fresh server, or one without the counter); zero if
	// it never has.
	zeroAt time.Time
	retr   []retrSample
	// For the ETA (etainput.go): the last gauges' batch and KV cache, and a
	// history of cumulative per-request decode progress and admissions.
	queued      int
	maxRunning  int
	kvCap       float64
	kvUsed      float64
	perReqRate  float64 // EWMA of one running request's tok/s
	rateSamples int     // counter deltas seen
	progress    float64 // Σ Δgeneration_tokens / running: tokens one running request made
	admitted    float64 // cumulative admissions: completions + running (monotone)
	hist        []progSample
}

type retrSample struct {
	at    time.Time
	total float64
}

type rate struct{ tokens, requests, errors float64 }

func (t *throughput) get(name string) *srvRate {
	if t.srv == nil {
		t.srv = map[string]*srvRate{}
	}
	r, ok := t.srv[name]
	if !ok {
		r = &srvRate{}
		t.srv[name] = r
	}
	return r
}

func (t *throughput) done(server string, tokens int64, failed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.get(server)
	if failed {
		r.errs++
		return
	}
	r.doneReq++
	r.doneTok += tokens
}

// samplePeriod is how often the servers' counters are sampled and the ETA
// recomputed: the control period (the gauges are probed that often),
// bounded to 100 ms … 1 s.
func samplePeriod(control time.Duration) time.Duration {
	return min(max(control, 100*time.Millisecond), time.Second)
}

// throughputLoop samples the servers' counters every samplePeriod.
func (d *Daemon) throughputLoop(ctx context.Context) {
	tk := time.NewTicker(samplePeriod(d.opts.ControlPeriod))
	defer tk.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tk.C:
			dt := now.Sub(last).Seconds()
			last = now
			d.tput.sample(d.sched.Servers(), dt)
		}
	}
}

// ewma is the weight of a one-second sample in the rate EWMAs; a sample
// over dt seconds weighs ewmaWeight(ewma, dt), so the smoothing does not
// depend on the sampling period.
const ewma = 0.3

func ewmaWeight(perSecond, dt float64) float64 {
	if dt <= 0 {
		return 0
	}
	return 1 - math.Pow(1-perSecond, math.Min(dt, 10))
}

func (t *throughput) sample(servers []api.Server, dt float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range servers {
		r := t.get(s.Name)
		if g := s.Gauges; g != nil {
			prevRunning := r.running
			r.running = g.Running
			r.observeGauges(g)
			if n := len(r.retr); n == 0 || g.At.After(r.retr[n-1].at) {
				r.retr = append(r.retr, retrSample{g.At, g.Retractions})
				for len(r.retr) > 2 && g.At.Sub(r.retr[0].at) > 2*time.Minute {
					r.retr = r.retr[1:]
				}
			}
			if g.GenTokensTotal == 0 && !r.seen {
				r.zeroAt = g.At
			}
			if g.GenTokensTotal > 0 {
				if !r.seen && !r.zeroAt.IsZero() && g.At.After(r.zeroAt) {
					// The counter read 0 until now: a fresh server that has
					// just started generating. Its first tokens count from
					// that reading, over the batch now (the first wave ran
					// the whole interval; a mean with the idle 0 would
					// halve it). Dropping them cost the first-wave requests
					// 25–40 % of their progress in a gensim job's first
					// seconds (docs/eta.md, fourth round).
					r.lastGen, r.lastAt, r.seen = 0, r.zeroAt, true
					prevRunning = g.Running
				}
				if r.seen && g.At.After(r.lastAt) && g.GenTokensTotal >= r.lastGen {
					inst := (g.GenTokensTotal - r.lastGen) / g.At.Sub(r.lastAt).Seconds()
					if r.genRate == 0 {
						r.genRate = inst
					} else {
						a := ewmaWeight(ewma, g.At.Sub(r.lastAt).Seconds())
						r.genRate = a*inst + (1-a)*r.genRate
					}
					r.observeProgress(g, prevRunning, g.GenTokensTotal-r.lastGen)
				}
				if !r.seen || g.At.After(r.lastAt) {
					r.lastGen, r.lastAt, r.seen = g.GenTokensTotal, g.At, true
				}
			}
		}
		if dt > 0 {
			a := ewmaWeight(ewma, dt)
			r.tokens = a*float64(r.doneTok-r.lastDone[0])/dt + (1-a)*r.tokens
			r.requests = a*float64(r.doneReq-r.lastDone[1])/dt + (1-a)*r.requests
			r.errors = a*float64(r.errs-r.lastDone[2])/dt + (1-a)*r.errors
			r.lastDone = [3]int64{r.doneTok, r.doneReq, r.errs}
		}
	}
}

func (t *throughput) perServer() map[string]rate {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]rate, len(t.srv))
	for n, r := range t.srv {
		tok := r.tokens
		if r.genRate > 0 {
			tok = r.genRate
		}
		out[n] = rate{tokens: tok, requests: r.requests, errors: r.errors}
	}
	return out
}

// fleet returns the output tokens/s of the given servers (all if empty),
// their running batch, and each server's per-request decode rate; tok is 0
// while a server's counters have not given minRateSamples deltas yet.
func (t *throughput) fleet(only []string) (tok float64, running int, perReq map[string]float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	perReq = map[string]float64{}
	allow := map[string]bool{}
	for _, n := range only {
		allow[n] = true
	}
	names := make([]string, 0, len(t.srv))
	for n := range t.srv {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if len(allow) > 0 && !allow[n] {
			continue
		}
		r := t.srv[n]
		if r.seen && r.rateSamples < minRateSamples {
			return 0, 0, perReq
		}
		g := r.genRate
		if g <= 0 {
			g = r.tokens
		}
		tok += g
		running += r.running
		if r.running > 0 {
			perReq[n] = g / float64(r.running)
		}
	}
	return tok, running, perReq
}

// retractionRates: per server, retractions per minute over the last ~2 min.
func (t *throughput) retractionRates() map[string]float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]float64{}
	for n, r := range t.srv {
		if len(r.retr) < 2 {
			continue
		}
		a, b := r.retr[0], r.retr[len(r.retr)-1]
		if dt := b.at.Sub(a.at).Minutes(); dt > 0 && b.total >= a.total {
			out[n] = (b.total - a.total) / dt
		}
	}
	return out
}
