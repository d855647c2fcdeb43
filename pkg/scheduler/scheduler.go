package scheduler

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gend-dev/gend/api"
)

// Outcome classifies one attempt (the daemon maps its backend's errors).
type Outcome int

const (
	OK          Outcome = iota
	Overload            // 503/429: retry later, shrink the server; not an attempt
	Unreachable         // connection failed: retry elsewhere, the server may be down
	Transient           // ran and failed: retry, counts as an attempt
	Permanent           // never retry: report the failure
	Fatal               // configuration is wrong: pause the job
	Aborted             // cancelled by gend itself (cancel, drain): not written, redone later
)

var outcomeNames = [...]string{"ok", "overload", "unreachable", "transient", "permanent", "fatal", "aborted"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// Outcomes lists every outcome label, for metrics.
func Outcomes() []string { return outcomeNames[:] }

// Result is what a Sender returns for one attempt.
type Result struct {
	Outcome          Outcome
	Err              error
	PromptTokens     int64
	CompletionTokens int64
	Value            any // the daemon's response, handed back in OnFinish
}

// Task is one request of a job as the scheduler moves it around.
type Task struct {
	Line     int64 // identity inside the job
	Payload  any   // the daemon's item
	Attempts int   // attempts that ran (Transient failures + the final one)
	Bounces  int   // Overload/Unreachable tries (not attempts)
	LastErr  error
	avoid    string
	due      time.Time

	// Live state while in flight.
	server   string
	started  time.Time
	streamed atomic.Int64
	exact    atomic.Bool // streamed is the server's own count

	// Guarded by Scheduler.mu: the attempt's cancel, and whether gend is
	// moving it to a faster server at the end of the job (migrate).
	cancel     context.CancelFunc
	migrating  bool
	migrations int
}

// Streamed records how many output tokens a streaming attempt has produced:
// exactly (the server's own count) or at least (chunks received).
func (t *Task) Streamed(n int64, exact bool) {
	t.streamed.Store(n)
	t.exact.Store(exact)
}

// ServerName is the server of the current attempt.
func (t *Task) ServerName() string { return t.server }

// Server is a fleet member as the scheduler sees it.
type Server struct {
	Spec api.ServerSpec
}

// Capacity is what a server says about itself.
type Capacity struct {
	MaxRunning     int
	MaxTotalTokens int64
	ContextLength  int
	MaxQueued      int     // waiting-queue cap (SGLang --max-queued-requests), 0 = none
	TimeScale      float64 // server seconds per wall second (1 except simulated servers)
}

// Sender sends one attempt; it blocks until the attempt ends. It must honour ctx.
type Sender interface {
	Send(ctx context.Context, server api.ServerSpec, t *Task) Result
}

// Prober reads a server's capacity, gauges and health.
type Prober interface {
	Capacity(ctx context.Context, server api.ServerSpec) (Capacity, error)
	Gauges(ctx context.Context, server api.ServerSpec) (api.Gauges, error)
	Health(ctx context.Context, server api.ServerSpec) error
}

// Events receives what the scheduler decides, for logs and metrics. All
// methods are called without scheduler locks held and must not block.
type Events interface {
	LimitChanged(server string, old, new int, reason string)
	ServerState(server, state, reason string)
}

// Options configure a Scheduler.
type Options struct {
	Sender Sender
	Prober Prober
	Events Events // may be nil
	Law    LawConfig
	Period time.Duration // control period (default 500ms)
	// TokensPerRequest estimates one request's KV footprint for the first limit
	// (default 2048).
	TokensPerRequest float64
	// Rand seeds the retry jitter (nil = random).
	Rand *rand.Rand
}

// Scheduler dispatches the tasks of its jobs onto the fleet.
type Scheduler struct {
	opts    Options
	wake    chan struct{}
	mu      sync.Mutex
	servers map[string]*server
	order   []string // server names in insertion order
	jobs    []*Job
	seq     int64
	stopped bool // no new dispatch (drain)
	rnd     *rand.Rand
	wg      sync.WaitGroup // send goroutines
	ctx     context.Context
	ctlWG   sync.WaitGroup // control goroutines
	lat     dispatchClock  // dispatch latency (latency.go)
}

// New builds a scheduler; Run starts it.
func New(opts Options) *Scheduler {
	if opts.Period <= 0 {
		opts.Period = 500 * time.Millisecond
	}
	if opts.Law.Max == 0 {
		opts.Law = DefaultLawConfig()
	}
	if opts.TokensPerRequest <= 0 {
		opts.TokensPerRequest = 2048
	}
	r := opts.Rand
	if r == nil {
		r = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	return &Scheduler{opts: opts, wake: make(chan struct{}, 1), servers: map[string]*server{}, rnd: r}
}

func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run dispatches until ctx is done, then waits for the control loops. Send
// goroutines are joined by Wait.
func (s *Scheduler) Run(ctx context.Context) error {
	s.mu.Lock()
	s.ctx = ctx
	for _, name := range s.order {
		s.startControlLocked(s.servers[name])
	}
	s.mu.Unlock()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := s.dispatch()
		if !next.IsZero() {
			d := time.Until(next)
			if d < time.Millisecond {
				d = time.Millisecond
			}
			timer.Reset(d)
		} else {
			timer.Reset(time.Hour)
		}
		select {
		case <-ctx.Done():
			s.ctlWG.Wait()
			return nil
		case <-s.wake:
		case <-timer.C:
		}
	}
}

// StopDispatch stops starting new attempts (drain). In-flight attempts go on.
func (s *Scheduler) StopDispatch() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
}

// InFlight is the number of attempts running now.
func (s *Scheduler) InFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, sv := range s.servers {
		n += sv.inflight
	}
	return n
}

// Wait blocks until all in-flight attempts have returned or ctx is done.
func (s *Scheduler) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// --- jobs ---

// JobOptions configure a job in the scheduler.
type JobOptions struct {
	ID          string
	Priority    int
	Servers     []string // allowed servers; empty = the whole fleet
	Limits      api.SchedulerSpec
	MaxAttempts int
	Buffer      int // bounded queue of new tasks (default 4096)
	// AttemptTimeout bounds one attempt (0 = none).
	AttemptTimeout time.Duration
	// OnFinish is called once per task with its final result (OK, Permanent,
	// or a Transient after the last attempt). It runs on the attempt's
	// goroutine. An error puts the task back (the job pauses with the reason:
	// output unwritable) so nothing is lost.
	OnFinish func(t *Task, r Result) error
	// OnPause is called when the scheduler pauses the job by itself (fatal
	// configuration error, output unwritable).
	OnPause func(reason string)
	// OnDrained is called once when the input is done and nothing is left.
	OnDrained func()
	// MaxFinishing bounds the final results handed to OnFinish and not yet
	// written (default 1024): when the output falls behind (a slow disk, a
	// starved CPU), dispatch waits for it instead of piling up finished
	// attempts in memory.
	MaxFinishing int
}

// Job is a job's queue inside the scheduler.
type Job struct {
	s        *Scheduler
	opts     JobOptions
	seq      int64
	ctx      context.Context
	cancel   context.CancelFunc
	in       chan *Task
	inputEnd atomic.Bool

	// guarded by s.mu
	limits    api.SchedulerSpec
	paused    bool
	cancelled bool
	retries   taskHeap
	inflight  int
	perServer map[string]int
	running   map[*Task]struct{}
	drained   bool
	stats     JobStats
	// completed requests' output tokens, for the mean at the end of the job
	doneTokens, doneCount int64
	migrating             int // attempts cancelled to move, not back yet
	// finishing counts final results handed to OnFinish and not yet
	// returned: the job is not drained until they are written.
	finishing int
}

// JobStats are a job's scheduler counters.
type JobStats struct {
	Dispatched int64
	Retries    int64
	Finished   int64
	Migrated   int64 // attempts moved off a slow server at the end of the job
}

// AddJob registers a job. Its tasks are pushed with Push.
func (s *Scheduler) AddJob(ctx context.Context, o JobOptions) *Job {
	if o.Buffer <= 0 {
		o.Buffer = 4096
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 5
	}
	if o.MaxFinishing <= 0 {
		o.MaxFinishing = 1024
	}
	jctx, cancel := context.WithCancel(ctx)
	j := &Job{s: s, opts: o, ctx: jctx, cancel: cancel, in: make(chan *Task, o.Buffer),
		limits: o.Limits, perServer: map[string]int{}, running: map[*Task]struct{}{}}
	s.mu.Lock()
	s.seq++
	j.seq = s.seq
	s.jobs = append(s.jobs, j)
	sort.SliceStable(s.jobs, func(a, b int) bool {
		if s.jobs[a].opts.Priority != s.jobs[b].opts.Priority {
			return s.jobs[a].opts.Priority > s.jobs[b].opts.Priority
		}
		return s.jobs[a].seq < s.jobs[b].seq
	})
	s.mu.Unlock()
	s.poke()
	return j
}

// Push queues a new task, blocking while the job's buffer is full.
func (j *Job) Push(ctx context.Context, t *Task) error {
	select {
	case j.in <- t:
		j.s.poke()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-j.ctx.Done():
		return fmt.Errorf("job %s: %w", j.opts.ID, context.Canceled)
	}
}

// InputDone says no more tasks will be pushed.
func (j *Job) InputDone() {
	j.inputEnd.Store(true)
	j.s.poke()
}

// InputEnded reports whether InputDone was called.
func (j *Job) InputEnded() bool { return j.inputEnd.Load() }

// Pause stops dispatching this job's tasks; in-flight ones finish.
func (j *Job) Pause() {
	j.s.mu.Lock()
	j.paused = true
	j.s.mu.Unlock()
}

// Resume lets the job dispatch again.
func (j *Job) Resume() {
	j.s.mu.Lock()
	j.paused = false
	j.s.mu.Unlock()
	j.s.poke()
}

// Cancel aborts the job's in-flight attempts and removes it.
func (j *Job) Cancel() {
	j.s.mu.Lock()
	j.cancelled = true
	j.s.mu.Unlock()
	j.cancel()
	j.s.poke()
}

// Remove forgets a finished job.
func (j *Job) Remove() {
	j.s.mu.Lock()
	for i, x := range j.s.jobs {
		if x == j {
			j.s.jobs = append(j.s.jobs[:i], j.s.jobs[i+1:]...)
			break
		}
	}
	j.s.mu.Unlock()
	j.cancel()
}

// SetLimits applies a resize; it takes effect at the next dispatch.
func (j *Job) SetLimits(l api.SchedulerSpec) {
	j.s.mu.Lock()
	j.limits = l
	j.s.mu.Unlock()
	j.s.poke()
}

// Limits returns the job's current scheduler spec.
func (j *Job) Limits() api.SchedulerSpec {
	j.s.mu.Lock()
	defer j.s.mu.Unlock()
	return j.limits
}

// Snapshot is a job's live scheduler state.
type Snapshot struct {
	InFlight int
	Queued   int // new tasks buffered + retries waiting
	Retrying int
	Stats    JobStats
	Servers  []JobServer
	// InFlightAges is, per in-flight attempt, seconds since it started and
	// output tokens streamed so far (0 when not streaming).
	InFlightAges []InFlightAge
}

// InFlightAge describes one in-flight attempt, for the ETA.
type InFlightAge struct {
	Server   string
	Seconds  float64
	Streamed int64
	// Exact: Streamed is the server's own count of output tokens (usage on
	// each chunk), not a lower bound.
	Exact bool
}

// JobServer is one server's share of a job.
type JobServer struct {
	Name        string
	Limit       int
	InFlight    int
	QueueTarget int
	State       string
	Reason      string
}

// Snapshot reads the job's live state.
func (j *Job) Snapshot(now time.Time) Snapshot {
	s := j.s
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := Snapshot{InFlight: j.inflight, Queued: len(j.in) + len(j.retries), Retrying: len(j.retries), Stats: j.stats}
	for _, name := range s.order {
		sv := s.servers[name]
		if !j.allowed(name) {
			continue
		}
		snap.Servers = append(snap.Servers, JobServer{Name: name, Limit: j.capLocked(sv, false), InFlight: j.perServer[name],
			QueueTarget: sv.law.QueueTarget, State: sv.state, Reason: sv.reason})
	}
	snap.InFlightAges = make([]InFlightAge, 0, len(j.running))
	for t := range j.running {
		snap.InFlightAges = append(snap.InFlightAges, InFlightAge{Server: t.server, Seconds: now.Sub(t.started).Seconds(), Streamed: t.streamed.Load(), Exact: t.exact.Load()})
	}
	return snap
}

func (j *Job) allowed(server string) bool {
	if len(j.opts.Servers) == 0 {
		return true
	}
	for _, n := range j.opts.Servers {
		if n == server {
			return true
		}
	}
	return false
}

// capLocked is the most this job may have in flight on sv.
func (j *Job) capLocked(sv *server, tail bool) int {
	l := j.limits
	max := l.PerServerMax
	if max <= 0 {
		max = 1024
	}
	var c int
	if l.Mode == api.ModeStatic {
		c = l.PerServer
		if c <= 0 {
			c = 64
		}
	} else {
		c = sv.law.Limit
		if tail && sv.law.QueueTarget > 0 {
			// End of the job: don't queue behind busy servers.
			c = maxInt(1, c-sv.law.QueueTarget)
		}
	}
	if c > max {
		c = max
	}
	return c
}

// pull takes the next task that may be dispatched now (retries first).
func (j *Job) pullLocked(now time.Time) *Task {
	if len(j.retries) > 0 && !j.retries[0].due.After(now) {
		return heap.Pop(&j.retries).(*Task)
	}
	select {
	case t := <-j.in:
		return t
	default:
		return nil
	}
}

func (j *Job) pendingLocked() int { return len(j.in) + len(j.retries) }

// --- dispatch ---

// dispatch starts every attempt that fits now and returns when the next
// retry becomes due (zero if none).
func (s *Scheduler) dispatch() time.Time {
	now := time.Now()
	var next time.Time
	var drained []*Job
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return next
	}
	// Sum of queue targets, for tail detection.
	qsum := 0
	for _, sv := range s.servers {
		if sv.state == StateHealthy {
			qsum += sv.law.QueueTarget
		}
	}
	for _, j := range s.jobs {
		if j.cancelled || j.drained {
			continue
		}
		if j.inputEnd.Load() && j.pendingLocked() == 0 && j.inflight == 0 && j.finishing == 0 {
			j.drained = true
			drained = append(drained, j)
			continue
		}
		if j.paused || j.finishing >= j.opts.MaxFinishing {
			continue
		}
		tail := j.inputEnd.Load() && j.pendingLocked() <= qsum
		end := s.endOfJobLocked(j)
		for {
			if j.limits.TotalMax > 0 && j.inflight >= j.limits.TotalMax {
				break
			}
			if end != nil {
				end.pending = j.pendingLocked()
			}
			sv := s.pickOtherLocked(j, tail, "", end)
			if sv == nil {
				break
			}
			t := j.pullLocked(now)
			if t == nil {
				break
			}
			if t.avoid == sv.spec.Name {
				if alt := s.pickOtherLocked(j, tail, sv.spec.Name, end); alt != nil {
					sv = alt
				}
			}
			s.startLocked(j, sv, t, now)
		}
		if end != nil && j.pendingLocked() == 0 && !j.paused {
			s.migrateLocked(j, tail)
		}
		if len(j.retries) > 0 {
			if d := j.retries[0].due; next.IsZero() || d.Before(next) {
				next = d
			}
		}
	}
	s.lat.passDoneLocked()
	s.mu.Unlock()
	for _, j := range drained {
		if j.opts.OnDrained != nil {
			j.opts.OnDrained()
		}
	}
	return next
}

// endOfJob is what dispatch knows at the end of an adaptive job's input,
// to keep tasks off servers too slow to finish them before the rest of the
// fleet drains the queue (TailSkip).
type endOfJob struct {
	pending int
	rate    float64 // fleet completions per second
	meanOut float64
	vBest   float64
}

// endOfJobLocked returns the end-of-job view of an adaptive job whose input
// has ended, or nil.
func (s *Scheduler) endOfJobLocked(j *Job) *endOfJob {
	if !j.inputEnd.Load() || j.limits.Mode == api.ModeStatic || j.doneCount < 20 {
		return nil
	}
	e := &endOfJob{meanOut: float64(j.doneTokens) / float64(j.doneCount)}
	for _, name := range s.order {
		sv := s.servers[name]
		if sv.state != StateHealthy || !j.allowed(name) {
			continue
		}
		e.rate += sv.complRate
		e.vBest = max(e.vBest, sv.speed.PerRequest)
	}
	return e
}

// pickOtherLocked returns the allowed healthy server (not skip) with the
// most free slots for j; end, when set, keeps slow servers out.
func (s *Scheduler) pickOtherLocked(j *Job, tail bool, skip string, end *endOfJob) *server {
	var best *server
	bestFree := 0
	for _, name := range s.order {
		sv := s.servers[name]
		if sv.state != StateHealthy || name == skip || !j.allowed(name) || !sv.law.Started {
			continue
		}
		if end != nil && TailSkip(end.pending, end.rate, end.meanOut, sv.speed.PerRequest, end.vBest) {
			continue
		}
		free := j.capLocked(sv, tail) - sv.inflight
		if free > bestFree {
			best, bestFree = sv, free
		}
	}
	return best
}

func (s *Scheduler) startLocked(j *Job, sv *server, t *Task, now time.Time) {
	sv.inflight++
	j.inflight++
	j.perServer[sv.spec.Name]++
	j.stats.Dispatched++
	t.server = sv.spec.Name
	t.started = now
	t.streamed.Store(0)
	t.exact.Store(false)
	j.running[t] = struct{}{}
	spec := sv.spec
	freed := s.lat.takeLocked()
	actx, acancel := context.WithCancel(j.ctx)
	t.cancel = acancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx := actx
		var cancel context.CancelFunc
		if j.opts.AttemptTimeout > 0 {
			ctx, cancel = context.WithTimeout(ctx, j.opts.AttemptTimeout)
		}
		s.lat.observe(freed)
		r := s.opts.Sender.Send(ctx, spec, t)
		if cancel != nil {
			cancel()
		}
		acancel()
		if j.ctx.Err() != nil && r.Outcome != OK {
			r.Outcome = Aborted
		}
		s.finish(j, sv, t, r)
	}()
}

// finish accounts one attempt and decides the task's fate.
func (s *Scheduler) finish(j *Job, sv *server, t *Task, r Result) {
	final := false
	s.mu.Lock()
	s.lat.slotFreedLocked(time.Now())
	sv.inflight--
	j.inflight--
	j.perServer[sv.spec.Name]--
	delete(j.running, t)
	t.cancel = nil
	moved := t.migrating
	t.migrating = false
	if moved {
		j.migrating--
	}
	if moved && r.Outcome != OK && j.ctx.Err() == nil {
		// Cancelled by migrateLocked: run it again elsewhere at once. Not
		// an attempt and not the server's fault.
		t.avoid = sv.spec.Name
		t.due = time.Now()
		heap.Push(&j.retries, t)
		j.stats.Migrated++
		s.mu.Unlock()
		s.poke()
		return
	}
	sv.count(r)
	if r.Outcome == OK {
		j.doneTokens += r.CompletionTokens
		j.doneCount++
	}
	switch r.Outcome {
	case OK, Permanent:
		final = true
	case Aborted:
		// Not written: redone after a restart (or dropped with the job).
	case Fatal:
		t.LastErr = r.Err
		heap.Push(&j.retries, t)
		j.paused = true
	case Overload, Unreachable:
		t.LastErr = r.Err
		t.Bounces++
		if t.Bounces > 200 {
			t.Attempts++
		}
		if t.Attempts >= j.opts.MaxAttempts {
			final = true
			break
		}
		t.avoid = sv.spec.Name
		delay := time.Duration(0)
		if r.Outcome == Overload {
			delay = backoff(s.rnd, 200*time.Millisecond, t.Bounces, 10*time.Second)
		} else if t.Bounces > 1 {
			delay = backoff(s.rnd, 100*time.Millisecond, t.Bounces-1, 5*time.Second)
		}
		t.due = time.Now().Add(delay)
		heap.Push(&j.retries, t)
		j.stats.Retries++
	case Transient:
		t.LastErr = r.Err
		t.Attempts++
		if t.Attempts >= j.opts.MaxAttempts {
			final = true
			break
		}
		t.avoid = sv.spec.Name
		// The first retry goes at once (to another server when there is
		// one: a cut connection or a 500 is rarely the prompt's fault, and
		// near the end of a job a long request retried late is the
		// makespan); later ones back off from 500 ms to 30 s.
		delay := time.Duration(0)
		if t.Attempts > 1 {
			delay = backoff(s.rnd, 500*time.Millisecond, t.Attempts-1, 30*time.Second)
		}
		t.due = time.Now().Add(delay)
		heap.Push(&j.retries, t)
		j.stats.Retries++
	}
	ejected := false
	if r.Outcome == Unreachable {
		sv.consecUnreachable++
		if sv.consecUnreachable >= 3 && sv.state == StateHealthy {
			s.ejectLocked(sv, "unreachable")
			ejected = true
		}
	} else if r.Outcome != Aborted {
		sv.consecUnreachable = 0
	}
	fatal := r.Outcome == Fatal
	if final {
		// Counted until OnFinish returns, so the job does not look drained
		// (and its output closed) while results are still being written.
		j.finishing++
	}
	s.mu.Unlock()
	if ejected {
		s.event(sv.spec.Name, StateDown, "unreachable")
	}
	if fatal && j.opts.OnPause != nil {
		j.opts.OnPause(fmt.Sprintf("server %s: %v", sv.spec.Name, r.Err))
	}
	if final {
		if r.Outcome == Overload || r.Outcome == Unreachable {
			r.Outcome = Transient
		}
		if err := j.opts.OnFinish(t, r); err != nil {
			s.mu.Lock()
			j.finishing--
			t.due = time.Now()
			// Keep the result itself: the task is re-run after resume.
			heap.Push(&j.retries, t)
			j.paused = true
			s.mu.Unlock()
			if j.opts.OnPause != nil {
				j.opts.OnPause(err.Error())
			}
		} else {
			s.mu.Lock()
			j.finishing--
			j.stats.Finished++
			s.mu.Unlock()
		}
	}
	s.poke()
}

func backoff(r *rand.Rand, base time.Duration, n int, max time.Duration) time.Duration {
	if n < 1 {
		n = 1
	}
	d := base << uint(minInt(n-1, 20))
	if d > max || d <= 0 {
		d = max
	}
	// Full jitter in [d/2, d].
	return d/2 + time.Duration(r.Int64N(int64(d/2)+1))
}

func minInt(a, b int) int {
	if a < b {
		return a
	}
	return b
}

// ErrUnknownServer is returned for a server name not in the fleet.
var ErrUnknownServer = errors.New("unknown server")

// taskHeap orders retries by due time.
type taskHeap []*Task

func (h taskHeap) Len() int           { return len(h) }
func (h taskHeap) Less(a, b int) bool { return h[a].due.Before(h[b].due) }
func (h taskHeap) Swap(a, b int)      { h[a], h[b] = h[b], h[a] }
func (h *taskHeap) Push(x any)        { *h = append(*h, x.(*Task)) }
func (h *taskHeap) Pop() any {
	old := *h
	n := len(old)
	t := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return t
}

// migrateLocked runs when an adaptive job has nothing left to dispatch:
// while faster servers have free slots, it cancels the oldest attempts on
// servers MigrateWorth calls slow, and finish puts them back to run on a
// faster one (TailSkip keeps them off the slow one).
func (s *Scheduler) migrateLocked(j *Job, tail bool) {
	free, vBest := 0, 0.0
	for _, name := range s.order {
		sv := s.servers[name]
		if sv.state != StateHealthy || !j.allowed(name) || !sv.law.Started {
			continue
		}
		if f := j.capLocked(sv, tail) - sv.inflight; f > 0 && sv.speed.PerRequest > 0 {
			free += f
			vBest = max(vBest, sv.speed.PerRequest)
		}
	}
	free -= j.migrating
	if free <= 0 || vBest <= 0 {
		return
	}
	var cands []*Task
	for t := range j.running {
		sv := s.servers[t.server]
		if sv == nil || t.migrating || t.cancel == nil || t.migrations >= maxMigrations || !MigrateWorth(sv.speed.PerRequest, vBest) {
			continue
		}
		cands = append(cands, t)
	}
	// Oldest first: with heavy-tailed lengths they are the likeliest to run
	// longest.
	sort.Slice(cands, func(a, b int) bool { return cands[a].started.Before(cands[b].started) })
	if len(cands) > 0 {
	}
	for _, t := range cands[:min(free, len(cands))] {
		t.migrating = true
		t.migrations++
		j.migrating++
		t.cancel()
	}
}
