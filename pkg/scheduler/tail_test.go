package scheduler

import "testing"

func TestTailSkip(t *testing.T) {
	tests := []struct {
		name    string
		pending int
		rate    float64
		meanOut float64
		v, best float64
		want    bool
	}{
		{"fastest server is never skipped", 5, 1, 2500, 12, 12, false},
		{"equal speeds: no skip", 1, 10, 2500, 12, 12.5, false},
		{"within the tolerance: no skip", 1, 10, 2500, 10, 12, false},
		{"just outside the tolerance, queue nearly empty: skip", 1, 10, 2500, 9.5, 12, true},
		{"3x slower, queue drains in 2 s: skip", 20, 10, 2500, 4, 12, true},
		{"3x slower, queue drains in 1000 s: keep", 10000, 10, 2500, 4, 12, false},
		{"just past the break-even: skip", 4160, 10, 2500, 4, 12, true},
		{"just before the break-even: keep", 4170, 10, 2500, 4, 12, false},
		{"unknown speed: keep", 1, 10, 2500, 0, 12, false},
		{"unknown best: keep", 1, 10, 2500, 4, 0, false},
		{"no completion rate yet: keep", 1, 0, 2500, 4, 12, false},
		{"no mean yet: keep", 1, 10, 0, 4, 12, false},
		{"nothing pending: keep", 0, 10, 2500, 4, 12, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := TailSkip(tt.pending, tt.rate, tt.meanOut, tt.v, tt.best); got != tt.want {
				t.Fatalf("TailSkip(%d, %v, %v, %v, %v) = %v, want %v", tt.pending, tt.rate, tt.meanOut, tt.v, tt.best, got, tt.want)
			}
		})
	}
}
