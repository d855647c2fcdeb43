package sim

import (
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

// Scenario is a --scenario file (JSON or YAML, decoded strictly): fleet-wide
// settings and one entry per server. A field set in the file overrides the
// command-line flag; a field left out keeps the flag's value.
type Scenario struct {
	Speedup float64        `json:"speedup,omitempty"`
	Seed    *int64         `json:"seed,omitempty"`
	Servers []ServerConfig `json:"servers"`
}

// ParseScenario decodes a scenario; unknown fields are errors.
func ParseScenario(data []byte) (Scenario, error) {
	var sc Scenario
	if err := yaml.UnmarshalStrict(data, &sc); err != nil {
		return Scenario{}, fmt.Errorf("decode scenario: %w", err)
	}
	return sc, nil
}

// LoadScenario reads and decodes a scenario file.
func LoadScenario(path string) (Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Scenario{}, fmt.Errorf("read scenario: %w", err)
	}
	sc, err := ParseScenario(data)
	if err != nil {
		return Scenario{}, fmt.Errorf("%s: %w", path, err)
	}
	return sc, nil
}

// Merge returns cfg with the scenario applied: its speedup and seed when
// set, and, when it lists servers, one server per entry built from template
// with the entry's fields on top.
func (sc Scenario) Merge(cfg FleetConfig, template ServerConfig) FleetConfig {
	if sc.Speedup != 0 {
		cfg.Speedup = sc.Speedup
	}
	if sc.Seed != nil {
		cfg.Seed = *sc.Seed
	}
	if len(sc.Servers) > 0 {
		cfg.Servers = make([]ServerConfig, len(sc.Servers))
		for i, s := range sc.Servers {
			cfg.Servers[i] = overlay(template, s)
		}
	}
	return cfg
}

// overlay returns base with every non-zero field of top.
func overlay(base, top ServerConfig) ServerConfig {
	setS := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	setI := func(dst *int, v int) {
		if v != 0 {
			*dst = v
		}
	}
	setF := func(dst *float64, v float64) {
		if v != 0 {
			*dst = v
		}
	}
	out := base
	setS(&out.Name, top.Name)
	setS(&out.GPU, top.GPU)
	setS(&out.Model, top.Model)
	setI(&out.Port, top.Port)
	setI(&out.MaxRunningRequests, top.MaxRunningRequests)
	setF(&out.MemFractionStatic, top.MemFractionStatic)
	setI(&out.MaxQueuedRequests, top.MaxQueuedRequests)
	setF(&out.ScheduleConservativeness, top.ScheduleConservativeness)
	setI(&out.ContextLength, top.ContextLength)
	setI(&out.ChunkedPrefillSize, top.ChunkedPrefillSize)
	setI(&out.MaxPrefillTokens, top.MaxPrefillTokens)
	setF(&out.OutputMean, top.OutputMean)
	setF(&out.OutputSigma, top.OutputSigma)
	setF(&out.OutputMeanNoThink, top.OutputMeanNoThink)
	setS(&out.OutputDist, top.OutputDist)
	setF(&out.OutputRunaway, top.OutputRunaway)
	setI(&out.MaxContentBytes, top.MaxContentBytes)
	setF(&out.Faults.ErrorRate, top.Faults.ErrorRate)
	setF(&out.Faults.DropRate, top.Faults.DropRate)
	if top.Faults.Slowdown != nil {
		out.Faults.Slowdown = top.Faults.Slowdown
	}
	if top.Faults.Death != nil {
		out.Faults.Death = top.Faults.Death
	}
	return out
}
