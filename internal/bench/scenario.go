package bench

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gend-dev/gend/internal/sim"
)

// Scenario is one simulated fleet of the scheduler benchmark.
type Scenario struct {
	Name    string
	Note    string             // one line for the table heading
	Servers []sim.ServerConfig // the fleet, faults included
	// Changes marks scenarios where the fleet changes during the run
	// (slowdown, death): adaptive must beat every static setting there.
	Changes bool
}

// Scenario names.
const (
	ScHomogeneous   = "homogeneous"
	ScHeterogeneous = "heterogeneous"
	ScSlowdown      = "slowdown"
	ScDeath         = "death"
	ScFlaky         = "flaky"
	ScSmallKV       = "small-kv"
	ScQueueCap      = "queue-cap"
)

// ScenarioNames lists the scenarios in the order they run.
func ScenarioNames() []string {
	return []string{ScHomogeneous, ScHeterogeneous, ScSlowdown, ScDeath, ScFlaky, ScSmallKV, ScQueueCap}
}

// fleetSize is the number of servers of every scenario.
const fleetSize = 8

// rtxTokensPerSec is the steady output rate of one rtx-pro-6000 with the 27B
// model in thinking mode (gensim bench), used to place faults in time.
const rtxTokensPerSec = 580.0

// MakeScenario builds a scenario for a job of prompts prompts of meanOut
// mean output tokens. Faults are placed relative to the expected makespan of
// the homogeneous fleet, so the quick variant sees them too.
func MakeScenario(name string, prompts int, meanOut float64) (Scenario, error) {
	expect := float64(prompts) * meanOut / (fleetSize * rtxTokensPerSec) // simulated seconds
	rtx := func(i int) sim.ServerConfig {
		// Short response texts: usage still counts every token, and the
		// scheduler comparison should not spend the machine's CPU on
		// copying 16 KB bodies (the controller benchmark measures that).
		return sim.ServerConfig{Name: "gpu" + strconv.Itoa(i), GPU: "rtx-pro-6000", Model: "27b", OutputMean: meanOut, MaxContentBytes: 256}
	}
	fleet := func(mod func(i int, s *sim.ServerConfig)) []sim.ServerConfig {
		out := make([]sim.ServerConfig, fleetSize)
		for i := range out {
			out[i] = rtx(i)
			if mod != nil {
				mod(i, &out[i])
			}
		}
		return out
	}
	round := func(v float64) float64 { return float64(int(v/10+0.5) * 10) }
	switch name {
	case ScHomogeneous:
		return Scenario{Name: name, Note: "8 × rtx-pro-6000, 27B, thinking on", Servers: fleet(nil)}, nil
	case ScHeterogeneous:
		return Scenario{Name: name, Note: "4 × h200 + 4 × rtx-pro-6000, 27B, thinking on",
			Servers: fleet(func(i int, s *sim.ServerConfig) {
				if i < fleetSize/2 {
					s.GPU = "h200"
				}
			})}, nil
	case ScSlowdown:
		at := round(0.25 * expect)
		return Scenario{Name: name, Changes: true, Note: fmt.Sprintf("8 × rtx-pro-6000; gpu3 slows 3× at %.0f s (for good)", at),
			Servers: fleet(func(i int, s *sim.ServerConfig) {
				if i == 3 {
					s.Faults.Slowdown = &sim.Slowdown{AtS: at, Factor: 3}
				}
			})}, nil
	case ScDeath:
		at, back := round(0.2*expect), round(0.3*expect)
		return Scenario{Name: name, Changes: true, Note: fmt.Sprintf("8 × rtx-pro-6000; gpu5 dies at %.0f s, listens again %.0f s later, 30 s warm-up", at, back),
			Servers: fleet(func(i int, s *sim.ServerConfig) {
				if i == 5 {
					s.Faults.Death = &sim.Death{AtS: at, ReviveAfterS: back, WarmupS: 30}
				}
			})}, nil
	case ScFlaky:
		return Scenario{Name: name, Note: "8 × rtx-pro-6000; every server answers 3 % with 500 and cuts 2 % of responses",
			Servers: fleet(func(i int, s *sim.ServerConfig) {
				s.Faults.ErrorRate, s.Faults.DropRate = 0.03, 0.02
			})}, nil
	case ScSmallKV:
		return Scenario{Name: name, Note: "8 × rtx-pro-6000, mem-fraction 0.70, schedule-conservativeness 0.3 (small KV pool: retractions)",
			Servers: fleet(func(i int, s *sim.ServerConfig) {
				s.MemFractionStatic, s.ScheduleConservativeness = 0.70, 0.3
			})}, nil
	case ScQueueCap:
		return Scenario{Name: name, Note: "8 × rtx-pro-6000, max-queued-requests 16 (503 over it)",
			Servers: fleet(func(i int, s *sim.ServerConfig) {
				s.MaxQueuedRequests = 16
			})}, nil
	}
	return Scenario{}, fmt.Errorf("unknown scenario %q (one of %s)", name, strings.Join(ScenarioNames(), ", "))
}

// Policy is how a run drives the fleet.
type Policy struct {
	Kind      string `json:"kind"`                 // adaptive, static, old-script
	PerServer int    `json:"per_server,omitempty"` // static and old-script
}

// Policy kinds.
const (
	KindAdaptive = "adaptive"
	KindStatic   = "static"
	KindOld      = "old-script"
)

func (p Policy) String() string {
	switch p.Kind {
	case KindStatic:
		return "static " + strconv.Itoa(p.PerServer)
	case KindOld:
		return "old script (" + strconv.Itoa(p.PerServer) + "/server)"
	}
	return p.Kind
}

// ParseList parses "8,16,32" into sorted unique positive ints.
func ParseList(s string) ([]int, error) {
	var out []int
	seen := map[int]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("list %q: %q is not a positive integer", s, f)
		}
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	sort.Ints(out)
	return out, nil
}
