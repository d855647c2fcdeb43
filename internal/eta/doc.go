// Package eta estimates when a generation job will finish.
//
// The estimator is pure: it starts no goroutines and never reads the clock.
// The caller (the daemon, once a second) reports each finished request with
// [Estimator.Completed] and asks for an estimate with [Estimator.Estimate],
// passing the job's running time, its queue, the in-flight requests' lower
// bounds on output length and the fleet's measured throughput. An Estimator
// is not safe for concurrent use: its owner serialises calls (one mutex held
// for the duration of a call is enough; calls do no I/O).
//
// Method (docs/eta.md): the output-length distribution is estimated with
// censoring taken into account — finished outputs are observed lengths,
// in-flight requests are right-censored at their lower bounds, and the job's
// max-tokens cap bounds the tail. The body comes from an actuarial
// (binned Kaplan–Meier) estimator over a log-spaced histogram; beyond the
// data the tail is a lognormal fitted by censored maximum likelihood.
// Remaining tokens are divided by the fleet throughput, and the end of the
// job, when fewer requests remain than the fleet runs at once, is modelled
// explicitly from the residual lengths of the last requests.
//
// Simulate runs a deterministic fleet simulation against the estimator; the
// tests use it to check accuracy, and benchmarks can print its checkpoints.
package eta
