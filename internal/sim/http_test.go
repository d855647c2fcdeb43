package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func startFleet(t *testing.T, cfg FleetConfig) *Fleet {
	t.Helper()
	f, err := StartFleet(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

type httpResult struct {
	status int
	body   []byte
	err    error
}

func post(ctx context.Context, url, path, contentType, body string) httpResult {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+path, strings.NewReader(body))
	if err != nil {
		return httpResult{err: err}
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return httpResult{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return httpResult{status: resp.StatusCode, body: b, err: err}
}

func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// waitFor polls cond (the fleet runs on real sockets and wall time, outside
// a synctest bubble) for at most 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 2000 {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

var normalizers = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`"created":\d+`), `"created":0`},
	{regexp.MustCompile(`"timestamp":("[^"]*"|[\d.]+)`), `"timestamp":0`},
	{regexp.MustCompile(`"ts_tic":[\d.]+`), `"ts_tic":0`},
	{regexp.MustCompile(`"id":"[0-9a-f]{32}"`), `"id":"ID"`},
}

// Consecutive text chunks are merged: how many a stream has depends on
// engine ticks, their order and content do not.
var (
	reasoningChunk = regexp.MustCompile(`^(data: .*"delta":\{"reasoning_content":")(.*)("\},"logprobs":null,"finish_reason":null.*)$`)
	contentChunk   = regexp.MustCompile(`^(data: .*"delta":\{"reasoning_content":null,"content":")(.+)("\},"logprobs":null,"finish_reason":null.*)$`)
	textChunk      = regexp.MustCompile(`^(data: .*"choices":\[\{"index":0,"text":")(.*)(","logprobs":null,"finish_reason":null.*)$`)
)

func normalize(b []byte) string {
	s := string(b)
	for _, n := range normalizers {
		s = n.re.ReplaceAllString(s, n.with)
	}
	if !strings.HasPrefix(s, "data: ") {
		return s
	}
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if line == "" {
			continue
		}
		if len(out) > 0 {
			prev := out[len(out)-1]
			merged := false
			for _, re := range []*regexp.Regexp{reasoningChunk, contentChunk, textChunk} {
				pm, cm := re.FindStringSubmatch(prev), re.FindStringSubmatch(line)
				if pm != nil && cm != nil && pm[1] == cm[1] && pm[3] == cm[3] {
					out[len(out)-1] = pm[1] + pm[2] + cm[2] + pm[3]
					merged = true
					break
				}
			}
			if merged {
				continue
			}
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n\n") + "\n\n"
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if os.Getenv("GENSIM_UPDATE_GOLDEN") == "1" {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (GENSIM_UPDATE_GOLDEN=1 writes it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s:\n got: %s\nwant: %s", name, path, got, want)
	}
}

func TestWireFormatGoldens(t *testing.T) {
	t.Parallel()
	// Small text caps keep the goldens short; usage still counts every token.
	f := startFleet(t, FleetConfig{Speedup: 5000, Seed: 1, Servers: []ServerConfig{{MaxContentBytes: 120}}})
	u := f.URLs()[0]
	ctx := context.Background()
	tests := []struct {
		name, path, body string
	}{
		{"chat_thinking", "/v1/chat/completions", `{"model":"default","messages":[{"role":"system","content":"Answer concisely."},{"role":"user","content":"Name three uses of a prime sieve."}],"max_completion_tokens":30000,"chat_template_kwargs":{"enable_thinking":true},"rid":"golden-1"}`},
		{"chat_plain", "/v1/chat/completions", `{"model":"default","messages":[{"role":"user","content":"Say hi."}],"max_completion_tokens":30000,"rid":"golden-2"}`},
		{"chat_no_separate", "/v1/chat/completions", `{"model":"default","messages":[{"role":"user","content":"Name three uses of a prime sieve."}],"max_completion_tokens":30000,"separate_reasoning":false,"chat_template_kwargs":{"enable_thinking":true},"rid":"golden-3"}`},
		{"chat_stream", "/v1/chat/completions", `{"model":"default","messages":[{"role":"user","content":"Name three uses of a prime sieve."}],"max_completion_tokens":30000,"stream":true,"stream_options":{"include_usage":true},"chat_template_kwargs":{"enable_thinking":true},"rid":"golden-4"}`},
		{"completion", "/v1/completions", `{"model":"default","prompt":"Once upon a time","max_tokens":12,"rid":"golden-5"}`},
		{"completion_stream", "/v1/completions", `{"model":"default","prompt":"Once upon a time","max_tokens":12,"stream":true,"stream_options":{"include_usage":true},"rid":"golden-6"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := post(ctx, u, tt.path, "application/json", tt.body)
			if res.err != nil || res.status != http.StatusOK {
				t.Fatalf("status %d err %v body %s", res.status, res.err, res.body)
			}
			golden(t, tt.name, normalize(res.body))
		})
	}
	for _, path := range []string{"/v1/loads?include=all", "/get_load", "/v1/models"} {
		status, body := get(t, u+path)
		if status != http.StatusOK {
			t.Fatalf("%s: status %d", path, status)
		}
		golden(t, strings.NewReplacer("/", "_", "?", "_", "=", "_").Replace(strings.TrimPrefix(path, "/")), normalize(body)+"\n")
	}
}

func TestServerInfoAndMetricsShapes(t *testing.T) {
	t.Parallel()
	f := startFleet(t, FleetConfig{Speedup: 1000, Servers: []ServerConfig{{MaxRunningRequests: 256}}})
	u := f.URLs()[0]
	for _, path := range []string{"/server_info", "/get_server_info"} {
		status, body := get(t, u+path)
		var info map[string]any
		if err := json.Unmarshal(body, &info); err != nil || status != http.StatusOK {
			t.Fatalf("%s: status %d: %v", path, status, err)
		}
		var lines []string
		for k := range info {
			lines = append(lines, k)
		}
		is := info["internal_states"].([]any)[0].(map[string]any)
		for k := range is {
			lines = append(lines, "internal_states[0]."+k)
		}
		for k := range is["memory_usage"].(map[string]any) {
			lines = append(lines, "internal_states[0].memory_usage."+k)
		}
		slices.Sort(lines)
		golden(t, "server_info_keys", strings.Join(lines, "\n")+"\n")
		if info["max_running_requests"].(float64) != 256 || info["max_total_num_tokens"].(float64) != 146399 {
			t.Errorf("max_running_requests %v max_total_num_tokens %v", info["max_running_requests"], info["max_total_num_tokens"])
		}
	}
	// One finished request so the histograms have series.
	res := post(context.Background(), u, "/v1/completions", "application/json", `{"prompt":"x y z w","max_tokens":3}`)
	if res.status != http.StatusOK {
		t.Fatalf("completion: %d %s", res.status, res.body)
	}
	_, body := get(t, u+"/metrics")
	var lines []string
	labels := ""
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "# TYPE sglang:") {
			lines = append(lines, strings.TrimPrefix(line, "# TYPE "))
		}
		if labels == "" && strings.HasPrefix(line, "sglang:num_running_reqs{") {
			labels = line[strings.Index(line, "{") : strings.Index(line, "}")+1]
		}
	}
	slices.Sort(lines)
	golden(t, "metrics_names", strings.Join(lines, "\n")+"\nlabels "+labels+"\n")
}

func TestErrorBodies(t *testing.T) {
	t.Parallel()
	f := startFleet(t, FleetConfig{Speedup: 1, Servers: []ServerConfig{
		{ContextLength: 1000, MaxRunningRequests: 1, MaxQueuedRequests: 1},
		{Faults: Faults{ErrorRate: 1}},
	}})
	u, bad := f.URLs()[0], f.URLs()[1]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	long := strings.Repeat("word ", 1000) // 1250 tokens
	var out []string
	record := func(name string, res httpResult) {
		if res.err != nil {
			t.Fatalf("%s: %v", name, res.err)
		}
		out = append(out, name+" "+http.StatusText(res.status)+"\n"+normalize(res.body))
	}
	chat := func(extra string) string {
		return `{"model":"m","messages":[{"role":"user","content":"hi"}]` + extra + `}`
	}
	record("content_type", post(ctx, u, "/v1/chat/completions", "text/plain", chat("")))
	record("bad_json", post(ctx, u, "/v1/chat/completions", "application/json", `{"messages":`))
	record("empty_messages", post(ctx, u, "/v1/chat/completions", "application/json", `{"messages":[]}`))
	record("empty_prompt", post(ctx, u, "/v1/completions", "application/json", `{"prompt":""}`))
	record("input_too_long", post(ctx, u, "/v1/chat/completions", "application/json", `{"messages":[{"role":"user","content":"`+long+`"}]}`))
	record("total_too_long", post(ctx, u, "/v1/chat/completions", "application/json", chat(`,"max_completion_tokens":999`)))
	record("max_tokens_too_large", post(ctx, u, "/v1/chat/completions", "application/json", chat(`,"max_completion_tokens":5000`)))
	record("internal_error", post(ctx, bad, "/v1/chat/completions", "application/json", chat("")))
	record("not_found", post(ctx, u, "/v1/nope", "application/json", "{}"))

	// Fill the one running slot and the one queue slot, then overflow.
	running := make(chan httpResult, 2)
	go func() {
		running <- post(ctx, u, "/v1/chat/completions", "application/json", chat(`,"max_completion_tokens":900,"rid":"busy"`))
	}()
	waitFor(t, "one running request", func() bool { return f.Stats()[0].Running == 1 })
	record("duplicate_rid", post(ctx, u, "/v1/chat/completions", "application/json", chat(`,"rid":"busy"`)))
	go func() {
		running <- post(ctx, u, "/v1/chat/completions", "application/json", chat(`,"max_completion_tokens":900,"rid":"queued"`))
	}()
	waitFor(t, "one queued request", func() bool { return f.Stats()[0].Waiting == 1 })
	record("queue_full", post(ctx, u, "/v1/chat/completions", "application/json", chat(`,"rid":"over-1"`)))
	record("queue_full_stream", post(ctx, u, "/v1/chat/completions", "application/json", chat(`,"rid":"over-2","stream":true,"stream_options":{"include_usage":true}`)))
	golden(t, "errors", strings.Join(out, "\n"))

	st := f.Stats()
	if st[0].QueueFull != 2 || st[0].BadRequests != 8 || st[1].Errors500 != 1 {
		t.Errorf("stats: queue full %d, 400s %d, 500s %d; want 2, 8, 1", st[0].QueueFull, st[0].BadRequests, st[1].Errors500)
	}
	// /abort_request ends the running request with finish_reason abort on a 200.
	if res := post(ctx, u, "/abort_request", "application/json", `{"rid":"busy"}`); res.status != http.StatusOK {
		t.Fatalf("abort_request: %d", res.status)
	}
	res := <-running
	if res.status != http.StatusOK || !bytes.Contains(res.body, []byte(`"finish_reason":"abort"`)) {
		t.Fatalf("aborted request: %d %s", res.status, res.body)
	}
}

func TestClientDisconnectAborts(t *testing.T) {
	t.Parallel()
	f := startFleet(t, FleetConfig{Speedup: 1, Servers: []ServerConfig{{}}})
	u := f.URLs()[0]
	for _, stream := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan httpResult, 1)
		body := `{"messages":[{"role":"user","content":"a long one"}],"max_completion_tokens":5000,"stream":` + map[bool]string{false: "false", true: "true"}[stream] + `}`
		go func() { done <- post(ctx, u, "/v1/chat/completions", "application/json", body) }()
		waitFor(t, "a running request", func() bool { return f.Stats()[0].Running == 1 })
		cancel()
		<-done
		waitFor(t, "the abort", func() bool { s := f.Stats()[0]; return s.Running == 0 })
	}
	if s := f.Stats()[0]; s.Aborted != 2 || s.RequestsDone != 0 {
		t.Fatalf("aborted %d done %d, want 2 and 0", s.Aborted, s.RequestsDone)
	}
}

func TestDropFault(t *testing.T) {
	t.Parallel()
	f := startFleet(t, FleetConfig{Speedup: 5000, Servers: []ServerConfig{{Faults: Faults{DropRate: 1}}}})
	u := f.URLs()[0]
	res := post(context.Background(), u, "/v1/chat/completions", "application/json", `{"messages":[{"role":"user","content":"x"}],"max_completion_tokens":50}`)
	if !errors.Is(res.err, io.ErrUnexpectedEOF) {
		t.Fatalf("non-stream: err %v status %d, want unexpected EOF", res.err, res.status)
	}
	res = post(context.Background(), u, "/v1/chat/completions", "application/json", `{"messages":[{"role":"user","content":"x"}],"max_completion_tokens":50,"stream":true}`)
	if res.err == nil || bytes.Contains(res.body, []byte("[DONE]")) || bytes.Contains(res.body, []byte(`"finish_reason":"`)) {
		t.Fatalf("stream: err %v, body %q: want a cut before the finish chunk", res.err, res.body)
	}
	if d := f.Stats()[0].Dropped; d != 2 {
		t.Fatalf("dropped %d, want 2", d)
	}
}

func TestDeathAndRevival(t *testing.T) {
	t.Parallel()
	f := startFleet(t, FleetConfig{Speedup: 10, Servers: []ServerConfig{
		{Faults: Faults{Death: &Death{AtS: 3, ReviveAfterS: 3, WarmupS: 3}, Slowdown: &Slowdown{AtS: 0, Factor: 3}}},
	}})
	u := f.URLs()[0]
	state := func(want string) func() bool { return func() bool { return f.Stats()[0].State == want } }
	ctx := context.Background()
	inflight := make(chan httpResult, 1)
	go func() {
		inflight <- post(ctx, u, "/v1/chat/completions", "application/json", `{"messages":[{"role":"user","content":"x"}],"max_completion_tokens":20000}`)
	}()
	var gpu struct {
		ClockEventReasons uint64 `json:"clock_event_reasons"`
		Source            string `json:"source"`
	}
	waitFor(t, "a running request", func() bool { return f.Stats()[0].Running == 1 })
	if _, body := get(t, u+"/sim/gpu"); json.Unmarshal(body, &gpu) != nil || gpu.ClockEventReasons != 8 || gpu.Source != "sim" {
		t.Errorf("/sim/gpu under slowdown: %s", body)
	}
	waitFor(t, "death", state("dead"))
	if res := <-inflight; res.err == nil {
		t.Errorf("in-flight request survived the death: %d", res.status)
	}
	if _, err := http.Get(u + "/health"); err == nil {
		t.Error("dead server accepted a connection")
	}
	waitFor(t, "revival", state("starting"))
	if resp, err := http.Get(u + "/health"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/health while starting: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	waitFor(t, "warm-up", state("alive"))
	if status, _ := get(t, u+"/health_generate"); status != http.StatusOK {
		t.Errorf("/health_generate after revival: %d", status)
	}
	if s := f.Stats()[0]; s.Aborted != 1 {
		t.Errorf("aborted %d, want 1", s.Aborted)
	}
}

func TestScenarioFiles(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"example.json", "example.yaml"} {
		sc, err := LoadScenario(filepath.Join("..", "..", "testdata", "scenarios", name))
		if err != nil {
			t.Fatal(err)
		}
		cfg := sc.Merge(FleetConfig{Speedup: 1}, ServerConfig{OutputMean: 1000})
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if cfg.Speedup != 50 || len(cfg.Servers) != 2 || cfg.Servers[0].GPU != "h200" ||
			cfg.Servers[0].Faults.Death == nil || cfg.Servers[1].OutputMean != 1000 {
			t.Fatalf("%s: merged %+v", name, cfg)
		}
	}
	if _, err := ParseScenario([]byte(`{"servers":[{"name":"a","gpuu":"h100"}]}`)); err == nil {
		t.Error("unknown field accepted")
	}
	bad := FleetConfig{Servers: []ServerConfig{{GPU: "tpu"}, {Name: "gpu0", MemFractionStatic: 0.3, Faults: Faults{ErrorRate: 2}}}}
	err := bad.Validate()
	if err == nil || !strings.Contains(err.Error(), "unknown gpu") || !strings.Contains(err.Error(), "duplicate") || !strings.Contains(err.Error(), "too small") {
		t.Fatalf("validation: %v", err)
	}
}

// TestStreamUsagePastTextCap: with continuous usage stats, a stream keeps
// reporting its output tokens after the text cap (max_content_bytes) is
// reached, as a real server sending every token would; a client's
// progress must not stall at the cap.
func TestStreamUsagePastTextCap(t *testing.T) {
	f := startFleet(t, FleetConfig{Speedup: 200, Servers: []ServerConfig{{Model: "8b", GPU: "h100", OutputMean: 2000, OutputSigma: 0.1, MaxContentBytes: 64}}})
	body := `{"model":"m","messages":[{"role":"user","content":"tell a long story"}],"max_tokens":4000,"stream":true,` +
		`"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`
	req, err := http.NewRequest(http.MethodPost, f.URLs()[0]+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var counts []int
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var c struct {
			Choices []json.RawMessage `json:"choices"`
			Usage   *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		if c.Usage != nil && len(c.Choices) > 0 {
			counts = append(counts, c.Usage.CompletionTokens)
		}
	}
	if len(counts) < 3 {
		t.Fatalf("%d chunks with usage", len(counts))
	}
	total := counts[len(counts)-1]
	// 64 bytes of text are 16 tokens; the chunks must go on far beyond.
	past := 0
	for i, n := range counts {
		if i > 0 && n < counts[i-1] {
			t.Fatalf("usage went back: %v", counts)
		}
		if n > 50 {
			past++
		}
	}
	if total < 200 || past < 3 {
		t.Fatalf("output %d tokens, %d usage chunks past 50 tokens: %v", total, past, counts)
	}
}
