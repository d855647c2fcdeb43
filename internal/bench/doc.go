// Package bench holds gend's benchmarks (make bench): the scheduler
// comparison of issue 4 and the controller-throughput measurement of issue 2.
// They are commands that print numbers (cmd/benchctl), not timed assertions.
//
// Scheduler benchmark. Scheduler runs every scenario's policies (adaptive,
// the static sweep and the old-script client), each in its own child process
// (benchctl run-one) so that runs have separate file-descriptor limits, CPU
// accounting and simulated fleets; up to Parallel children run at once.
// Scheduler's goroutine owns the children: it starts them with exec, reads
// each one's JSON result from its stdout and waits for it; a child still
// running when its makespan is clearly dominated (StopFactor × the best
// finished makespan) is interrupted (SIGINT) and reports what it reached.
//
// RunOne (inside a child) starts a gensim fleet and either a gend daemon
// (in-process, on 127.0.0.1:0) or the old-script client, plus one sampler
// goroutine that reads the fleet's counters once per simulated second. All of
// them are stopped and joined before RunOne returns: the sampler and the
// daemon by cancelling their context and waiting on their done channels, the
// old-script workers by a WaitGroup, the fleet by Close.
//
// Controller benchmark. Controller runs gensim (as a separate process when
// a gensim binary is given, else in-process) at a speedup where the GPUs are
// not the limit, and gend in-process; it measures completions per second and
// gend's CPU time from /proc/self/stat. RSS streams a large generated input
// through gend and samples the process's resident set from /proc/self/status
// on one goroutine that stops with the run.
package bench
