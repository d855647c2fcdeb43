package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/gend-dev/gend/api"
	"github.com/gend-dev/gend/internal/backend"
	"github.com/gend-dev/gend/internal/httpapi"
	"github.com/gend-dev/gend/internal/spec"
	"github.com/gend-dev/gend/pkg/nvml"
	"github.com/gend-dev/gend/pkg/scheduler"
	"github.com/gend-dev/gend/pkg/sink"
)

// Options configure the daemon (flags → Options in cmd/gend).
type Options struct {
	Listen        string
	StateDir      string
	Config        api.Config
	Token         string
	NVML          string // auto, off, sim
	DrainTimeout  time.Duration
	S3Endpoint    string
	Logger        zerolog.Logger
	ControlPeriod time.Duration // scheduler control period (default 500ms)
	ProgressEvery time.Duration // progress.json period (default 2s)
	// Listener, when set, is used instead of listening on Listen (tests).
	Listener net.Listener
	// ETARecord, when set, receives every job's ETA estimator calls as
	// JSON lines (eta.Options.Record; etabench -record). Benchmarks only.
	ETARecord io.Writer
}

// Daemon is gend.
type Daemon struct {
	opts    Options
	log     zerolog.Logger
	reg     *prometheus.Registry
	met     *metrics
	be      *backend.Client
	sched   *scheduler.Scheduler
	store   *store
	gpus    nvml.Source
	local   nvml.Source // this host's GPUs only (served at /v1/gpus)
	runners []func(context.Context) error
	boot    string
	ln      net.Listener
	http    *http.Server

	mu       sync.Mutex
	jobs     map[string]*job
	fleet    map[string]api.ServerSpec
	ready    bool
	workCtx  context.Context
	jobGroup *errgroup.Group
	tput     throughput
	fleetRec fleetRecord // API changes to the fleet, persisted
}

// New builds the daemon; it starts nothing.
func New(opts Options) (*Daemon, error) {
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = 2 * time.Minute
	}
	if opts.ProgressEvery <= 0 {
		opts.ProgressEvery = 2 * time.Second
	}
	if opts.StateDir == "" {
		opts.StateDir = "./gend-state"
	}
	if err := CheckListen(opts.Listen, opts.Token, opts.Listener); err != nil {
		return nil, err
	}
	st, err := newStore(opts.StateDir)
	if err != nil {
		return nil, err
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	d := &Daemon{
		opts:  opts,
		log:   opts.Logger,
		reg:   prometheus.NewRegistry(),
		be:    backend.New(backend.Options{}),
		store: st,
		boot:  hex.EncodeToString(b[:]),
		jobs:  map[string]*job{},
		fleet: map[string]api.ServerSpec{},
	}
	d.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d.met = newMetrics(d.reg, d)
	d.sched = scheduler.New(scheduler.Options{
		Sender: sender{d}, Prober: prober{d.be}, Events: events{d}, Period: opts.ControlPeriod,
	})
	d.reg.MustRegister(dispatchCollector{d.sched})
	fr, err := st.loadFleet()
	if err != nil {
		return nil, err
	}
	d.fleetRec = fr
	removed := map[string]bool{}
	for _, n := range fr.Removed {
		removed[n] = true
	}
	for _, s := range append(append([]api.ServerSpec{}, opts.Config.Servers...), fr.Added...) {
		if removed[s.Name] {
			continue
		}
		if _, dup := d.fleet[s.Name]; dup {
			continue
		}
		if err := d.sched.AddServer(s); err != nil {
			return nil, err
		}
		d.fleet[s.Name] = s
		d.met.preCreate(s.Name)
	}
	d.setupTelemetry()
	return d, nil
}

// CheckListen refuses a non-loopback listen address without a token.
func CheckListen(addr, token string, ln net.Listener) error {
	if ln != nil {
		addr = ln.Addr().String()
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if token != "" {
		return nil
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("listen address %q is not loopback: set a token (GEND_TOKEN or --token-file) first", addr)
	}
	return nil
}

func (d *Daemon) fleetSpecs() []api.ServerSpec {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]api.ServerSpec, 0, len(d.fleet))
	for _, s := range d.fleet {
		out = append(out, s)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

func (d *Daemon) setupTelemetry() {
	hc := &http.Client{Timeout: 10 * time.Second}
	var remote []nvml.Source
	hasRemote := false
	for _, s := range d.opts.Config.Servers {
		if s.Host != "" {
			hasRemote = true
		}
	}
	if hasRemote {
		rs := nvml.NewRemoteSource(nvml.RemoteOptions{Servers: d.fleetSpecs, Client: hc, Logger: d.log})
		d.runners = append(d.runners, rs.Run)
		remote = append(remote, rs)
	}
	switch d.opts.NVML {
	case "off":
		d.local = nvml.Unavailable("telemetry disabled (--nvml off)")
	case "sim":
		ss := nvml.NewSimSource(nvml.SimOptions{Servers: d.fleetSpecs, Client: hc, Interval: time.Second, Logger: d.log})
		d.runners = append(d.runners, ss.Run)
		d.local = ss
	default:
		gpuServer := func(idx int) string {
			for _, s := range d.fleetSpecs() {
				if s.Host != "" {
					continue
				}
				for _, g := range s.GPUs {
					if g == idx {
						return s.Name
					}
				}
			}
			return ""
		}
		sm := nvml.NewSampler(nvml.Options{Logger: d.log, GPUServer: gpuServer})
		d.runners = append(d.runners, sm.Run)
		d.local = sm
	}
	d.gpus = d.local
	if len(remote) > 0 {
		d.gpus = nvml.Combine(append([]nvml.Source{d.local}, remote...)...)
	}
	d.reg.MustRegister(nvml.NewCollector(d.local))
}

// Addr is the address the API listens on (after Run started listening).
func (d *Daemon) Addr() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ln == nil {
		return ""
	}
	return d.ln.Addr().String()
}

// Run serves until ctx is done, then shuts down in order (see doc.go).
func (d *Daemon) Run(ctx context.Context) error {
	ln := d.opts.Listener
	if ln == nil {
		var err error
		ln, err = net.Listen("tcp", d.opts.Listen)
		if err != nil {
			return fmt.Errorf("listen %s: %w", d.opts.Listen, err)
		}
	}
	d.mu.Lock()
	d.ln = ln
	d.mu.Unlock()
	d.log.Info().Str("listen", ln.Addr().String()).Str("state_dir", d.opts.StateDir).Int("servers", len(d.opts.Config.Servers)).
		Bool("token", d.opts.Token != "").Str("nvml", d.opts.NVML).Dur("drain_timeout", d.opts.DrainTimeout).Msg("gend starting")

	// The work context outlives the signal context by the drain.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	work, wctx := errgroup.WithContext(workCtx)
	jobs := &errgroup.Group{}
	d.mu.Lock()
	d.workCtx = wctx
	d.jobGroup = jobs
	d.mu.Unlock()
	work.Go(func() error { return d.sched.Run(wctx) })
	for _, r := range d.runners {
		work.Go(func() error { return r(wctx) })
	}
	work.Go(func() error { d.throughputLoop(wctx); return nil })

	if err := d.restore(); err != nil {
		cancelWork()
		_ = work.Wait()
		return err
	}
	d.mu.Lock()
	d.ready = true
	d.mu.Unlock()

	d.http = &http.Server{
		Handler:           httpapi.New(d, httpapi.Options{Token: d.opts.Token, Registry: d.reg, Gatherer: d.reg, Logger: d.log}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- d.http.Serve(ln) }()

	var runErr error
	served := false
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		served = true
		if !errors.Is(err, http.ErrServerClosed) {
			runErr = fmt.Errorf("serve: %w", err)
		}
	}
	d.log.Info().Msg("shutting down: stop accepting, stop dispatching, drain in-flight")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = d.http.Shutdown(sctx)
	cancel()
	if !served {
		<-serveErr // Serve returns once Shutdown has closed the listener
	}
	d.sched.StopDispatch()
	dctx, cancel := context.WithTimeout(context.Background(), d.opts.DrainTimeout)
	if err := d.sched.Wait(dctx); err != nil {
		d.log.Warn().Int("in_flight", d.sched.InFlight()).Msg("drain timeout: in-flight requests abandoned; they are redone after restart")
	}
	cancel()
	d.mu.Lock()
	for _, j := range d.jobs {
		j.stopping.Store(true)
	}
	d.mu.Unlock()
	cancelWork()
	_ = d.sched.Wait(context.Background())
	if err := jobs.Wait(); err != nil && runErr == nil {
		runErr = err
	}
	if err := work.Wait(); err != nil && runErr == nil && !errors.Is(err, context.Canceled) {
		runErr = err
	}
	d.be.CloseIdle()
	d.log.Info().Msg("gend stopped")
	return runErr
}

// restore loads the jobs of the state dir and carries on with the
// unfinished ones.
func (d *Daemon) restore() error {
	recs, err := d.store.load()
	if err != nil {
		return err
	}
	for _, r := range recs {
		j := d.newJob(r)
		d.mu.Lock()
		d.jobs[j.id] = j
		d.mu.Unlock()
		if !api.Terminal(r.Status) {
			d.log.Info().Str("job", r.ID).Str("status", r.Status).Msg("resuming job from state dir")
			d.startJob(j)
		} else {
			j.loadFinal()
		}
	}
	return nil
}

func (d *Daemon) startJob(j *job) {
	d.mu.Lock()
	g, ctx := d.jobGroup, d.workCtx
	d.mu.Unlock()
	g.Go(func() error { return j.run(ctx) })
}

// Ready implements httpapi.Service.
func (d *Daemon) Ready() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.ready {
		return errors.New("starting")
	}
	return nil
}

func newJobID() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

func notFound(what, id string) error {
	return &api.Error{Status: http.StatusNotFound, Code: "not_found", Message: fmt.Sprintf("%s %q not found", what, id)}
}

func conflict(msg string) error {
	return &api.Error{Status: http.StatusConflict, Code: "conflict", Message: msg}
}

// SubmitJob implements httpapi.Service.
func (d *Daemon) SubmitJob(_ context.Context, raw []byte) (api.Job, error) {
	fleet := map[string]bool{}
	for _, s := range d.fleetSpecs() {
		fleet[s.Name] = true
	}
	s, err := spec.DecodeJob(raw, fleet)
	if err != nil {
		return api.Job{}, err
	}
	if err := d.checkOutputDir(s); err != nil {
		return api.Job{}, err
	}
	if !filepath.IsAbs(s.Output.Dir) {
		if abs, err := filepath.Abs(s.Output.Dir); err == nil {
			s.Output.Dir = abs
		}
	}
	if !isS3(s.Input) && !filepath.IsAbs(s.Input) {
		if abs, err := filepath.Abs(s.Input); err == nil {
			s.Input = abs
		}
	}
	if !isS3(s.Input) {
		if _, err := os.Stat(s.Input); err != nil {
			return api.Job{}, &api.Error{Status: http.StatusBadRequest, Code: "invalid_job_spec", Message: "invalid job spec",
				Problems: []string{fmt.Sprintf("input: %v", err)}}
		}
	}
	r := jobRecord{ID: newJobID(), Spec: s, Status: api.StatusQueued, CreatedAt: time.Now().UTC(), Scheduler: s.Scheduler}
	if err := d.store.save(r); err != nil {
		return api.Job{}, err
	}
	j := d.newJob(r)
	d.mu.Lock()
	d.jobs[j.id] = j
	d.mu.Unlock()
	d.log.Info().Str("job", j.id).Str("name", s.Name).Int("priority", s.Priority).Msg("job submitted")
	d.startJob(j)
	return j.view(), nil
}

func isS3(p string) bool { return len(p) > 5 && p[:5] == "s3://" }

// checkOutputDir refuses an output dir that another unfinished job uses.
func (d *Daemon) checkOutputDir(s api.JobSpec) error {
	abs, _ := filepath.Abs(s.Output.Dir)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, j := range d.jobs {
		if api.Terminal(j.status()) {
			continue
		}
		other, _ := filepath.Abs(j.spec.Output.Dir)
		if other == abs {
			return conflict(fmt.Sprintf("output.dir %s is used by job %s, which has not finished", abs, j.id))
		}
	}
	if _, err := os.Stat(filepath.Join(abs, "manifest.json")); err == nil {
		return conflict(fmt.Sprintf("output.dir %s already holds a job's output (manifest.json): choose a new directory", abs))
	}
	return nil
}

func (d *Daemon) job(id string) (*job, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	j, ok := d.jobs[id]
	if !ok {
		return nil, notFound("job", id)
	}
	return j, nil
}

// Jobs implements httpapi.Service (newest first).
func (d *Daemon) Jobs() []api.Job {
	d.mu.Lock()
	js := make([]*job, 0, len(d.jobs))
	for _, j := range d.jobs {
		js = append(js, j)
	}
	d.mu.Unlock()
	sort.Slice(js, func(a, b int) bool { return js[a].created.After(js[b].created) })
	out := make([]api.Job, 0, len(js))
	for _, j := range js {
		out = append(out, j.view())
	}
	return out
}

// Job implements httpapi.Service.
func (d *Daemon) Job(id string) (api.Job, error) {
	j, err := d.job(id)
	if err != nil {
		return api.Job{}, err
	}
	return j.view(), nil
}

// PauseJob implements httpapi.Service.
func (d *Daemon) PauseJob(id string) (api.Job, error) {
	j, err := d.job(id)
	if err != nil {
		return api.Job{}, err
	}
	if err := j.pause("paused by operator", true); err != nil {
		return api.Job{}, err
	}
	return j.view(), nil
}

// ResumeJob implements httpapi.Service.
func (d *Daemon) ResumeJob(id string) (api.Job, error) {
	j, err := d.job(id)
	if err != nil {
		return api.Job{}, err
	}
	if err := j.resume(); err != nil {
		return api.Job{}, err
	}
	return j.view(), nil
}

// CancelJob implements httpapi.Service.
func (d *Daemon) CancelJob(id string) (api.Job, error) {
	j, err := d.job(id)
	if err != nil {
		return api.Job{}, err
	}
	if err := j.cancelJob(); err != nil {
		return api.Job{}, err
	}
	return j.view(), nil
}

// ResizeJob implements httpapi.Service.
func (d *Daemon) ResizeJob(id string, r api.ResizeRequest) (api.Job, error) {
	j, err := d.job(id)
	if err != nil {
		return api.Job{}, err
	}
	if err := j.resize(r); err != nil {
		return api.Job{}, err
	}
	return j.view(), nil
}

// currentJob is the job /v1/eta describes: the highest-priority running
// job, else the most recent one.
func (d *Daemon) currentJob() *job {
	d.mu.Lock()
	defer d.mu.Unlock()
	var best *job
	for _, j := range d.jobs {
		st := j.status()
		if best == nil {
			best = j
			continue
		}
		ba, ja := !api.Terminal(best.status()), !api.Terminal(st)
		switch {
		case ja && !ba:
			best = j
		case ja == ba && ja && j.spec.Priority > best.spec.Priority:
			best = j
		case ja == ba && j.spec.Priority == best.spec.Priority && j.created.After(best.created) && !ja:
			best = j
		case ja == ba && ja && j.spec.Priority == best.spec.Priority && j.created.Before(best.created):
			best = j
		}
	}
	return best
}

// ETA implements httpapi.Service.
func (d *Daemon) ETA(id string) (api.ETA, error) {
	var j *job
	if id == "" {
		j = d.currentJob()
		if j == nil {
			return api.ETA{}, notFound("job", "(none)")
		}
	} else {
		var err error
		if j, err = d.job(id); err != nil {
			return api.ETA{}, err
		}
	}
	v := j.view()
	e := api.ProgressETA(v.ID, v.Progress)
	e.Line = api.FormatETALine(e)
	return e, nil
}

// Servers implements httpapi.Service.
func (d *Daemon) Servers() []api.Server {
	out := d.sched.Servers()
	rates := d.tput.perServer()
	for i := range out {
		r := rates[out[i].Name]
		out[i].TokensPerSec = r.tokens
		out[i].RatePerSec = r.requests
		out[i].ErrorsPerSec = r.errors
	}
	return out
}

// AddServer implements httpapi.Service.
func (d *Daemon) AddServer(s api.ServerSpec) (api.Server, error) {
	if err := d.sched.AddServer(s); err != nil {
		return api.Server{}, conflict(err.Error())
	}
	d.mu.Lock()
	d.fleet[s.Name] = s
	d.fleetRec.Added = append(d.fleetRec.Added, s)
	d.fleetRec.Removed = without(d.fleetRec.Removed, s.Name)
	err := d.store.saveFleet(d.fleetRec)
	d.mu.Unlock()
	if err != nil {
		d.log.Error().Err(err).Msg("persist fleet")
	}
	d.met.preCreate(s.Name)
	d.log.Info().Str("server", s.Name).Str("url", s.URL).Msg("server added")
	for _, sv := range d.sched.Servers() {
		if sv.Name == s.Name {
			return sv, nil
		}
	}
	return api.Server{ServerSpec: s, State: scheduler.StateStarting}, nil
}

// RemoveServer implements httpapi.Service.
func (d *Daemon) RemoveServer(name string) error {
	if err := d.sched.RemoveServer(name); err != nil {
		return notFound("server", name)
	}
	d.mu.Lock()
	delete(d.fleet, name)
	kept := d.fleetRec.Added[:0]
	for _, a := range d.fleetRec.Added {
		if a.Name != name {
			kept = append(kept, a)
		}
	}
	d.fleetRec.Added = kept
	d.fleetRec.Removed = append(without(d.fleetRec.Removed, name), name)
	err := d.store.saveFleet(d.fleetRec)
	d.mu.Unlock()
	if err != nil {
		d.log.Error().Err(err).Msg("persist fleet")
	}
	d.log.Info().Str("server", name).Msg("server removal requested: draining")
	return nil
}

// GPUs implements httpapi.Service: this host's GPUs.
func (d *Daemon) GPUs() api.GPUs { return d.local.Snapshot() }

// s3Options builds the S3 client options for a URL of a job.
func (d *Daemon) s3Options(_ string, log zerolog.Logger) sink.S3Options {
	ep := d.opts.S3Endpoint
	if ep == "" {
		ep = os.Getenv("AWS_ENDPOINT_URL")
	}
	return sink.S3Options{Endpoint: ep, Region: os.Getenv("AWS_REGION"), Secure: true, Logger: log}
}

func without(list []string, name string) []string {
	out := list[:0]
	for _, x := range list {
		if x != name {
			out = append(out, x)
		}
	}
	return out
}
