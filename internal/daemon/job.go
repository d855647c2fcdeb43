package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/gend-dev/gend/api"
	"github.com/gend-dev/gend/internal/backend"
	"github.com/gend-dev/gend/internal/eta"
	"github.com/gend-dev/gend/internal/input"
	"github.com/gend-dev/gend/internal/spec"
	"github.com/gend-dev/gend/pkg/scheduler"
	"github.com/gend-dev/gend/pkg/sink"
)

// payload is what a scheduler task carries.
type payload struct {
	item input.Item
}

type job struct {
	d       *Daemon
	id      string
	spec    api.JobSpec
	created time.Time
	log     zerolog.Logger

	stopping atomic.Bool // daemon shutdown: do not finish the job

	mu         sync.Mutex
	rec        jobRecord
	sj         *scheduler.Job
	snk        *sink.Local
	s3         *sink.S3
	total      int64
	totalKnown bool
	est        *eta.Estimator
	etaRes     eta.Result
	runStart   time.Time // start of the current running stretch (zero when not running)
	cancelRun  context.CancelFunc
	final      *api.Progress // for finished jobs loaded from state
	done       chan struct{}
	lastRate   rateWindow
	fleetTok   float64
}

func (d *Daemon) newJob(r jobRecord) *job {
	return &job{d: d, id: r.ID, spec: r.Spec, created: r.CreatedAt, rec: r, done: make(chan struct{}),
		log: d.log.With().Str("job", r.ID).Logger()}
}

func (j *job) status() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.rec.Status
}

// setStatus changes the status and persists it.
func (j *job) setStatusLocked(status, reason string) {
	now := time.Now().UTC()
	if j.rec.Status == api.StatusRunning && status != api.StatusRunning && !j.runStart.IsZero() {
		j.rec.RunningSeconds += time.Since(j.runStart).Seconds()
		j.runStart = time.Time{}
	}
	if status == api.StatusRunning && j.runStart.IsZero() {
		j.runStart = time.Now()
		if j.rec.StartedAt == nil {
			j.rec.StartedAt = &now
		}
	}
	if api.Terminal(status) {
		j.rec.FinishedAt = &now
	}
	if j.rec.Status != status || j.rec.Reason != reason {
		j.log.Info().Str("status", status).Str("reason", reason).Msg("job status")
	}
	j.rec.Status, j.rec.Reason = status, reason
	if err := j.d.store.save(j.rec); err != nil {
		j.log.Error().Err(err).Msg("persist job state")
	}
}

func (j *job) elapsedLocked() float64 {
	s := j.rec.RunningSeconds
	if !j.runStart.IsZero() {
		s += time.Since(j.runStart).Seconds()
	}
	return s
}

// run is the job's runner goroutine.
func (j *job) run(parent context.Context) error {
	defer close(j.done)
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	j.mu.Lock()
	j.cancelRun = cancel
	j.mu.Unlock()
	err := j.execute(ctx)
	if err != nil && !j.stopping.Load() && ctx.Err() == nil {
		j.mu.Lock()
		j.setStatusLocked(api.StatusFailed, err.Error())
		j.mu.Unlock()
		j.log.Error().Err(err).Msg("job failed")
	}
	return nil
}

func (j *job) inputPath(ctx context.Context) (string, error) {
	if !isS3(j.spec.Input) {
		return j.spec.Input, nil
	}
	dst := filepath.Join(j.d.opts.StateDir, "inputs", j.id, filepath.Base(j.spec.Input))
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o750); err != nil {
		return "", fmt.Errorf("input download dir: %w", err)
	}
	dl, err := sink.NewS3(j.d.s3Options(j.spec.Input, j.log))
	if err != nil {
		return "", fmt.Errorf("input %s: %w", j.spec.Input, err)
	}
	if err := dl.Download(ctx, j.spec.Input, dst); err != nil {
		return "", fmt.Errorf("download input %s: %w", j.spec.Input, err)
	}
	return dst, nil
}

func (j *job) execute(ctx context.Context) error {
	sp := j.spec
	path, err := j.inputPath(ctx)
	if err != nil {
		return err
	}
	// Open (or recover) the output first: it says which lines are done.
	snk, rec, err := sink.Open(sink.Options{Dir: sp.Output.Dir, JobID: j.id, ShardRecords: sp.Output.ShardRecords,
		ShardSeconds: sp.Output.ShardSeconds, Logger: j.log, OnShardClosed: j.onShardClosed})
	if err != nil {
		return fmt.Errorf("open output %s: %w", sp.Output.Dir, err)
	}
	for _, r := range rec.Repaired {
		j.log.Warn().Str("repair", r).Msg("output recovered")
	}
	var up *sink.S3
	if sp.Output.S3 != "" {
		opts := j.d.s3Options(sp.Output.S3, j.log)
		opts.Bucket, opts.Prefix, err = sink.ParseS3URL(sp.Output.S3)
		if err != nil {
			return fmt.Errorf("output.s3: %w", err)
		}
		// A job split by input shards writes under prefix/shard-<i>-of-<n>/
		// so controllers sharing the prefix never collide (docs/scale.md).
		if si, sn, serr := spec.ParseShard(sp.Shard); serr == nil {
			opts.Prefix = sink.ShardPrefix(opts.Prefix, si, sn)
		}
		up, err = sink.NewS3(opts)
		if err != nil {
			return fmt.Errorf("s3 output: %w", err)
		}
	}
	j.mu.Lock()
	j.snk, j.s3 = snk, up
	j.est = eta.New(eta.Options{MaxTokens: spec.MaxTokens(sp.Request.Params), Record: j.d.opts.ETARecord})
	j.mu.Unlock()
	var wg sync.WaitGroup
	defer wg.Wait()
	upCtx, stopUp := context.WithCancel(context.WithoutCancel(ctx))
	defer stopUp()
	if up != nil {
		wg.Add(1)
		go func() { defer wg.Done(); _ = up.Run(upCtx, snk) }()
	}

	shardIdx, shardCnt, _ := spec.ParseShard(sp.Shard)
	iopts := input.Options{Endpoint: sp.Request.Endpoint, Model: sp.Request.Model, Params: sp.Request.Params,
		Order: sp.Order, Seed: sp.Seed, ShardIndex: shardIdx, ShardCount: shardCnt,
		TempDir: filepath.Join(j.d.opts.StateDir, "tmp"), Skip: rec.Done.Get}
	_ = os.MkdirAll(iopts.TempDir, 0o750)
	total, err := input.Count(ctx, path, iopts)
	if err != nil {
		j.closeSink()
		return fmt.Errorf("read input: %w", err)
	}
	iopts.ExpectedLines = total * int64(max(shardCnt, 1))
	j.mu.Lock()
	j.total, j.totalKnown = total, true
	j.mu.Unlock()

	timeout := time.Duration(sp.Request.TimeoutSeconds * float64(time.Second))
	if timeout == 0 {
		mt := spec.MaxTokens(sp.Request.Params)
		timeout = 30*time.Minute + time.Duration(mt)*200*time.Millisecond
	}
	drained := make(chan struct{})
	sj := j.d.sched.AddJob(context.WithValue(ctx, jobKey{}, j), scheduler.JobOptions{
		ID: j.id, Priority: sp.Priority, Servers: sp.Servers, Limits: j.rec.Scheduler, MaxAttempts: sp.MaxAttempts,
		AttemptTimeout: timeout, OnFinish: j.onFinish, OnPause: j.onSchedPause,
		OnDrained: func() { close(drained) },
	})
	defer sj.Remove()
	j.mu.Lock()
	j.sj = sj
	switch j.rec.Status {
	case api.StatusPaused:
		sj.Pause()
		if !j.rec.UserPaused {
			// Paused by gend (output unwritable, fatal error): try again.
			j.mu.Unlock()
			_ = j.resume()
			j.mu.Lock()
		}
	default:
		// queued until its first request is dispatched (promote), unless it
		// was already running before a restart.
		st := api.StatusQueued
		if j.rec.StartedAt != nil {
			st = api.StatusRunning
		}
		j.setStatusLocked(st, "")
	}
	j.mu.Unlock()

	wg.Add(1)
	go func() { defer wg.Done(); j.progressLoop(ctx, drained) }()

	feedErr := j.feed(ctx, path, iopts, sj)
	if feedErr != nil && ctx.Err() == nil {
		j.closeSink()
		return feedErr
	}
	select {
	case <-drained:
	case <-ctx.Done():
		j.closeSink()
		j.writeProgress()
		return nil
	}
	// All done: close the last shard, then the job is complete.
	for {
		err := j.closeSinkErr()
		if err == nil {
			break
		}
		j.mu.Lock()
		j.setStatusLocked(api.StatusPaused, "output unwritable: "+err.Error())
		j.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(5 * time.Second):
		}
	}
	j.mu.Lock()
	j.setStatusLocked(api.StatusCompleted, "")
	j.est.Finished(j.elapsedLocked())
	j.mu.Unlock()
	j.writeProgress()
	if up != nil {
		// Uploads catch up in the background; wait for them while the
		// daemon runs, so s3_uploaded becomes the truth.
		if err := up.Drain(ctx, snk); err != nil && ctx.Err() == nil {
			j.log.Warn().Err(err).Msg("s3 uploads not finished")
		}
	}
	j.writeProgress()
	return nil
}

// feed reads the input and queues its items; bad lines go to errors.jsonl.
func (j *job) feed(ctx context.Context, path string, opts input.Options, sj *scheduler.Job) error {
	r, err := input.Open(ctx, path, opts)
	if err != nil {
		return fmt.Errorf("open input: %w", err)
	}
	defer r.Close()
	for {
		it, bad, err := r.Next()
		if errors.Is(err, io.EOF) {
			sj.InputDone()
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("read input: %w", err)
		}
		if bad != nil {
			f := sink.Failure{Line: bad.Line, CustomID: bad.CustomID, Code: bad.Code, Message: bad.Message}
			if err := j.writeFailure(f); err != nil {
				return err
			}
			continue
		}
		t := &scheduler.Task{Line: it.Line, Payload: &payload{item: it}}
		if err := sj.Push(ctx, t); err != nil {
			return err
		}
	}
}

func (j *job) writeFailure(f sink.Failure) error {
	j.mu.Lock()
	snk := j.snk
	j.mu.Unlock()
	err := snk.WriteFailure(f)
	if err != nil && errors.Is(err, sink.ErrOutputUnwritable) {
		j.pause("output unwritable: "+err.Error(), false)
		return nil
	}
	if err != nil && errors.Is(err, sink.ErrDuplicate) {
		j.log.Error().Err(err).Int64("line", f.Line).Msg("line already recorded; not written twice")
		return nil
	}
	return err
}

// onFinish records a task's final result; called on the attempt's goroutine.
func (j *job) onFinish(t *scheduler.Task, r scheduler.Result) error {
	p := t.Payload.(*payload)
	j.mu.Lock()
	snk, est := j.snk, j.est
	j.mu.Unlock()
	var err error
	if r.Outcome == scheduler.OK {
		resp := r.Value.(backend.Response)
		err = snk.WriteResult(sink.Result{Line: t.Line, CustomID: p.item.CustomID, RequestID: resp.RequestID, Status: resp.Status,
			Body: resp.Body, BodyIsJSON: true, PromptTokens: resp.PromptTokens, CompletionTokens: resp.CompletionTokens})
		j.mu.Lock()
		est.Completed(int(resp.CompletionTokens), resp.FinishReason == "length")
		j.mu.Unlock()
	} else {
		f := sink.Failure{Line: t.Line, CustomID: p.item.CustomID, Code: "request_failed", Message: fmt.Sprintf("after %d attempts: %v", t.Attempts, r.Err)}
		var be *backend.Error
		if errors.As(r.Err, &be) {
			f.Status, f.Body = be.Status, be.Body
			if be.Code == "prompt_too_long" {
				f.Code = be.Code
			}
			if r.Outcome == scheduler.Permanent {
				f.Message = be.Error()
			}
		}
		err = snk.WriteFailure(f)
	}
	switch {
	case err == nil:
	case errors.Is(err, sink.ErrOutputUnwritable):
		// Accepted and kept in memory by the sink: pause until the operator
		// frees space and resumes.
		j.pause("output unwritable: "+err.Error(), false)
	case errors.Is(err, sink.ErrDuplicate):
		j.log.Error().Err(err).Int64("line", t.Line).Msg("result already recorded; not written twice")
	default:
		j.log.Error().Err(err).Int64("line", t.Line).Msg("write result")
		return err
	}
	return nil
}

func (j *job) onSchedPause(reason string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if api.Terminal(j.rec.Status) {
		return
	}
	j.rec.UserPaused = false
	j.setStatusLocked(api.StatusPaused, reason)
}

func (j *job) onShardClosed(si sink.ShardInfo) {
	j.log.Info().Str("shard", si.Name).Int64("records", si.Records).Int64("bytes", si.Bytes).Msg("shard closed")
	j.mu.Lock()
	up := j.s3
	j.mu.Unlock()
	if up != nil {
		up.Notify()
	}
}

func (j *job) closeSink() { _ = j.closeSinkErr() }

func (j *job) closeSinkErr() error {
	j.mu.Lock()
	snk := j.snk
	j.mu.Unlock()
	if snk == nil {
		return nil
	}
	return snk.Close()
}

func (j *job) pause(reason string, user bool) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	switch j.rec.Status {
	case api.StatusCompleted, api.StatusFailed, api.StatusCancelled:
		return conflict(fmt.Sprintf("job %s is %s", j.id, j.rec.Status))
	}
	if j.sj != nil {
		j.sj.Pause()
	}
	j.rec.UserPaused = user
	j.setStatusLocked(api.StatusPaused, reason)
	return nil
}

func (j *job) resume() error {
	j.mu.Lock()
	if paused, err := j.pausedLocked(); !paused {
		j.mu.Unlock()
		return err
	}
	snk := j.snk
	j.mu.Unlock()
	// Retry the output without j.mu: a retry that closes a pending shard
	// calls back into the job (onShardClosed takes j.mu). Holding the lock
	// across it hung the daemon for good (TestResumeClosesPendingShard).
	if snk != nil {
		if err := snk.Retry(); err != nil {
			return &api.Error{Status: http.StatusConflict, Code: "output_unwritable", Message: "output still unwritable: " + err.Error()}
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	// The job may have moved meanwhile (cancelled, or resumed by another
	// call).
	if paused, err := j.pausedLocked(); !paused {
		return err
	}
	j.rec.UserPaused = false
	if j.sj == nil {
		// Not started yet (counting input): the runner will see the status.
		j.setStatusLocked(api.StatusQueued, "")
		return nil
	}
	st := api.StatusQueued
	if j.rec.StartedAt != nil {
		st = api.StatusRunning
	}
	j.setStatusLocked(st, "")
	j.sj.Resume()
	return nil
}

// pausedLocked reports whether the job is paused; when it is not, err is
// resume's answer: nil when it runs or waits already, a conflict when it
// has ended.
func (j *job) pausedLocked() (paused bool, err error) {
	switch j.rec.Status {
	case api.StatusPaused:
		return true, nil
	case api.StatusRunning, api.StatusQueued:
		return false, nil
	}
	return false, conflict(fmt.Sprintf("job %s is %s", j.id, j.rec.Status))
}

// promote turns a queued job into a running one once the scheduler has
// dispatched one of its requests.
func (j *job) promote() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.rec.Status != api.StatusQueued || j.sj == nil {
		return
	}
	if j.sj.Snapshot(time.Now()).Stats.Dispatched > 0 {
		j.setStatusLocked(api.StatusRunning, "")
	}
}

func (j *job) cancelJob() error {
	j.mu.Lock()
	if api.Terminal(j.rec.Status) {
		defer j.mu.Unlock()
		return conflict(fmt.Sprintf("job %s is %s", j.id, j.rec.Status))
	}
	sj := j.sj
	j.setStatusLocked(api.StatusCancelled, "cancelled by operator")
	cancel := j.cancelRun
	j.mu.Unlock()
	if sj != nil {
		sj.Cancel()
	}
	if cancel != nil {
		cancel()
	}
	return nil
}

func (j *job) resize(r api.ResizeRequest) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if api.Terminal(j.rec.Status) {
		return conflict(fmt.Sprintf("job %s is %s", j.id, j.rec.Status))
	}
	j.rec.Scheduler = spec.ApplyResize(j.rec.Scheduler, r)
	if j.sj != nil {
		j.sj.SetLimits(j.rec.Scheduler)
	}
	j.log.Info().Interface("scheduler", j.rec.Scheduler).Msg("job resized")
	if err := j.d.store.save(j.rec); err != nil {
		return err
	}
	return nil
}

// loadFinal reads a finished job's last progress.json.
func (j *job) loadFinal() {
	raw, err := os.ReadFile(filepath.Join(j.spec.Output.Dir, "progress.json"))
	if err != nil {
		return
	}
	var p api.Progress
	if json.Unmarshal(raw, &p) == nil {
		j.mu.Lock()
		j.final = &p
		j.mu.Unlock()
	}
}

// view is the job as the API shows it, with live counters.
func (j *job) view() api.Job {
	j.mu.Lock()
	defer j.mu.Unlock()
	v := api.Job{ID: j.id, Name: j.spec.Name, Status: j.rec.Status, Reason: j.rec.Reason, Priority: j.spec.Priority,
		CreatedAt: j.rec.CreatedAt, StartedAt: j.rec.StartedAt, FinishedAt: j.rec.FinishedAt, Spec: j.spec,
		Scheduler: j.rec.Scheduler, Servers: []api.JobServer{}}
	if j.final != nil && j.snk == nil {
		v.Progress = *j.final
		v.Progress.Status = j.rec.Status
		return v
	}
	v.Progress = j.progressLocked()
	if j.sj != nil {
		snap := j.sj.Snapshot(time.Now())
		rates := j.d.tput.perServer()
		for _, s := range snap.Servers {
			v.Servers = append(v.Servers, api.JobServer{Name: s.Name, Limit: s.Limit, InFlight: s.InFlight, QueueTarget: s.QueueTarget,
				State: s.State, LastReason: s.Reason, TokensPerSec: rates[s.Name].tokens})
		}
	}
	return v
}

// progressLocked computes the live progress document.
func (j *job) progressLocked() api.Progress {
	p := api.Progress{Total: j.total, TotalKnown: j.totalKnown, Status: j.rec.Status, UpdatedAt: time.Now().UTC().Format(time.RFC3339)}
	if j.snk != nil {
		st := j.snk.Stats()
		p.Completed, p.Failed = st.Completed, st.Failed
		p.TotalInputTokens, p.TotalOutputTokens = st.PromptTokens, st.CompletionTokens
		if j.spec.Output.S3 != "" {
			p.S3Uploaded, p.S3Bytes, p.S3Pending = st.S3Uploaded, st.S3Bytes, st.S3Pending
		}
	}
	if j.sj != nil {
		snap := j.sj.Snapshot(time.Now())
		p.InFlight = int64(snap.InFlight)
		p.Retries = snap.Stats.Retries
	}
	if p.Completed > 0 {
		p.AvgOutputTokens = float64(p.TotalOutputTokens) / float64(p.Completed)
	}
	el := j.elapsedLocked()
	p.ElapsedSeconds = el
	p.ElapsedHours = el / 3600
	p.RatePerSec, p.TokensPerSec = j.lastRate.rates()
	e := j.etaRes
	if api.Terminal(j.rec.Status) {
		e = eta.Result{OK: true}
	}
	if e.OK {
		p.ETASeconds, p.ETALowSeconds, p.ETAHighSeconds = e.Seconds, e.LowSeconds, e.HighSeconds
		p.ETAHours = e.Seconds / 3600
	} else {
		p.ETASeconds, p.ETALowSeconds, p.ETAHighSeconds, p.ETAHours = -1, -1, -1, -1
	}
	p.NaiveETASeconds = e.Naive
	p.EstRemainingTokens, p.EstMeanOutputTokens, p.FleetTokensPerSec = e.RemainingTokens, e.MeanOutputTokens, j.fleetTok
	for _, f := range []*float64{&p.ETASeconds, &p.ETALowSeconds, &p.ETAHighSeconds, &p.ETAHours, &p.NaiveETASeconds,
		&p.RatePerSec, &p.TokensPerSec, &p.AvgOutputTokens} {
		if math.IsNaN(*f) || math.IsInf(*f, 0) {
			*f = -1
		}
	}
	return p
}

// progressLoop updates rates and the ETA every sampling period (the
// control period, 100 ms … 1 s, so the ETA follows the gauges it reads)
// and writes progress.json every ProgressEvery.
func (j *job) progressLoop(ctx context.Context, drained <-chan struct{}) {
	period := samplePeriod(j.d.opts.ControlPeriod)
	t := time.NewTicker(min(250*time.Millisecond, period))
	defer t.Stop()
	lastWrite, lastETA := time.Time{}, time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-drained:
			return
		case <-t.C:
		}
		j.promote()
		if time.Since(lastETA) < period {
			continue
		}
		lastETA = time.Now()
		j.updateETA()
		if time.Since(lastWrite) >= j.d.opts.ProgressEvery {
			j.writeProgress()
			lastWrite = time.Now()
		}
	}
}

func (j *job) updateETA() {
	now := time.Now()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.snk == nil || j.sj == nil || j.est == nil {
		return
	}
	st := j.snk.Stats()
	el := j.elapsedLocked()
	j.lastRate.add(el, st.Completed+st.Failed, st.CompletionTokens)
	if j.rec.Status != api.StatusRunning {
		return
	}
	snap := j.sj.Snapshot(now)
	fleetTok, running, _ := j.d.tput.fleet(j.spec.Servers)
	if fleetTok <= 0 && !j.d.tput.counting(j.spec.Servers) {
		// The servers export no token counters: gend's own completions.
		_, fleetTok = j.lastRate.rates()
	}
	// Share the fleet with other jobs by in-flight share.
	if all := j.d.sched.InFlight(); all > 0 && snap.InFlight < all {
		fleetTok *= float64(snap.InFlight) / float64(all)
	}
	// Each in-flight attempt's output so far: from the server's progress
	// history and its queue (etainput.go), or the tokens streamed.
	limits, own, all := map[string]int{}, map[string]int{}, map[string]int{}
	for _, sv := range snap.Servers {
		limits[sv.Name] = sv.Limit
		own[sv.Name] = sv.InFlight
	}
	for _, sv := range j.d.sched.Servers() {
		all[sv.Name] = sv.InFlight
	}
	prompt := 0.0
	if n := st.Completed; n > 0 {
		prompt = float64(st.PromptTokens) / float64(n)
	}
	inflight := j.d.tput.inflightTokens(snap.InFlightAges, own, all, now)
	// The servers' rates, batch and KV use over the last half of the job's
	// running time, at most etaWindow, at least four samples (etainput.go,
	// windowed).
	window := max(min(time.Duration(el/2*float64(time.Second)), etaWindow), 4*samplePeriod(j.d.opts.ControlPeriod))
	servers, scale := coveringServers(j.d.tput.servers(j.spec.Servers, limits, window, now), own, snap.InFlight, el)
	rateWindow := 0.0
	if len(servers) > 0 {
		rateWindow = window.Seconds()
	}
	if len(servers) == 0 && (j.d.tput.counting(j.spec.Servers) || el < etaFallbackAfter) {
		// The servers' rates are not established yet: no estimate. Without
		// token counters, gend's own completions (the fallback above) only
		// after the first seconds: a fresh server's counter reads 0, as if
		// absent, until it has generated, and the first completions (the
		// shortest outputs, in a burst) are no rate to plan with.
		fleetTok, running = 0, 0
	}
	if len(servers) > 0 {
		var tok, run float64
		for _, sv := range servers {
			tok += sv.TokensPerSec
			run += sv.Running
		}
		running = int(math.Round(run))
		if all := j.d.sched.InFlight(); all > 0 && snap.InFlight < all {
			tok *= float64(snap.InFlight) / float64(all)
		}
		fleetTok = tok * scale
	}
	notStarted := j.total - st.Completed - st.Failed - int64(snap.InFlight)
	if notStarted < 0 {
		notStarted = 0
	}
	pr := 0.0
	if running > 0 {
		pr = fleetTok / float64(running)
	}
	j.etaRes = j.est.Estimate(eta.State{Elapsed: el, NotStarted: notStarted, InFlight: inflight, TokensPerSec: fleetTok,
		Concurrency: float64(running), PerRequestTokPerSec: pr, Servers: servers, PromptTokens: prompt, RateWindow: rateWindow})
	if math.IsNaN(j.etaRes.Seconds) || math.IsInf(j.etaRes.Seconds, 0) {
		j.etaRes.OK = false
	}
	// Report the throughput the ETA divides by (the projected main phase's
	// when it projects one), else the fleet's measured rate.
	j.fleetTok = fleetTok
	if j.etaRes.OK && j.etaRes.MainTokensPerSec > 0 {
		j.fleetTok = j.etaRes.MainTokensPerSec
	}
}

func (j *job) writeProgress() {
	j.mu.Lock()
	if j.snk == nil {
		j.mu.Unlock()
		return
	}
	p := j.progressLocked()
	dir := j.spec.Output.Dir
	_ = j.d.store.save(j.rec)
	j.mu.Unlock()
	raw, _ := json.MarshalIndent(p, "", "  ")
	if err := sink.WriteFileAtomic(filepath.Join(dir, "progress.json"), raw); err != nil {
		j.log.Warn().Err(err).Msg("write progress.json")
	}
}

// rateWindow keeps (elapsed, done, tokens) samples for ~30 s rates.
type rateWindow struct {
	t, n, tok []float64
}

func (r *rateWindow) add(el float64, done, tokens int64) {
	r.t = append(r.t, el)
	r.n = append(r.n, float64(done))
	r.tok = append(r.tok, float64(tokens))
	for len(r.t) > 2 && r.t[len(r.t)-1]-r.t[0] > 30 {
		r.t, r.n, r.tok = r.t[1:], r.n[1:], r.tok[1:]
	}
}

func (r *rateWindow) rates() (req, tok float64) {
	if len(r.t) < 2 {
		return 0, 0
	}
	dt := r.t[len(r.t)-1] - r.t[0]
	if dt <= 0 {
		return 0, 0
	}
	return (r.n[len(r.n)-1] - r.n[0]) / dt, (r.tok[len(r.tok)-1] - r.tok[0]) / dt
}
