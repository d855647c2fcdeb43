package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gend-dev/gend/api"
)

// deployDir is deploy/ at the repository root (tests run in internal/e2e).
func deployDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs(filepath.Join("..", "..", "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// lookTool finds a tool from Debian's prometheus package, or skips: CI
// installs it (scripts/test-deps.sh, run by make test).
func lookTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not installed (Debian package prometheus; `make deps` installs it): %v", name, err)
	}
	return p
}

// TestPrometheusRules runs promtool on deploy/prometheus: the example
// config, the rules, and the rules' unit tests (one group per alert).
func TestPrometheusRules(t *testing.T) {
	promtool := lookTool(t, "promtool")
	dir := filepath.Join(deployDir(t), "prometheus")
	for _, args := range [][]string{
		{"check", "config", "prometheus.yml"},
		{"check", "rules", "gend.rules.yml"},
		{"test", "rules", "gend.rules.test.yml"},
	} {
		t.Run(strings.Join(args, "_"), func(t *testing.T) {
			cmd := exec.Command(promtool, args...)
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "SUCCESS") {
				t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		})
	}
}

// dashboard is the part of a Grafana dashboard this test reads.
type dashboard struct {
	Title      string                   `json:"title"`
	UID        string                   `json:"uid"`
	Panels     []dashPanel              `json:"panels"`
	Templating struct{ List []dashVar } `json:"templating"`
}

type dashPanel struct {
	ID      int         `json:"id"`
	Type    string      `json:"type"`
	Title   string      `json:"title"`
	Panels  []dashPanel `json:"panels"` // collapsed rows
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
}

type dashVar struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Definition string          `json:"definition"`
	Query      json.RawMessage `json:"query"`
}

// dashQuery is one PromQL expression of the dashboard.
type dashQuery struct{ panel, ref, expr string }

// loadDashboard reads deploy/grafana/gend.json and checks its structure.
func loadDashboard(t *testing.T) (dashboard, []dashQuery) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(deployDir(t), "grafana", "gend.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("gend.json: %v", err)
	}
	if d.Title == "" || d.UID == "" {
		t.Fatalf("gend.json: no title or uid")
	}
	var qs []dashQuery
	ids := map[int]string{}
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			if prev, dup := ids[p.ID]; dup || p.ID == 0 {
				t.Errorf("panel %q: id %d missing or also used by %q", p.Title, p.ID, prev)
			}
			ids[p.ID] = p.Title
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("panel %q target %s: empty expr", p.Title, tg.RefID)
				}
				qs = append(qs, dashQuery{p.Title, tg.RefID, tg.Expr})
			}
		}
	}
	walk(d.Panels)
	return d, qs
}

// What the dashboard's variables stand for in the test: every instance and
// server, and a rate window that holds several 1 s scrapes.
var dashVars = strings.NewReplacer("$__rate_interval", "30s", "$instance", ".*", "$server", ".*")

var unknownVar = regexp.MustCompile(`\$\{?\w+`)

var labelValues = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

// The panels these features rest on must show non-zero values, not only
// exist: throughput, GPU utilization beside DRAM bandwidth, limits.
var mustBePositive = []string{
	"Throughput: output tokens/s",
	"Requests/s",
	"Limit and in-flight per server",
	"GPU utilization (a kernel was running)",
	"DRAM bandwidth utilization",
	"ETA with its interval",
}

// TestGrafanaDashboard checks deploy/grafana/gend.json without a server:
// valid JSON, unique panel ids, a query on every panel, only the known
// variables, and the panels the dashboard promises.
func TestGrafanaDashboard(t *testing.T) {
	d, qs := loadDashboard(t)
	for _, q := range qs {
		if v := unknownVar.FindString(dashVars.Replace(q.expr)); v != "" {
			t.Errorf("panel %q: unknown variable %s in %s", q.panel, v, q.expr)
		}
	}
	titles := map[string]bool{}
	var collect func([]dashPanel)
	collect = func(ps []dashPanel) {
		for _, p := range ps {
			titles[p.Title] = true
			collect(p.Panels)
		}
	}
	collect(d.Panels)
	for _, want := range append([]string{"S3 backlog", "Failed attempts/s by outcome", "Retries/s and failed share"}, mustBePositive...) {
		if !titles[want] {
			t.Errorf("dashboard lacks the panel %q", want)
		}
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	for _, v := range []string{"datasource", "instance", "server"} {
		if !vars[v] {
			t.Errorf("dashboard lacks the variable $%s", v)
		}
	}
}

// promAPI is a Prometheus HTTP API response.
type promAPI struct {
	Status    string          `json:"status"`
	Error     string          `json:"error"`
	ErrorType string          `json:"errorType"`
	Data      json.RawMessage `json:"data"`
}

type promSeries struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`  // instant: [ts, "v"]
	Values [][]any           `json:"values"` // range: [[ts, "v"], ...]
}

type promClient struct{ base string }

func (c promClient) get(path string, q url.Values, out any) error {
	resp, err := http.Get(c.base + path + "?" + q.Encode())
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	var r promAPI
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	if r.Status != "success" {
		return fmt.Errorf("GET %s: %s: %s", path, r.ErrorType, r.Error)
	}
	return json.Unmarshal(r.Data, out)
}

// queryRange runs expr over [from, to] at 1 s steps.
func (c promClient) queryRange(expr string, from, to time.Time) ([]promSeries, error) {
	var data struct {
		Result []promSeries `json:"result"`
	}
	err := c.get("/api/v1/query_range", url.Values{"query": {expr}, "start": {unix(from)}, "end": {unix(to)}, "step": {"1"}}, &data)
	return data.Result, err
}

func (c promClient) query(expr string) ([]promSeries, error) {
	var data struct {
		Result []promSeries `json:"result"`
	}
	err := c.get("/api/v1/query", url.Values{"query": {expr}}, &data)
	return data.Result, err
}

func unix(t time.Time) string { return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64) }

// maxValue is the largest finite value of a range result (NaN if none).
func maxValue(rs []promSeries) (float64, int) {
	best, n := -1e308, 0
	for _, s := range rs {
		for _, v := range s.Values {
			if len(v) != 2 {
				continue
			}
			str, _ := v[1].(string)
			f, err := strconv.ParseFloat(str, 64)
			if err != nil || f != f {
				continue
			}
			n++
			best = max(best, f)
		}
	}
	return best, n
}

// startProm starts a real Prometheus on a free loopback port with the
// given config and returns its base URL. The port is picked by listening
// on :0 and closing; if another process takes it meanwhile, it tries again.
func startProm(t *testing.T, bin, cfg string) string {
	t.Helper()
	for attempt := 1; ; attempt++ {
		base, portTaken := tryStartProm(t, bin, cfg)
		if !portTaken {
			return base
		}
		if attempt == 3 {
			t.Fatalf("prometheus: no free port after %d attempts", attempt)
		}
	}
}

func tryStartProm(t *testing.T, bin, cfg string) (base string, portTaken bool) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := &proc{t: t, done: make(chan struct{})}
	p.cmd = exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(t.TempDir(), "tsdb"),
		"--web.listen-address="+addr, "--log.level=warn")
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("prometheus output:\n%s", p.output())
		}
	})
	base = "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			if strings.Contains(p.output(), "address already in use") {
				return "", true
			}
			t.Fatalf("prometheus exited: %v\n%s", p.err, p.output())
		default:
		}
		if resp, err := http.Get(base + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base, false
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("prometheus at %s not ready within 30s", base)
	return "", false
}

// TestPrometheusScrape: a real Prometheus scrapes gend (--nvml sim, so the
// gend_gpu_* series come from gensim's simulated GPUs) every second, with
// deploy/prometheus/gend.rules.yml loaded, during a gensim job. Then: the
// target is up, every rule evaluates, every recording rule and every
// PromQL expression of deploy/grafana/gend.json returns data, and
// `promtool check metrics` accepts gend's /metrics without a warning.
func TestPrometheusScrape(t *testing.T) {
	promBin := lookTool(t, "prometheus")
	promtool := lookTool(t, "promtool")
	dash, queries := loadDashboard(t)
	rulesFile := filepath.Join(deployDir(t), "prometheus", "gend.rules.yml")

	dir := t.TempDir()
	_, urls := startSim(t, "--servers", "2", "--speedup", "100", "--seed", "3", "--error-rate", "0.02")
	g := startGend(t, filepath.Join(dir, "state"), writeFleet(t, dir, urls), "", "--nvml", "sim")
	target := strings.TrimPrefix(g.addr, "http://")
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: gend
    static_configs:
      - targets: [%q]
`, rulesFile, target)), 0o644); err != nil {
		t.Fatal(err)
	}
	prom := promClient{base: startProm(t, promBin, cfg)}
	from := time.Now()

	in := writeInput(t, dir, 1500, "prom")
	out := filepath.Join(dir, "out")
	j, err := g.c.SubmitJob(context.Background(), []byte(jobSpec(in.path, out, "")), api.ContentTypeYAML)
	if err != nil {
		t.Fatal(err)
	}
	j = waitJob(t, g.c, j.ID, 90*time.Second, func(j api.Job) bool { return api.Terminal(j.Status) })
	if j.Status != api.StatusCompleted {
		t.Fatalf("job ended %s (%s)", j.Status, j.Reason)
	}
	t.Logf("job took %v", time.Since(from).Round(time.Second))

	// Wait until Prometheus has scraped the finished job and evaluated the
	// rules once more.
	deadline := time.Now().Add(20 * time.Second)
	for {
		rs, err := prom.query(`gend_job_progress_ratio == 1`)
		if err == nil && len(rs) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus never saw the finished job: %v %v", rs, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // two more evaluation rounds for the rules
	to := time.Now()

	// The target is up.
	var targets struct {
		ActiveTargets []struct {
			Labels    map[string]string `json:"labels"`
			Health    string            `json:"health"`
			LastError string            `json:"lastError"`
		} `json:"activeTargets"`
	}
	if err := prom.get("/api/v1/targets", url.Values{}, &targets); err != nil {
		t.Fatal(err)
	}
	if len(targets.ActiveTargets) != 1 || targets.ActiveTargets[0].Health != "up" || targets.ActiveTargets[0].Labels["job"] != "gend" {
		t.Fatalf("targets: %+v, want one gend target up", targets.ActiveTargets)
	}
	if rs, err := prom.query(fmt.Sprintf(`up{job="gend",instance=%q}`, target)); err != nil || len(rs) != 1 || rs[0].Value[1] != "1" {
		t.Fatalf("up{job=gend}: %+v %v", rs, err)
	}

	// Every rule evaluates without error; every recording rule has data.
	var rules struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Name      string `json:"name"`
				Type      string `json:"type"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := prom.get("/api/v1/rules", url.Values{}, &rules); err != nil {
		t.Fatal(err)
	}
	nRules := 0
	for _, gr := range rules.Groups {
		for _, r := range gr.Rules {
			nRules++
			if r.Health != "ok" {
				t.Errorf("rule %s/%s: health %q %s", gr.Name, r.Name, r.Health, r.LastError)
			}
			if r.Type != "recording" {
				continue
			}
			rs, err := prom.queryRange(r.Name, from, to)
			if _, n := maxValue(rs); err != nil || n == 0 {
				t.Errorf("recording rule %s: no data (%v)", r.Name, err)
			}
		}
	}
	if nRules < 10 {
		t.Errorf("Prometheus loaded %d rules from %s", nRules, rulesFile)
	}

	// Every expression of the dashboard returns data.
	positive := map[string]bool{}
	for _, p := range mustBePositive {
		positive[p] = true
	}
	for _, q := range queries {
		expr := dashVars.Replace(q.expr)
		rs, err := prom.queryRange(expr, from, to)
		if err != nil {
			t.Errorf("panel %q %s: %s: %v", q.panel, q.ref, expr, err)
			continue
		}
		top, n := maxValue(rs)
		switch {
		case n == 0:
			t.Errorf("panel %q %s: no data for %s", q.panel, q.ref, expr)
		case positive[q.panel] && top <= 0:
			t.Errorf("panel %q %s: only zeros for %s", q.panel, q.ref, expr)
		}
	}
	t.Logf("%d dashboard queries, %d rules checked", len(queries), nRules)

	// The dashboard's variables list the gend and its servers.
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable $%s: definition %q is not label_values(selector, label)", v.Name, v.Definition)
			continue
		}
		expr := fmt.Sprintf("count by (%s) (%s)", m[2], dashVars.Replace(m[1]))
		rs, err := prom.query(expr)
		if err != nil || len(rs) == 0 || rs[0].Metric[m[2]] == "" {
			t.Errorf("variable $%s: %s gives %+v %v", v.Name, expr, rs, err)
		}
	}

	// Unknown estimates are absent, never a -1 sentinel that bends graphs and deriv().
	sentinel := `gend_job_eta_seconds < 0 or gend_job_eta_low_seconds < 0 or gend_job_eta_high_seconds < 0 or ` +
		`gend_job_output_tokens_per_second < 0 or gend_job_requests_per_second < 0`
	if rs, err := prom.queryRange(sentinel, from, to); err != nil || len(rs) > 0 {
		t.Errorf("negative job estimates exported: %+v %v", rs, err)
	}

	// promtool check metrics on gend's /metrics: no error, no warning.
	resp, err := http.Get(g.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"gend_gpu_dram_bandwidth_utilization_ratio{", "gend_requests_total{", "gend_s3_pending_shards 0"} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	lint, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(lint)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, lint)
	}
}
