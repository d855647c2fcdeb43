package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

// recorder answers every request with a fixed status and body and records
// what it got.
type recorder struct {
	status int
	body   string
	ct     string
	got    *http.Request
	gotRaw string
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	r.got, r.gotRaw = req, string(b)
	if r.ct != "" {
		w.Header().Set("Content-Type", r.ct)
	}
	w.WriteHeader(r.status)
	io.WriteString(w, r.body)
}

func TestClientEndpoints(t *testing.T) {
	t.Parallel()
	three := 3
	tests := []struct {
		name       string
		reply      string
		call       func(context.Context, *Client) (any, error)
		method     string
		path       string // escaped
		reqCT      string
		accept     string
		reqBody    string
		want       any
		wantStatus int
	}{
		{name: "submit yaml", reply: `{"id":"j1","name":"n","status":"queued"}`, wantStatus: 201,
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.SubmitJob(ctx, []byte("name: n\n"), ContentTypeYAML)
			},
			method: "POST", path: "/v1/jobs", reqCT: ContentTypeYAML, accept: ContentTypeJSON, reqBody: "name: n\n",
			want: Job{ID: "j1", Name: "n", Status: "queued"}},
		{name: "list jobs", reply: `{"jobs":[{"id":"a"},{"id":"b"}]}`,
			call:   func(ctx context.Context, c *Client) (any, error) { return c.ListJobs(ctx) },
			method: "GET", path: "/v1/jobs", accept: ContentTypeJSON, want: []Job{{ID: "a"}, {ID: "b"}}},
		{name: "get job escapes id", reply: `{"id":"a/b"}`,
			call:   func(ctx context.Context, c *Client) (any, error) { return c.GetJob(ctx, "a/b") },
			method: "GET", path: "/v1/jobs/a%2Fb", accept: ContentTypeJSON, want: Job{ID: "a/b"}},
		{name: "pause", reply: `{"id":"j","status":"paused"}`,
			call:   func(ctx context.Context, c *Client) (any, error) { return c.PauseJob(ctx, "j") },
			method: "POST", path: "/v1/jobs/j/pause", accept: ContentTypeJSON, want: Job{ID: "j", Status: "paused"}},
		{name: "resume", reply: `{"id":"j","status":"running"}`,
			call:   func(ctx context.Context, c *Client) (any, error) { return c.ResumeJob(ctx, "j") },
			method: "POST", path: "/v1/jobs/j/resume", accept: ContentTypeJSON, want: Job{ID: "j", Status: "running"}},
		{name: "cancel", reply: `{"id":"j","status":"cancelled"}`,
			call:   func(ctx context.Context, c *Client) (any, error) { return c.CancelJob(ctx, "j") },
			method: "POST", path: "/v1/jobs/j/cancel", accept: ContentTypeJSON, want: Job{ID: "j", Status: "cancelled"}},
		{name: "resize", reply: `{"id":"j","scheduler":{"mode":"static","per_server":3}}`,
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.ResizeJob(ctx, "j", ResizeRequest{Mode: ModeStatic, PerServer: &three})
			},
			method: "POST", path: "/v1/jobs/j/resize", reqCT: ContentTypeJSON, accept: ContentTypeJSON,
			reqBody: `{"mode":"static","per_server":3}`,
			want:    Job{ID: "j", Scheduler: SchedulerSpec{Mode: ModeStatic, PerServer: 3}}},
		{name: "eta current", reply: `{"job_id":"j","eta_seconds":60}`,
			call:   func(ctx context.Context, c *Client) (any, error) { return c.ETA(ctx, "") },
			method: "GET", path: "/v1/eta", accept: ContentTypeJSON, want: ETA{JobID: "j", ETASeconds: 60}},
		{name: "eta of a job", reply: `{"job_id":"j"}`,
			call:   func(ctx context.Context, c *Client) (any, error) { return c.ETA(ctx, "j") },
			method: "GET", path: "/v1/jobs/j/eta", accept: ContentTypeJSON, want: ETA{JobID: "j"}},
		{name: "eta line", reply: "ETA 1m00s · 50.0% done · 1.00 req/s · 10 tok/s\n",
			call:   func(ctx context.Context, c *Client) (any, error) { return c.ETALine(ctx, "j") },
			method: "GET", path: "/v1/jobs/j/eta", accept: ContentTypeText, want: "ETA 1m00s · 50.0% done · 1.00 req/s · 10 tok/s"},
		{name: "servers", reply: `{"servers":[{"name":"gpu0","url":"u","state":"healthy","limit":8}]}`,
			call:   func(ctx context.Context, c *Client) (any, error) { return c.Servers(ctx) },
			method: "GET", path: "/v1/servers", accept: ContentTypeJSON,
			want: []Server{{ServerSpec: ServerSpec{Name: "gpu0", URL: "u"}, State: "healthy", Limit: 8}}},
		{name: "add server", reply: `{"name":"gpu4","url":"u","gpus":[4],"state":"probing"}`, wantStatus: 201,
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.AddServer(ctx, ServerSpec{Name: "gpu4", URL: "u", GPUs: []int{4}})
			},
			method: "POST", path: "/v1/servers", reqCT: ContentTypeJSON, accept: ContentTypeJSON,
			reqBody: `{"name":"gpu4","url":"u","gpus":[4]}`,
			want:    Server{ServerSpec: ServerSpec{Name: "gpu4", URL: "u", GPUs: []int{4}}, State: "probing"}},
		{name: "remove server", wantStatus: 204,
			call:   func(ctx context.Context, c *Client) (any, error) { return nil, c.RemoveServer(ctx, "gpu 4") },
			method: "DELETE", path: "/v1/servers/gpu%204", accept: ContentTypeJSON},
		{name: "gpus", reply: `{"available":false,"reason":"no driver","gpus":[]}`,
			call:   func(ctx context.Context, c *Client) (any, error) { return c.GPUs(ctx) },
			method: "GET", path: "/v1/gpus", accept: ContentTypeJSON, want: GPUs{Reason: "no driver", GPUs: []GPU{}}},
		{name: "diagnosis", reply: `{"verdict":"kv_bound","evidence":["x"]}`,
			call:   func(ctx context.Context, c *Client) (any, error) { return c.Diagnosis(ctx) },
			method: "GET", path: "/v1/diagnosis", accept: ContentTypeJSON, want: Diagnosis{Verdict: "kv_bound", Evidence: []string{"x"}}},
		{name: "health", reply: "ok",
			call:   func(ctx context.Context, c *Client) (any, error) { return nil, c.Health(ctx) },
			method: "GET", path: "/healthz"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			status := tc.wantStatus
			if status == 0 {
				status = 200
			}
			rec := &recorder{status: status, body: tc.reply}
			srv := httptest.NewServer(rec)
			defer srv.Close()
			c := NewClient(srv.URL+"/", "tok", nil) // a trailing slash is tolerated
			got, err := tc.call(t.Context(), c)
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			r := rec.got
			if r.Method != tc.method || r.URL.EscapedPath() != tc.path {
				t.Errorf("sent %s %s, want %s %s", r.Method, r.URL.EscapedPath(), tc.method, tc.path)
			}
			if h := r.Header.Get("Authorization"); h != "Bearer tok" {
				t.Errorf("Authorization %q", h)
			}
			if ct := r.Header.Get("Content-Type"); ct != tc.reqCT {
				t.Errorf("Content-Type %q, want %q", ct, tc.reqCT)
			}
			if a := r.Header.Get("Accept"); a != tc.accept {
				t.Errorf("Accept %q, want %q", a, tc.accept)
			}
			if rec.gotRaw != tc.reqBody {
				t.Errorf("body %q, want %q", rec.gotRaw, tc.reqBody)
			}
			if tc.want != nil && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %#v\nwant %#v", got, tc.want)
			}
		})
	}
}

func TestClientErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		body   string
		want   Error
		msg    string
	}{
		{"api error with problems", 400,
			`{"error":{"code":"invalid_spec","message":"invalid job spec","problems":["input is required","output.dir is required"]}}`,
			Error{Status: 400, Code: "invalid_spec", Message: "invalid job spec", Problems: []string{"input is required", "output.dir is required"}},
			"get job j: invalid job spec: input is required; output.dir is required"},
		{"unauthorized", 401, `{"error":{"code":"unauthorized","message":"missing bearer token"}}`,
			Error{Status: 401, Code: "unauthorized", Message: "missing bearer token"}, "get job j: missing bearer token"},
		{"not json", 502, "<html>bad gateway</html>",
			Error{Status: 502, Message: "HTTP 502: <html>bad gateway</html>"}, "get job j: HTTP 502: <html>bad gateway</html>"},
		{"empty", 500, "", Error{Status: 500}, "get job j: HTTP 500 Internal Server Error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(&recorder{status: tc.status, body: tc.body})
			defer srv.Close()
			_, err := NewClient(srv.URL, "", nil).GetJob(t.Context(), "j")
			var ae *Error
			if !errors.As(err, &ae) {
				t.Fatalf("error %v is not an *api.Error", err)
			}
			if !reflect.DeepEqual(*ae, tc.want) {
				t.Errorf("got %#v\nwant %#v", *ae, tc.want)
			}
			if err.Error() != tc.msg {
				t.Errorf("message %q, want %q", err.Error(), tc.msg)
			}
		})
	}
}

func TestClientDoRawAndNoToken(t *testing.T) {
	t.Parallel()
	const body = "{\n  \"jobs\": []\n}"
	rec := &recorder{status: 200, body: body}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	c := NewClient(srv.URL, "", nil)
	status, raw, err := c.Do(t.Context(), http.MethodGet, "/v1/jobs", nil)
	if err != nil || status != 200 || string(raw) != body {
		t.Fatalf("Do = %d, %q, %v; want the body as it came", status, raw, err)
	}
	if h, ok := rec.got.Header["Authorization"]; ok {
		t.Errorf("Authorization sent without a token: %q", h)
	}
	rec.status, rec.body = 404, `{"error":{"code":"not_found","message":"no such job"}}`
	status, raw, err = c.Do(t.Context(), http.MethodGet, "/v1/jobs/x", nil)
	if status != 404 || string(raw) != rec.body || !IsNotFound(err) {
		t.Errorf("Do on 404 = %d, %q, %v", status, raw, err)
	}
	if !strings.HasPrefix(err.Error(), "GET /v1/jobs/x: ") {
		t.Errorf("Do error %q does not name the request", err)
	}
}

func TestClientConnectionRefused(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	_, err := NewClient(url, "", nil).ListJobs(t.Context())
	var ae *Error
	if err == nil || errors.As(err, &ae) || !strings.HasPrefix(err.Error(), "list jobs: ") {
		t.Errorf("ListJobs on a closed port = %v; want a wrapped transport error", err)
	}
}
