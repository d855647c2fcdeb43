// Package sim is gensim: a simulated fleet of SGLang servers with a roofline
// performance model, for gend's demo, end-to-end tests and benchmarks on a
// machine without a GPU.
//
// Each server speaks SGLang's HTTP protocol on its own 127.0.0.1 listener
// and runs a model of SGLang's scheduler (core): continuous batching,
// admission against a KV reserve scaled by a decaying new-token ratio,
// chunked prefill, retraction of the requests with the fewest generated
// tokens when decode outgrows the KV pool, and step times from the roofline
// (Roofline). Simulated time runs Speedup times faster than wall time.
//
// Goroutines and ownership:
//
//   - One engine goroutine per server (engine.run) owns that server's core.
//     While the server has work it wakes every Tick (default 5 ms wall),
//     converts elapsed wall time to simulated time and advances all running
//     requests by as many decode steps as fit, in O(running) per wake, not
//     per step. When idle it sleeps until a request arrives or a fault is due.
//     It ends when the fleet's context is cancelled (Close or the caller's
//     ctx), after aborting every request.
//   - One Serve goroutine per live listener, owned by the fleet's WaitGroup;
//     it ends when the listener is closed (death fault or Close).
//   - HTTP handler goroutines belong to net/http. They hand requests to the
//     engine through a mutex-guarded inbox and wait on the request's done
//     channel (and, for streams, a capacity-1 notify channel). A client
//     disconnect aborts the request. Close waits for running handlers.
//
// State shared with handlers is the engine's snapshot (mutex), the inbox
// (mutex), the in-flight rid map (mutex) and per-request atomics; no lock is
// held across I/O.
package sim
