package sim

import (
	"context"
	"math"
	"sync"
	"time"
)

// serverState is a simulated server's life-cycle state.
type serverState uint8

const (
	stateAlive    serverState = iota
	stateStarting             // listening, /health 503, engine not yet running
	stateDead                 // listener closed
)

func (s serverState) String() string {
	switch s {
	case stateStarting:
		return "starting"
	case stateDead:
		return "dead"
	default:
		return "alive"
	}
}

// snapshot is what the engine publishes after each wake-up for handlers,
// /metrics, /v1/loads, /sim/gpu and Stats.
type snapshot struct {
	state            serverState
	simNow           float64
	running          int
	waiting          int
	waitingTokens    int64
	waitingRetracted int
	used             int64
	ratio            float64
	genThroughput    float64
	lastRetracted    int64
	slow             float64
	c                counters
	busy             bool
	bwRatio          float64 // EMA of DRAM bytes/s ÷ peak
	smRatio          float64 // EMA of the busy fraction
	tensorRatio      float64 // EMA of FLOP/s ÷ peak
}

type inboxItem struct {
	r     *request
	abort bool
}

// engine owns one server's core and runs it on one goroutine (run). Handlers
// talk to it through the inbox (submit, abort) and read its snapshot.
type engine struct {
	s    *server
	core *core

	mu    sync.Mutex // guards inbox and snap
	inbox []inboxItem
	snap  snapshot

	wake chan struct{} // cap 1

	// engine-goroutine state
	state serverState
	lastT float64
	lastC counters
	ema   struct{ bw, sm, tensor float64 }
	died  bool // the death fault has fired
}

func newEngine(s *server, cfg coreConfig) *engine {
	e := &engine{s: s, wake: make(chan struct{}, 1)}
	e.core = newCore(cfg, e.onDone)
	e.snap.slow = 1
	return e
}

func (e *engine) submit(r *request) {
	e.push(inboxItem{r: r})
}

func (e *engine) abort(r *request) {
	e.push(inboxItem{r: r, abort: true})
}

func (e *engine) push(it inboxItem) {
	e.mu.Lock()
	e.inbox = append(e.inbox, it)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *engine) snapshot() snapshot {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.snap
}

// onDone runs on the engine goroutine when a request ends.
func (e *engine) onDone(r *request) {
	r.progress.Store(int64(r.generated))
	if r.out == outFinished && r.seenFirst {
		e.s.metrics.observe(r)
	}
	close(r.done)
}

// run is the engine goroutine: it wakes every tick while busy (or when a
// request arrives while idle, or at the next fault time), advances the
// simulated clock to wall time × speedup and publishes the result.
func (e *engine) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := e.s.f.simNow()
		e.tick(now)
		d, wake := e.nextWake(now)
		timer.Reset(d)
		select {
		case <-ctx.Done():
			e.core.abortAll(outDied)
			e.drainInbox(true)
			e.publish(e.core.now)
			return
		case <-timer.C:
		case <-wake:
		}
	}
}

// tick applies faults and the inbox, then advances the core to now.
func (e *engine) tick(now float64) {
	e.applyFaults(now)
	c := e.core
	if e.state != stateAlive || c.idle() {
		c.now = math.Max(c.now, now)
	}
	e.drainInbox(e.state == stateDead)
	if e.state == stateAlive {
		c.advance(now)
	}
	for _, r := range c.running {
		if r.stream {
			if g := c.generated(r); g != r.lastPublic {
				r.lastPublic = g
				r.progress.Store(int64(g))
				select {
				case r.notify <- struct{}{}:
				default:
				}
			}
		}
	}
	e.publish(now)
}

func (e *engine) drainInbox(dead bool) {
	e.mu.Lock()
	items := e.inbox
	e.inbox = nil
	e.mu.Unlock()
	for _, it := range items {
		switch {
		case dead:
			e.core.abort(it.r, outDied)
		case it.abort:
			e.core.abort(it.r, outFinished)
		default:
			e.core.submit(it.r)
		}
	}
}

func (e *engine) applyFaults(now float64) {
	f := e.s.cfg.Faults
	slow := 1.0
	if sd := f.Slowdown; sd != nil && now >= sd.AtS && (sd.DurationS <= 0 || now < sd.AtS+sd.DurationS) {
		slow = sd.Factor
	}
	e.core.slow = slow
	d := f.Death
	if d == nil {
		return
	}
	if !e.died && now >= d.AtS {
		e.died = true
		e.state = stateDead
		e.s.die()
		e.core.abortAll(outDied)
		e.s.log.Info().Float64("sim_seconds", now).Msg("server died (fault)")
	}
	if e.state == stateDead && d.ReviveAfterS > 0 && now >= d.AtS+d.ReviveAfterS {
		if err := e.s.listen(); err != nil {
			e.s.log.Warn().Err(err).Msg("revive: listen again")
			return // retried at the next wake
		}
		e.state = stateStarting
	}
	if e.state == stateStarting && now >= d.AtS+d.ReviveAfterS+d.WarmupS {
		e.state = stateAlive
		e.s.log.Info().Float64("sim_seconds", now).Msg("server alive again")
	}
}

// nextWake says how long to sleep and whether an arrival may wake the engine.
func (e *engine) nextWake(now float64) (time.Duration, <-chan struct{}) {
	speed := e.s.f.speedup
	next := math.Inf(1) // simulated time of the next fault transition
	if d := e.s.cfg.Faults.Death; d != nil {
		for _, t := range []float64{d.AtS, d.AtS + d.ReviveAfterS, d.AtS + d.ReviveAfterS + d.WarmupS} {
			if t > now && (t != d.AtS+d.ReviveAfterS || d.ReviveAfterS > 0) {
				next = math.Min(next, t)
			}
		}
	}
	if sd := e.s.cfg.Faults.Slowdown; sd != nil {
		for _, t := range []float64{sd.AtS, sd.AtS + sd.DurationS} {
			if t > now {
				next = math.Min(next, t)
			}
		}
	}
	maxSleep := time.Hour
	if !math.IsInf(next, 1) {
		maxSleep = time.Duration((next - now) / speed * float64(time.Second))
	}
	if e.state != stateAlive || e.core.idle() {
		return max(min(maxSleep, time.Hour), time.Millisecond), e.wake
	}
	// Busy: sleep until the committed work is due, at least one tick.
	d := time.Duration((e.core.now - now) / speed * float64(time.Second))
	d = min(max(d, e.s.f.tick), time.Second, max(maxSleep, time.Millisecond))
	return d, nil
}

// publish updates the snapshot and the telemetry averages.
func (e *engine) publish(now float64) {
	c := e.core
	dt := now - e.lastT
	if dt > 0 {
		g := e.s.p.roof.GPU
		a := 1 - math.Exp(-dt/telemetryTau)
		d := func(x, y float64) float64 { return math.Max(x-y, 0) }
		bw := math.Min(d(c.c.bytesRead, e.lastC.bytesRead)/dt/g.BandwidthBytes, 1)
		sm := math.Min(d(c.c.busySeconds, e.lastC.busySeconds)/dt, 1)
		tn := math.Min(d(c.c.flops, e.lastC.flops)/dt/g.PeakFLOPS, 1)
		e.ema.bw += a * (bw - e.ema.bw)
		e.ema.sm += a * (sm - e.ema.sm)
		e.ema.tensor += a * (tn - e.ema.tensor)
		e.lastT, e.lastC = now, c.c
	}
	s := snapshot{
		state:            e.state,
		simNow:           now,
		running:          len(c.running),
		waiting:          len(c.waiting),
		waitingTokens:    c.waitingTokens(),
		waitingRetracted: c.waitingRetracted(),
		used:             c.used(),
		ratio:            c.ratio,
		genThroughput:    c.genThroughput,
		lastRetracted:    c.lastRetracted,
		slow:             c.slow,
		c:                c.c,
		busy:             !c.idle(),
		bwRatio:          e.ema.bw,
		smRatio:          e.ema.sm,
		tensorRatio:      e.ema.tensor,
	}
	if s.running == 0 {
		s.genThroughput = 0
	}
	e.mu.Lock()
	e.snap = s
	e.mu.Unlock()
}

// telemetryTau is the time constant (simulated seconds) of the GPU telemetry averages.
const telemetryTau = 2.0
