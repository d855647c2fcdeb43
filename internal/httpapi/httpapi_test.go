package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/gend-dev/gend/api"
	"github.com/gend-dev/gend/internal/spec"
)

// fakeService is a hand-written fake with function fields.
type fakeService struct {
	submit func(raw []byte) (api.Job, error)
	resize func(id string, r api.ResizeRequest) (api.Job, error)
	eta    api.ETA
}

func (f *fakeService) SubmitJob(_ context.Context, raw []byte) (api.Job, error) { return f.submit(raw) }
func (f *fakeService) Jobs() []api.Job                                          { return nil }
func (f *fakeService) Job(id string) (api.Job, error) {
	if id != "j1" {
		return api.Job{}, &api.Error{Status: 404, Code: "not_found", Message: "job not found"}
	}
	return api.Job{ID: "j1", Status: api.StatusRunning}, nil
}
func (f *fakeService) PauseJob(id string) (api.Job, error) {
	return api.Job{ID: id, Status: api.StatusPaused}, nil
}
func (f *fakeService) ResumeJob(id string) (api.Job, error) {
	return api.Job{ID: id, Status: api.StatusRunning}, nil
}
func (f *fakeService) CancelJob(id string) (api.Job, error) {
	return api.Job{ID: id, Status: api.StatusCancelled}, nil
}
func (f *fakeService) ResizeJob(id string, r api.ResizeRequest) (api.Job, error) {
	return f.resize(id, r)
}
func (f *fakeService) ETA(string) (api.ETA, error) { return f.eta, nil }
func (f *fakeService) Servers() []api.Server       { return nil }
func (f *fakeService) AddServer(s api.ServerSpec) (api.Server, error) {
	return api.Server{ServerSpec: s}, nil
}
func (f *fakeService) RemoveServer(string) error { return nil }
func (f *fakeService) GPUs() api.GPUs            { return api.GPUs{Available: false, Reason: "no NVML"} }
func (f *fakeService) Diagnosis() api.Diagnosis  { return api.Diagnosis{Verdict: api.VerdictHealthy} }
func (f *fakeService) Ready() error              { return nil }

func newTestServer(t *testing.T, svc Service, token string) *httptest.Server {
	t.Helper()
	reg := prometheus.NewRegistry()
	srv := httptest.NewServer(New(svc, Options{Token: token, Registry: reg, Gatherer: reg, Logger: zerolog.Nop()}))
	t.Cleanup(srv.Close)
	return srv
}

func do(t *testing.T, method, url, token, body string, hdr ...string) (*http.Response, api.ErrorBody, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	var eb api.ErrorBody
	_ = json.Unmarshal([]byte(sb.String()), &eb)
	return resp, eb, sb.String()
}

func TestAuthAndErrors(t *testing.T) {
	svc := &fakeService{
		submit: func(raw []byte) (api.Job, error) {
			if _, err := spec.DecodeJob(raw, nil); err != nil {
				return api.Job{}, err
			}
			return api.Job{ID: "j1"}, nil
		},
		resize: func(id string, r api.ResizeRequest) (api.Job, error) { return api.Job{ID: id}, nil },
		eta:    api.ETA{Line: "ETA 1h00m (55m–1h10m) · 10.0% done · 1.00 req/s · 100 tok/s"},
	}
	srv := newTestServer(t, svc, "s3cret")
	tests := []struct {
		name, method, path, token, body string
		hdr                             []string
		status                          int
		code                            string
	}{
		{"POST without token", "POST", "/v1/jobs", "", "input: a\noutput: {dir: o}\n", nil, 401, "unauthorized"},
		{"POST wrong token", "POST", "/v1/jobs/j1/pause", "nope", "", nil, 401, "unauthorized"},
		{"DELETE without token", "DELETE", "/v1/servers/gpu0", "", "", nil, 401, "unauthorized"},
		{"GET needs no token", "GET", "/v1/jobs/j1", "", "", nil, 200, ""},
		{"submit ok", "POST", "/v1/jobs", "s3cret", "input: a\noutput: {dir: o}\n", nil, 201, ""},
		{"submit invalid lists problems", "POST", "/v1/jobs", "s3cret", "order: x\n", nil, 400, "invalid_job_spec"},
		{"unknown job", "GET", "/v1/jobs/zz", "", "", nil, 404, "not_found"},
		{"resize bad body", "POST", "/v1/jobs/j1/resize", "s3cret", `{"mode":"static"}`, nil, 400, "invalid_resize"},
		{"resize ok", "POST", "/v1/jobs/j1/resize", "s3cret", `{"per_server_max":8}`, nil, 200, ""},
		{"body too large", "POST", "/v1/jobs", "s3cret", strings.Repeat("x", MaxBodyBytes+10), nil, 413, "body_too_large"},
		{"no route", "GET", "/v2/nothing", "", "", nil, 404, "not_found"},
		{"server add invalid", "POST", "/v1/servers", "s3cret", `{"name":"","url":"x"}`, nil, 400, "invalid_server"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, eb, raw := do(t, tt.method, srv.URL+tt.path, tt.token, tt.body, tt.hdr...)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, raw)
			}
			if tt.code != "" && eb.Error.Code != tt.code {
				t.Fatalf("error code %q, want %q: %s", eb.Error.Code, tt.code, raw)
			}
		})
	}
	_, eb, _ := do(t, "POST", srv.URL+"/v1/jobs", "s3cret", "order: x\n")
	if len(eb.Error.Problems) < 3 {
		t.Fatalf("problems not listed: %+v", eb)
	}
}

func TestETAPlainAndJSON(t *testing.T) {
	svc := &fakeService{eta: api.ETA{JobID: "j1", ETASeconds: 3600, Line: "ETA 1h00m (55m–1h10m) · 10.0% done · 1.00 req/s · 100 tok/s"}}
	srv := newTestServer(t, svc, "")
	resp, _, raw := do(t, "GET", srv.URL+"/v1/eta", "", "")
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") || raw != svc.eta.Line+"\n" {
		t.Fatalf("plain: %q %q", resp.Header.Get("Content-Type"), raw)
	}
	resp, _, raw = do(t, "GET", srv.URL+"/v1/jobs/j1/eta", "", "", "Accept", "application/json")
	var e api.ETA
	if err := json.Unmarshal([]byte(raw), &e); err != nil || e.ETASeconds != 3600 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("json: %v %q", err, raw)
	}
}

func TestMetricsUseRoutePatterns(t *testing.T) {
	srv := newTestServer(t, &fakeService{}, "")
	do(t, "GET", srv.URL+"/v1/jobs/j1", "", "")
	do(t, "GET", srv.URL+"/v1/jobs/zz", "", "")
	_, _, raw := do(t, "GET", srv.URL+"/metrics", "", "")
	if !strings.Contains(raw, `route="/v1/jobs/{id}"`) || strings.Contains(raw, `/v1/jobs/j1"`) {
		t.Fatalf("metrics should label by route pattern, not path:\n%s", raw)
	}
}

func FuzzAPIBodies(f *testing.F) {
	for _, s := range []string{`{"per_server_max":4}`, `{"name":"a","url":"http://h:1"}`, "input: a\noutput: {dir: o}\n", `{`, ``} {
		f.Add(s)
	}
	svc := &fakeService{
		submit: func(raw []byte) (api.Job, error) {
			if _, err := spec.DecodeJob(raw, nil); err != nil {
				return api.Job{}, err
			}
			return api.Job{ID: "j1"}, nil
		},
		resize: func(id string, r api.ResizeRequest) (api.Job, error) { return api.Job{ID: id}, nil },
	}
	h := New(svc, Options{Logger: zerolog.Nop()})
	f.Fuzz(func(t *testing.T, body string) {
		for _, path := range []string{"/v1/jobs", "/v1/jobs/j1/resize", "/v1/servers"} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("POST", path, strings.NewReader(body)))
			if rec.Code >= 500 {
				t.Fatalf("%s: %d for %q: %s", path, rec.Code, body, rec.Body.String())
			}
			if rec.Code >= 400 {
				var eb api.ErrorBody
				if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Error.Code == "" {
					t.Fatalf("%s: error body not in the API shape: %q", path, rec.Body.String())
				}
			}
		}
	})
}
