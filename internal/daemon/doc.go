// Package daemon wires gend together: the fleet, the job queue and its
// durable state, the scheduler, the sinks, telemetry and the HTTP API.
//
// Goroutines and their owners:
//   - Run owns everything below through one errgroup and returns when all
//     of them have stopped.
//   - The scheduler's dispatch loop and per-server control loops run on the
//     work context, which is NOT the signal context: on SIGTERM, Run stops
//     accepting requests, stops dispatching, lets in-flight attempts finish
//     for up to DrainTimeout, and only then cancels the work context.
//   - Each job has one runner goroutine (prepare, feed the scheduler from
//     the input, wait for the end) and one progress goroutine (live
//     counters, ETA, progress.json every ProgressEvery). Both stop with the
//     job's context.
//   - Each job with S3 output has one uploader goroutine (pkg/sink.S3).
//   - The telemetry source (NVML sampler, gensim or remote poller) has one
//     goroutine.
//
// Shutdown order: HTTP server → dispatch → drain in-flight (bounded) →
// cancel work → job runners flush, fsync and close their sinks and write
// progress.json and their state → telemetry stops.
package daemon
