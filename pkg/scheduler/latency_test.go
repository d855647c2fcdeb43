package scheduler

import (
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gend-dev/gend/api"
)

func TestLatencyHistogramQuantile(t *testing.T) {
	bounds := []float64{1, 2, 4}
	tests := []struct {
		name   string
		counts []uint64
		q      float64
		want   float64
	}{
		{"empty", []uint64{0, 0, 0, 0}, 0.99, 0},
		{"all in first bucket, median", []uint64{10, 0, 0, 0}, 0.5, 0.5},
		{"interpolates inside the bucket", []uint64{0, 10, 0, 0}, 0.5, 1.5},
		{"p99 in the last finite bucket", []uint64{90, 0, 10, 0}, 0.99, 2 + 2*0.9},
		{"above the last bound", []uint64{0, 0, 0, 5}, 0.5, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := LatencyHistogram{Bounds: bounds, Counts: tc.counts}
			for _, c := range tc.counts {
				h.Count += c
			}
			if got := h.Quantile(tc.q); math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
}

func TestLatencyHistogramSub(t *testing.T) {
	old := LatencyHistogram{Bounds: []float64{1}, Counts: []uint64{3, 1}, Count: 4, SumSeconds: 2}
	now := LatencyHistogram{Bounds: []float64{1}, Counts: []uint64{5, 4}, Count: 9, SumSeconds: 7}
	d := now.Sub(old)
	if d.Count != 5 || d.Counts[0] != 2 || d.Counts[1] != 3 || d.SumSeconds != 5 {
		t.Fatalf("Sub = %+v", d)
	}
}

func TestDispatchClockObserve(t *testing.T) {
	tests := []struct {
		name   string
		ago    time.Duration
		bucket int
	}{
		{"none", 0, -1},
		{"under 10µs", time.Microsecond, 0},
		{"3ms", 3 * time.Millisecond, 9}, // 10µs·2^8 = 2.56ms < 3ms ≤ 5.12ms
		{"beyond the last bound", time.Minute, latencyBounds},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &Scheduler{}
			freed := time.Time{}
			if tc.ago > 0 {
				freed = time.Now().Add(-tc.ago)
			}
			s.lat.observe(freed)
			h := s.DispatchLatency()
			want := uint64(0)
			if tc.bucket >= 0 {
				want = 1
				if h.Counts[tc.bucket] != 1 {
					t.Fatalf("counts %v: want the observation in bucket %d", h.Counts, tc.bucket)
				}
			}
			if h.Count != want {
				t.Fatalf("count %d, want %d", h.Count, want)
			}
		})
	}
}

// TestDispatchLatencyCounted: every attempt that fills a slot freed by a
// finished one is observed; slots freed while the job is paused are dropped,
// not counted later as a long dispatch delay.
func TestDispatchLatencyCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeFleet(40, "a")
		s, j, res, drained, cancel := harness(t, f, []string{"a"}, 100, api.SchedulerSpec{Mode: api.ModeStatic, PerServer: 10, PerServerMax: 1024})
		defer cancel()
		time.Sleep(2500 * time.Millisecond) // two rounds of 1 s attempts
		synctest.Wait()
		if h := s.DispatchLatency(); h.Count != 20 {
			t.Fatalf("after two rounds: %d observations, want 20 (the first 10 attempts fill no freed slot)", h.Count)
		}
		j.Pause()
		time.Sleep(5 * time.Second) // the third round finishes while paused
		synctest.Wait()
		j.Resume()
		select {
		case <-drained:
		case <-time.After(time.Minute):
			t.Fatalf("not drained: %d finished", res.count())
		}
		h := s.DispatchLatency()
		if h.Count != 80 {
			t.Fatalf("%d observations, want 80 (100 attempts, 10 initial, 10 after the pause)", h.Count)
		}
		// Fake time does not move while goroutines run: every delay is 0.
		if h.Counts[0] != h.Count || h.SumSeconds != 0 {
			t.Fatalf("counts %v sum %v: a stale freed slot was counted", h.Counts, h.SumSeconds)
		}
		cancel()
	})
}
