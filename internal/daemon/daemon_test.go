package daemon

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gend-dev/gend/api"
	"github.com/gend-dev/gend/internal/sim"
)

func TestCheckListen(t *testing.T) {
	tests := []struct {
		addr, token string
		ok          bool
	}{
		{"127.0.0.1:9410", "", true},
		{"[::1]:9410", "", true},
		{"localhost:9410", "", true},
		{"0.0.0.0:9410", "", false},
		{"10.0.0.5:9410", "", false},
		{"0.0.0.0:9410", "t", true},
		{"nonsense", "", false},
	}
	for _, tt := range tests {
		err := CheckListen(tt.addr, tt.token, nil)
		if (err == nil) != tt.ok {
			t.Errorf("CheckListen(%q, token %q) = %v, want ok=%v", tt.addr, tt.token, err, tt.ok)
		}
	}
}

type running struct {
	d      *Daemon
	c      *api.Client
	cancel context.CancelFunc
	done   chan error
}

func startDaemon(t *testing.T, stateDir string, cfg api.Config, opts ...func(*Options)) *running {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Listener: ln, StateDir: stateDir, Config: cfg, NVML: "off", Logger: zerolog.Nop(),
		ControlPeriod: 100 * time.Millisecond, DrainTimeout: 5 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{d: d, c: api.NewClient("http://"+ln.Addr().String(), "", nil), cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- d.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for d.Ready() != nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(r.stop)
	return r
}

func (r *running) stop() {
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(20 * time.Second):
	}
}

func startFleet(t *testing.T, n int, speedup float64) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	scs := make([]sim.ServerConfig, n)
	for i := range scs {
		scs[i] = sim.ServerConfig{Model: "8b", GPU: "h100", OutputMean: 300, MaxContentBytes: 256}
	}
	f, err := sim.StartFleet(ctx, sim.FleetConfig{Speedup: speedup, Servers: scs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f.URLs()
}

func TestFleetChangesSurviveRestart(t *testing.T) {
	urls := startFleet(t, 2, 50)
	state := t.TempDir()
	cfg := api.Config{Servers: []api.ServerSpec{{Name: "a", URL: urls[0]}}}
	r := startDaemon(t, state, cfg)
	ctx := context.Background()
	if _, err := r.c.AddServer(ctx, api.ServerSpec{Name: "b", URL: urls[1]}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.AddServer(ctx, api.ServerSpec{Name: "b", URL: urls[1]}); err == nil {
		t.Fatal("adding a server twice should fail")
	}
	if err := r.c.RemoveServer(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	r.stop()
	r = startDaemon(t, state, cfg)
	servers, err := r.c.Servers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range servers {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "b" {
		t.Fatalf("fleet after restart = %v, want [b] (a removed, b added)", names)
	}
}

func writePrompts(t *testing.T, dir, name string, n int) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `{"id":"%s-%d","prompt":"complete this sentence number %d"}`+"\n", name, i, i)
	}
	p := filepath.Join(dir, name+".jsonl")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPriorityQueueAndLifecycle(t *testing.T) {
	urls := startFleet(t, 1, 50)
	dir := t.TempDir()
	r := startDaemon(t, filepath.Join(dir, "state"), api.Config{Servers: []api.ServerSpec{{Name: "a", URL: urls[0]}}})
	ctx := context.Background()
	spec := func(name string, prio int) []byte {
		return []byte(fmt.Sprintf(`{"name":%q,"priority":%d,"input":%q,"request":{"endpoint":"/v1/completions","params":{"max_tokens":256}},"output":{"dir":%q},"scheduler":{"mode":"static","per_server":8}}`,
			name, prio, writePrompts(t, dir, name, 120), filepath.Join(dir, "out-"+name)))
	}
	lo, err := r.c.SubmitJob(ctx, spec("lo", 0), api.ContentTypeJSON)
	if err != nil {
		t.Fatal(err)
	}
	hi, err := r.c.SubmitJob(ctx, spec("hi", 5), api.ContentTypeJSON)
	if err != nil {
		t.Fatal(err)
	}
	// The same output dir twice is refused.
	if _, err := r.c.SubmitJob(ctx, spec("hi", 5), api.ContentTypeJSON); err == nil {
		t.Fatal("a second job on a busy output dir should be refused")
	}
	deadline := time.Now().Add(90 * time.Second)
	var hiDone, loDone time.Time
	for time.Now().Before(deadline) && (hiDone.IsZero() || loDone.IsZero()) {
		for _, id := range []string{hi.ID, lo.ID} {
			j, err := r.c.GetJob(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if j.Status == api.StatusCompleted {
				if id == hi.ID && hiDone.IsZero() {
					hiDone = time.Now()
				}
				if id == lo.ID && loDone.IsZero() {
					loDone = time.Now()
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if hiDone.IsZero() || loDone.IsZero() {
		t.Fatal("jobs did not complete")
	}
	if !hiDone.Before(loDone) {
		t.Fatalf("priority 5 finished at %v, after priority 0 at %v", hiDone, loDone)
	}
	j, _ := r.c.GetJob(ctx, lo.ID)
	if j.Progress.Completed != 120 || j.Progress.Total != 120 || j.StartedAt == nil || j.FinishedAt == nil {
		t.Fatalf("lo: %+v", j.Progress)
	}
	if _, err := r.c.PauseJob(ctx, lo.ID); err == nil {
		t.Fatal("pausing a completed job should fail")
	}
}
