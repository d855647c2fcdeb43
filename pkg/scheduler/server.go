package scheduler

import (
	"context"
	"fmt"
	"time"

	"github.com/gend-dev/gend/api"
)

// Server states.
const (
	StateStarting = "starting" // capacity not read yet
	StateHealthy  = "healthy"
	StateDown     = "down" // ejected; probed with backoff
	StateDraining = "draining"
)

type server struct {
	spec   api.ServerSpec
	state  string
	reason string
	law    LawState
	cap    Capacity
	gauges api.Gauges
	hasG   bool

	inflight          int
	consecUnreachable int
	cancel            context.CancelFunc
	removed           chan struct{}

	// period counters, reset by the control loop
	pOverloads, pErrors, pSuccesses int
	pTokens                         int64
	lastRetractions                 float64
	retractionsSeen                 bool

	// speed: per-request decode rate (EWMA) and completions per second,
	// from the gauges and gend's own results; read by dispatch at the end
	// of a job.
	speed       Speed
	complRate   float64
	lastGen     float64
	lastGenAt   time.Time
	lastRunning int

	// totals
	stats ServerStats
}

// ServerStats are cumulative per-server counters.
type ServerStats struct {
	Completed        int64
	Errors           int64
	Overloads        int64
	CompletionTokens int64
	PromptTokens     int64
	Retractions      float64
	LimitChanges     map[string]int64
}

func (sv *server) count(r Result) {
	switch r.Outcome {
	case OK:
		sv.pSuccesses++
		sv.pTokens += r.CompletionTokens
		sv.stats.Completed++
		sv.stats.CompletionTokens += r.CompletionTokens
		sv.stats.PromptTokens += r.PromptTokens
	case Overload:
		sv.pOverloads++
		sv.stats.Overloads++
	case Transient, Unreachable:
		sv.pErrors++
		sv.stats.Errors++
	case Permanent:
		sv.pSuccesses++ // the server answered correctly
	}
}

// AddServer adds a fleet member; it is probed before it gets work.
func (s *Scheduler) AddServer(spec api.ServerSpec) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.servers[spec.Name]; ok {
		return fmt.Errorf("add server %s: already in the fleet", spec.Name)
	}
	sv := &server{spec: spec, state: StateStarting, removed: make(chan struct{}),
		stats: ServerStats{LimitChanges: map[string]int64{}}}
	s.servers[spec.Name] = sv
	s.order = append(s.order, spec.Name)
	if s.ctx != nil {
		s.startControlLocked(sv)
	}
	return nil
}

// RemoveServer drains a server: no new work; its in-flight attempts finish;
// then it leaves the fleet. It returns at once.
func (s *Scheduler) RemoveServer(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sv, ok := s.servers[name]
	if !ok {
		return fmt.Errorf("remove server %s: %w", name, ErrUnknownServer)
	}
	sv.state = StateDraining
	sv.reason = "removal requested"
	return nil
}

func (s *Scheduler) forgetLocked(sv *server) {
	delete(s.servers, sv.spec.Name)
	for i, n := range s.order {
		if n == sv.spec.Name {
			s.order = append(s.order[:i], s.order[i+1:]...)
			break
		}
	}
}

func (s *Scheduler) startControlLocked(sv *server) {
	ctx, cancel := context.WithCancel(s.ctx)
	sv.cancel = cancel
	s.ctlWG.Add(1)
	go func() {
		defer s.ctlWG.Done()
		s.control(ctx, sv)
	}()
}

func (s *Scheduler) ejectLocked(sv *server, reason string) {
	sv.state = StateDown
	sv.reason = reason
	sv.law.Started = false
}

// control is one server's loop: probe until it answers, then read its
// gauges every period and apply the law; eject on failures and probe back.
func (s *Scheduler) control(ctx context.Context, sv *server) {
	// Probe a down server with backoff from half a period up to maxProbe:
	// ten periods, between 1 s and 15 s.
	minProbe := s.opts.Period / 2
	maxProbe := min(max(10*s.opts.Period, time.Second), 15*time.Second)
	probeDelay := minProbe
	ticker := time.NewTicker(s.opts.Period)
	defer ticker.Stop()
	for {
		s.mu.Lock()
		state := sv.state
		s.mu.Unlock()
		switch state {
		case StateDraining:
			s.mu.Lock()
			if sv.inflight == 0 {
				s.forgetLocked(sv)
				s.mu.Unlock()
				s.event(sv.spec.Name, "removed", "drained")
				return
			}
			s.mu.Unlock()
		case StateStarting, StateDown:
			if err := s.admit(ctx, sv); err != nil {
				s.mu.Lock()
				if sv.state == StateStarting {
					sv.state = StateDown
				}
				sv.reason = err.Error()
				s.mu.Unlock()
				select {
				case <-ctx.Done():
					return
				case <-time.After(probeDelay):
				}
				probeDelay = minDur(probeDelay*2, maxProbe)
				continue
			}
			probeDelay = minProbe
		default:
			s.tick(ctx, sv)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func minDur(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}

// admit reads capacity and health, then opens the server to work with the
// law's initial limit (filled at once).
func (s *Scheduler) admit(ctx context.Context, sv *server) error {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	capy, err := s.opts.Prober.Capacity(pctx, sv.spec)
	if err != nil {
		return err
	}
	if err := s.opts.Prober.Health(pctx, sv.spec); err != nil {
		return err
	}
	g, gerr := s.opts.Prober.Gauges(pctx, sv.spec)
	s.mu.Lock()
	prev := sv.state
	sv.cap = capy
	sv.hasG = gerr == nil && g.Source != "none" && g.Source != ""
	if sv.hasG {
		sv.gauges = g
		sv.lastRetractions = g.Retractions
		sv.retractionsSeen = true
	}
	sv.speed, sv.complRate, sv.lastGen, sv.lastGenAt, sv.lastRunning = Speed{}, 0, g.GenTokensTotal, g.At, g.Running
	o := Observation{Capacity: capy.MaxRunning, KVTokens: capy.MaxTotalTokens, MaxQueued: capy.MaxQueued, TokensPerRequest: s.opts.TokensPerRequest, HasGauges: sv.hasG}
	if o.KVTokens == 0 && sv.hasG {
		o.KVTokens = g.MaxTotalTokens
	}
	if o.Capacity == 0 && sv.hasG {
		o.Capacity = g.MaxRunning
	}
	cfg := s.opts.Law
	old := sv.law.Limit
	sv.law = LawState{}
	var d Decision
	sv.law, d = Step(cfg, sv.law, o)
	sv.state = StateHealthy
	sv.reason = ""
	sv.consecUnreachable = 0
	sv.stats.LimitChanges[d.Reason]++
	s.mu.Unlock()
	if s.opts.Events != nil {
		if prev != StateHealthy {
			s.opts.Events.ServerState(sv.spec.Name, StateHealthy, "admitted")
		}
		s.opts.Events.LimitChanged(sv.spec.Name, old, d.Limit, d.Reason)
	}
	s.poke()
	return nil
}

func (s *Scheduler) event(name, state, reason string) {
	if s.opts.Events != nil {
		s.opts.Events.ServerState(name, state, reason)
	}
}

// tick reads gauges and applies the law once.
func (s *Scheduler) tick(ctx context.Context, sv *server) {
	var g api.Gauges
	var gerr error
	s.mu.Lock()
	hasG := sv.hasG
	s.mu.Unlock()
	if hasG {
		pctx, cancel := context.WithTimeout(ctx, 4*s.opts.Period)
		g, gerr = s.opts.Prober.Gauges(pctx, sv.spec)
		cancel()
	}
	s.mu.Lock()
	if sv.state != StateHealthy {
		s.mu.Unlock()
		return
	}
	fresh := hasG && gerr == nil && g.Source != "none"
	o := Observation{
		Fresh: fresh, HasGauges: hasG, Capacity: sv.cap.MaxRunning, KVTokens: sv.cap.MaxTotalTokens, MaxQueued: sv.cap.MaxQueued,
		TokensPerRequest: s.opts.TokensPerRequest, InFlight: sv.inflight,
		Overloads: sv.pOverloads, Errors: sv.pErrors, Successes: sv.pSuccesses,
		Throughput: float64(sv.pTokens) / s.opts.Period.Seconds(),
	}
	if fresh {
		sv.gauges = g
		o.Running, o.Queued, o.TokenUsage = g.Running, g.Queued, g.TokenUsage
		if o.Capacity == 0 {
			o.Capacity = g.MaxRunning
		}
		if sv.retractionsSeen && g.Retractions >= sv.lastRetractions {
			o.Retractions = g.Retractions - sv.lastRetractions
		}
		sv.stats.Retractions += o.Retractions
		sv.lastRetractions, sv.retractionsSeen = g.Retractions, true
		sv.observeSpeed(g)
	}
	sv.complRate = ewma(sv.complRate, float64(sv.pSuccesses)/s.opts.Period.Seconds())
	sv.pOverloads, sv.pErrors, sv.pSuccesses, sv.pTokens = 0, 0, 0, 0
	old := sv.law.Limit
	var d Decision
	sv.law, d = Step(s.opts.Law, sv.law, o)
	sv.stats.LimitChanges[d.Reason]++
	if d.Reason != "hold" {
		sv.reason = d.Reason
	}
	s.mu.Unlock()
	if hasG && gerr != nil {
		// A server that stops answering its gauges while work fails is
		// caught by the unreachable counter; check health here too.
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		herr := s.opts.Prober.Health(hctx, sv.spec)
		cancel()
		if herr != nil {
			s.mu.Lock()
			ejected := sv.state == StateHealthy
			if ejected {
				s.ejectLocked(sv, "health check failed: "+herr.Error())
			}
			s.mu.Unlock()
			if ejected {
				s.event(sv.spec.Name, StateDown, "health check failed")
			}
		}
	}
	if d.Limit != old && s.opts.Events != nil {
		s.opts.Events.LimitChanged(sv.spec.Name, old, d.Limit, d.Reason)
	}
	if d.Limit > old {
		s.poke()
	}
}

const speedEWMA = 0.3

func ewma(old, v float64) float64 {
	if old == 0 {
		return v
	}
	return speedEWMA*v + (1-speedEWMA)*old
}

// observeSpeed updates the per-request decode rate from fresh gauges: the
// generation counter's growth per running request when the server exports
// it, else its own gen_throughput gauge. Only periods where the server is
// full (requests waiting, or the running batch at its cap) count: a
// server's per-request speed rises as its batch empties at the end of a
// job, and that must not make it look faster than its peers.
func (sv *server) observeSpeed(g api.Gauges) {
	full := g.Queued > 0 || (sv.cap.MaxRunning > 0 && g.Running >= sv.cap.MaxRunning)
	running := float64(g.Running+sv.lastRunning) / 2
	var v float64
	switch {
	case g.GenTokensTotal > 0 && !sv.lastGenAt.IsZero() && g.At.After(sv.lastGenAt) && g.GenTokensTotal >= sv.lastGen:
		if running >= 1 {
			v = (g.GenTokensTotal - sv.lastGen) / g.At.Sub(sv.lastGenAt).Seconds() / running
		}
	case g.GenTokensTotal == 0 && g.GenThroughput > 0 && g.Running > 0:
		v = g.GenThroughput / float64(g.Running)
	}
	if g.GenTokensTotal > 0 {
		sv.lastGen, sv.lastGenAt = g.GenTokensTotal, g.At
	}
	sv.lastRunning = g.Running
	if v > 0 && full {
		sv.speed.PerRequest = ewma(sv.speed.PerRequest, v)
	}
}

// Servers returns the fleet with live state.
func (s *Scheduler) Servers() []api.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]api.Server, 0, len(s.order))
	for _, name := range s.order {
		sv := s.servers[name]
		as := api.Server{ServerSpec: sv.spec, State: sv.state, Limit: s.effectiveLimitLocked(sv), InFlight: sv.inflight,
			QueueTarget: sv.law.QueueTarget, LastReason: sv.reason, Capacity: sv.cap.MaxRunning,
			Completed: sv.stats.Completed, Errors: sv.stats.Errors, ContextLength: sv.cap.ContextLength, TimeScale: sv.cap.TimeScale}
		if sv.hasG {
			g := sv.gauges
			as.Gauges = &g
		}
		out = append(out, as)
	}
	return out
}

// effectiveLimitLocked is the most gend may have in flight on sv now: the
// largest cap of the jobs that may use it (a static job pins it; resize
// bounds bound it), or the law's limit when no job runs.
func (s *Scheduler) effectiveLimitLocked(sv *server) int {
	lim := -1
	for _, j := range s.jobs {
		if j.cancelled || j.drained || !j.allowed(sv.spec.Name) {
			continue
		}
		lim = max(lim, j.capLocked(sv, false))
	}
	if lim < 0 {
		return sv.law.Limit
	}
	return lim
}

// ServerStats returns cumulative counters per server.
func (s *Scheduler) ServerStats() map[string]ServerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]ServerStats, len(s.servers))
	for name, sv := range s.servers {
		st := sv.stats
		st.LimitChanges = make(map[string]int64, len(sv.stats.LimitChanges))
		for k, v := range sv.stats.LimitChanges {
			st.LimitChanges[k] = v
		}
		out[name] = st
	}
	return out
}

// HasServer reports whether name is in the fleet.
func (s *Scheduler) HasServer(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.servers[name]
	return ok
}
