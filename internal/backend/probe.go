package backend

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gend-dev/gend/api"
)

// Capacity is what a server says about itself at registration.
type Capacity struct {
	Kind              string // sglang, vllm, openai
	MaxRunning        int    // max_running_requests (effective), 0 unknown
	MaxTotalTokens    int64  // KV pool size in tokens, 0 unknown
	MaxReqInputLen    int64
	ContextLength     int
	Model             string
	MaxQueuedRequests int
	// TimeScale is server seconds per wall second: 1 for real servers,
	// gensim's speedup for simulated ones (its /server_info says so).
	TimeScale float64
}

func (c *Client) getJSON(ctx context.Context, url string, v any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.probe.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	if v == nil {
		return resp.StatusCode, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return resp.StatusCode, fmt.Errorf("GET %s: decode: %w", url, err)
	}
	return resp.StatusCode, nil
}

// Health checks liveness (SGLang /health runs a 1-token generation and
// answers fast on a busy server; vLLM's never generates).
func (c *Client) Health(ctx context.Context, base string) error {
	ctx, cancel := context.WithTimeout(ctx, 25*time.Second)
	defer cancel()
	_, err := c.getJSON(ctx, base+"/health", nil)
	if err != nil {
		return fmt.Errorf("health %s: %w", base, err)
	}
	return nil
}

// Capacity reads /server_info (or /get_server_info), /v1/models, or vLLM's
// cache_config_info. Missing endpoints are not errors; an unreachable
// server is.
func (c *Client) Capacity(ctx context.Context, base string) (Capacity, error) {
	var cp Capacity
	var info map[string]any
	st, err := c.getJSON(ctx, base+"/server_info", &info)
	if err != nil && st == 0 {
		return cp, fmt.Errorf("capacity %s: %w", base, err)
	}
	if err != nil {
		info = nil
		if _, err2 := c.getJSON(ctx, base+"/get_server_info", &info); err2 != nil {
			info = nil
		}
	}
	if info != nil {
		cp.Kind = "sglang"
		cp.MaxTotalTokens = int64(num(info["max_total_num_tokens"]))
		cp.MaxReqInputLen = int64(num(info["max_req_input_len"]))
		cp.ContextLength = int(num(info["context_length"]))
		cp.MaxRunning = int(num(info["max_running_requests"]))
		cp.MaxQueuedRequests = int(num(info["max_queued_requests"]))
		cp.TimeScale = num(info["gensim_speedup"])
		if s, ok := info["served_model_name"].(string); ok {
			cp.Model = s
		}
		if states, ok := info["internal_states"].([]any); ok {
			total := 0
			for _, s := range states {
				if m, ok := s.(map[string]any); ok {
					total += int(num(m["effective_max_running_requests_per_dp"]))
				}
			}
			if total > 0 {
				cp.MaxRunning = total
			}
		}
	}
	var models struct {
		Data []struct {
			ID          string `json:"id"`
			OwnedBy     string `json:"owned_by"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if _, err := c.getJSON(ctx, base+"/v1/models", &models); err == nil && len(models.Data) > 0 {
		if cp.Model == "" {
			cp.Model = models.Data[0].ID
		}
		if cp.ContextLength == 0 {
			cp.ContextLength = models.Data[0].MaxModelLen
		}
		if cp.Kind == "" {
			cp.Kind = models.Data[0].OwnedBy
		}
	}
	if cp.Kind == "vllm" {
		if g, err := c.scrape(ctx, base); err == nil {
			if g.MaxTotalTokens > 0 {
				cp.MaxTotalTokens = g.MaxTotalTokens
			}
		}
	}
	if cp.Kind == "" {
		cp.Kind = "openai"
	}
	if cp.TimeScale <= 0 {
		cp.TimeScale = 1
	}
	return cp, nil
}

func num(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case json.Number:
		f, _ := x.Float64()
		return f
	}
	return 0
}

// Gauges reads the server's own load gauges: SGLang /v1/loads first, then
// /metrics (SGLang or vLLM names). Source "none" when the server exposes
// neither (the scheduler then hill-climbs on throughput).
func (c *Client) Gauges(ctx context.Context, base string) (api.Gauges, error) {
	var loads struct {
		Loads []struct {
			Running        float64 `json:"num_running_reqs"`
			Waiting        float64 `json:"num_waiting_reqs"`
			TokenUsage     float64 `json:"token_usage"`
			MaxRunning     float64 `json:"max_running_requests"`
			MaxTotalTokens float64 `json:"max_total_num_tokens"`
			GenThroughput  float64 `json:"gen_throughput"`
		} `json:"loads"`
	}
	g := api.Gauges{At: time.Now()}
	st, lerr := c.getJSON(ctx, base+"/v1/loads", &loads)
	if lerr != nil && st == 0 {
		return g, fmt.Errorf("gauges %s: %w", base, lerr)
	}
	// The counters (generated tokens, retractions) are read from /metrics:
	// date the sample at the middle of that scrape, not before both
	// requests, so rates computed from successive samples are not skewed
	// by a slow /v1/loads answer.
	t0 := time.Now()
	sm, serr := c.scrape(ctx, base)
	if serr == nil {
		g.At = t0.Add(time.Since(t0) / 2)
	}
	if lerr == nil && len(loads.Loads) > 0 {
		g.Source = "sglang-loads"
		for _, l := range loads.Loads {
			g.Running += int(l.Running)
			g.Queued += int(l.Waiting)
			g.MaxRunning += int(l.MaxRunning)
			g.MaxTotalTokens += int64(l.MaxTotalTokens)
			g.GenThroughput += l.GenThroughput
			if l.TokenUsage > g.TokenUsage {
				g.TokenUsage = l.TokenUsage
			}
		}
		if serr == nil {
			g.Retractions = sm.Retractions
			g.GenTokensTotal = sm.GenTokensTotal
		}
		return g, nil
	}
	if serr != nil {
		g.Source = "none"
		return g, nil
	}
	sm.At = g.At
	return sm, nil
}

// scrape parses the Prometheus text of /metrics for the SGLang and vLLM
// series gend uses (reference §9): counts are summed over label sets,
// usage ratios take the max.
func (c *Client) scrape(ctx context.Context, base string) (api.Gauges, error) {
	var g api.Gauges
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return g, err
	}
	resp, err := c.probe.Do(req)
	if err != nil {
		return g, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return g, fmt.Errorf("GET %s/metrics: HTTP %d", base, resp.StatusCode)
	}
	seen := false
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		name, labels, val, ok := parseSample(line)
		if !ok {
			continue
		}
		switch name {
		case "sglang:num_running_reqs", "vllm:num_requests_running":
			g.Running += int(val)
		case "sglang:num_queue_reqs", "vllm:num_requests_waiting":
			g.Queued += int(val)
		case "sglang:token_usage", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc":
			if val > g.TokenUsage {
				g.TokenUsage = val
			}
		case "sglang:num_retracted_requests_total", "sglang:num_retracted_reqs_total", "vllm:num_preemptions_total":
			g.Retractions += val
		case "sglang:generation_tokens_total", "vllm:generation_tokens_total":
			g.GenTokensTotal += val
		case "sglang:gen_throughput":
			g.GenThroughput += val
		case "sglang:max_total_num_tokens":
			g.MaxTotalTokens += int64(val)
		case "vllm:cache_config_info":
			blocks, _ := strconv.ParseFloat(labelValue(labels, "num_gpu_blocks"), 64)
			size, _ := strconv.ParseFloat(labelValue(labels, "block_size"), 64)
			if blocks > 0 && size > 0 {
				g.MaxTotalTokens = int64(blocks * size)
			}
		default:
			continue
		}
		seen = true
		if strings.HasPrefix(name, "vllm:") {
			g.Source = "vllm-metrics"
		} else {
			g.Source = "sglang-metrics"
		}
	}
	if err := sc.Err(); err != nil {
		return g, fmt.Errorf("read %s/metrics: %w", base, err)
	}
	if !seen {
		return g, fmt.Errorf("%s/metrics: no known series", base)
	}
	return g, nil
}

// parseSample splits `name{labels} value [ts]`.
func parseSample(line []byte) (name string, labels []byte, val float64, ok bool) {
	i := bytes.IndexAny(line, "{ ")
	if i <= 0 {
		return "", nil, 0, false
	}
	name = string(line[:i])
	rest := line[i:]
	if rest[0] == '{' {
		j := bytes.LastIndexByte(rest, '}')
		if j < 0 {
			return "", nil, 0, false
		}
		labels = rest[1:j]
		rest = rest[j+1:]
	}
	fields := bytes.Fields(rest)
	if len(fields) == 0 {
		return "", nil, 0, false
	}
	v, err := strconv.ParseFloat(string(fields[0]), 64)
	if err != nil {
		return "", nil, 0, false
	}
	return name, labels, v, true
}

func labelValue(labels []byte, key string) string {
	k := []byte(key + `="`)
	i := bytes.Index(labels, k)
	if i < 0 {
		return ""
	}
	rest := labels[i+len(k):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}
