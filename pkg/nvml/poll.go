package nvml

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/gend-dev/gend/api"
)

// PollOptions configure SimSource and RemoteSource.
type PollOptions struct {
	// Servers returns the current fleet; called once per poll. Required.
	Servers func() []api.ServerSpec
	// Client is the shared HTTP client; nil means http.DefaultClient.
	Client *http.Client
	// Interval between polls; 0 means DefaultPollInterval. Each request is
	// bounded by the interval (at least one second).
	Interval time.Duration
	// Logger gets component=gpu-sim or component=gpu-remote.
	Logger zerolog.Logger
}

// SimOptions configure a SimSource.
type SimOptions = PollOptions

// RemoteOptions configure a RemoteSource.
type RemoteOptions = PollOptions

// DefaultPollInterval is the polling period of SimSource and RemoteSource when
// the options leave it zero.
const DefaultPollInterval = 5 * time.Second

// maxPollBody bounds a /sim/gpu or /v1/gpus response.
const maxPollBody = 4 << 20

// pollConcurrency bounds the requests of one poll in flight at once.
const pollConcurrency = 16

// SimSource polls gensim's GET <server url>/sim/gpu for every fleet server and
// publishes the simulated GPUs (Source "sim", Server set). gend --nvml sim.
type SimSource struct{ p poller }

// NewSimSource returns a SimSource; it starts nothing.
func NewSimSource(opts SimOptions) *SimSource {
	s := &SimSource{}
	s.p.init(opts, SourceSim, "gpu-sim", s.p.pollSim)
	return s
}

// Run polls immediately and then every Interval until ctx is done; it returns nil.
func (s *SimSource) Run(ctx context.Context) error { return s.p.run(ctx) }

// Snapshot returns the latest published snapshot.
func (s *SimSource) Snapshot() api.GPUs { return s.p.snap.load(SourceSim) }

// RemoteSource polls GET <host>/v1/gpus of the gend on each remote GPU host
// (ServerSpec.Host) and publishes the GPUs of the fleet's servers there,
// mapped by ServerSpec.GPUs (Source "remote", Server set). Servers without a
// Host are ignored: their GPUs are local.
type RemoteSource struct{ p poller }

// NewRemoteSource returns a RemoteSource; it starts nothing.
func NewRemoteSource(opts RemoteOptions) *RemoteSource {
	s := &RemoteSource{}
	s.p.init(opts, SourceRemote, "gpu-remote", s.p.pollRemote)
	return s
}

// Run polls immediately and then every Interval until ctx is done; it returns nil.
func (s *RemoteSource) Run(ctx context.Context) error { return s.p.run(ctx) }

// Snapshot returns the latest published snapshot.
func (s *RemoteSource) Snapshot() api.GPUs { return s.p.snap.load(SourceRemote) }

// poller is the loop shared by SimSource and RemoteSource.
type poller struct {
	opts   PollOptions
	source string
	log    zerolog.Logger
	snap   snapshotHolder
	poll   func(ctx context.Context, servers []api.ServerSpec) (gpus []api.GPU, errs map[string]error)

	lastErr map[string]string // owned by the Run goroutine: target → last error logged
}

func (p *poller) init(opts PollOptions, source, component string,
	poll func(context.Context, []api.ServerSpec) ([]api.GPU, map[string]error)) {
	if opts.Interval <= 0 {
		opts.Interval = DefaultPollInterval
	}
	if opts.Client == nil {
		opts.Client = http.DefaultClient
	}
	p.opts, p.source, p.poll = opts, source, poll
	p.log = opts.Logger.With().Str("component", component).Logger()
	p.lastErr = map[string]string{}
}

func (p *poller) run(ctx context.Context) error {
	p.pollOnce(ctx)
	t := time.NewTicker(p.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			p.pollOnce(ctx)
		}
	}
}

// pollOnce polls every target, publishes the result and logs error changes.
func (p *poller) pollOnce(ctx context.Context) {
	var servers []api.ServerSpec
	if p.opts.Servers != nil {
		servers = p.opts.Servers()
	}
	gpus, errs := p.poll(ctx, servers)
	if ctx.Err() != nil {
		return // shutting down: keep the last good snapshot
	}
	for target, err := range errs {
		if msg := err.Error(); p.lastErr[target] != msg {
			p.lastErr[target] = msg
			p.log.Warn().Str("target", target).Err(err).Msg("GPU telemetry poll")
		}
	}
	for target := range p.lastErr {
		if _, failing := errs[target]; !failing {
			delete(p.lastErr, target)
			p.log.Info().Str("target", target).Msg("GPU telemetry poll recovered")
		}
	}
	out := api.GPUs{Available: true, Source: p.source, GPUs: gpus}
	if len(gpus) == 0 && len(errs) > 0 {
		out.Available = false
		out.Reason = summarizeErrors(errs)
	} else if len(gpus) == 0 && len(servers) == 0 {
		out.Available = false
		out.Reason = "no servers to read GPU telemetry from"
	}
	p.snap.publish(out)
}

func summarizeErrors(errs map[string]error) string {
	const show = 3
	var parts []string
	for target, err := range errs {
		if len(parts) == show {
			parts = append(parts, fmt.Sprintf("and %d more", len(errs)-show))
			break
		}
		parts = append(parts, fmt.Sprintf("%s: %v", target, err))
	}
	return "no GPU telemetry: " + strings.Join(parts, "; ")
}

// fetch GETs url and returns the body (bounded), failing on a non-200 status.
func (p *poller) fetch(ctx context.Context, url string) ([]byte, error) {
	timeout := max(p.opts.Interval, time.Second)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", url, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := p.opts.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPollBody))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("get %s: status %d", url, resp.StatusCode)
	}
	return body, nil
}

// each runs f(i) for i in [0, n) with bounded concurrency and waits for all.
func each(ctx context.Context, n int, f func(ctx context.Context, i int)) {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(pollConcurrency)
	for i := range n {
		g.Go(func() error {
			f(gctx, i)
			return nil
		})
	}
	_ = g.Wait() // f reports through its own results; never returns an error here
}

// pollSim reads GET <url>/sim/gpu per server: one api.GPU object (or an array
// of them for a tensor-parallel server).
func (p *poller) pollSim(ctx context.Context, servers []api.ServerSpec) ([]api.GPU, map[string]error) {
	results := make([][]api.GPU, len(servers))
	errList := make([]error, len(servers))
	each(ctx, len(servers), func(ctx context.Context, i int) {
		srv := servers[i]
		body, err := p.fetch(ctx, strings.TrimRight(srv.URL, "/")+"/sim/gpu")
		if err != nil {
			errList[i] = err
			return
		}
		gpus, err := decodeSimGPUs(body)
		if err != nil {
			errList[i] = fmt.Errorf("decode %s/sim/gpu: %w", srv.URL, err)
			return
		}
		results[i] = mapSimGPUs(srv, gpus, time.Now())
	})
	return flatten(servers, results, errList)
}

func decodeSimGPUs(body []byte) ([]api.GPU, error) {
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '[' {
		var gpus []api.GPU
		if err := json.Unmarshal(body, &gpus); err != nil {
			return nil, err
		}
		return gpus, nil
	}
	var g api.GPU
	if err := json.Unmarshal(body, &g); err != nil {
		return nil, err
	}
	return []api.GPU{g}, nil
}

// mapSimGPUs labels gensim's GPUs with the server. A single simulated GPU for
// a server that spans several GPU indices stands for each of them.
func mapSimGPUs(srv api.ServerSpec, gpus []api.GPU, now time.Time) []api.GPU {
	if len(gpus) == 1 && len(srv.GPUs) > 1 {
		one := gpus[0]
		gpus = make([]api.GPU, len(srv.GPUs))
		for i := range gpus {
			gpus[i] = one
		}
	}
	for i := range gpus {
		g := &gpus[i]
		g.Server, g.Source = srv.Name, SourceSim
		if i < len(srv.GPUs) {
			g.Index = srv.GPUs[i]
		}
		if g.SampledAt.IsZero() {
			g.SampledAt = now
		}
	}
	return gpus
}

func flatten(servers []api.ServerSpec, results [][]api.GPU, errList []error) ([]api.GPU, map[string]error) {
	var out []api.GPU
	errs := map[string]error{}
	for i, r := range results {
		out = append(out, r...)
		if errList[i] != nil {
			errs[servers[i].Name] = errList[i]
		}
	}
	return out, errs
}

// pollRemote reads GET <host>/v1/gpus once per host and maps its GPUs to the
// fleet's servers on that host.
func (p *poller) pollRemote(ctx context.Context, servers []api.ServerSpec) ([]api.GPU, map[string]error) {
	var hosts []string
	byHost := map[string][]api.ServerSpec{}
	for _, s := range servers {
		h := strings.TrimRight(s.Host, "/")
		if h == "" {
			continue
		}
		if _, ok := byHost[h]; !ok {
			hosts = append(hosts, h)
		}
		byHost[h] = append(byHost[h], s)
	}
	results := make([][]api.GPU, len(hosts))
	errList := make([]error, len(hosts))
	each(ctx, len(hosts), func(ctx context.Context, i int) {
		body, err := p.fetch(ctx, hosts[i]+"/v1/gpus")
		if err != nil {
			errList[i] = err
			return
		}
		var snap api.GPUs
		if err := json.Unmarshal(body, &snap); err != nil {
			errList[i] = fmt.Errorf("decode %s/v1/gpus: %w", hosts[i], err)
			return
		}
		if !snap.Available {
			errList[i] = fmt.Errorf("%s: telemetry unavailable: %s", hosts[i], snap.Reason)
			return
		}
		results[i] = mapRemoteGPUs(byHost[hosts[i]], snap.GPUs)
	})
	var out []api.GPU
	errs := map[string]error{}
	for i, r := range results {
		out = append(out, r...)
		if errList[i] != nil {
			errs[hosts[i]] = errList[i]
		}
	}
	return out, errs
}

// mapRemoteGPUs picks, for each server, the host's GPUs at its ServerSpec.GPUs
// indices; a server without indices takes the GPUs the remote gend already
// attributes to it by name, or the host's only GPU.
func mapRemoteGPUs(servers []api.ServerSpec, gpus []api.GPU) []api.GPU {
	var out []api.GPU
	add := func(srv api.ServerSpec, g api.GPU) {
		g.Server, g.Source = srv.Name, SourceRemote
		out = append(out, g)
	}
	for _, srv := range servers {
		if len(srv.GPUs) > 0 {
			for _, idx := range srv.GPUs {
				for _, g := range gpus {
					if g.Index == idx {
						add(srv, g)
						break
					}
				}
			}
			continue
		}
		matched := false
		for _, g := range gpus {
			if g.Server == srv.Name {
				add(srv, g)
				matched = true
			}
		}
		if !matched && len(gpus) == 1 {
			add(srv, gpus[0])
		}
	}
	return out
}
