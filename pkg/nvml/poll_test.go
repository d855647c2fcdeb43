package nvml

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gend-dev/gend/api"
)

// simServer serves GET /sim/gpu with gpu, or 503 when gpu is nil.
func simServer(t *testing.T, gpu any) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/sim/gpu" || r.Method != http.MethodGet {
			http.NotFound(w, r)
			return
		}
		if gpu == nil {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		_ = json.NewEncoder(w).Encode(gpu)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestSimSource(t *testing.T) {
	t.Parallel()
	a := simServer(t, api.GPU{Index: 0, UUID: "SIM-a", Name: "RTX PRO 6000", UtilizationRatio: 1,
		DRAMBandwidthRatio: ptr(0.81), PeakBandwidthBytes: 1.792e12})
	tp := simServer(t, api.GPU{Index: 0, UUID: "SIM-tp", Name: "H100", PeakBandwidthBytes: 3.35e12})
	down := simServer(t, nil)

	tests := []struct {
		name      string
		servers   []api.ServerSpec
		available bool
		want      map[string][]int // server → GPU indices
		reason    string
	}{
		{
			name: "two servers, one tensor-parallel, one down",
			servers: []api.ServerSpec{{Name: "gpu0", URL: a.URL, GPUs: []int{3}},
				{Name: "tp", URL: tp.URL + "/", GPUs: []int{4, 5}}, {Name: "dead", URL: down.URL}},
			available: true,
			want:      map[string][]int{"gpu0": {3}, "tp": {4, 5}},
		},
		{
			name:      "all down",
			servers:   []api.ServerSpec{{Name: "dead", URL: down.URL}},
			available: false,
			reason:    "status 503",
		},
		{name: "no servers", available: false, reason: "no servers"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := NewSimSource(SimOptions{Servers: func() []api.ServerSpec { return tc.servers }, Logger: zerolog.Nop()})
			s.p.pollOnce(t.Context())
			snap := s.Snapshot()
			if snap.Available != tc.available || !strings.Contains(snap.Reason, tc.reason) || snap.Source != SourceSim {
				t.Fatalf("available=%v reason=%q source=%q", snap.Available, snap.Reason, snap.Source)
			}
			got := map[string][]int{}
			for _, g := range snap.GPUs {
				if g.Source != SourceSim || g.SampledAt.IsZero() {
					t.Errorf("gpu %+v: source/sampled_at not set", g)
				}
				got[g.Server] = append(got[g.Server], g.Index)
			}
			if len(got) != len(tc.want) {
				t.Errorf("servers %v, want %v", got, tc.want)
			}
			for name, idx := range tc.want {
				if fmt.Sprint(got[name]) != fmt.Sprint(idx) {
					t.Errorf("server %s GPUs %v, want %v", name, got[name], idx)
				}
			}
		})
	}
	t.Run("values", func(t *testing.T) {
		t.Parallel()
		s := NewSimSource(SimOptions{Servers: func() []api.ServerSpec { return []api.ServerSpec{{Name: "gpu0", URL: a.URL}} }})
		s.p.pollOnce(t.Context())
		g := s.Snapshot().GPUs[0]
		if g.DRAMBandwidthRatio == nil || *g.DRAMBandwidthRatio != 0.81 || g.PeakBandwidthBytes != 1.792e12 || g.Server != "gpu0" {
			t.Errorf("gpu = %+v", g)
		}
	})
}

func TestRemoteSource(t *testing.T) {
	t.Parallel()
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/gpus" {
			http.NotFound(w, r)
			return
		}
		gpus := api.GPUs{Available: true, Source: SourceNVML}
		for i := range 4 {
			gpus.GPUs = append(gpus.GPUs, api.GPU{Index: i, UUID: "GPU-" + string(rune('a'+i)), Source: SourceNVML,
				DRAMBandwidthRatio: ptr(0.5 + float64(i)/10)})
		}
		_ = json.NewEncoder(w).Encode(gpus)
	}))
	t.Cleanup(host.Close)
	noDriver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(api.GPUs{Available: false, Reason: "no driver", GPUs: []api.GPU{}})
	}))
	t.Cleanup(noDriver.Close)

	servers := []api.ServerSpec{
		{Name: "h1-gpu1", URL: "http://h1:30001", GPUs: []int{1}, Host: host.URL},
		{Name: "h1-tp", URL: "http://h1:30002", GPUs: []int{2, 3}, Host: host.URL + "/"},
		{Name: "local", URL: "http://127.0.0.1:30000", GPUs: []int{0}}, // no Host: not remote
		{Name: "h2", URL: "http://h2:30000", GPUs: []int{0}, Host: "http://127.0.0.1:1"},
		{Name: "h3", URL: "http://h3:30000", GPUs: []int{0}, Host: noDriver.URL},
	}
	s := NewRemoteSource(RemoteOptions{Servers: func() []api.ServerSpec { return servers }})
	s.p.pollOnce(context.Background())
	snap := s.Snapshot()
	if !snap.Available || snap.Source != SourceRemote {
		t.Fatalf("available=%v source=%q reason=%q", snap.Available, snap.Source, snap.Reason)
	}
	got := map[string][]string{}
	for _, g := range snap.GPUs {
		if g.Source != SourceRemote {
			t.Errorf("gpu source %q", g.Source)
		}
		got[g.Server] = append(got[g.Server], g.UUID)
	}
	want := map[string]string{"h1-gpu1": "GPU-b", "h1-tp": "GPU-c,GPU-d"}
	if len(got) != len(want) {
		t.Errorf("servers %v, want %v", got, want)
	}
	for name, uuids := range want {
		if strings.Join(got[name], ",") != uuids {
			t.Errorf("%s: %v, want %s", name, got[name], uuids)
		}
	}
	if len(s.p.lastErr) != 2 || !strings.Contains(s.p.lastErr[noDriver.URL], "no driver") {
		t.Errorf("errors tracked %v, want the unreachable host and the one without a driver", s.p.lastErr)
	}
}

func TestPollRunStops(t *testing.T) {
	t.Parallel()
	calls := make(chan struct{}, 8)
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls <- struct{}{}
		_ = json.NewEncoder(w).Encode(api.GPU{UUID: "SIM-a"})
	}))
	t.Cleanup(a.Close)
	s := NewSimSource(SimOptions{Servers: func() []api.ServerSpec { return []api.ServerSpec{{Name: "a", URL: a.URL}} }})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	<-calls // the first poll happens at once, not after Interval
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}
