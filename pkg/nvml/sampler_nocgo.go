//go:build !(linux && cgo)

package nvml

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/gend-dev/gend/api"
)

// DefaultInterval is the sampling period when Options.Interval is zero.
const DefaultInterval = 5 * time.Second

// Options configure a Sampler. This build has no cgo, so there is no NVML
// library to pass: Lib is accepted for source compatibility and ignored.
type Options struct {
	Interval  time.Duration
	Lib       any
	Logger    zerolog.Logger
	GPUServer func(index int) string
}

// Sampler, in a build without cgo (or not on Linux), always reports GPU
// telemetry as unavailable.
type Sampler struct {
	log  zerolog.Logger
	snap snapshotHolder
}

const noCgoReason = "gend was built without cgo (or not for Linux): NVML telemetry is not compiled in"

// NewSampler returns a Sampler; it starts nothing.
func NewSampler(opts Options) *Sampler {
	return &Sampler{log: opts.Logger.With().Str("component", "nvml").Logger()}
}

// Snapshot returns the latest published snapshot.
func (s *Sampler) Snapshot() api.GPUs { return s.snap.load(SourceNVML) }

// Run publishes "unavailable", logs it once and waits for ctx; it returns nil.
func (s *Sampler) Run(ctx context.Context) error {
	s.snap.publish(api.GPUs{Available: false, Reason: noCgoReason, Source: SourceNVML})
	s.log.Warn().Str("reason", noCgoReason).Msg("GPU telemetry disabled; gend runs without it")
	<-ctx.Done()
	return nil
}
