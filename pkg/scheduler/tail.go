package scheduler

import "math"

// SpeedTolerance: a server at least this fraction of the fastest one's
// per-request speed counts as equally fast at the end of a job.
const SpeedTolerance = 0.8

// Speed is what the scheduler knows about how fast one server turns a new
// request around, for the end of a job.
type Speed struct {
	// PerRequest is the server's decode rate per running request (output
	// tokens per second per request), 0 when unknown.
	PerRequest float64
}

// TailSkip says whether, near the end of a job, a server is too slow to be
// given another task: a request sent there now would end later than the
// whole remaining queue takes to drain on the rest of the fleet.
//
// pending is the job's tasks not yet dispatched, rate the fleet's completions
// per second, meanOut the job's mean output tokens per request, v this
// server's per-request decode rate and vBest the fastest healthy server's.
// A request takes about meanOut/v here and meanOut/vBest on the best server;
// the queue drains in pending/rate. When the difference of the two
// durations exceeds the drain time, the task is better left for a faster
// server. Speeds within SpeedTolerance of the best are treated as equal
// (gauge noise must not shuffle a homogeneous fleet). Unknown inputs (zero)
// never skip. Pure: no clock, no state.
func TailSkip(pending int, rate, meanOut, v, vBest float64) bool {
	if pending <= 0 || rate <= 0 || meanOut <= 0 || v <= 0 || vBest <= 0 || v >= SpeedTolerance*vBest {
		return false
	}
	extra := meanOut/v - meanOut/vBest
	drain := float64(pending) / rate
	return extra > drain && !math.IsInf(extra, 0)
}

// MigrateRatio: at the end of a job, a request running on a server this many
// times slower per request than an idle one is moved there.
const MigrateRatio = 2.0

// maxMigrations bounds how often one task is moved.
const maxMigrations = 1

// MigrateWorth says whether a request running at per-request speed from is
// better restarted on a free server of per-request speed to: with nothing
// left to dispatch, a request on a much slower server ends the job last
// (output lengths are heavy-tailed, and the longest run longest there), and
// a restart on a server MigrateRatio times faster ends sooner unless it was
// nearly done. Unknown speeds (zero) never migrate. Pure.
func MigrateWorth(from, to float64) bool {
	return from > 0 && to > 0 && to >= MigrateRatio*from
}
