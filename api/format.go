package api

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// FormatDuration renders a duration the way operators read an ETA:
// "45s", "3m05s", "4h12m", "2d03h". Hours and longer round to the minute,
// shorter durations to the second. Negative, NaN or infinite values render
// as "?".
func FormatDuration(d time.Duration) string {
	if d < 0 {
		return "?"
	}
	switch {
	case d < time.Minute:
		s := int64(d.Round(time.Second) / time.Second)
		if s < 60 {
			return strconv.FormatInt(s, 10) + "s"
		}
		return "1m00s"
	case d < time.Hour:
		s := int64(d.Round(time.Second) / time.Second)
		if s >= 3600 {
			return "1h00m"
		}
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case d < 24*time.Hour:
		m := int64(d.Round(time.Minute) / time.Minute)
		if m >= 24*60 {
			return "1d00h"
		}
		return fmt.Sprintf("%dh%02dm", m/60, m%60)
	default:
		h := int64(d.Round(time.Hour) / time.Hour)
		return fmt.Sprintf("%dd%02dh", h/24, h%24)
	}
}

// maxSeconds bounds what FormatSeconds converts, so an absurd estimate
// cannot overflow time.Duration (~292 years).
const maxSeconds = 100 * 365 * 24 * 3600

// FormatSeconds is FormatDuration for a float number of seconds as the API
// carries them. NaN, infinite and negative values render as "?".
func FormatSeconds(s float64) string {
	if math.IsNaN(s) || math.IsInf(s, 0) || s < 0 {
		return "?"
	}
	if s > maxSeconds {
		s = maxSeconds
	}
	return FormatDuration(time.Duration(s * float64(time.Second)))
}

// FormatCount renders an integer with thousands separators: 3850 → "3,850".
func FormatCount(n int64) string {
	neg := n < 0
	u := uint64(n)
	if neg {
		u = uint64(-(n + 1)) + 1
	}
	digits := strconv.FormatUint(u, 10)
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	lead := len(digits) % 3
	if lead == 0 {
		lead = 3
	}
	b.WriteString(digits[:lead])
	for i := lead; i < len(digits); i += 3 {
		b.WriteByte(',')
		b.WriteString(digits[i : i+3])
	}
	return b.String()
}

// FormatRate renders a float rounded to an integer with thousands separators
// (tokens per second, for instance). NaN and infinities render as "?".
func FormatRate(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > 1e18 {
		return "?"
	}
	return FormatCount(int64(math.Round(v)))
}

// ETAKnown reports whether an ETA carries an estimate: a running job before
// its first completions has none (eta_seconds 0 or not finite).
func ETAKnown(e ETA) bool {
	if Terminal(e.Status) {
		return false
	}
	s := e.ETASeconds
	return !math.IsNaN(s) && !math.IsInf(s, 0) && s > 0
}

// FormatETAInterval renders the point estimate and its interval:
// "4h12m (3h55m–4h31m)", or "unknown" when there is no estimate yet. The
// interval is left out when the server gave none.
func FormatETAInterval(e ETA) string {
	if !ETAKnown(e) {
		return "unknown"
	}
	s := FormatSeconds(e.ETASeconds)
	if e.ETAHighSeconds > 0 && e.ETAHighSeconds >= e.ETALowSeconds {
		s += " (" + FormatSeconds(e.ETALowSeconds) + "–" + FormatSeconds(e.ETAHighSeconds) + ")"
	}
	return s
}

// FormatETALine is the plain-text line of GET /v1/eta, e.g.
//
//	ETA 4h12m (3h55m–4h31m) · 12.3% done · 1.57 req/s · 3,850 tok/s
//
// A finished job gives its status instead of the ETA ("completed · 100.0%
// done · ..."); a paused or queued job is prefixed with its status.
// PercentDone is 0–100.
func FormatETALine(e ETA) string {
	rest := fmt.Sprintf("%.1f%% done · %.2f req/s · %s tok/s",
		finite(e.PercentDone), finite(e.RatePerSec), FormatRate(e.TokensPerSec))
	if Terminal(e.Status) {
		return e.Status + " · " + rest
	}
	line := "ETA " + FormatETAInterval(e) + " · " + rest
	if e.Status == StatusPaused || e.Status == StatusQueued {
		line = e.Status + " · " + line
	}
	return line
}

// ProgressETA derives the ETA document from a job's progress; gend's
// /v1/eta and genctl's views use it so both say the same thing.
func ProgressETA(jobID string, p Progress) ETA {
	e := ETA{
		JobID:          jobID,
		Status:         p.Status,
		ETASeconds:     p.ETASeconds,
		ETALowSeconds:  p.ETALowSeconds,
		ETAHighSeconds: p.ETAHighSeconds,
		PercentDone:    PercentDone(p),
		RatePerSec:     p.RatePerSec,
		TokensPerSec:   p.TokensPerSec,
	}
	e.Line = FormatETALine(e)
	return e
}

// PercentDone is (completed + failed) / total in percent, 0 while the total
// is 0, and 100 at most.
func PercentDone(p Progress) float64 {
	if p.Total <= 0 {
		if Terminal(p.Status) {
			return 100
		}
		return 0
	}
	v := 100 * float64(p.Completed+p.Failed) / float64(p.Total)
	return math.Min(v, 100)
}

func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}
