package scheduler

import "math"

// LawConfig tunes the adaptive control law. The zero value is not useful;
// start from DefaultLawConfig.
type LawConfig struct {
	Min      int // never below this many in flight per server
	Max      int // never above (per_server_max)
	QueueMin int // smallest queue kept on a server so it never idles
	// QueueFrac: queue target as a fraction of the running batch. With
	// heavy-tailed outputs a KV-bound batch swings widely (one long request
	// finishing frees room for several new ones), and the server's own
	// admission can only fill that room from its queue.
	QueueFrac float64
	// TrimFactor: a queue longer than this many times the target is
	// trimmed (the limit comes down toward running + target).
	TrimFactor int
	KVHigh     float64 // KV usage above which the law stops growing
	Cut        float64 // multiplicative decrease on overload/errors/retraction storms
	// RetractFrac: retractions in one period above this fraction of the
	// running batch (and at least 2) mean the server is at its KV limit: the
	// queue is trimmed to QueueMin and the limit does not grow.
	RetractFrac float64
	// StormFrac: retractions in one period above this fraction of the
	// running batch (and at least StormMin) are a storm: cut multiplicatively.
	StormFrac  float64
	StormMin   float64
	ErrorRatio float64 // error share of finished attempts above which the law cuts
	Default    int     // first limit when the server says nothing about its capacity
}

// DefaultLawConfig is what gend runs with.
func DefaultLawConfig() LawConfig {
	return LawConfig{Min: 1, Max: 1024, QueueMin: 8, QueueFrac: 0.25, TrimFactor: 3, KVHigh: 0.92, Cut: 0.7,
		RetractFrac: 0.05, StormFrac: 0.25, StormMin: 4, ErrorRatio: 0.2, Default: 64}
}

// Observation is everything the law sees about one server for one period.
type Observation struct {
	Fresh       bool    // the server's gauges were read this period
	HasGauges   bool    // the server exposes load gauges at all
	Running     int     // requests in the server's running batch
	Queued      int     // requests waiting in the server's queue
	TokenUsage  float64 // KV pool usage 0..1
	Retractions float64 // retractions/preemptions during the period
	Capacity    int     // max_running_requests (0 = unknown)
	// MaxQueued is the server's waiting-queue cap (SGLang
	// --max-queued-requests; over it the server answers 503), 0 = none.
	MaxQueued int
	KVTokens  int64 // KV pool size in tokens (0 = unknown)
	// TokensPerRequest estimates one request's KV footprint (prompt + a share
	// of max tokens), for the first limit.
	TokensPerRequest float64
	InFlight         int     // gend's requests on this server now
	Overloads        int     // 503/429 answers during the period
	Errors           int     // failed attempts (5xx, drops, timeouts) during the period
	Successes        int     // completed attempts during the period
	Throughput       float64 // output tokens/s completed during the period (hill climb)
}

// LawState is the law's memory between periods.
type LawState struct {
	Limit       int
	QueueTarget int
	Started     bool
	Cooldown    int // periods left during which the law does not grow after a cut
	// Hill climb (servers without gauges).
	LastThroughput float64
	Direction      int
	Periods        int
}

// Decision is the law's output for one period.
type Decision struct {
	Limit       int
	QueueTarget int
	Reason      string // start, grow, hold, trim_queue, overload, errors, retractions, hill_up, hill_down
}

// Reasons, for metrics (pre-created at zero).
var Reasons = []string{"start", "grow", "hold", "trim_queue", "overload", "errors", "retractions", "stale", "hill_up", "hill_down"}

// InitialLimit fills the server's capacity at once: the running batch it can
// hold (from max_running_requests and the KV pool) plus a small queue.
func InitialLimit(cfg LawConfig, o Observation) (limit, queue int) {
	batch := 0
	if o.KVTokens > 0 && o.TokensPerRequest > 0 {
		batch = int(float64(o.KVTokens) / o.TokensPerRequest)
	}
	if o.Capacity > 0 && (batch == 0 || o.Capacity < batch) {
		batch = o.Capacity
	}
	if batch <= 0 {
		batch = cfg.Default
	}
	queue = queueTarget(cfg, batch, batch, o.MaxQueued)
	return clamp(batch+queue, cfg.Min, cfg.Max), queue
}

// queueTarget is the queue kept on a server running running requests: a
// fraction of the batch, at least QueueMin (or the server's capacity, when
// smaller), and at most half the server's own queue cap (maxQueued > 0), so
// that gend's queue never meets it.
func queueTarget(cfg LawConfig, running, capacity, maxQueued int) int {
	q := int(math.Ceil(cfg.QueueFrac * float64(running)))
	// At least QueueMin, but never more than the server's whole batch on a
	// small server (a 4-request server needs no 8-request queue).
	floor := cfg.QueueMin
	if capacity > 0 {
		floor = min(floor, capacity)
	}
	q = max(q, floor, 1)
	if maxQueued > 0 {
		q = min(q, max(1, maxQueued/2))
	}
	return q
}

func clamp(v, lo, hi int) int {
	if hi > 0 && v > hi {
		v = hi
	}
	if v < lo {
		v = lo
	}
	return v
}

// Step is the control law: a pure function of the previous state and one
// period's observation.
//
// It keeps a small positive queue on the server (so it never idles between
// requests), grows only while the KV cache has headroom, trims a queue that
// has grown long, and cuts multiplicatively on 503s, error bursts and
// retraction storms. Stale gauges never raise the limit. A server without
// gauges gets a throughput hill climb.
func Step(cfg LawConfig, st LawState, o Observation) (LawState, Decision) {
	if !st.Started {
		st.Limit, st.QueueTarget = InitialLimit(cfg, o)
		st.Started = true
		return st, Decision{Limit: st.Limit, QueueTarget: st.QueueTarget, Reason: "start"}
	}
	limit := st.Limit
	reason := "hold"
	finished := o.Errors + o.Successes
	base := limit
	if o.InFlight < base {
		base = o.InFlight
	}
	switch {
	case o.Overloads > 0:
		limit = int(float64(maxInt(base, cfg.Min)) * cfg.Cut)
		reason = "overload"
		st.Cooldown = 3
	case o.Errors >= 3 && float64(o.Errors) > cfg.ErrorRatio*float64(finished):
		limit = int(float64(maxInt(base, cfg.Min)) * cfg.Cut)
		reason = "errors"
		st.Cooldown = 3
	case o.Fresh && o.Retractions > math.Max(cfg.StormMin, cfg.StormFrac*float64(o.Running)):
		// A retraction storm: the batch far outgrows the KV cache and the
		// server throws work away faster than it finishes it. Cut.
		limit = int(float64(maxInt(base, cfg.Min)) * cfg.Cut)
		reason = "retractions"
		st.Cooldown = 2
	case o.Fresh && o.Retractions > math.Max(1, cfg.RetractFrac*float64(o.Running)):
		// Some retractions: the server is at its KV limit. Its own
		// admission decides the running batch (recomputing a retracted
		// request costs a prefill, far less than an idle slot), so keep
		// the batch but no more than the minimum queue, and do not grow.
		if floor := o.Running + cfg.QueueMin; limit > floor {
			limit = floor
			reason = "retractions"
		}
		st.Cooldown = maxInt(st.Cooldown, 1)
	case !o.HasGauges:
		st, limit, reason = hillClimb(cfg, st, o)
	case !o.Fresh:
		reason = "stale"
	default:
		q := queueTarget(cfg, o.Running, o.Capacity, o.MaxQueued)
		st.QueueTarget = q
		switch {
		case o.Queued < q && st.Cooldown == 0 && o.InFlight >= limit-q:
			// The server would take more, and gend is using its limit.
			if o.TokenUsage < cfg.KVHigh {
				limit += q - o.Queued
				reason = "grow"
			} else if o.Queued == 0 {
				limit++
				reason = "grow"
			}
		case o.Queued > max(cfg.TrimFactor, 1)*q:
			floor := o.Running + q
			next := limit - (o.Queued-q)/2
			if next < floor {
				next = floor
			}
			if next < limit {
				limit = next
				reason = "trim_queue"
			}
		}
		if o.Capacity > 0 && limit > o.Capacity+q {
			limit = o.Capacity + q
		}
		if o.MaxQueued > 0 && limit > o.Running+q && o.Queued > q {
			// A capped queue: what the server does not run waits in a
			// queue that answers 503 when full.
			limit = max(o.Running+q, limit-(o.Queued-q))
			reason = "trim_queue"
		}
	}
	if st.Cooldown > 0 && reason != "overload" && reason != "errors" && reason != "retractions" {
		st.Cooldown--
	}
	st.Limit = clamp(limit, cfg.Min, cfg.Max)
	if st.QueueTarget == 0 {
		st.QueueTarget = queueTarget(cfg, st.Limit, o.Capacity, o.MaxQueued)
	}
	return st, Decision{Limit: st.Limit, QueueTarget: st.QueueTarget, Reason: reason}
}

// hillClimb moves the limit by 10% every few periods in the direction that
// raised throughput; flat throughput holds.
func hillClimb(cfg LawConfig, st LawState, o Observation) (LawState, int, string) {
	st.Periods++
	limit := st.Limit
	if st.Periods < 4 || o.Throughput <= 0 {
		return st, limit, "hold"
	}
	st.Periods = 0
	if st.Direction == 0 {
		st.Direction = 1
	}
	switch {
	case st.LastThroughput == 0:
	case o.Throughput < st.LastThroughput*0.97:
		st.Direction = -st.Direction
	case o.Throughput < st.LastThroughput*1.02:
		st.LastThroughput = o.Throughput
		return st, limit, "hold"
	}
	st.LastThroughput = o.Throughput
	step := maxInt(1, limit/10)
	limit += st.Direction * step
	if st.Direction > 0 {
		return st, limit, "hill_up"
	}
	return st, limit, "hill_down"
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}
