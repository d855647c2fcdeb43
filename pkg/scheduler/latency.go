package scheduler

import (
	"sync/atomic"
	"time"
)

// Dispatch latency is the time from a slot freeing (an attempt of any job
// ending) to the next attempt's Send call: what the controller itself adds
// between a server finishing a request and the next one going on the wire
// (wake-up, locking, picking, goroutine start). A freed slot that the very
// next dispatch pass cannot fill (no queued work, the server is at its
// limit, the job paused) is discarded, so waiting for input or for a limit
// is not counted.

// latencyBounds are the upper bounds (seconds) of the dispatch-latency
// histogram's buckets: 10 µs doubling to ~10.5 s.
const latencyBounds = 21

func latencyBound(i int) float64 { return 10e-6 * float64(uint64(1)<<i) }

// maxFreed bounds the slots remembered between two dispatch passes.
const maxFreed = 1 << 16

// dispatchClock pairs freed slots with the attempts that fill them.
type dispatchClock struct {
	freed []time.Time // guarded by Scheduler.mu: slots freed since the last pass, oldest first

	counts [latencyBounds + 1]atomic.Uint64 // per bucket, the last one +Inf
	sumNs  atomic.Int64
}

// slotFreedLocked records that an attempt ended now.
func (c *dispatchClock) slotFreedLocked(now time.Time) {
	if len(c.freed) < maxFreed {
		c.freed = append(c.freed, now)
	}
}

// takeLocked returns the oldest freed slot not yet filled (zero if none).
func (c *dispatchClock) takeLocked() time.Time {
	if len(c.freed) == 0 {
		return time.Time{}
	}
	t := c.freed[0]
	c.freed = c.freed[1:]
	return t
}

// passDoneLocked forgets the slots a dispatch pass could not fill.
func (c *dispatchClock) passDoneLocked() {
	if cap(c.freed) > 4096 {
		c.freed = nil
		return
	}
	c.freed = c.freed[:0]
}

// observe records one dispatch latency (freed is the slot's time; zero: none).
func (c *dispatchClock) observe(freed time.Time) {
	if freed.IsZero() {
		return
	}
	d := time.Since(freed)
	if d < 0 {
		d = 0
	}
	sec := d.Seconds()
	i := 0
	for i < latencyBounds && sec > latencyBound(i) {
		i++
	}
	c.counts[i].Add(1)
	c.sumNs.Add(int64(d))
}

// LatencyHistogram is a snapshot of the dispatch-latency histogram.
type LatencyHistogram struct {
	// Bounds are the buckets' upper bounds in seconds; Counts[i] counts the
	// observations ≤ Bounds[i] and > Bounds[i-1] (not cumulative), and
	// Counts[len(Bounds)] those above the last bound.
	Bounds     []float64
	Counts     []uint64
	Count      uint64
	SumSeconds float64
}

// DispatchLatency returns the histogram of dispatch latencies so far.
func (s *Scheduler) DispatchLatency() LatencyHistogram {
	c := &s.lat
	h := LatencyHistogram{Bounds: make([]float64, latencyBounds), Counts: make([]uint64, len(c.counts))}
	for i := range h.Bounds {
		h.Bounds[i] = latencyBound(i)
	}
	for i := range c.counts {
		h.Counts[i] = c.counts[i].Load()
		h.Count += h.Counts[i]
	}
	h.SumSeconds = float64(c.sumNs.Load()) / 1e9
	return h
}

// Quantile estimates the q-quantile (0–1) by linear interpolation inside
// its bucket; NaN-free: 0 when empty, the last bound when it falls above.
func (h LatencyHistogram) Quantile(q float64) float64 {
	if h.Count == 0 {
		return 0
	}
	rank := q * float64(h.Count)
	var cum float64
	for i, n := range h.Counts {
		if n == 0 {
			continue
		}
		if cum+float64(n) >= rank {
			if i >= len(h.Bounds) {
				return h.Bounds[len(h.Bounds)-1]
			}
			lo := 0.0
			if i > 0 {
				lo = h.Bounds[i-1]
			}
			return lo + (h.Bounds[i]-lo)*(rank-cum)/float64(n)
		}
		cum += float64(n)
	}
	return h.Bounds[len(h.Bounds)-1]
}

// Sub returns h minus an earlier snapshot of the same histogram.
func (h LatencyHistogram) Sub(old LatencyHistogram) LatencyHistogram {
	out := LatencyHistogram{Bounds: h.Bounds, Counts: make([]uint64, len(h.Counts)), SumSeconds: h.SumSeconds - old.SumSeconds}
	for i := range h.Counts {
		if i < len(old.Counts) {
			out.Counts[i] = h.Counts[i] - old.Counts[i]
		} else {
			out.Counts[i] = h.Counts[i]
		}
		out.Count += out.Counts[i]
	}
	return out
}
