package eta

import (
	"container/heap"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
)

// LengthDist draws one natural output length (before the cap) in tokens.
type LengthDist func(r *rand.Rand) float64

// LogNormal is a lognormal length distribution with the given mean and
// sigma (of ln length).
func LogNormal(mean, sigma float64) LengthDist {
	mu := math.Log(mean) - sigma*sigma/2
	return func(r *rand.Rand) float64 { return math.Exp(mu + sigma*r.NormFloat64()) }
}

// Mixture draws from a with probability p, else from b.
func Mixture(p float64, a, b LengthDist) LengthDist {
	return func(r *rand.Rand) float64 {
		if r.Float64() < p {
			return a(r)
		}
		return b(r)
	}
}

// Lomax is a Pareto type II distribution (a power-law tail with index
// alpha > 1) with the given mean.
func Lomax(mean, alpha float64) LengthDist {
	scale := mean * (alpha - 1)
	return func(r *rand.Rand) float64 {
		return scale * (math.Pow(1-r.Float64(), -1/alpha) - 1)
	}
}

// Gamma is a gamma distribution with the given mean and shape k ≥ 1
// (Marsaglia–Tsang).
func Gamma(mean, k float64) LengthDist {
	d := k - 1.0/3
	c := 1 / math.Sqrt(9*d)
	return func(r *rand.Rand) float64 {
		for i := 0; i < 1000; i++ {
			x := r.NormFloat64()
			v := 1 + c*x
			if v <= 0 {
				continue
			}
			v = v * v * v
			u := r.Float64()
			if math.Log(u) < x*x/2+d-d*v+d*math.Log(v) {
				return d * v * mean / k
			}
		}
		return mean
	}
}

// SimConfig describes a simulated job on a simulated fleet. Each server runs
// up to Slots requests in one continuous batch; a decode step produces one
// token for every running request and takes
// StepBase + StepPerRequest·batch + StepPerKToken·(context tokens in the batch)/1000.
type SimConfig struct {
	Name           string
	Requests       int
	Servers        int
	Slots          int // running requests per server
	MaxTokens      int // cap on output tokens
	Lengths        LengthDist
	PromptTokens   float64
	StepBase       float64 // seconds per step (weights read); default 0.02
	StepPerRequest float64 // seconds per step per running request; default 1e-4
	StepPerKToken  float64 // seconds per step per 1000 context tokens (KV read)
	// RampSeconds: each server's running batch grows linearly to Slots over
	// this time (admission and prefill at the start of a job).
	RampSeconds float64
	// RateWindow is the window (s) of the throughput the daemon reports;
	// default 20.
	RateWindow float64
	// LowerBound makes in-flight lengths lower bounds: each request reports
	// its true tokens × (1 − LowerBound·u), u uniform in [0, 1) per request.
	LowerBound float64
	// EstimateEvery is the simulated seconds between Estimate calls (the
	// daemon calls about once a second); default 2.
	EstimateEvery float64
	Seed          uint64
	// Progress lists the checkpoints (completed/total); default 1, 2, 5,
	// 10, 25, 50, 75 %.
	Progress []float64
	// Record, when set, receives the estimator's calls (Options.Record).
	Record io.Writer
}

// Checkpoint is the estimator's answer when the job reached a progress mark,
// against the truth.
type Checkpoint struct {
	Progress      float64 // completed / total
	Elapsed       float64 // simulated seconds so far
	TrueRemaining float64 // seconds until the job actually finished
	Result        Result
	Err           float64 // (Seconds − TrueRemaining) / TrueRemaining
	NaiveErr      float64 // same for the naive ETA
	Covered       bool    // LowSeconds ≤ TrueRemaining ≤ HighSeconds
	// TrueDrain is how long the job ran after its queue emptied (compare
	// Result.DrainSeconds).
	TrueDrain float64
	// TrueRemainingTokens is the output the job still produced after this
	// point (compare Result.RemainingTokens).
	TrueRemainingTokens float64
	cum                 float64
}

type simReq struct {
	finish float64 // server token clock at which it ends
	start  float64 // server token clock at dispatch
	length int
	capped bool
	lbf    float64 // lower-bound factor
}

type reqHeap []simReq

func (h reqHeap) Len() int           { return len(h) }
func (h reqHeap) Less(i, j int) bool { return h[i].finish < h[j].finish }
func (h reqHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *reqHeap) Push(x any)        { *h = append(*h, x.(simReq)) }
func (h *reqHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type simServer struct {
	run    reqHeap
	clock  float64 // tokens generated per running request since start
	sumV0  float64 // Σ start of running requests
	rate   float64 // tokens/s per request now
	filled int
}

// Simulate runs the job to completion, asking a fresh Estimator at every
// progress mark, and returns the checkpoints with the true remaining time.
// It is deterministic for a given config.
func Simulate(cfg SimConfig) []Checkpoint {
	cfg = cfg.withDefaults()
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	est := New(Options{MaxTokens: cfg.MaxTokens, Record: cfg.Record})
	servers := make([]simServer, cfg.Servers)
	queue := cfg.Requests
	completed := 0
	var cum float64        // tokens generated
	perSec := []float64{0} // cum at each whole second
	marks := make([]int, len(cfg.Progress))
	for i, p := range cfg.Progress {
		marks[i] = max(1, int(math.Ceil(p*float64(cfg.Requests))))
	}
	var cps []Checkpoint
	emptyAt := -1.0
	nextMark := 0

	allowed := func(t float64) int {
		if cfg.RampSeconds <= 0 || t >= cfg.RampSeconds {
			return cfg.Slots
		}
		return max(1, int(float64(cfg.Slots)*t/cfg.RampSeconds))
	}
	dispatch := func(s *simServer, t float64) {
		for queue > 0 && s.run.Len() < allowed(t) {
			l := cfg.Lengths(rng)
			r := simReq{start: s.clock, lbf: 1 - cfg.LowerBound*rng.Float64()}
			if l >= float64(cfg.MaxTokens) {
				r.length, r.capped = cfg.MaxTokens, true
			} else {
				r.length = max(1, int(math.Round(l)))
			}
			r.finish = s.clock + float64(r.length)
			heap.Push(&s.run, r)
			s.sumV0 += r.start
			queue--
		}
		if queue == 0 && emptyAt < 0 {
			emptyAt = t
		}
	}
	rates := func() {
		for i := range servers {
			s := &servers[i]
			b := float64(s.run.Len())
			ctx := b*(cfg.PromptTokens+s.clock) - s.sumV0
			s.rate = 1 / (cfg.StepBase + cfg.StepPerRequest*b + cfg.StepPerKToken*ctx/1000)
		}
	}
	state := func(t float64) State {
		st := State{Elapsed: t, NotStarted: int64(queue), Concurrency: float64(cfg.Servers * cfg.Slots)}
		for i := range servers {
			s := &servers[i]
			for _, r := range s.run {
				st.InFlight = append(st.InFlight, (s.clock-r.start)*r.lbf)
			}
		}
		w0 := math.Floor(t - cfg.RateWindow)
		if w0 <= 0 || int(w0) >= len(perSec) {
			if t > 0 {
				st.TokensPerSec = cum / t
			}
		} else {
			st.TokensPerSec = (cum - perSec[int(w0)]) / (t - w0)
		}
		if n := len(st.InFlight); n > 0 {
			st.PerRequestTokPerSec = st.TokensPerSec / float64(n)
		}
		return st
	}

	for i := range servers {
		dispatch(&servers[i], 0)
	}
	t, nextTick, nextEst := 0.0, 1.0, cfg.EstimateEvery
	// Bounded: every iteration completes a request or passes a whole second,
	// and the job cannot take more than this many seconds.
	limit := 1e9
	for completed < cfg.Requests && t < limit {
		rates()
		next, who := nextTick, -1
		for i := range servers {
			s := &servers[i]
			if s.run.Len() == 0 {
				continue
			}
			if te := t + (s.run[0].finish-s.clock)/s.rate; te < next {
				next, who = te, i
			}
		}
		dt := next - t
		for i := range servers {
			s := &servers[i]
			s.clock += s.rate * dt
			cum += s.rate * dt * float64(s.run.Len())
		}
		t = next
		if who < 0 {
			perSec = append(perSec, cum)
			nextTick++
			for i := range servers {
				dispatch(&servers[i], t)
			}
			if t >= nextEst {
				est.Estimate(state(t))
				nextEst += cfg.EstimateEvery
			}
			continue
		}
		s := &servers[who]
		s.clock = math.Max(s.clock, s.run[0].finish)
		for s.run.Len() > 0 && s.run[0].finish <= s.clock+1e-9 {
			r := heap.Pop(&s.run).(simReq)
			s.sumV0 -= r.start
			est.Completed(r.length, r.capped)
			completed++
		}
		dispatch(s, t)
		for nextMark < len(marks) && completed >= marks[nextMark] {
			st := state(t)
			cps = append(cps, Checkpoint{
				Progress: float64(completed) / float64(cfg.Requests),
				Elapsed:  t,
				cum:      cum,
				Result:   est.Estimate(st),
			})
			nextMark++
		}
	}
	est.Finished(t)
	for i := range cps {
		c := &cps[i]
		c.TrueRemaining = t - c.Elapsed
		c.TrueDrain = t - math.Max(emptyAt, c.Elapsed)
		c.TrueRemainingTokens = cum - c.cum
		if c.TrueRemaining > 0 {
			c.Err = (c.Result.Seconds - c.TrueRemaining) / c.TrueRemaining
			c.NaiveErr = (c.Result.Naive - c.TrueRemaining) / c.TrueRemaining
		}
		c.Covered = c.Result.OK && c.Result.LowSeconds <= c.TrueRemaining && c.TrueRemaining <= c.Result.HighSeconds
	}
	return cps
}

func (c SimConfig) withDefaults() SimConfig {
	if c.Requests <= 0 {
		c.Requests = 30000
	}
	if c.Servers <= 0 {
		c.Servers = 4
	}
	if c.Slots <= 0 {
		c.Slots = 128
	}
	if c.MaxTokens <= 0 {
		c.MaxTokens = 12000
	}
	if c.Lengths == nil {
		c.Lengths = LogNormal(2500, 1)
	}
	if c.StepBase <= 0 {
		c.StepBase = 0.02
	}
	if c.StepPerRequest <= 0 {
		c.StepPerRequest = 1e-4
	}
	if c.RateWindow <= 0 {
		c.RateWindow = 20
	}
	if c.EstimateEvery <= 0 {
		c.EstimateEvery = 2
	}
	if len(c.Progress) == 0 {
		c.Progress = []float64{0.01, 0.02, 0.05, 0.10, 0.25, 0.50, 0.75}
	}
	return c
}

// Table formats checkpoints for people: progress, elapsed, true remaining,
// the estimate with its interval, its error, coverage, and the naive error.
func Table(cps []Checkpoint) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%8s %9s %9s %9s %21s %8s %7s %9s %8s %6s %10s\n",
		"progress", "elapsed", "true_rem", "eta", "interval", "err", "covered", "naive_err", "mean_len", "drain", "true_drain")
	for _, c := range cps {
		fmt.Fprintf(&b, "%7.1f%% %8.0fs %8.0fs %8.0fs [%8.0fs,%9.0fs] %+7.1f%% %7v %+8.1f%% %8.0f %5.0fs %9.0fs\n",
			100*c.Progress, c.Elapsed, c.TrueRemaining, c.Result.Seconds, c.Result.LowSeconds,
			c.Result.HighSeconds, 100*c.Err, c.Covered, 100*c.NaiveErr, c.Result.MeanOutputTokens, c.Result.DrainSeconds, c.TrueDrain)
	}
	return b.String()
}
