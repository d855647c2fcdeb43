package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gend-dev/gend/api"
)

// fakeFleet is a hand-written fake: each server runs an attempt for a fixed
// time; function fields change behaviour per test.
type fakeFleet struct {
	mu       sync.Mutex
	dur      map[string]time.Duration
	down     map[string]bool
	fail     func(server string, t *Task) Outcome
	inflight map[string]int
	peak     map[string]int
	sent     map[int64]int // line → attempts sent
	capacity int
	// rate is each server's decode speed per running request (tokens/s);
	// gen integrates it into the generation counter the gauges report.
	rate  map[string]float64
	gen   map[string]float64
	genAt map[string]time.Time
}

func newFakeFleet(capacity int, servers ...string) *fakeFleet {
	f := &fakeFleet{dur: map[string]time.Duration{}, down: map[string]bool{}, inflight: map[string]int{},
		peak: map[string]int{}, sent: map[int64]int{}, capacity: capacity,
		rate: map[string]float64{}, gen: map[string]float64{}, genAt: map[string]time.Time{}}
	for _, s := range servers {
		f.dur[s] = time.Second
	}
	return f
}

func (f *fakeFleet) Send(ctx context.Context, s api.ServerSpec, t *Task) Result {
	f.mu.Lock()
	if f.down[s.Name] {
		f.mu.Unlock()
		return Result{Outcome: Unreachable, Err: errors.New("connection refused")}
	}
	f.inflight[s.Name]++
	if f.inflight[s.Name] > f.peak[s.Name] {
		f.peak[s.Name] = f.inflight[s.Name]
	}
	f.sent[t.Line]++
	d := f.dur[s.Name]
	fail := f.fail
	f.mu.Unlock()
	defer func() { f.mu.Lock(); f.inflight[s.Name]--; f.mu.Unlock() }()
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return Result{Outcome: Transient, Err: ctx.Err()}
	}
	if fail != nil {
		if o := fail(s.Name, t); o != OK {
			return Result{Outcome: o, Err: fmt.Errorf("fake %s", o)}
		}
	}
	return Result{Outcome: OK, CompletionTokens: 10}
}

func (f *fakeFleet) Capacity(ctx context.Context, s api.ServerSpec) (Capacity, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down[s.Name] {
		return Capacity{}, errors.New("down")
	}
	return Capacity{MaxRunning: f.capacity}, nil
}

func (f *fakeFleet) Gauges(ctx context.Context, s api.ServerSpec) (api.Gauges, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down[s.Name] {
		return api.Gauges{}, errors.New("down")
	}
	n := f.inflight[s.Name]
	run := min(n, f.capacity)
	now := time.Now()
	if at, ok := f.genAt[s.Name]; ok {
		f.gen[s.Name] += float64(run) * f.rate[s.Name] * now.Sub(at).Seconds()
	}
	f.genAt[s.Name] = now
	return api.Gauges{At: now, Source: "sglang-loads", Running: run, Queued: n - run, TokenUsage: float64(run) / float64(f.capacity+1),
		GenTokensTotal: f.gen[s.Name]}, nil
}

func (f *fakeFleet) Health(ctx context.Context, s api.ServerSpec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down[s.Name] {
		return errors.New("down")
	}
	return nil
}

type finished struct {
	mu    sync.Mutex
	lines map[int64]Outcome
}

func (r *finished) onFinish(t *Task, res Result) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.lines[t.Line]; dup {
		panic(fmt.Sprintf("line %d finished twice", t.Line))
	}
	r.lines[t.Line] = res.Outcome
	return nil
}

func (r *finished) count() int { r.mu.Lock(); defer r.mu.Unlock(); return len(r.lines) }

// harness starts a scheduler on the fake fleet and a job fed n tasks.
func harness(t *testing.T, f *fakeFleet, servers []string, n int, limits api.SchedulerSpec) (*Scheduler, *Job, *finished, chan struct{}, context.CancelFunc) {
	t.Helper()
	s := New(Options{Sender: f, Prober: f, Period: 100 * time.Millisecond})
	for _, name := range servers {
		if err := s.AddServer(api.ServerSpec{Name: name, URL: "http://" + name}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	go s.Run(ctx)
	res := &finished{lines: map[int64]Outcome{}}
	drained := make(chan struct{})
	j := s.AddJob(ctx, JobOptions{ID: "j", Limits: limits, MaxAttempts: 3, OnFinish: res.onFinish, OnDrained: func() { close(drained) }})
	go func() {
		for i := 1; i <= n; i++ {
			if err := j.Push(ctx, &Task{Line: int64(i)}); err != nil {
				return
			}
		}
		j.InputDone()
	}()
	return s, j, res, drained, cancel
}

func TestFillsCapacityAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeFleet(40, "a", "b")
		f.dur["a"], f.dur["b"] = 10*time.Second, 10*time.Second
		s, _, _, _, cancel := harness(t, f, []string{"a", "b"}, 1000, api.SchedulerSpec{Mode: api.ModeAdaptive})
		defer cancel()
		time.Sleep(50 * time.Millisecond)
		synctest.Wait()
		// No stagger: both servers hold their capacity plus a queue within
		// the first control period.
		if got := s.InFlight(); got < 80 {
			t.Fatalf("in flight after 50ms = %d, want >= 80 (2 servers x capacity 40)", got)
		}
		cancel()
		time.Sleep(20 * time.Second)
		synctest.Wait()
	})
}

func TestPauseResumeResize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeFleet(40, "a")
		s, j, res, drained, cancel := harness(t, f, []string{"a"}, 300, api.SchedulerSpec{Mode: api.ModeStatic, PerServer: 10, PerServerMax: 1024})
		defer cancel()
		time.Sleep(50 * time.Millisecond)
		synctest.Wait()
		if got := s.InFlight(); got != 10 {
			t.Fatalf("static 10: in flight = %d", got)
		}
		j.Pause()
		time.Sleep(1500 * time.Millisecond) // attempts last 1s: all finish
		synctest.Wait()
		done := res.count()
		if got := s.InFlight(); got != 0 {
			t.Fatalf("paused: in flight = %d, want 0", got)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if res.count() != done {
			t.Fatalf("paused: completed rose from %d to %d", done, res.count())
		}
		j.Resume()
		j.SetLimits(api.SchedulerSpec{Mode: api.ModeStatic, PerServer: 25, PerServerMax: 1024})
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		if got := s.InFlight(); got != 25 {
			t.Fatalf("after resize to 25: in flight = %d", got)
		}
		j.SetLimits(api.SchedulerSpec{Mode: api.ModeStatic, PerServer: 25, PerServerMax: 5})
		time.Sleep(1100 * time.Millisecond)
		synctest.Wait()
		if got := s.InFlight(); got > 5 {
			t.Fatalf("per_server_max 5 caps static 25: in flight = %d", got)
		}
		<-drained
		if res.count() != 300 {
			t.Fatalf("finished %d of 300", res.count())
		}
	})
}

func TestRetriesAndFailover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeFleet(20, "a", "b")
		var mu sync.Mutex
		tries := map[int64]int{}
		f.fail = func(server string, t *Task) Outcome {
			mu.Lock()
			defer mu.Unlock()
			tries[t.Line]++
			switch {
			case t.Line%10 == 0:
				return Permanent
			case t.Line%7 == 0 && tries[t.Line] == 1:
				return Transient
			case t.Line == 13:
				return Transient // always: fails after MaxAttempts
			}
			return OK
		}
		_, _, res, drained, cancel := harness(t, f, []string{"a", "b"}, 200, api.SchedulerSpec{Mode: api.ModeAdaptive})
		defer cancel()
		// Server b dies for a while: its work goes to a.
		time.Sleep(2 * time.Second)
		f.mu.Lock()
		f.down["b"] = true
		f.mu.Unlock()
		time.Sleep(5 * time.Second)
		f.mu.Lock()
		f.down["b"] = false
		f.mu.Unlock()
		<-drained
		if res.count() != 200 {
			t.Fatalf("finished %d of 200", res.count())
		}
		res.mu.Lock()
		defer res.mu.Unlock()
		if res.lines[10] != Permanent || res.lines[13] != Transient || res.lines[14] != OK {
			t.Fatalf("outcomes: 10=%v 13=%v 14=%v", res.lines[10], res.lines[13], res.lines[14])
		}
		mu.Lock()
		defer mu.Unlock()
		if tries[13] != 3 {
			t.Fatalf("line 13 tried %d times, want max_attempts 3", tries[13])
		}
		if tries[10] != 1 {
			t.Fatalf("permanent failure retried: %d tries", tries[10])
		}
	})
}

func TestEjectAndReadmit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeFleet(10, "a", "b")
		s, _, res, drained, cancel := harness(t, f, []string{"a", "b"}, 400, api.SchedulerSpec{Mode: api.ModeAdaptive})
		defer cancel()
		time.Sleep(500 * time.Millisecond)
		f.mu.Lock()
		f.down["b"] = true
		f.mu.Unlock()
		time.Sleep(3 * time.Second)
		synctest.Wait()
		state := func(name string) string {
			for _, sv := range s.Servers() {
				if sv.Name == name {
					return sv.State
				}
			}
			return ""
		}
		if st := state("b"); st != StateDown {
			t.Fatalf("b state %q, want down", st)
		}
		f.mu.Lock()
		f.down["b"] = false
		f.mu.Unlock()
		time.Sleep(20 * time.Second)
		synctest.Wait()
		if st := state("b"); st != StateHealthy {
			t.Fatalf("b state %q after revival, want healthy", st)
		}
		<-drained
		if res.count() != 400 {
			t.Fatalf("finished %d of 400", res.count())
		}
	})
}

func TestPriorityAndBackfill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeFleet(10, "a")
		s := New(Options{Sender: f, Prober: f, Period: 100 * time.Millisecond})
		_ = s.AddServer(api.ServerSpec{Name: "a"})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		lo := &finished{lines: map[int64]Outcome{}}
		hi := &finished{lines: map[int64]Outcome{}}
		jl := s.AddJob(ctx, JobOptions{ID: "lo", Priority: 0, Limits: api.SchedulerSpec{Mode: api.ModeStatic, PerServer: 10}, OnFinish: lo.onFinish})
		jh := s.AddJob(ctx, JobOptions{ID: "hi", Priority: 5, Limits: api.SchedulerSpec{Mode: api.ModeStatic, PerServer: 10}, OnFinish: hi.onFinish})
		for i := 1; i <= 50; i++ {
			_ = jl.Push(ctx, &Task{Line: int64(i)})
		}
		for i := 1; i <= 5; i++ {
			_ = jh.Push(ctx, &Task{Line: int64(i)})
		}
		jh.InputDone()
		// Both jobs have work before the server is admitted, so the first
		// dispatch sees both queues.
		go s.Run(ctx)
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		// The high-priority job takes its 5 slots first; the low one fills the
		// 5 it leaves idle.
		if a, b := jh.Snapshot(time.Now()).InFlight, jl.Snapshot(time.Now()).InFlight; a != 5 || b != 5 {
			t.Fatalf("in flight hi=%d lo=%d, want 5 and 5", a, b)
		}
		cancel()
		time.Sleep(2 * time.Second)
		synctest.Wait()
	})
}

// At the end of an adaptive job, work leaves a server that became much
// slower than the rest: no new task goes there once the queue drains faster
// than it would finish one, and its running attempts move to idle fast
// servers. Static mode does neither.
func TestEndOfJobMovesWorkOffSlowServer(t *testing.T) {
	tests := []struct {
		name         string
		limits       api.SchedulerSpec
		wantMigrated bool
		minElapsed   time.Duration
		maxElapsed   time.Duration
	}{
		{"adaptive", api.SchedulerSpec{Mode: api.ModeAdaptive}, true, 0, 15 * time.Second},
		{"static", api.SchedulerSpec{Mode: api.ModeStatic, PerServer: 8}, false, 17 * time.Second, time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeFleet(4, "fast", "slow")
				// 10 output tokens per request: speed × duration = 10.
				f.rate["fast"], f.rate["slow"] = 10, 10
				start := time.Now()
				_, j, res, drained, cancel := harness(t, f, []string{"fast", "slow"}, 160, tt.limits)
				defer cancel()
				// Both take 1 s per request until "slow" slows down 10×
				// shortly before the queue runs out (about 10 s).
				time.Sleep(7 * time.Second)
				f.mu.Lock()
				f.dur["slow"], f.rate["slow"] = 10*time.Second, 1
				f.mu.Unlock()
				<-drained
				elapsed := time.Since(start)
				if res.count() != 160 {
					t.Fatalf("finished %d of 160", res.count())
				}
				st := j.Snapshot(time.Now()).Stats
				if (st.Migrated > 0) != tt.wantMigrated {
					t.Fatalf("migrated %d attempts, want migration %v", st.Migrated, tt.wantMigrated)
				}
				if elapsed < tt.minElapsed || elapsed > tt.maxElapsed {
					t.Fatalf("job took %v, want between %v and %v", elapsed, tt.minElapsed, tt.maxElapsed)
				}
				cancel()
				time.Sleep(20 * time.Second)
				synctest.Wait()
			})
		})
	}
}

// The job is drained only once every final result has been written: a slow
// OnFinish (a sink busy with fsync) must not let OnDrained run first, or
// the daemon closes the output under the results still being written.
func TestDrainedWaitsForOnFinish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeFleet(50, "a")
		f.dur["a"] = 10 * time.Millisecond
		s := New(Options{Sender: f, Prober: f, Period: 100 * time.Millisecond})
		_ = s.AddServer(api.ServerSpec{Name: "a"})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go s.Run(ctx)
		var mu sync.Mutex
		written, atDrain := 0, -1
		drained := make(chan struct{})
		j := s.AddJob(ctx, JobOptions{ID: "j", Limits: api.SchedulerSpec{Mode: api.ModeStatic, PerServer: 50},
			OnFinish: func(t *Task, r Result) error {
				time.Sleep(time.Second) // slow output
				mu.Lock()
				written++
				mu.Unlock()
				return nil
			},
			OnDrained: func() {
				mu.Lock()
				atDrain = written
				mu.Unlock()
				close(drained)
			}})
		for i := 1; i <= 100; i++ {
			_ = j.Push(ctx, &Task{Line: int64(i)})
		}
		j.InputDone()
		<-drained
		mu.Lock()
		defer mu.Unlock()
		if atDrain != 100 {
			t.Fatalf("OnDrained ran with %d of 100 results written", atDrain)
		}
	})
}

// When the output falls behind, dispatch waits for it: no more than
// MaxFinishing finished results wait for OnFinish, and nothing is lost.
func TestSlowOutputBoundsFinishing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeFleet(50, "a")
		f.dur["a"] = 10 * time.Millisecond
		s := New(Options{Sender: f, Prober: f, Period: 100 * time.Millisecond})
		_ = s.AddServer(api.ServerSpec{Name: "a"})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go s.Run(ctx)
		var mu sync.Mutex
		waiting, peak, written := 0, 0, 0
		drained := make(chan struct{})
		j := s.AddJob(ctx, JobOptions{ID: "j", Limits: api.SchedulerSpec{Mode: api.ModeStatic, PerServer: 50}, MaxFinishing: 20,
			OnFinish: func(t *Task, r Result) error {
				mu.Lock()
				waiting++
				peak = max(peak, waiting)
				mu.Unlock()
				time.Sleep(100 * time.Millisecond) // a disk far slower than the servers
				mu.Lock()
				waiting--
				written++
				mu.Unlock()
				return nil
			},
			OnDrained: func() { close(drained) }})
		// Other events (control ticks, other jobs, resizes) wake dispatch
		// while every finished attempt waits for the output.
		go func() {
			for {
				select {
				case <-drained:
					return
				case <-time.After(5 * time.Millisecond):
					s.poke()
				}
			}
		}()
		for i := 1; i <= 300; i++ {
			_ = j.Push(ctx, &Task{Line: int64(i)})
		}
		j.InputDone()
		<-drained
		mu.Lock()
		defer mu.Unlock()
		if written != 300 {
			t.Fatalf("wrote %d of 300", written)
		}
		// At most MaxFinishing waiting, plus the attempts already in flight
		// when dispatch stopped (the per-server limit).
		if peak > 20+50 {
			t.Fatalf("%d results waited for the output at once, want ≤ 70 (MaxFinishing 20 + 50 in flight)", peak)
		}
		if peak < 20 {
			t.Fatalf("peak %d: the output never fell behind; the test does not test the bound", peak)
		}
	})
}

// The fleet view shows the limit in force: a static job pins it, whatever
// the law would allow.
func TestServersShowEffectiveLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeFleet(40, "a")
		f.dur["a"] = time.Hour
		s, _, _, _, cancel := harness(t, f, []string{"a"}, 10, api.SchedulerSpec{Mode: api.ModeStatic, PerServer: 2})
		defer cancel()
		time.Sleep(time.Second)
		synctest.Wait()
		sv := s.Servers()[0]
		if sv.Limit != 2 || sv.InFlight != 2 {
			t.Fatalf("server a: limit %d, in flight %d; want 2 and 2 (static 2)", sv.Limit, sv.InFlight)
		}
		cancel()
		time.Sleep(2 * time.Hour)
		synctest.Wait()
	})
}
