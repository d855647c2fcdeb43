package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gend-dev/gend/api"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// reply is one canned answer of the fake API.
type reply struct {
	status int
	file   string // under testdata/api/
	body   string // used when file is empty
	// textFile answers requests that do not Accept JSON (the plain ETA line).
	textFile string
}

// seen is one request the fake API received.
type seen struct {
	method, path, auth, contentType, accept string
	body                                    []byte
}

// fakeAPI serves canned API documents from testdata/api. A route may have a
// sequence of replies (for watch); the last one repeats.
type fakeAPI struct {
	t      *testing.T
	mu     sync.Mutex
	routes map[string][]reply
	hits   map[string]int
	reqs   []seen
}

func newFakeAPI(t *testing.T) (*fakeAPI, *httptest.Server) {
	t.Helper()
	f := &fakeAPI{t: t, hits: map[string]int{}, routes: map[string][]reply{
		"GET /v1/jobs":                          {{file: "jobs.json"}},
		"POST /v1/jobs":                         {{status: 201, file: "job_running.json"}},
		"GET /v1/jobs/j-20260301-0001":          {{file: "job_running.json"}},
		"GET /v1/jobs/j-20260301-0001/eta":      {{file: "eta.json", textFile: "eta.txt"}},
		"GET /v1/jobs/nope":                     {{status: 404, file: "error_notfound.json"}},
		"POST /v1/jobs/j-20260301-0001/pause":   {{body: `{"id":"j-20260301-0001","status":"paused"}`}},
		"POST /v1/jobs/j-20260301-0001/resume":  {{body: `{"id":"j-20260301-0001","status":"running"}`}},
		"POST /v1/jobs/j-20260301-0001/cancel":  {{body: `{"id":"j-20260301-0001","status":"cancelled"}`}},
		"POST /v1/jobs/j-20260301-0001/resize":  {{body: `{"id":"j-20260301-0001","status":"running","scheduler":{"mode":"static","per_server":64,"per_server_max":512}}`}},
		"GET /v1/jobs/j-w":                      {{file: "watch_0.json"}, {file: "watch_1.json"}, {file: "watch_2.json"}},
		"GET /v1/jobs/j-c":                      {{file: "watch_0.json"}, {file: "watch_cancelled.json"}},
		"GET /v1/servers":                       {{file: "servers.json"}},
		"POST /v1/servers":                      {{status: 201, body: `{"name":"gpu4","url":"http://127.0.0.1:30004","gpus":[4,5],"state":"probing"}`}},
		"DELETE /v1/servers/gpu0":               {{status: 204}},
		"GET /v1/gpus":                          {{file: "gpus.json"}},
		"GET /v1/diagnosis":                     {{file: "diagnosis.json"}},
		"GET /v1/eta":                           {{file: "eta.json", textFile: "eta.txt"}},
		"POST /v1/jobs/j-20260301-0001/explode": {{status: 500, body: "upstream exploded"}},
	}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	key := r.Method + " " + r.URL.EscapedPath()
	f.mu.Lock()
	f.reqs = append(f.reqs, seen{r.Method, r.URL.EscapedPath(), r.Header.Get("Authorization"),
		r.Header.Get("Content-Type"), r.Header.Get("Accept"), body})
	seq, ok := f.routes[key]
	n := f.hits[key]
	f.hits[key]++
	f.mu.Unlock()
	if !ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":{"code":"not_found","message":"no route `+key+`"}}`)
		return
	}
	rep := seq[min(n, len(seq)-1)]
	status := rep.status
	if status == 0 {
		status = http.StatusOK
	}
	file, ct := rep.file, "application/json"
	if rep.textFile != "" && !strings.Contains(r.Header.Get("Accept"), "json") {
		file, ct = rep.textFile, "text/plain; charset=utf-8"
	}
	out := []byte(rep.body)
	if file != "" {
		b, err := os.ReadFile(filepath.Join("testdata", "api", file))
		if err != nil {
			f.t.Errorf("fake api: %v", err)
		}
		out = b
	}
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(status)
	w.Write(out)
}

func (f *fakeAPI) requests() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seen(nil), f.reqs...)
}

// genctl runs the CLI with env as its environment.
func genctl(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(args, &out, &errOut, func(k string) string { return env[k] })
	return code, out.String(), errOut.String()
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run go test -update to create it): %v", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s (go test -update rewrites it)\n--- got ---\n%s\n--- want ---\n%s", name, path, got, want)
	}
}

func TestGoldenTables(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		code int
	}{
		{"status", []string{"status", "j-20260301-0001"}, 0},
		{"status_default", []string{"status"}, 0},
		{"status_all", []string{"status", "--all"}, 0},
		{"servers_ls", []string{"servers", "ls"}, 0},
		{"servers_add", []string{"servers", "add", "--name", "gpu4", "--url", "http://127.0.0.1:30004", "--gpus", "4,5"}, 0},
		{"servers_rm", []string{"servers", "rm", "gpu0"}, 0},
		{"gpus", []string{"gpus"}, 0},
		{"doctor", []string{"doctor"}, 0},
		{"eta", []string{"eta", "j-20260301-0001"}, 0},
		{"eta_default", []string{"eta"}, 0},
		{"watch", []string{"watch", "j-w", "--interval", "5ms"}, 0},
		{"watch_cancelled", []string{"watch", "j-c", "--interval", "5ms"}, 1},
		{"watch_json", []string{"watch", "j-w", "--interval", "5ms", "-o", "json"}, 0},
		{"start", []string{"start", "-f", "testdata/job.yaml"}, 0},
		{"pause", []string{"pause", "j-20260301-0001"}, 0},
		{"resume", []string{"resume", "j-20260301-0001"}, 0},
		{"cancel", []string{"cancel", "j-20260301-0001"}, 0},
		{"resize", []string{"resize", "j-20260301-0001", "--static", "64"}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, srv := newFakeAPI(t)
			code, out, errOut := genctl(t, map[string]string{"GEND_ADDR": srv.URL}, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tc.code, errOut)
			}
			checkGolden(t, tc.name, out)
		})
	}
}

func TestGPUsUnavailable(t *testing.T) {
	t.Parallel()
	f, srv := newFakeAPI(t)
	f.routes["GET /v1/gpus"] = []reply{{file: "gpus_unavailable.json"}}
	code, out, errOut := genctl(t, map[string]string{"GEND_ADDR": srv.URL}, "gpus")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	checkGolden(t, "gpus_unavailable", out)
}

// -o json prints the API's bytes exactly as they came.
func TestJSONOutputIsRaw(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		file string
	}{
		{[]string{"status", "j-20260301-0001"}, "job_running.json"},
		{[]string{"status"}, "job_running.json"},
		{[]string{"status", "--all"}, "jobs.json"},
		{[]string{"servers"}, "servers.json"},
		{[]string{"gpus"}, "gpus.json"},
		{[]string{"doctor"}, "diagnosis.json"},
		{[]string{"eta", "j-20260301-0001"}, "eta.json"},
		{[]string{"start", "-f", "testdata/job.yaml"}, "job_running.json"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, "_"), func(t *testing.T) {
			t.Parallel()
			_, srv := newFakeAPI(t)
			code, out, errOut := genctl(t, map[string]string{"GEND_ADDR": srv.URL}, append([]string{"-o", "json"}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			want, err := os.ReadFile(filepath.Join("testdata", "api", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasSuffix(want, []byte("\n")) {
				want = append(want, '\n') // genctl ends the output with a newline
			}
			if out != string(want) {
				t.Errorf("-o json output is not the API's JSON as it came:\n%s\nwant:\n%s", out, want)
			}
		})
	}
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	tests := []struct {
		name      string
		env       string // GEND_ADDR; "" = the fake
		args      []string
		code      int
		stderrHas []string
		stdoutHas string
	}{
		{name: "no command", args: nil, code: 2, stderrHas: []string{"genctl: no command", "usage: genctl"}},
		{name: "unknown command", args: []string{"frobnicate"}, code: 2, stderrHas: []string{`unknown command "frobnicate"`}},
		{name: "unknown global flag", args: []string{"--bogus", "status"}, code: 2, stderrHas: []string{"flag provided but not defined: -bogus"}},
		{name: "unknown command flag", args: []string{"pause", "x", "--bogus"}, code: 2, stderrHas: []string{"-bogus", "usage: genctl [global flags] pause ID"}},
		{name: "missing id", args: []string{"pause"}, code: 2, stderrHas: []string{"pause: missing argument"}},
		{name: "extra argument", args: []string{"cancel", "a", "b"}, code: 2, stderrHas: []string{`unexpected argument "b"`}},
		{name: "resize without a change", args: []string{"resize", "j"}, code: 2, stderrHas: []string{"--per-server-max N"}},
		{name: "resize static and adaptive", args: []string{"resize", "j", "--static", "4", "--adaptive"}, code: 2, stderrHas: []string{"exclude"}},
		{name: "resize zero", args: []string{"resize", "j", "--total-max", "0"}, code: 2, stderrHas: []string{"at least 1"}},
		{name: "bad output", args: []string{"-o", "yaml", "gpus"}, code: 2, stderrHas: []string{"-o must be table or json"}},
		{name: "start without file", args: []string{"start"}, code: 2, stderrHas: []string{"-f FILE is required"}},
		{name: "servers bad subcommand", args: []string{"servers", "zap"}, code: 2, stderrHas: []string{`unknown subcommand "zap"`}},
		{name: "servers add bad gpus", args: []string{"servers", "add", "--name", "a", "--url", "u", "--gpus", "0,x"}, code: 2, stderrHas: []string{`"x" is not a GPU index`}},
		{name: "watch bad interval", args: []string{"watch", "j", "--interval", "0s"}, code: 2, stderrHas: []string{"--interval must be positive"}},
		{name: "help", args: []string{"--help"}, code: 0, stdoutHas: "commands:"},
		{name: "help command", args: []string{"help", "resize"}, code: 0, stdoutHas: "--per-server-max N"},
		{name: "command -h", args: []string{"watch", "-h"}, code: 0, stdoutHas: "genctl [global flags] watch"},
		{name: "not found", args: []string{"status", "nope"}, code: 1, stderrHas: []string{"genctl: get job nope: job nope not found\n"}},
		{name: "spec problems", args: []string{"start", "-f", "testdata/job.json"}, code: 1,
			stderrHas: []string{"genctl: submit job: invalid job spec:\n  - input is required\n  - output.dir is required\n"}},
		{name: "unreadable file", args: []string{"start", "-f", "testdata/does-not-exist.yaml"}, code: 1, stderrHas: []string{"genctl: read job spec:"}},
		{name: "connection refused", env: deadURL, args: []string{"gpus"}, code: 1, stderrHas: []string{"genctl: get gpus:", "is gend running at " + deadURL}},
		{name: "no jobs", args: []string{"status"}, code: 1, stderrHas: []string{"no jobs"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, fsrv := newFakeAPI(t)
			addr := fsrv.URL
			if tc.env != "" {
				addr = tc.env
			}
			switch tc.name {
			case "spec problems":
				f.routes["POST /v1/jobs"] = []reply{{status: 400, file: "error_spec.json"}}
			case "no jobs":
				f.routes["GET /v1/jobs"] = []reply{{body: `{"jobs":[]}`}}
			}
			code, out, errOut := genctl(t, map[string]string{"GEND_ADDR": addr}, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, out, errOut)
			}
			for _, s := range tc.stderrHas {
				if !strings.Contains(errOut, s) {
					t.Errorf("stderr %q lacks %q", errOut, s)
				}
			}
			if !strings.Contains(out, tc.stdoutHas) {
				t.Errorf("stdout %q lacks %q", out, tc.stdoutHas)
			}
			if tc.code == 2 && len(f.requests()) != 0 {
				t.Errorf("a usage error sent %d requests", len(f.requests()))
			}
		})
	}
}

func TestNonJSONError(t *testing.T) {
	t.Parallel()
	f, srv := newFakeAPI(t)
	f.routes["POST /v1/jobs/j-20260301-0001/pause"] = []reply{{status: 502, body: "<html>bad gateway</html>"}}
	code, _, errOut := genctl(t, map[string]string{"GEND_ADDR": srv.URL}, "pause", "j-20260301-0001")
	if code != 1 || errOut != "genctl: pause job j-20260301-0001: HTTP 502: <html>bad gateway</html>\n" {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// Global flags work before and after the command and override the
// environment. ADDR in args stands for the fake's URL.
func TestGlobalFlagPositions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		json bool
	}{
		{"before", []string{"--addr", "ADDR", "status", "j-20260301-0001"}, false},
		{"after", []string{"status", "j-20260301-0001", "--addr", "ADDR"}, false},
		{"between", []string{"status", "--addr=ADDR", "j-20260301-0001"}, false},
		{"single dash", []string{"-addr", "ADDR", "status", "j-20260301-0001"}, false},
		{"json before", []string{"-o", "json", "--addr", "ADDR", "status", "j-20260301-0001"}, true},
		{"json after", []string{"status", "j-20260301-0001", "--addr", "ADDR", "-o", "json"}, true},
		{"output long", []string{"status", "--output=json", "j-20260301-0001", "--addr", "ADDR"}, true},
		{"servers sub after flags", []string{"--addr", "ADDR", "servers", "-o", "json", "ls"}, true},
		{"servers add flags around", []string{"servers", "--addr", "ADDR", "add", "--name", "gpu4", "-o", "json", "--url", "http://127.0.0.1:30004"}, true},
		{"resize flags after id", []string{"resize", "j-20260301-0001", "--static", "64", "--addr", "ADDR", "-o=json"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, srv := newFakeAPI(t)
			args := make([]string, len(tc.args))
			for i, a := range tc.args {
				args[i] = strings.ReplaceAll(a, "ADDR", srv.URL)
			}
			// GEND_ADDR points nowhere: only the flag can reach the fake.
			code, out, errOut := genctl(t, map[string]string{"GEND_ADDR": "http://127.0.0.1:1"}, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if len(f.requests()) == 0 {
				t.Error("no request reached the fake")
			}
			if isJSON := json.Valid([]byte(out)); isJSON != tc.json {
				t.Errorf("json output %v, want %v:\n%s", isJSON, tc.json, out)
			}
		})
	}
}

func TestTokenHeader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  string
		args []string
		want string
	}{
		{"env", "s3cret", nil, "Bearer s3cret"},
		{"flag overrides env", "s3cret", []string{"--token", "other"}, "Bearer other"},
		{"flag after command", "", []string{"--token=t2"}, "Bearer t2"},
		{"none", "", nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, srv := newFakeAPI(t)
			env := map[string]string{"GEND_ADDR": srv.URL, "GEND_TOKEN": tc.env}
			for _, cmd := range [][]string{{"pause", "j-20260301-0001"}, {"status", "j-20260301-0001"}} {
				if code, _, errOut := genctl(t, env, append(cmd, tc.args...)...); code != 0 {
					t.Fatalf("%v: exit %d: %s", cmd, code, errOut)
				}
			}
			reqs := f.requests()
			if len(reqs) != 2 {
				t.Fatalf("%d requests, want 2", len(reqs))
			}
			for _, r := range reqs {
				if r.auth != tc.want {
					t.Errorf("%s %s: Authorization %q, want %q", r.method, r.path, r.auth, tc.want)
				}
			}
		})
	}
}

func TestRequestsSent(t *testing.T) {
	t.Parallel()
	yamlSpec, err := os.ReadFile("testdata/job.yaml")
	if err != nil {
		t.Fatal(err)
	}
	jsonSpec, err := os.ReadFile("testdata/job.json")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     []string
		method   string
		path     string
		ct       string
		body     string // exact; "" = none
		fileBody []byte
	}{
		{name: "start yaml", args: []string{"start", "-f", "testdata/job.yaml"}, method: "POST", path: "/v1/jobs", ct: "application/yaml", fileBody: yamlSpec},
		{name: "start json", args: []string{"start", "--file", "testdata/job.json"}, method: "POST", path: "/v1/jobs", ct: "application/json", fileBody: jsonSpec},
		{name: "resize per-server-max", args: []string{"resize", "j-20260301-0001", "--per-server-max", "256"}, method: "POST", path: "/v1/jobs/j-20260301-0001/resize", ct: "application/json", body: `{"per_server_max":256}`},
		{name: "resize total-max", args: []string{"resize", "j-20260301-0001", "--total-max", "900"}, method: "POST", path: "/v1/jobs/j-20260301-0001/resize", ct: "application/json", body: `{"total_max":900}`},
		{name: "resize static", args: []string{"resize", "j-20260301-0001", "--static", "64"}, method: "POST", path: "/v1/jobs/j-20260301-0001/resize", ct: "application/json", body: `{"mode":"static","per_server":64}`},
		{name: "resize adaptive with cap", args: []string{"resize", "--adaptive", "--per-server-max", "300", "j-20260301-0001"}, method: "POST", path: "/v1/jobs/j-20260301-0001/resize", ct: "application/json", body: `{"mode":"adaptive","per_server_max":300}`},
		{name: "servers add", args: []string{"servers", "add", "--name", "gpu4", "--url", "http://127.0.0.1:30004", "--gpus", "4, 5"}, method: "POST", path: "/v1/servers", ct: "application/json", body: `{"name":"gpu4","url":"http://127.0.0.1:30004","gpus":[4,5]}`},
		{name: "servers rm", args: []string{"servers", "rm", "gpu0"}, method: "DELETE", path: "/v1/servers/gpu0"},
		{name: "eta plain", args: []string{"eta", "j-20260301-0001"}, method: "GET", path: "/v1/jobs/j-20260301-0001/eta"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, srv := newFakeAPI(t)
			if tc.name == "start json" {
				f.routes["POST /v1/jobs"] = []reply{{status: 201, file: "job_running.json"}}
			}
			if code, _, errOut := genctl(t, map[string]string{"GEND_ADDR": srv.URL}, tc.args...); code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			reqs := f.requests()
			r := reqs[len(reqs)-1]
			if r.method != tc.method || r.path != tc.path || r.contentType != tc.ct {
				t.Errorf("sent %s %s (Content-Type %q), want %s %s (%q)", r.method, r.path, r.contentType, tc.method, tc.path, tc.ct)
			}
			switch {
			case tc.fileBody != nil:
				if !bytes.Equal(r.body, tc.fileBody) {
					t.Errorf("body %q is not the file as read", r.body)
				}
			case string(r.body) != tc.body:
				t.Errorf("body %q, want %q", r.body, tc.body)
			}
			if tc.name == "eta plain" && strings.Contains(r.accept, "json") {
				t.Errorf("plain eta asked for JSON: Accept %q", r.accept)
			}
		})
	}
}

func TestPickJob(t *testing.T) {
	t.Parallel()
	at := func(h int) time.Time { return time.Date(2026, 3, 1, h, 0, 0, 0, time.UTC) }
	tests := []struct {
		name string
		jobs []api.Job
		want string
		ok   bool
	}{
		{"none", nil, "", false},
		{"newest running over newer queued", []api.Job{
			{ID: "a", Status: "running", CreatedAt: at(1)},
			{ID: "b", Status: "running", CreatedAt: at(2)},
			{ID: "c", Status: "queued", CreatedAt: at(3)},
		}, "b", true},
		{"no running: newest", []api.Job{
			{ID: "a", Status: "completed", CreatedAt: at(3)},
			{ID: "b", Status: "paused", CreatedAt: at(2)},
		}, "a", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j, ok := pickJob(tc.jobs)
			if ok != tc.ok || j.ID != tc.want {
				t.Errorf("pickJob = %q, %v; want %q, %v", j.ID, ok, tc.want, tc.ok)
			}
		})
	}
}

// On a terminal, watch redraws the frame in place.
func TestWatchRedrawsOnTerminal(t *testing.T) {
	t.Parallel()
	_, srv := newFakeAPI(t)
	var out, errOut bytes.Buffer
	a := &app{stdout: &out, stderr: &errOut, tty: true, g: globals{addr: srv.URL, output: "table"}}
	if err := a.watch(context.Background(), "j-w", 5*time.Millisecond); err != nil {
		t.Fatalf("watch: %v", err)
	}
	got := out.String()
	// Frames 2 and 3 each move the cursor back up over the previous frame
	// (7 lines: 3 of header, a blank, the table header and 2 servers).
	if n := strings.Count(got, "\x1b[7A\r\x1b[J"); n != 2 {
		t.Errorf("%d redraws, want 2:\n%q", n, got)
	}
	checkGolden(t, "watch_tty", got)
}

// A cancelled context stops watch.
func TestWatchStopsOnCancel(t *testing.T) {
	t.Parallel()
	f, srv := newFakeAPI(t)
	f.routes["GET /v1/jobs/j-r"] = []reply{{file: "job_running.json"}}
	ctx, cancel := context.WithCancel(context.Background())
	var out bytes.Buffer
	a := &app{stdout: &writeHook{w: &out, after: 2, fn: cancel}, stderr: io.Discard, g: globals{addr: srv.URL, output: "table"}}
	err := a.watch(ctx, "j-r", 5*time.Millisecond)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("watch = %v, want context.Canceled", err)
	}
	if n := strings.Count(out.String(), "\n"); n != 2 {
		t.Errorf("%d lines before the cancel took effect, want 2", n)
	}
}

// writeHook calls fn after the after-th write.
type writeHook struct {
	w     io.Writer
	n     int
	after int
	fn    func()
}

func (h *writeHook) Write(p []byte) (int, error) {
	h.n++
	if h.n == h.after {
		h.fn()
	}
	return h.w.Write(p)
}
