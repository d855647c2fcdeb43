package rlimit

import (
	"bytes"
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/rs/zerolog"
)

// fake is a process limit with a permission model like Linux's: without
// privilege the hard limit may only go down and the soft limit not above it.
type fake struct {
	cur        Limit
	privileged bool
	nrOpen     uint64
	getErr     error
	sets       []Limit
}

func (f *fake) sys() sys {
	return sys{
		get: func() (Limit, error) { return f.cur, f.getErr },
		set: func(l Limit) error {
			f.sets = append(f.sets, l)
			if l.Soft > l.Hard || l.Hard > f.nrOpen {
				return syscall.EINVAL
			}
			if l.Hard > f.cur.Hard && !f.privileged {
				return syscall.EPERM
			}
			f.cur = l
			return nil
		},
		nrOpen: func() (uint64, error) { return f.nrOpen, nil },
	}
}

func TestRaise(t *testing.T) {
	for _, tc := range []struct {
		name       string
		start      Limit
		privileged bool
		nrOpen     uint64
		want       Limit
		hardErr    bool
	}{
		{"unprivileged: soft to hard", Limit{1024, 20000}, false, 1 << 20, Limit{20000, 20000}, true},
		{"privileged: hard to nr_open", Limit{1024, 20000}, true, 1 << 20, Limit{1 << 20, 1 << 20}, false},
		{"privileged: nr_open below ceiling", Limit{1024, 4096}, true, 65536, Limit{65536, 65536}, false},
		{"privileged: ceiling below nr_open", Limit{1024, 4096}, true, 1 << 30, Limit{Ceiling, Ceiling}, false},
		{"hard already at ceiling is not lowered", Limit{1024, 1 << 21}, true, 1 << 22, Limit{1 << 21, 1 << 21}, false},
		{"nothing to do", Limit{1 << 20, 1 << 20}, false, 1 << 20, Limit{1 << 20, 1 << 20}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fake{cur: tc.start, privileged: tc.privileged, nrOpen: tc.nrOpen}
			res, err := f.sys().raise()
			if err != nil {
				t.Fatalf("raise: %v", err)
			}
			if res.Before != tc.start || res.After != tc.want || f.cur != tc.want {
				t.Fatalf("before %v after %v (in force %v), want %v → %v", res.Before, res.After, f.cur, tc.start, tc.want)
			}
			if (res.HardErr != nil) != tc.hardErr {
				t.Fatalf("HardErr = %v, want error: %v", res.HardErr, tc.hardErr)
			}
			if tc.hardErr && !errors.Is(res.HardErr, syscall.EPERM) {
				t.Fatalf("HardErr = %v, want EPERM", res.HardErr)
			}
		})
	}
}

func TestRaiseErrors(t *testing.T) {
	f := &fake{getErr: syscall.EFAULT, nrOpen: 1 << 20}
	if _, err := f.sys().raise(); !errors.Is(err, syscall.EFAULT) {
		t.Fatalf("get error: got %v", err)
	}
	// Setting the soft limit fails: the error is returned and After is what
	// is still in force.
	f = &fake{cur: Limit{1024, 4096}, nrOpen: 1 << 20}
	s := f.sys()
	s.set = func(Limit) error { return syscall.EINVAL }
	res, err := s.raise()
	if !errors.Is(err, syscall.EINVAL) || res.After != (Limit{1024, 4096}) {
		t.Fatalf("set error: res %+v err %v", res, err)
	}
	// nr_open unreadable: the ceiling alone bounds the hard limit.
	f = &fake{cur: Limit{1024, 4096}, privileged: true, nrOpen: 1 << 30}
	s = f.sys()
	s.nrOpen = func() (uint64, error) { return 0, syscall.ENOENT }
	if res, err := s.raise(); err != nil || res.After != (Limit{Ceiling, Ceiling}) {
		t.Fatalf("no nr_open: res %+v err %v", res, err)
	}
}

func TestEnough(t *testing.T) {
	r := Result{After: Limit{Soft: 20000, Hard: 20000}}
	if !r.Enough(20000) || r.Enough(20001) || !r.Enough(0) {
		t.Fatal("Enough is not soft >= need")
	}
}

func TestLog(t *testing.T) {
	var b bytes.Buffer
	log := zerolog.New(&b)
	Result{Before: Limit{1024, 20000}, After: Limit{20000, 20000}, HardErr: syscall.EPERM}.Log(log, nil)
	if s := b.String(); !strings.Contains(s, `"level":"info"`) || !strings.Contains(s, `"soft":20000`) || !strings.Contains(s, "CAP_SYS_RESOURCE") {
		t.Fatalf("log: %s", s)
	}
	b.Reset()
	Result{}.Log(log, syscall.EINVAL)
	if s := b.String(); !strings.Contains(s, `"level":"warn"`) {
		t.Fatalf("log on error: %s", s)
	}
}

// TestRaiseReal lowers this test process's soft limit and checks that Raise
// brings it back up to at least the hard limit (the real system calls).
func TestRaiseReal(t *testing.T) {
	var orig syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig) })
	low := syscall.Rlimit{Cur: min(orig.Max, 512), Max: orig.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	res, err := Raise()
	if err != nil {
		t.Fatalf("Raise: %v", err)
	}
	if res.Before.Soft != low.Cur || res.After.Soft < orig.Max || res.After.Soft != res.After.Hard {
		t.Fatalf("before %+v after %+v, want soft raised to at least the hard limit %d", res.Before, res.After, orig.Max)
	}
	var now syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &now); err != nil {
		t.Fatal(err)
	}
	if now.Cur != res.After.Soft || now.Max != res.After.Hard {
		t.Fatalf("in force %+v, Raise reported %+v", now, res.After)
	}
}
