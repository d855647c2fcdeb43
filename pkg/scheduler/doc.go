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
//     Each attempt also has its own cancel, used at the end of an adaptive
//     job to move an attempt off a much slower server (migrateLocked): the
//     cancelled attempt's goroutine returns through finish like any other,
//     which puts the task back to run elsewhere.
//
// End of a job (adaptive mode): once the input is read, dispatch keeps new
// tasks off a server too slow to finish one before the rest of the fleet
// drains the queue (TailSkip), stops queueing behind busy servers, and when
// nothing is left to dispatch moves the oldest attempts of a server at
// least MigrateRatio times slower per request to free, faster servers
// (MigrateWorth). Per-request speeds come from the servers' generation
// counters, measured only while a server is full.
//
// All state is guarded by Scheduler.mu, held briefly and never across I/O
// or callbacks.
package scheduler
