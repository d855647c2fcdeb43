package sim

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// FleetConfig describes a simulated fleet. Zero values take the defaults
// noted on each field.
type FleetConfig struct {
	Host    string        // listen host; default 127.0.0.1
	Port    int           // server i listens on Port+i; 0 picks free ports
	Speedup float64       // simulated seconds per wall second; default 1
	Seed    int64         // seeds output lengths, request ids and fault draws
	Tick    time.Duration // engine wake-up period while busy; default 5ms
	Servers []ServerConfig
	Logger  zerolog.Logger // the zero Logger discards
}

// ServerConfig is one simulated SGLang server. Zero values take defaults.
type ServerConfig struct {
	Name  string `json:"name,omitempty"`  // default gpu<i>
	GPU   string `json:"gpu,omitempty"`   // rtx-pro-6000 (default), h100, h200, b200
	Model string `json:"model,omitempty"` // 27b (default), 8b
	Port  int    `json:"port,omitempty"`  // default FleetConfig.Port+i

	MaxRunningRequests       int     `json:"max_running_requests,omitempty"`      // default derived from the KV pool like SGLang
	MemFractionStatic        float64 `json:"mem_fraction_static,omitempty"`       // default 0.9
	MaxQueuedRequests        int     `json:"max_queued_requests,omitempty"`       // default unbounded
	ScheduleConservativeness float64 `json:"schedule_conservativeness,omitempty"` // default 1.0
	ContextLength            int     `json:"context_length,omitempty"`            // default from the model (32768)
	ChunkedPrefillSize       int     `json:"chunked_prefill_size,omitempty"`      // default 8192 (16384 on GPUs ≥ 160 GB)
	MaxPrefillTokens         int     `json:"max_prefill_tokens,omitempty"`        // default 16384

	OutputMean        float64 `json:"output_mean,omitempty"`         // mean output tokens with thinking on; default 2500
	OutputSigma       float64 `json:"output_sigma,omitempty"`        // lognormal sigma; default 1.0
	OutputMeanNoThink float64 `json:"output_mean_nothink,omitempty"` // default OutputMean/5
	OutputDist        string  `json:"output_dist,omitempty"`         // lognormal (default), gamma:K, weibull:K, pareto:A, bimodal:P:M, uniform:LO:HI
	OutputRunaway     float64 `json:"output_runaway,omitempty"`      // share (0–0.5) of prompts that never stop on their own
	MaxContentBytes   int     `json:"max_content_bytes,omitempty"`   // text cap per field; default 8192, negative: none

	Faults Faults `json:"faults,omitzero"`
}

// Faults are injected failures. Times are simulated seconds since start.
type Faults struct {
	ErrorRate float64   `json:"error_rate,omitempty"` // share of requests answered 500
	DropRate  float64   `json:"drop_rate,omitempty"`  // share of responses cut off mid-body
	Slowdown  *Slowdown `json:"slowdown,omitempty"`
	Death     *Death    `json:"death,omitempty"`
}

// Slowdown multiplies every step time by Factor from AtS (for DurationS, 0: for good).
type Slowdown struct {
	AtS       float64 `json:"at_s"`
	Factor    float64 `json:"factor"`
	DurationS float64 `json:"duration_s,omitempty"`
}

// Death closes the listener and aborts everything at AtS; after ReviveAfterS
// (0: never) it listens again on the same port and answers /health with 503
// for WarmupS more seconds before it serves.
type Death struct {
	AtS          float64 `json:"at_s"`
	ReviveAfterS float64 `json:"revive_after_s,omitempty"`
	WarmupS      float64 `json:"warmup_s,omitempty"`
}

// Defaults.
const (
	DefaultOutputMean      = 2500
	DefaultOutputSigma     = 1.0
	DefaultMaxContentBytes = 8192
	defaultTick            = 5 * time.Millisecond
)

// params are a server's resolved settings.
type params struct {
	roof           Roofline
	pool           int64
	maxRunning     int
	contextLen     int
	contextSet     bool
	maxReqLen      int
	maxReqInputLen int
	chunk          int
	maxPrefill     int
	memFraction    float64
	conservative   float64
	lengths        lengthModel
	contentCap     int // < 0: none
}

func (c ServerConfig) resolve(seed int64) (params, []error) {
	var errs []error
	g, err := GPUPreset(or(c.GPU, "rtx-pro-6000"))
	if err != nil {
		errs = append(errs, err)
	}
	m, err := ModelPreset(or(c.Model, "27b"))
	if err != nil {
		errs = append(errs, err)
	}
	p := params{
		roof:         Roofline{GPU: g, Model: m},
		memFraction:  orF(c.MemFractionStatic, defaultMemFrac),
		conservative: orF(c.ScheduleConservativeness, 1),
		maxPrefill:   orI(c.MaxPrefillTokens, defaultMaxPrefill),
		contextLen:   orI(c.ContextLength, m.ContextLength),
		contextSet:   c.ContextLength > 0,
		contentCap:   orI(c.MaxContentBytes, DefaultMaxContentBytes),
	}
	mean := orF(c.OutputMean, DefaultOutputMean)
	dist, distErr := parseOutputDist(c.OutputDist)
	p.lengths = lengthModel{seed: seed, mean: mean, sigma: orF(c.OutputSigma, DefaultOutputSigma),
		meanPlain: orF(c.OutputMeanNoThink, mean/5), dist: dist, runaway: c.OutputRunaway}
	chunk := 8192
	if g.MemoryBytes >= 160e9 {
		chunk = 16384
	}
	p.chunk = orI(c.ChunkedPrefillSize, chunk)
	if len(errs) > 0 {
		return p, errs
	}
	switch {
	case p.memFraction <= 0 || p.memFraction >= 1:
		errs = append(errs, fmt.Errorf("mem_fraction_static %v: must be in (0, 1)", p.memFraction))
	case p.conservative <= 0:
		errs = append(errs, fmt.Errorf("schedule_conservativeness %v: must be > 0", p.conservative))
	case c.MaxRunningRequests < 0 || c.MaxQueuedRequests < 0 || c.ContextLength < 0 || c.ChunkedPrefillSize < 0 || c.MaxPrefillTokens < 0:
		errs = append(errs, errors.New("max_running_requests, max_queued_requests, context_length, chunked_prefill_size and max_prefill_tokens must not be negative"))
	case mean < 1 || p.lengths.meanPlain < 1 || p.lengths.sigma < 0 || p.lengths.sigma > 4:
		errs = append(errs, fmt.Errorf("output_mean %v, output_mean_nothink %v, output_sigma %v: means must be ≥ 1, sigma in [0, 4]", mean, p.lengths.meanPlain, p.lengths.sigma))
	}
	if distErr == nil && mean >= 1 {
		distErr = p.lengths.check()
	}
	if distErr != nil {
		errs = append(errs, fmt.Errorf("output_dist %q: %w", c.OutputDist, distErr))
	}
	if !(c.OutputRunaway >= 0 && c.OutputRunaway <= 0.5) {
		errs = append(errs, fmt.Errorf("output_runaway %v: must be in [0, 0.5]", c.OutputRunaway))
	}
	p.pool = p.roof.KVPoolTokens(p.memFraction)
	if p.pool < 1024 {
		errs = append(errs, fmt.Errorf("gpu %s, model %s, mem_fraction_static %v: KV pool of %d tokens is too small (weights do not fit)", g.Key, m.Key, p.memFraction, p.pool))
		return p, errs
	}
	p.maxReqLen = int(min(int64(p.contextLen-1), p.pool-1))
	p.maxReqInputLen = p.maxReqLen - 5
	// SGLang: req_to_token pool size, then min(max_total_num_tokens/2, that).
	reqPool := min(max(int(float64(p.pool)/float64(p.contextLen)*512), 2048), 4096)
	p.maxRunning = min(int(p.pool/2), reqPool)
	if c.MaxRunningRequests > 0 {
		p.maxRunning = min(c.MaxRunningRequests, reqPool)
	}
	f := c.Faults
	if f.ErrorRate < 0 || f.ErrorRate > 1 || f.DropRate < 0 || f.DropRate > 1 {
		errs = append(errs, fmt.Errorf("error_rate %v, drop_rate %v: must be in [0, 1]", f.ErrorRate, f.DropRate))
	}
	if s := f.Slowdown; s != nil && (s.Factor < 1 || s.AtS < 0 || s.DurationS < 0) {
		errs = append(errs, fmt.Errorf("slowdown %+v: factor must be ≥ 1, times ≥ 0", *s))
	}
	if d := f.Death; d != nil && (d.AtS < 0 || d.ReviveAfterS < 0 || d.WarmupS < 0) {
		errs = append(errs, fmt.Errorf("death %+v: times must be ≥ 0", *d))
	}
	return p, errs
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func orI(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

func orF(v, def float64) float64 {
	if v == 0 {
		return def
	}
	return v
}

// Validate reports every problem of the configuration at once.
func (cfg FleetConfig) Validate() error {
	var errs []error
	if cfg.Speedup < 0 || math.IsNaN(cfg.Speedup) || math.IsInf(cfg.Speedup, 0) {
		errs = append(errs, fmt.Errorf("speedup %v: must be > 0", cfg.Speedup))
	}
	if len(cfg.Servers) == 0 {
		errs = append(errs, errors.New("no servers"))
	}
	if cfg.Port < 0 || cfg.Port+len(cfg.Servers) > 65536 {
		errs = append(errs, fmt.Errorf("port %d: out of range for %d servers", cfg.Port, len(cfg.Servers)))
	}
	names := map[string]bool{}
	for i, s := range cfg.Servers {
		name := serverName(s, i)
		if names[name] {
			errs = append(errs, fmt.Errorf("server %s: duplicate name", name))
		}
		names[name] = true
		if s.Port < 0 || s.Port > 65535 {
			errs = append(errs, fmt.Errorf("server %s: port %d out of range", name, s.Port))
		}
		if _, perr := s.resolve(cfg.Seed); len(perr) > 0 {
			for _, e := range perr {
				errs = append(errs, fmt.Errorf("server %s: %w", name, e))
			}
		}
	}
	return errors.Join(errs...)
}

func serverName(s ServerConfig, i int) string {
	if s.Name != "" {
		return s.Name
	}
	return "gpu" + strconv.Itoa(i)
}

// Fleet is a running simulated fleet. Close stops it.
type Fleet struct {
	speedup float64
	tick    time.Duration
	start   time.Time
	seed    int64
	fill    filler
	servers []*server
	log     zerolog.Logger

	cancel context.CancelFunc
	wg     sync.WaitGroup // engines and Serve loops

	hmu     sync.RWMutex // guards closing against handler registration
	closing bool
	hwg     sync.WaitGroup // running HTTP handlers

	closeOnce sync.Once
}

// StartFleet validates cfg, listens on every server's port and starts the
// engines. The fleet runs until ctx ends or Close is called.
func StartFleet(ctx context.Context, cfg FleetConfig) (*Fleet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("gensim config: %w", err)
	}
	f := &Fleet{
		speedup: orF(cfg.Speedup, 1),
		tick:    cfg.Tick,
		seed:    cfg.Seed,
		fill:    newFiller(),
		log:     cfg.Logger.With().Str("component", "gensim").Logger(),
	}
	if f.tick <= 0 {
		f.tick = defaultTick
	}
	host := or(cfg.Host, "127.0.0.1")
	for i, sc := range cfg.Servers {
		p, _ := sc.resolve(cfg.Seed) // validated above
		port := sc.Port
		if port == 0 && cfg.Port > 0 {
			port = cfg.Port + i
		}
		s := newServer(f, i, serverName(sc, i), sc, p, net.JoinHostPort(host, strconv.Itoa(port)))
		f.servers = append(f.servers, s)
	}
	for _, s := range f.servers {
		if err := s.listen(); err != nil {
			f.closeServers()
			return nil, fmt.Errorf("start %s: %w", s.name, err)
		}
	}
	ctx, f.cancel = context.WithCancel(ctx)
	f.start = time.Now()
	for _, s := range f.servers {
		f.wg.Go(func() { s.eng.run(ctx) })
	}
	f.wg.Go(func() {
		<-ctx.Done()
		f.closeServers()
	})
	return f, nil
}

// simNow is the simulated time since start, in seconds.
func (f *Fleet) simNow() float64 { return time.Since(f.start).Seconds() * f.speedup }

// URLs returns each server's base URL (http://host:port), in order.
func (f *Fleet) URLs() []string {
	out := make([]string, len(f.servers))
	for i, s := range f.servers {
		out[i] = s.url()
	}
	return out
}

// Names returns each server's name, in order.
func (f *Fleet) Names() []string {
	out := make([]string, len(f.servers))
	for i, s := range f.servers {
		out[i] = s.name
	}
	return out
}

// Close stops the fleet: no new connections or handlers, every listener and
// connection closed, in-flight requests aborted; it returns once every
// goroutine it started has ended.
func (f *Fleet) Close() error {
	f.closeOnce.Do(func() {
		f.hmu.Lock()
		f.closing = true
		f.hmu.Unlock()
		f.cancel()
		f.wg.Wait()
		f.hwg.Wait()
	})
	return nil
}

func (f *Fleet) closeServers() {
	for _, s := range f.servers {
		s.closeForGood()
	}
}

// track wraps a handler so Close waits for it.
func (f *Fleet) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.hmu.RLock()
		if f.closing {
			f.hmu.RUnlock()
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		f.hwg.Add(1)
		f.hmu.RUnlock()
		defer f.hwg.Done()
		h.ServeHTTP(w, r)
	})
}

// ServerStats are one server's counters and gauges, readable in Go.
type ServerStats struct {
	Name               string
	URL                string
	State              string // alive, starting, dead
	SimSeconds         float64
	Running            int
	Waiting            int
	UsedTokens         int64
	MaxTotalTokens     int64
	MaxRunningRequests int
	TokenUsage         float64
	NewTokenRatio      float64
	GenThroughput      float64 // simulated tok/s over the last log interval
	GeneratedTokens    int64
	PromptTokens       int64
	RequestsDone       int64 // finished normally (stop or length)
	Aborted            int64 // client disconnects, /abort_request, deaths
	Retractions        int64
	RetractedOutTokens int64
	QueueFull          int64 // 503 queue full
	Errors500          int64 // injected 500s and out-of-memory aborts
	Dropped            int64 // connections cut mid-response
	BadRequests        int64 // 400s
	DecodeSteps        int64
	BusySeconds        float64 // simulated GPU busy time
}

// Stats returns every server's statistics, in order.
func (f *Fleet) Stats() []ServerStats {
	out := make([]ServerStats, len(f.servers))
	for i, s := range f.servers {
		out[i] = s.stats()
	}
	return out
}

// gpuUUID is a stable fake UUID per fleet seed and server index.
func gpuUUID(seed int64, idx int) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("gensim/%d/%d", seed, idx)))
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}
