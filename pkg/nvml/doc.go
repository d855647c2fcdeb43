// Package nvml reads GPU telemetry and publishes it as an immutable
// api.GPUs snapshot.
//
// Three sources implement Source:
//
//   - Sampler reads the local GPUs through NVML (go-nvml, imported as gonvml).
//     It needs cgo; a build without cgo gets a Sampler that always reports
//     telemetry as unavailable.
//   - SimSource polls gensim's GET <server url>/sim/gpu for each fleet server
//     (gend --nvml sim).
//   - RemoteSource polls GET <host>/v1/gpus of the gend running on each remote
//     GPU host named by a server's ServerSpec.Host.
//
// Goroutines and lifecycle: constructors start nothing. Each source's Run(ctx)
// is the only goroutine that samples; the caller owns it (typically one
// errgroup member in the daemon) and stops it by cancelling ctx. Run returns
// nil once ctx is done, also when NVML is missing: gend keeps serving without
// GPU telemetry. The Sampler calls NVML's Shutdown before Run returns.
// SimSource and RemoteSource poll their servers concurrently inside Run, bounded
// by an errgroup with a limit, and join all polls before the next tick.
//
// Snapshots are published through an atomic pointer: Snapshot never blocks on
// sampling, and the returned value (its slices and pointers included) must be
// treated as read-only by every caller.
//
// NewCollector exports a Source's latest snapshot as gend_gpu_* Prometheus
// metrics in base units; it reads the snapshot at scrape time and holds no
// goroutine.
package nvml
