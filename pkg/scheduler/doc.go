// Package scheduler dispatches the requests of gend's jobs onto a fleet of
// inference servers and sets each server's concurrency with a pure control
// law (Step).
//
// Goroutines and their owners:
//   - Run is the dispatch loop: it wakes on a capacity-1 channel (a task
//     pushed, an attempt finished, a limit raised, a resume) or when the
//     next retry is due, and starts every attempt that fits. It returns
//     when its context is done.
//   - One control goroutine per server (started by Run or AddServer) probes
//     the server until it answers, then reads its gauges every Period and
//     applies Step; it ejects a failing server and probes it back with
//     backoff. It stops with Run's context or when a drained server is
//     removed.
//   - One goroutine per attempt calls Sender.Send and accounts the result;
//     they are joined by Wait. An attempt's context derives from its job's
//     context (not from Run's), so stopping dispatch does not abort it.
//
// All state is guarded by Scheduler.mu, held briefly and never across I/O
// or callbacks.
package scheduler
