package sim

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// server is one simulated SGLang server: an HTTP front end on its own
// listener and an engine goroutine.
type server struct {
	f       *Fleet
	idx     int
	name    string
	cfg     ServerConfig
	p       params
	eng     *engine
	metrics *metrics
	log     zerolog.Logger
	uuid    string
	handler http.Handler

	mu     sync.Mutex // guards addr, hs, closed
	addr   string
	hs     *http.Server
	closed bool // the fleet is closing: never listen again

	rmu  sync.Mutex // guards rids
	rids map[string]*request

	seq    atomic.Uint64 // requests seen: ids and fault draws
	n500   atomic.Int64
	nDrop  atomic.Int64
	n400   atomic.Int64
	nNoEng atomic.Int64 // max_tokens 0: answered without the engine
}

func newServer(f *Fleet, idx int, name string, cfg ServerConfig, p params, addr string) *server {
	s := &server{
		f: f, idx: idx, name: name, cfg: cfg, p: p, addr: addr,
		log:  f.log.With().Str("server", name).Logger(),
		uuid: gpuUUID(f.seed, idx),
		rids: map[string]*request{},
	}
	s.eng = newEngine(s, coreConfig{
		roof: p.roof, pool: p.pool, maxRunning: p.maxRunning, chunk: p.chunk,
		maxPrefill: p.maxPrefill, maxQueued: cfg.MaxQueuedRequests, conservativeness: p.conservative,
	})
	s.metrics = newMetrics(s)
	s.handler = f.track(s.routes())
	return s
}

func (s *server) url() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return "http://" + s.addr
}

// listen opens the server's port (the same one again after a death) and
// serves it on a goroutine owned by the fleet's WaitGroup.
func (s *server) listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("fleet closed")
	}
	if s.hs != nil {
		return nil
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.addr, err)
	}
	s.addr = ln.Addr().String()
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Second, // SGLANG_TIMEOUT_KEEP_ALIVE
		ErrorLog:          nil,
	}
	s.hs = hs
	s.f.wg.Go(func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Warn().Err(err).Msg("serve")
		}
	})
	return nil
}

// die closes the listener and every connection (connection refused from now on).
func (s *server) die() {
	s.mu.Lock()
	hs := s.hs
	s.hs = nil
	s.mu.Unlock()
	if hs != nil {
		_ = hs.Close() // closing listeners and connections; errors are not actionable
	}
}

// closeForGood is die for fleet shutdown: the server never listens again.
func (s *server) closeForGood() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.die()
}

// draw is a deterministic uniform number for request seq and purpose salt.
func (s *server) draw(seq uint64, salt uint64) float64 {
	return unit(splitmix64(uint64(s.f.seed) ^ uint64(s.idx)<<48 ^ salt<<40 ^ splitmix64(seq)))
}

// newID is a 32-hex request id like SGLang's uuid4().hex.
func (s *server) newID(seq uint64) string {
	a := splitmix64(uint64(s.f.seed) ^ uint64(s.idx)<<48 ^ seq)
	return fmt.Sprintf("%016x%016x", a, splitmix64(a))
}

// register claims an in-flight rid; false when it is already in flight.
func (s *server) register(rid string, r *request) bool {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	if _, dup := s.rids[rid]; dup {
		return false
	}
	s.rids[rid] = r
	return true
}

func (s *server) unregister(rid string) {
	s.rmu.Lock()
	delete(s.rids, rid)
	s.rmu.Unlock()
}

func (s *server) lookup(rid string) *request {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	return s.rids[rid]
}

func (s *server) stats() ServerStats {
	sn := s.eng.snapshot()
	usage := 0.0
	if s.p.pool > 0 {
		usage = float64(sn.used) / float64(s.p.pool)
	}
	return ServerStats{
		Name:               s.name,
		URL:                s.url(),
		State:              sn.state.String(),
		SimSeconds:         sn.simNow,
		Running:            sn.running,
		Waiting:            sn.waiting,
		UsedTokens:         sn.used,
		MaxTotalTokens:     s.p.pool,
		MaxRunningRequests: s.p.maxRunning,
		TokenUsage:         usage,
		NewTokenRatio:      sn.ratio,
		GenThroughput:      sn.genThroughput,
		GeneratedTokens:    sn.c.genTokens,
		PromptTokens:       sn.c.promptTokens,
		RequestsDone:       sn.c.requests,
		Aborted:            sn.c.aborted,
		Retractions:        sn.c.retractions,
		RetractedOutTokens: sn.c.retractedOut,
		QueueFull:          sn.c.queueFull,
		Errors500:          s.n500.Load() + sn.c.oom,
		Dropped:            s.nDrop.Load(),
		BadRequests:        s.n400.Load(),
		DecodeSteps:        sn.c.decodeSteps,
		BusySeconds:        sn.c.busySeconds,
	}
}
