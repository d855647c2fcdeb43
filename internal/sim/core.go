package sim

import (
	"container/heap"
	"math"
	"slices"
	"sync/atomic"
)

type reqState uint8

const (
	stNew reqState = iota
	stWaiting
	stChunked
	stRunning
	stDone
)

// outcome says how a request ended.
type outcome uint8

const (
	outFinished  outcome = iota // finish_reason stop, length or abort (HTTP 200)
	outQueueFull                // 503 The request queue is full.
	outOOM                      // 500 Out of memory even after retracting ...
	outDied                     // the server died or the fleet closed
)

// request is one generation request as the engine sees it. Fields above
// "core-owned" are fixed before submission; core-owned fields belong to the
// engine goroutine; results are written before done is closed.
type request struct {
	id        string
	prompt    int    // prompt tokens
	maxNew    int    // effective max new tokens
	target    int    // tokens it will generate: min(natural length, maxNew)
	reasoning int    // leading reasoning tokens of the natural output
	reason    string // finish reason when target is reached: stop or length
	stream    bool

	// core-owned
	state      reqState
	gen        int   // generated tokens while not running
	base       int64 // while running: generated = base + core.step
	heapIdx    int
	prefilled  int // chunked prefill progress, tokens of prompt+gen
	retracted  int
	seenFirst  bool
	tArrive    float64
	tAdmit     float64
	tFirst     float64
	tDone      float64
	lastPublic int

	// results
	out       outcome
	finish    string // stop, length, abort
	generated int

	progress atomic.Int64  // generated tokens as published to the handler
	notify   chan struct{} // cap 1: progress changed (streams only)
	done     chan struct{} // closed when the request has ended
}

func newRequest() *request {
	return &request{notify: make(chan struct{}, 1), done: make(chan struct{})}
}

// finishStep is the global decode step at which a running request is done.
func (r *request) finishStep() int64 { return int64(r.target) - r.base }

// runHeap orders running requests by the step at which they finish.
type runHeap []*request

func (h runHeap) Len() int           { return len(h) }
func (h runHeap) Less(i, j int) bool { return h[i].finishStep() < h[j].finishStep() }
func (h runHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}
func (h *runHeap) Push(x any) {
	r := x.(*request)
	r.heapIdx = len(*h)
	*h = append(*h, r)
}
func (h *runHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	r.heapIdx = -1
	return r
}

// coreConfig is what the scheduler model needs.
type coreConfig struct {
	roof             Roofline
	pool             int64 // max_total_num_tokens
	maxRunning       int
	chunk            int // chunked_prefill_size
	maxPrefill       int // max_prefill_tokens
	maxQueued        int // 0: unbounded
	conservativeness float64
}

// counters are cumulative engine totals.
type counters struct {
	genTokens      int64
	promptTokens   int64
	requests       int64 // finished requests (num_requests_total)
	aborted        int64
	retractions    int64
	retractedIn    int64
	retractedOut   int64
	queueFull      int64
	oom            int64
	decodeSteps    int64
	prefillBatches int64
	prefillTokens  int64
	bytesRead      float64
	flops          float64
	busySeconds    float64
}

// core is the SGLang scheduler model: a pure state machine over simulated
// time, with no goroutines and no clock. advance(t) runs prefill and decode
// steps until the simulated clock reaches t. Running requests advance
// together: a global step counter gives each one's generated count, and a heap
// keyed by finishing step makes n decode steps O(finishing requests).
type core struct {
	cfg                                   coreConfig
	now                                   float64 // simulated seconds
	step                                  int64   // decode steps so far
	ratio, ratioInit, ratioMin, ratioStep float64
	slow                                  float64 // step time multiplier (slowdown fault), ≥ 1

	waiting []*request
	chunked *request
	running runHeap
	sumPB   int64 // Σ(prompt + base) over running requests

	c counters

	// decode log interval: gen_throughput and num_retracted_reqs
	winStep       int64
	winTime       float64
	winGen        int64
	winRetract    int64
	genThroughput float64
	lastRetracted int64

	onDone func(*request) // called once per request, on the engine goroutine
}

func newCore(cfg coreConfig, onDone func(*request)) *core {
	init := math.Min(initRatioBase*cfg.conservativeness, 1)
	c := &core{
		cfg:       cfg,
		ratioInit: init,
		ratioMin:  init * minRatioFactor,
		ratio:     init,
		slow:      1,
		onDone:    onDone,
	}
	c.ratioStep = (c.ratioInit - c.ratioMin) / ratioDecaySteps
	return c
}

func (c *core) generated(r *request) int {
	if r.state == stRunning {
		return int(r.base + c.step)
	}
	return r.gen
}

// used is the number of KV tokens held.
func (c *core) used() int64 {
	u := c.sumPB + int64(len(c.running))*c.step
	if c.chunked != nil {
		u += int64(c.chunked.prefilled)
	}
	return u
}

func (c *core) waitingTokens() int64 {
	var n int64
	for _, r := range c.waiting {
		n += int64(r.prompt + r.gen)
	}
	return n
}

func (c *core) waitingRetracted() int {
	n := 0
	for _, r := range c.waiting {
		if r.retracted > 0 {
			n++
		}
	}
	return n
}

func (c *core) idle() bool { return len(c.running) == 0 && len(c.waiting) == 0 && c.chunked == nil }

// submit enqueues a request, or rejects it when the queue is at its cap.
func (c *core) submit(r *request) {
	r.tArrive = c.now
	if c.cfg.maxQueued > 0 && len(c.waiting) >= c.cfg.maxQueued {
		c.c.queueFull++
		c.end(r, outQueueFull, "abort")
		return
	}
	r.state = stWaiting
	c.waiting = append(c.waiting, r)
}

// remove takes a request out of whichever queue holds it.
func (c *core) remove(r *request) {
	switch r.state {
	case stWaiting:
		if i := slices.Index(c.waiting, r); i >= 0 {
			c.waiting = slices.Delete(c.waiting, i, i+1)
		}
	case stChunked:
		c.chunked = nil
		r.prefilled = 0
	case stRunning:
		r.gen = c.generated(r)
		heap.Remove(&c.running, r.heapIdx)
		c.sumPB -= int64(r.prompt) + r.base
	}
}

// abort ends a request early: finish_reason "abort" (or out for a death).
func (c *core) abort(r *request, out outcome) {
	if r.state == stDone {
		return
	}
	c.remove(r)
	c.c.aborted++
	c.end(r, out, "abort")
}

// abortAll ends every request (server death or shutdown).
func (c *core) abortAll(out outcome) {
	for len(c.waiting) > 0 {
		c.abort(c.waiting[0], out)
	}
	if c.chunked != nil {
		c.abort(c.chunked, out)
	}
	for len(c.running) > 0 {
		c.abort(c.running[0], out)
	}
	c.ratio = c.ratioInit
}

func (c *core) end(r *request, out outcome, finish string) {
	r.state = stDone
	r.out = out
	r.finish = finish
	r.generated = r.gen
	r.tDone = c.now
	c.onDone(r)
}

// advance runs the engine until the simulated clock reaches target. A step
// that starts before target is committed whole, so the clock may overshoot
// by at most one step.
func (c *core) advance(target float64) {
	const maxOps = 1 << 20 // a bound far above any real tick's work
	for i := 0; i < maxOps && c.now < target; i++ {
		if c.prefill() {
			continue
		}
		if len(c.running) == 0 {
			c.now = target
			c.ratio = c.ratioInit // SGLang resets the ratio when idle
			return
		}
		c.decode(target)
	}
}

// prefill forms and runs one prefill batch (SGLang PrefillAdder): the
// chunked request first, then waiting requests in order while their prompt
// plus min(max_new, 4096) fits in what the running requests' reservations
// leave free. It reports whether a batch ran.
func (c *core) prefill() bool {
	if c.chunked == nil && len(c.waiting) == 0 {
		return false
	}
	avail := c.cfg.pool - c.used()
	reserve := 0.0
	for _, r := range c.running {
		reserve += float64(min(r.maxNew-c.generated(r), clipMaxNewTokens)) * c.ratio
	}
	remTotal := float64(avail) - reserve
	remInput := c.cfg.maxPrefill
	remChunk := c.cfg.chunk
	tokens := 0
	prefix := 0.0
	var ready []*request

	if ch := c.chunked; ch != nil {
		left := ch.prompt + ch.gen - ch.prefilled
		take := min(left, remChunk, int(max(avail, 0)))
		if take <= 0 {
			return false
		}
		prefix += float64(ch.prefilled)
		ch.prefilled += take
		tokens += take
		remChunk -= take
		remInput -= take
		remTotal -= float64(take)
		if take == left {
			c.chunked = nil
			remTotal -= float64(min(ch.maxNew-ch.gen, clipMaxNewTokens))
			ready = append(ready, ch)
		}
	}
	for c.chunked == nil && len(c.waiting) > 0 {
		if len(c.running)+len(ready) >= c.cfg.maxRunning || remInput <= 0 || remChunk <= 0 {
			break
		}
		r := c.waiting[0]
		ext := r.prompt + r.gen
		total := float64(ext + min(r.maxNew-r.gen, clipMaxNewTokens))
		if total >= remTotal {
			// An empty server always takes the head of the queue, so a
			// request that passed validation never waits forever.
			if len(c.running) > 0 || len(ready) > 0 || int64(ext) > avail {
				break
			}
		}
		c.waiting = c.waiting[1:]
		if !r.seenFirst && r.tAdmit == 0 {
			r.tAdmit = c.now
		}
		if ext <= remChunk {
			tokens += ext
			remChunk -= ext
			remInput -= ext
			remTotal -= total
			ready = append(ready, r)
			continue
		}
		r.state = stChunked
		r.prefilled = remChunk
		tokens += remChunk
		c.chunked = r
		break
	}
	if tokens == 0 {
		return false
	}
	cost := c.cfg.roof.Prefill(tokens, prefix)
	c.spend(cost, 1)
	c.c.prefillBatches++
	c.c.prefillTokens += int64(tokens)
	for _, r := range ready {
		r.prefilled = 0
		r.gen++ // the prefill forward pass samples the next token
		c.c.genTokens++
		if !r.seenFirst {
			r.seenFirst = true
			r.tFirst = c.now
			c.c.promptTokens += int64(r.prompt)
		}
		if r.gen >= r.target {
			c.c.requests++
			c.end(r, outFinished, r.reason)
			continue
		}
		r.state = stRunning
		r.base = int64(r.gen) - c.step
		c.sumPB += int64(r.prompt) + r.base
		heap.Push(&c.running, r)
	}
	return true
}

func (c *core) spend(cost StepCost, n int64) {
	s := cost.Seconds * c.slow * float64(n)
	c.now += s
	c.c.busySeconds += s
	c.c.bytesRead += cost.BytesRead * float64(n)
	c.c.flops += cost.FLOPs * float64(n)
}

// decode runs as many decode steps as fit before target, stopping early at
// the next finishing request or when the KV pool cannot take another step.
func (c *core) decode(target float64) {
	if c.cfg.pool-c.used() < int64(len(c.running)) {
		c.retract()
		if len(c.running) == 0 {
			return
		}
		if c.cfg.pool-c.used() < int64(len(c.running)) {
			// A lone request that still does not fit.
			r := c.running[0]
			c.remove(r)
			c.c.oom++
			c.end(r, outOOM, "abort")
			return
		}
	}
	b := int64(len(c.running))
	sumCtx := float64(c.sumPB + b*c.step)
	n := int64(1)
	if budget := target - c.now; budget > 0 {
		st := c.cfg.roof.DecodeStep(int(b), sumCtx).Seconds * c.slow
		if est := int64(budget / st); est > 1 {
			mid := c.cfg.roof.DecodeStep(int(b), sumCtx+float64(b*(est-1))/2).Seconds * c.slow
			n = max(1, int64(budget/mid))
		}
	}
	n = min(n, c.running[0].finishStep()-c.step, (c.cfg.pool-c.used())/b)
	n = max(n, 1)
	c.spend(c.cfg.roof.DecodeStep(int(b), sumCtx+float64(b*(n-1))/2), n)
	c.step += n
	c.c.genTokens += b * n
	c.c.decodeSteps += n
	c.ratio = math.Max(c.ratio-float64(n)*c.ratioStep, c.ratioMin)
	for len(c.running) > 0 && c.running[0].finishStep() <= c.step {
		r := heap.Pop(&c.running).(*request)
		c.sumPB -= int64(r.prompt) + r.base
		r.gen = r.target
		c.c.requests++
		c.end(r, outFinished, r.reason)
	}
	if c.step-c.winStep >= logIntervalSteps {
		if dt := c.now - c.winTime; dt > 0 {
			c.genThroughput = float64(c.c.genTokens-c.winGen) / dt
		}
		c.lastRetracted = c.c.retractions - c.winRetract
		c.winStep, c.winTime, c.winGen, c.winRetract = c.step, c.now, c.c.genTokens, c.c.retractions
	}
}

// retract implements SGLang's retract_decode: retract the requests with the
// fewest generated tokens (longest prompt first on ties), at least one, until
// the rest can take a decode step; they re-queue and later recompute. The
// new-token ratio is re-estimated from the requests that remain.
func (c *core) retract() {
	order := slices.Clone([]*request(c.running))
	slices.SortFunc(order, func(a, b *request) int {
		ga, gb := c.generated(a), c.generated(b)
		if ga != gb {
			return gb - ga // most generated first; victims come from the end
		}
		return a.prompt - b.prompt
	})
	for first := true; first || c.cfg.pool-c.used() < int64(len(c.running)); first = false {
		if len(order) == 1 {
			break
		}
		r := order[len(order)-1]
		order = order[:len(order)-1]
		c.remove(r)
		c.c.retractions++
		c.c.retractedIn += int64(r.prompt)
		c.c.retractedOut += int64(r.gen)
		r.retracted++
		r.state = stWaiting
		c.waiting = append(c.waiting, r)
	}
	var sumGen, sumMax float64
	for _, r := range c.running {
		sumGen += float64(c.generated(r))
		sumMax += float64(r.maxNew)
	}
	c.ratio = math.Min(1, (sumGen+retractDecodeSteps*float64(len(c.running)))/(sumMax+1))
}
