package bench

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/gend-dev/gend/internal/sim"
)

func TestScenariosValidate(t *testing.T) {
	for _, name := range ScenarioNames() {
		t.Run(name, func(t *testing.T) {
			sc, err := MakeScenario(name, 3000, 2500)
			if err != nil {
				t.Fatal(err)
			}
			if len(sc.Servers) != fleetSize {
				t.Fatalf("%d servers, want %d", len(sc.Servers), fleetSize)
			}
			if err := (sim.FleetConfig{Speedup: 50, Servers: sc.Servers}).Validate(); err != nil {
				t.Fatalf("gensim rejects the scenario: %v", err)
			}
		})
	}
	if _, err := MakeScenario("nope", 1, 1); err == nil {
		t.Fatal("unknown scenario accepted")
	}
}

func TestParseList(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{"8,16,32", []int{8, 16, 32}, false},
		{" 64, 8 ,8,", []int{8, 64}, false},
		{"8,x", nil, true},
		{"0", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseList(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
}

// series builds samples once per simulated second from a rate function.
func series(end float64, rate func(t float64) float64) []sample {
	var out []sample
	var gen float64
	for t := 0.0; t <= end; t++ {
		out = append(out, sample{t, int64(gen)})
		gen += rate(t)
	}
	return out
}

func TestRampAndSteady(t *testing.T) {
	tests := []struct {
		name       string
		rate       func(t float64) float64
		wantSteady float64
		wantT90    float64 // -1: never
	}{
		{"flat from the start", func(float64) float64 { return 1000 }, 1000, 2},
		{"linear ramp over 60 s", func(t float64) float64 { return 1000 * math.Min(1, t/60) }, 1000, 56},
		{"overshoot then settle", func(t float64) float64 {
			if t < 100 {
				return 2000
			}
			return 1000
		}, 1000, 2},
		{"never starts", func(float64) float64 { return 0 }, 0, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			steady, t90 := rampAndSteady(series(1000, tt.rate), 1000)
			if math.Abs(steady-tt.wantSteady) > 0.02*tt.wantSteady+1e-9 {
				t.Fatalf("steady = %.0f, want %.0f", steady, tt.wantSteady)
			}
			if tt.wantT90 < 0 {
				if t90 >= 0 {
					t.Fatalf("t90 = %v, want never", t90)
				}
				return
			}
			if math.Abs(t90-tt.wantT90) > 1.01 {
				t.Fatalf("t90 = %v, want %v ± 1", t90, tt.wantT90)
			}
		})
	}
}

func TestCheckTargets(t *testing.T) {
	run := func(kind string, per int, makespan float64, lost int64) RunResult {
		p := Policy{Kind: kind, PerServer: per}
		return RunResult{Policy: p.String(), Kind: kind, PerServer: per, Makespan: makespan, Lost: lost,
			TokensPerSec: 1e6 / makespan, TT90Ramp: 4, TT90: 30}
	}
	tests := []struct {
		name     string
		sr       ScenarioReport
		target   string
		wantPass bool
	}{
		{"within 3 % of the best static", ScenarioReport{Scenario: ScHomogeneous, Runs: []RunResult{
			run(KindAdaptive, 0, 1020, 0), run(KindStatic, 64, 1000, 0), run(KindStatic, 32, 1100, 0), run(KindOld, 32, 1200, 0)}},
			"adaptive ≤ 1.03 × best static", true},
		{"5 % behind the best static", ScenarioReport{Scenario: ScHomogeneous, Runs: []RunResult{
			run(KindAdaptive, 0, 1050, 0), run(KindStatic, 64, 1000, 0), run(KindOld, 32, 1200, 0)}},
			"adaptive ≤ 1.03 × best static", false},
		{"changing fleet: not below every static", ScenarioReport{Scenario: ScSlowdown, Changes: true, Runs: []RunResult{
			run(KindAdaptive, 0, 1000, 0), run(KindStatic, 32, 990, 0), run(KindOld, 32, 2000, 0)}},
			"adaptive below every static", false},
		{"1.5× faster than the old script on slowdown", ScenarioReport{Scenario: ScSlowdown, Changes: true, Runs: []RunResult{
			run(KindAdaptive, 0, 1000, 0), run(KindStatic, 32, 1100, 0), run(KindOld, 32, 1600, 0)}},
			"≥ 1.5 × faster than the old script", true},
		{"a lost prompt fails the flaky target", ScenarioReport{Scenario: ScFlaky, Runs: []RunResult{
			run(KindAdaptive, 0, 1000, 1), run(KindStatic, 32, 1100, 0), run(KindOld, 32, 1000, 30)}},
			"no prompt lost (old script loses some)", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, tg := range checkTargets([]ScenarioReport{tt.sr}) {
				if tg.Name == tt.target {
					if tg.Pass != tt.wantPass {
						t.Fatalf("%s: pass = %v, want %v (%s)", tg.Name, tg.Pass, tt.wantPass, tg.Detail)
					}
					return
				}
			}
			t.Fatalf("target %q not evaluated", tt.target)
		})
	}
}

// A tiny job through the real gend and gensim (and the old-script client):
// every prompt completes, and the counters add up.
func TestRunOneSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts gensim and gend")
	}
	for _, p := range []Policy{{Kind: KindAdaptive}, {Kind: KindStatic, PerServer: 4}, {Kind: KindOld, PerServer: 4}} {
		t.Run(p.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			r, err := RunOne(ctx, RunConfig{Scenario: ScFlaky, Policy: p, Prompts: 60, MeanOut: 40, MaxTokens: 256,
				Speedup: 50, Seed: 3, Period: 100 * time.Millisecond, Stagger: 0.05})
			if err != nil {
				t.Fatal(err)
			}
			if r.Stopped || r.Makespan <= 0 || r.OutputTokens <= 0 {
				t.Fatalf("run = %+v, want a finished run with output", r)
			}
			if r.Completed+r.Lost != 60 {
				t.Fatalf("completed %d + lost %d != 60", r.Completed, r.Lost)
			}
			if p.Kind != KindOld && r.Lost != 0 {
				t.Fatalf("gend lost %d prompts on a flaky fleet (it retries)", r.Lost)
			}
		})
	}
}
