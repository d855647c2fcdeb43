package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// The SSE trace of the SGLang reference (§4), with reasoning and usage.
const sglangTrace = `data: {"id":"r1","object":"chat.completion.chunk","created":1767225600,"model":"default","choices":[{"index":0,"delta":{"reasoning_content":null,"role":"assistant","content":""},"logprobs":null,"finish_reason":null,"matched_stop":null}]}

data: {"id":"r1","object":"chat.completion.chunk","created":1767225600,"model":"default","choices":[{"index":0,"delta":{"reasoning_content":"First, sieves"},"logprobs":null,"finish_reason":null,"matched_stop":null}]}

data: {"id":"r1","object":"chat.completion.chunk","created":1767225601,"model":"default","choices":[{"index":0,"delta":{"reasoning_content":null,"content":"1. Listing"},"logprobs":null,"finish_reason":null,"matched_stop":null}]}

data: {"id":"r1","object":"chat.completion.chunk","created":1767225609,"model":"default","choices":[{"index":0,"delta":{"reasoning_content":null},"logprobs":null,"finish_reason":"stop","matched_stop":151645}]}

data: {"id":"r1","object":"chat.completion.chunk","created":1767225609,"model":"default","choices":[],"usage":{"prompt_tokens":31,"total_tokens":912,"completion_tokens":881,"prompt_tokens_details":null,"reasoning_tokens":604}}

data: [DONE]

`

const queueFullStream = `data: {"error":{"object":"error","message":"The request queue is full.","type":"SERVICE_UNAVAILABLE","param":null,"code":503}}

data: [DONE]

`

const chatBody = `{"id":"job7-1","object":"chat.completion","created":1767225600,"model":"default","choices":[{"index":0,"message":{"role":"assistant","content":"1. Listing","reasoning_content":"The user wants","tool_calls":null},"logprobs":null,"finish_reason":"length","matched_stop":null}],"usage":{"prompt_tokens":31,"total_tokens":912,"completion_tokens":881,"prompt_tokens_details":null,"reasoning_tokens":604}}`

func TestGenerate(t *testing.T) {
	var lastBody atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		lastBody.Store(string(raw))
		if r.Header.Get("Content-Type") != "application/json" {
			w.WriteHeader(400)
			return
		}
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		mode, _ := body["mode"].(string)
		switch mode {
		case "plain":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, chatBody)
		case "stream":
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, sglangTrace)
		case "stream-queue-full":
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, queueFullStream)
		case "stream-cut":
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, strings.Join(strings.SplitN(sglangTrace, "\n\n", 4)[:3], "\n\n")+"\n\n")
		case "abort":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, strings.Replace(chatBody, `"finish_reason":"length"`, `"finish_reason":"abort"`, 1))
		case "too-long":
			w.WriteHeader(400)
			io.WriteString(w, `{"object":"error","message":"The input (40000 tokens) is longer than the model's context length (32768 tokens).","type":"BadRequestError","param":null,"code":400}`)
		case "vllm-too-long":
			w.WriteHeader(400)
			io.WriteString(w, `{"error":{"message":"This model's maximum context length is 32768 tokens. However, you requested 4096 output tokens and your prompt contains 30000 input tokens","type":"BadRequestError","param":"input_tokens","code":400}}`)
		case "queue-full":
			w.WriteHeader(503)
			io.WriteString(w, `{"object":"error","message":"The request queue is full.","type":"503","param":null,"code":503}`)
		case "starting":
			w.WriteHeader(503)
		case "oom":
			w.WriteHeader(500)
			io.WriteString(w, `{"object":"error","message":"Out of memory even after retracting all other requests in the decode batch. Aborting the last request.","type":"InternalServerError","param":null,"code":500}`)
		case "dup":
			w.WriteHeader(400)
			io.WriteString(w, `{"object":"error","message":"Duplicate request ID detected: x","type":"BadRequestError","param":null,"code":400}`)
		case "unknown-model":
			w.WriteHeader(404)
			io.WriteString(w, `{"error":{"message":"The model `+"`x`"+` does not exist.","type":"NotFoundError","param":null,"code":404}}`)
		case "drop":
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "100000")
			io.WriteString(w, chatBody[:50])
			hj, _ := w.(http.Hijacker)
			c, _, _ := hj.Hijack()
			c.Close()
		}
	}))
	defer srv.Close()
	c := New(Options{})
	tests := []struct {
		mode     string
		stream   bool
		class    Class
		code     string
		finish   string
		complTok int64
	}{
		{"plain", false, 0, "", "length", 881},
		{"stream", true, 0, "", "stop", 881},
		{"stream-queue-full", true, Overload, "overloaded", "", 0},
		{"stream-cut", true, Transient, "request_failed", "", 0},
		{"abort", false, Transient, "request_failed", "", 0},
		{"too-long", false, Permanent, "prompt_too_long", "", 0},
		{"vllm-too-long", false, Permanent, "prompt_too_long", "", 0},
		{"queue-full", false, Overload, "overloaded", "", 0},
		{"starting", false, Unreachable, "server_unavailable", "", 0},
		{"oom", false, Transient, "out_of_memory", "", 0},
		{"dup", false, Fatal, "request_failed", "", 0},
		{"unknown-model", false, Fatal, "request_failed", "", 0},
		{"drop", false, Transient, "request_failed", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			body := fmt.Sprintf(`{"mode":%q,"messages":[{"role":"user","content":"hi"}]}`, tt.mode)
			resp, err := c.Generate(context.Background(), Request{BaseURL: srv.URL, Endpoint: "/v1/chat/completions", Body: []byte(body), RID: "row-1-a1", Stream: tt.stream})
			if tt.class == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if resp.FinishReason != tt.finish || resp.CompletionTokens != tt.complTok || resp.PromptTokens != 31 {
					t.Fatalf("got %+v", resp)
				}
				var m map[string]any
				if err := json.Unmarshal(resp.Body, &m); err != nil {
					t.Fatalf("body not JSON: %v", err)
				}
				msg := m["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
				if msg["content"] != "1. Listing" || msg["reasoning_content"] == nil {
					t.Fatalf("message not kept whole: %v", msg)
				}
				if tt.stream && msg["reasoning_content"] != "First, sieves" {
					t.Fatalf("stream reasoning assembled as %q", msg["reasoning_content"])
				}
				return
			}
			var be *Error
			if !errors.As(err, &be) {
				t.Fatalf("want *Error, got %v", err)
			}
			if be.Class != tt.class || be.Code != tt.code {
				t.Fatalf("class %v code %q, want %v %q (%v)", be.Class, be.Code, tt.class, tt.code, be)
			}
		})
	}
	// The body on the wire carries the rid (SGLang) and request_id (vLLM).
	var sent map[string]any
	_ = json.Unmarshal([]byte(lastBody.Load().(string)), &sent)
	if sent["rid"] != "row-1-a1" || sent["request_id"] != "row-1-a1" || sent["stream"] != false {
		t.Fatalf("wire body: %v", sent)
	}
}

func TestUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	_, err := New(Options{}).Generate(context.Background(), Request{BaseURL: url, Endpoint: "/v1/completions", Body: []byte(`{"prompt":"x"}`)})
	var be *Error
	if !errors.As(err, &be) || be.Class != Unreachable {
		t.Fatalf("want Unreachable, got %v", err)
	}
}

func TestWithFields(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":1}`:   `{"a":1,"rid":"x\"y","request_id":"x\"y","stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`,
		`{}`:        `{"rid":"x\"y","request_id":"x\"y","stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`,
		`{ "b":2 }`: `{ "b":2 ,"rid":"x\"y","request_id":"x\"y","stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`,
	} {
		got := string(withFields([]byte(in), `x"y`, true))
		if got != want {
			t.Errorf("withFields(%s) = %s, want %s", in, got, want)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(got), &m); err != nil {
			t.Errorf("not JSON: %s", got)
		}
	}
}

func TestGaugesAndCapacity(t *testing.T) {
	sglang := http.NewServeMux()
	sglang.HandleFunc("/v1/loads", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"loads":[{"dp_rank":0,"num_running_reqs":233,"num_waiting_reqs":317,"token_usage":0.82,"max_running_requests":1024,"max_total_num_tokens":452000,"gen_throughput":4594.0},
		{"dp_rank":1,"num_running_reqs":10,"num_waiting_reqs":3,"token_usage":0.91,"max_running_requests":1024,"max_total_num_tokens":452000,"gen_throughput":100}]}`)
	})
	sglang.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "# HELP x\n# TYPE sglang:num_retracted_requests_total counter\n"+
			`sglang:num_retracted_requests_total{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0",dp_rank="0"} 7`+"\n"+
			`sglang:num_retracted_requests_total{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0",dp_rank="1"} 5`+"\n"+
			`sglang:generation_tokens_total{model_name="m"} 1.5e+06`+"\n")
	})
	sglang.HandleFunc("/server_info", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"context_length":32768,"max_running_requests":null,"max_total_num_tokens":452000,"max_req_input_len":32000,"internal_states":[{"effective_max_running_requests_per_dp":48}],"version":"0.5"}`)
	})
	vllm := http.NewServeMux()
	vllm.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `vllm:num_requests_running{model_name="m",engine="0"} 40`+"\n"+
			`vllm:num_requests_waiting{model_name="m",engine="0"} 2`+"\n"+
			`vllm:kv_cache_usage_perc{model_name="m",engine="0"} 0.93`+"\n"+
			`vllm:num_preemptions_total{model_name="m",engine="0"} 3`+"\n"+
			`vllm:cache_config_info{block_size="16",num_gpu_blocks="9000",engine="0"} 1`+"\n")
	})
	vllm.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model","owned_by":"vllm","max_model_len":32768}]}`)
	})
	s1, s2 := httptest.NewServer(sglang), httptest.NewServer(vllm)
	defer s1.Close()
	defer s2.Close()
	c := New(Options{})
	g, err := c.Gauges(context.Background(), s1.URL)
	if err != nil {
		t.Fatal(err)
	}
	if g.Source != "sglang-loads" || g.Running != 243 || g.Queued != 320 || g.TokenUsage != 0.91 || g.Retractions != 12 || g.GenTokensTotal != 1.5e6 {
		t.Fatalf("sglang gauges: %+v", g)
	}
	g, err = c.Gauges(context.Background(), s2.URL)
	if err != nil {
		t.Fatal(err)
	}
	if g.Source != "vllm-metrics" || g.Running != 40 || g.Queued != 2 || g.TokenUsage != 0.93 || g.Retractions != 3 || g.MaxTotalTokens != 144000 {
		t.Fatalf("vllm gauges: %+v", g)
	}
	cp, err := c.Capacity(context.Background(), s1.URL)
	if err != nil || cp.MaxRunning != 48 || cp.MaxTotalTokens != 452000 || cp.ContextLength != 32768 || cp.TimeScale != 1 {
		t.Fatalf("sglang capacity %+v %v", cp, err)
	}
	cp, err = c.Capacity(context.Background(), s2.URL)
	if err != nil || cp.Kind != "vllm" || cp.MaxTotalTokens != 144000 || cp.ContextLength != 32768 {
		t.Fatalf("vllm capacity %+v %v", cp, err)
	}
}
