// Package rlimit raises the open-file limit (RLIMIT_NOFILE) of the process
// as far as it may. gend holds one socket per in-flight request (and gensim
// one per request it serves), so 20,000 in flight need more than 20,000
// descriptors; the common default soft limit is 1,024.
//
// Go (since 1.19) already raises the soft limit to the hard limit when
// package os starts; Raise does that too, explicitly, and also raises the
// hard limit when the process is permitted to (root or CAP_SYS_RESOURCE), up
// to min(/proc/sys/fs/nr_open, 1<<20). It starts no goroutines.
package rlimit

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/rs/zerolog"
)

// Ceiling is the highest hard limit Raise asks for, whatever nr_open allows.
const Ceiling = 1 << 20

// Limit is a soft/hard pair of RLIMIT_NOFILE.
type Limit struct {
	Soft, Hard uint64
}

// Result says what Raise found and what it got.
type Result struct {
	Before, After Limit
	// HardErr says why the hard limit stayed below the ceiling (usually
	// EPERM: not root and no CAP_SYS_RESOURCE); nil when it was raised or
	// already at the ceiling.
	HardErr error
}

// sys is the system interface Raise uses (replaced in tests).
type sys struct {
	get    func() (Limit, error)
	set    func(Limit) error
	nrOpen func() (uint64, error)
}

var real = sys{
	get: func() (Limit, error) {
		var r syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
			return Limit{}, err
		}
		return Limit{Soft: r.Cur, Hard: r.Max}, nil
	},
	set: func(l Limit) error {
		return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: l.Soft, Max: l.Hard})
	},
	nrOpen: func() (uint64, error) {
		b, err := os.ReadFile("/proc/sys/fs/nr_open")
		if err != nil {
			return 0, err
		}
		return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	},
}

// Raise raises RLIMIT_NOFILE: the hard limit up to min(nr_open, Ceiling)
// when permitted, and the soft limit to the hard limit always. The error is
// non-nil only when the limit could not be read or the soft limit could not
// be raised; the Result is valid (After = what is in force) either way.
func Raise() (Result, error) { return real.raise() }

func (s sys) raise() (Result, error) {
	before, err := s.get()
	if err != nil {
		return Result{}, fmt.Errorf("getrlimit RLIMIT_NOFILE: %w", err)
	}
	res := Result{Before: before, After: before}
	ceiling := uint64(Ceiling)
	if n, err := s.nrOpen(); err == nil && n > 0 {
		ceiling = min(ceiling, n)
	}
	if before.Hard < ceiling {
		want := Limit{Soft: ceiling, Hard: ceiling}
		if err := s.set(want); err != nil {
			res.HardErr = fmt.Errorf("raise hard limit %d → %d: %w", before.Hard, ceiling, err)
		} else {
			res.After = want
			return res, nil
		}
	}
	if res.After.Soft < res.After.Hard {
		want := Limit{Soft: res.After.Hard, Hard: res.After.Hard}
		if err := s.set(want); err != nil {
			return res, fmt.Errorf("raise soft limit %d → %d: %w", res.After.Soft, want.Soft, err)
		}
		res.After = want
	}
	// Report what is in force, not what was asked for.
	if got, err := s.get(); err == nil {
		res.After = got
	}
	return res, nil
}

// Enough reports whether the soft limit leaves need descriptors.
func (r Result) Enough(need int) bool { return need <= 0 || uint64(need) <= r.After.Soft }

// Log writes the result once: Info with what it got, Warn when the limit
// could not be read or raised.
func (r Result) Log(log zerolog.Logger, err error) {
	if err != nil {
		log.Warn().Err(err).Uint64("soft", r.After.Soft).Uint64("hard", r.After.Hard).Msg("open-file limit not raised")
		return
	}
	ev := log.Info().Uint64("soft", r.After.Soft).Uint64("hard", r.After.Hard).
		Uint64("soft_before", r.Before.Soft).Uint64("hard_before", r.Before.Hard)
	if r.HardErr != nil && !errors.Is(r.HardErr, syscall.EPERM) {
		ev = ev.AnErr("hard_error", r.HardErr)
	} else if r.HardErr != nil {
		ev = ev.Str("hard_note", "hard limit not raised: needs root or CAP_SYS_RESOURCE (systemd: LimitNOFILE=)")
	}
	ev.Msg("open-file limit")
}
