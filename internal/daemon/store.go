package daemon

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/gend-dev/gend/api"
	"github.com/gend-dev/gend/pkg/sink"
)

// jobRecord is a job's durable state under --state-dir/jobs/<id>.json.
type jobRecord struct {
	ID             string            `json:"id"`
	Spec           api.JobSpec       `json:"spec"`
	Status         string            `json:"status"`
	Reason         string            `json:"reason,omitempty"`
	CreatedAt      time.Time         `json:"created_at"`
	StartedAt      *time.Time        `json:"started_at,omitempty"`
	FinishedAt     *time.Time        `json:"finished_at,omitempty"`
	Scheduler      api.SchedulerSpec `json:"scheduler"`
	RunningSeconds float64           `json:"running_seconds"`
	UserPaused     bool              `json:"user_paused,omitempty"`
}

type store struct{ dir string }

func newStore(stateDir string) (*store, error) {
	dir := filepath.Join(stateDir, "jobs")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	return &store{dir: dir}, nil
}

func (s *store) save(r jobRecord) error {
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("save job %s: %w", r.ID, err)
	}
	if err := sink.WriteFileAtomic(filepath.Join(s.dir, r.ID+".json"), raw); err != nil {
		return fmt.Errorf("save job %s: %w", r.ID, err)
	}
	return nil
}

func (s *store) load() ([]jobRecord, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("read state: %w", err)
	}
	var out []jobRecord
	for _, e := range ents {
		if e.IsDir() || filepath.Ext(e.Name()) != ".json" {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(s.dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read job state %s: %w", e.Name(), err)
		}
		var r jobRecord
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, fmt.Errorf("decode job state %s: %w", e.Name(), err)
		}
		out = append(out, r)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].CreatedAt.Before(out[b].CreatedAt) })
	return out, nil
}

// fleetRecord is the fleet changes made through the API
// (--state-dir/fleet.json): servers added, and config servers removed.
type fleetRecord struct {
	Added   []api.ServerSpec `json:"added"`
	Removed []string         `json:"removed"`
}

func (s *store) fleetPath() string { return filepath.Join(filepath.Dir(s.dir), "fleet.json") }

func (s *store) loadFleet() (fleetRecord, error) {
	var r fleetRecord
	raw, err := os.ReadFile(s.fleetPath())
	if os.IsNotExist(err) {
		return r, nil
	}
	if err != nil {
		return r, fmt.Errorf("read fleet state: %w", err)
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return r, fmt.Errorf("decode %s: %w", s.fleetPath(), err)
	}
	return r, nil
}

func (s *store) saveFleet(r fleetRecord) error {
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := sink.WriteFileAtomic(s.fleetPath(), raw); err != nil {
		return fmt.Errorf("save fleet state: %w", err)
	}
	return nil
}
