package api

import (
	"math"
	"testing"
	"time"
)

func TestFormatDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{45 * time.Second, "45s"},
		{59*time.Second + 600*time.Millisecond, "1m00s"},
		{3*time.Minute + 5*time.Second, "3m05s"},
		{59*time.Minute + 59*time.Second + 700*time.Millisecond, "1h00m"},
		{4*time.Hour + 12*time.Minute, "4h12m"},
		{4*time.Hour + 11*time.Minute + 40*time.Second, "4h12m"},
		{23*time.Hour + 59*time.Minute + 50*time.Second, "1d00h"},
		{50*time.Hour + 20*time.Minute, "2d02h"},
		{-time.Second, "?"},
	}
	for _, tc := range tests {
		if got := FormatDuration(tc.d); got != tc.want {
			t.Errorf("FormatDuration(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestFormatSeconds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s    float64
		want string
	}{
		{15120, "4h12m"},
		{185, "3m05s"},
		{math.NaN(), "?"},
		{math.Inf(1), "?"},
		{-1, "?"},
		{1e30, "36500d00h"}, // clamped, no overflow
	}
	for _, tc := range tests {
		if got := FormatSeconds(tc.s); got != tc.want {
			t.Errorf("FormatSeconds(%v) = %q, want %q", tc.s, got, tc.want)
		}
	}
}

func TestFormatCount(t *testing.T) {
	t.Parallel()
	tests := []struct {
		n    int64
		want string
	}{
		{0, "0"},
		{999, "999"},
		{1000, "1,000"},
		{3850, "3,850"},
		{654676, "654,676"},
		{1234567890, "1,234,567,890"},
		{-1234, "-1,234"},
		{math.MinInt64, "-9,223,372,036,854,775,808"},
	}
	for _, tc := range tests {
		if got := FormatCount(tc.n); got != tc.want {
			t.Errorf("FormatCount(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
	if got := FormatRate(3850.4); got != "3,850" {
		t.Errorf("FormatRate(3850.4) = %q", got)
	}
	if got := FormatRate(math.NaN()); got != "?" {
		t.Errorf("FormatRate(NaN) = %q", got)
	}
}

func TestFormatETALine(t *testing.T) {
	t.Parallel()
	base := ETA{Status: StatusRunning, ETASeconds: 15120, ETALowSeconds: 14100, ETAHighSeconds: 16260,
		PercentDone: 12.3, RatePerSec: 1.57, TokensPerSec: 3850.4}
	with := func(f func(*ETA)) ETA { e := base; f(&e); return e }
	tests := []struct {
		name string
		e    ETA
		want string
	}{
		{"design example", base, "ETA 4h12m (3h55m–4h31m) · 12.3% done · 1.57 req/s · 3,850 tok/s"},
		{"no interval", with(func(e *ETA) { e.ETALowSeconds, e.ETAHighSeconds = 0, 0 }),
			"ETA 4h12m · 12.3% done · 1.57 req/s · 3,850 tok/s"},
		{"no estimate yet", with(func(e *ETA) { e.ETASeconds, e.PercentDone, e.RatePerSec, e.TokensPerSec = 0, 0, 0, 0 }),
			"ETA unknown · 0.0% done · 0.00 req/s · 0 tok/s"},
		{"paused", with(func(e *ETA) { e.Status = StatusPaused }),
			"paused · ETA 4h12m (3h55m–4h31m) · 12.3% done · 1.57 req/s · 3,850 tok/s"},
		{"completed", with(func(e *ETA) { e.Status, e.PercentDone = StatusCompleted, 100 }),
			"completed · 100.0% done · 1.57 req/s · 3,850 tok/s"},
		{"NaN rate", with(func(e *ETA) { e.RatePerSec = math.NaN() }),
			"ETA 4h12m (3h55m–4h31m) · 12.3% done · 0.00 req/s · 3,850 tok/s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := FormatETALine(tc.e); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestProgressETA(t *testing.T) {
	t.Parallel()
	p := Progress{Total: 1000, TotalKnown: true, Completed: 120, Failed: 3, Status: StatusRunning,
		ETASeconds: 185, ETALowSeconds: 170, ETAHighSeconds: 200, RatePerSec: 2, TokensPerSec: 5000}
	e := ProgressETA("j1", p)
	if e.JobID != "j1" || e.PercentDone != 12.3 || e.Line != "ETA 3m05s (2m50s–3m20s) · 12.3% done · 2.00 req/s · 5,000 tok/s" {
		t.Errorf("ProgressETA = %+v", e)
	}
	if got := PercentDone(Progress{Total: 10, Completed: 12}); got != 100 {
		t.Errorf("PercentDone over total = %v, want 100", got)
	}
	if got := PercentDone(Progress{Status: StatusCompleted}); got != 100 {
		t.Errorf("PercentDone of an empty completed job = %v, want 100", got)
	}
}
