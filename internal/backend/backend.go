// Package backend is gend's HTTP client for OpenAI-compatible inference
// servers (SGLang, vLLM): generation requests (plain JSON or SSE), error
// classification, capacity (/server_info) and load gauges (/v1/loads,
// /metrics).
//
// One Client holds one shared, tuned http.Transport for the whole fleet
// (probes, gauges, https servers) and its own HTTP/1.1 connection pool for
// generations to http:// servers (conn.go: no goroutine per connection).
// It starts no goroutines of its own; every call is bounded by its context
// and runs on the caller's goroutine.
package backend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// MaxResponseBytes caps one response body (a 32k-token answer with
// reasoning is hundreds of KB; logprobs multiply that).
const MaxResponseBytes = 64 << 20

// Class says what to do about a failed attempt.
type Class int

const (
	// Overload: the server is saturated (503 queue full, 429, 408, waiting
	// timeout). Retry later; shrink this server's concurrency. It does not
	// count against the request's attempts.
	Overload Class = iota + 1
	// Unreachable: connection refused/reset, EOF, DNS: the request may not
	// have reached the server. Retry elsewhere; mark the server unhealthy.
	Unreachable
	// Transient: the request ran and failed (500, abort, dropped mid-response,
	// timeout). Retry with a fresh attempt id, bounded by max_attempts.
	Transient
	// Permanent: this request can never succeed (400 context length,
	// validation). Goes to errors.jsonl at once.
	Permanent
	// Fatal: the client configuration is wrong (unknown model, duplicate rid
	// scheme, priority disabled). Stop the job instead of failing every row.
	Fatal
)

func (c Class) String() string {
	switch c {
	case Overload:
		return "overload"
	case Unreachable:
		return "unreachable"
	case Transient:
		return "transient"
	case Permanent:
		return "permanent"
	case Fatal:
		return "fatal"
	}
	return "unknown"
}

// Error is a classified failure of one attempt.
type Error struct {
	Class  Class
	Status int    // HTTP status, 0 when none was received
	Body   []byte // the server's error body, when any
	Code   string // errors.jsonl code: request_failed, prompt_too_long, ...
	Msg    string
	Err    error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Class.String())
	if e.Status != 0 {
		fmt.Fprintf(&b, " (HTTP %d)", e.Status)
	}
	if e.Msg != "" {
		b.WriteString(": ")
		b.WriteString(e.Msg)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Options tune the shared transport.
type Options struct {
	// MaxConnsPerHost bounds connections per server (0 = unlimited; the
	// scheduler enforces concurrency, not the transport). Set, it sends
	// every generation through net/http, which enforces it.
	MaxConnsPerHost int
	// IdleConnsPerHost keeps this many idle connections per server; set it
	// to at least the per-server in-flight limit (default 4096).
	IdleConnsPerHost int
}

// Client talks to the fleet.
type Client struct {
	hc    *http.Client
	probe *http.Client
	pool  *pool // generations to http:// servers; nil: all through hc
}

// New builds a client with one shared transport sized for the fleet.
func New(opts Options) *Client {
	idle := opts.IdleConnsPerHost
	if idle <= 0 {
		idle = 4096
	}
	tr := &http.Transport{
		Proxy:               nil, // servers are addressed directly
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0, // no global cap
		MaxIdleConnsPerHost: idle,
		MaxConnsPerHost:     opts.MaxConnsPerHost,
		// SGLang and vLLM close idle keep-alive connections after 5 s.
		IdleConnTimeout:       4 * time.Second,
		ExpectContinueTimeout: 0,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		// Default 4 KiB buffers: one connection per in-flight request, so
		// larger buffers cost ~100 KB per request at 20,000 in flight.
	}
	c := &Client{
		// No client timeout: a generation may legitimately run for many
		// minutes; every request is bounded by its context instead.
		hc:    &http.Client{Transport: tr},
		probe: &http.Client{Transport: tr, Timeout: 10 * time.Second},
	}
	if opts.MaxConnsPerHost <= 0 {
		c.pool = newPool(idle, tr.IdleConnTimeout)
	}
	return c
}

// CloseIdle closes idle connections (shutdown).
func (c *Client) CloseIdle() {
	c.hc.CloseIdleConnections()
	if c.pool != nil {
		c.pool.closeIdle()
	}
}

// Request is one generation attempt.
type Request struct {
	BaseURL  string // server base URL, e.g. http://127.0.0.1:30000
	Endpoint string // /v1/chat/completions or /v1/completions
	Body     []byte // JSON object without rid/stream
	RID      string // request id for this attempt (<custom_id>-<attempt>)
	Stream   bool
	// OnTokens, when streaming, is called with the output tokens so far:
	// the server's usage.completion_tokens when it reports usage on each
	// chunk (continuous_usage_stats; exact is true), else the number of
	// output chunks received so far (a lower bound on output tokens), for
	// the ETA.
	OnTokens func(n int, exact bool)
}

// Response is a successful generation.
type Response struct {
	Status           int
	RequestID        string
	Body             []byte // the whole JSON response (assembled for SSE)
	PromptTokens     int64
	CompletionTokens int64
	FinishReason     string
}

// Generate sends one attempt and classifies the outcome. A returned error
// is always an *Error. Plain-HTTP servers are reached through the client's
// own connection pool (conn.go); https (and a client with MaxConnsPerHost)
// through net/http.
func (c *Client) Generate(ctx context.Context, r Request) (Response, error) {
	body := withFields(r.Body, r.RID, r.Stream)
	if c.pool != nil && strings.HasPrefix(r.BaseURL, "http://") {
		return c.pool.generate(ctx, r, body)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.BaseURL+r.Endpoint, bytes.NewReader(body))
	if err != nil {
		return Response{}, &Error{Class: Fatal, Code: "request_failed", Msg: "build request", Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if r.Stream {
		req.Header.Set("Accept", "text/event-stream")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return Response{}, transportError(ctx, err, false)
	}
	defer func() {
		// Drain so the connection is reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
	}()
	return readResponse(ctx, resp, r)
}

// readResponse classifies a response and reads its body (whole, or the SSE
// stream assembled). It leaves the body for the caller to drain.
func readResponse(ctx context.Context, resp *http.Response, r Request) (Response, error) {
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return Response{}, classifyStatus(resp.StatusCode, raw)
	}
	if r.Stream && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return readStream(ctx, resp.Body, r.OnTokens)
	}
	var raw []byte
	var err error
	if n := resp.ContentLength; n >= 0 && n <= MaxResponseBytes {
		// Known length: one allocation of the right size instead of
		// io.ReadAll's doubling.
		raw = make([]byte, n)
		_, err = io.ReadFull(resp.Body, raw)
	} else {
		raw, err = io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes))
	}
	if err != nil {
		return Response{}, transportError(ctx, err, true)
	}
	return parseBody(raw)
}

// withFields appends "rid" (SGLang), "request_id" (vLLM) and "stream" to a
// JSON object body without re-encoding it. Both servers ignore unknown fields.
func withFields(body []byte, rid string, stream bool) []byte {
	b := bytes.TrimRight(body, " \t\r\n")
	if len(b) == 0 || b[len(b)-1] != '}' {
		return body
	}
	out := make([]byte, 0, len(b)+len(rid)*2+96)
	out = append(out, b[:len(b)-1]...)
	empty := len(bytes.TrimSpace(b[1:len(b)-1])) == 0
	sep := func() {
		if !empty {
			out = append(out, ',')
		}
		empty = false
	}
	if rid != "" {
		q, _ := json.Marshal(rid)
		sep()
		out = append(out, `"rid":`...)
		out = append(out, q...)
		out = append(out, `,"request_id":`...)
		out = append(out, q...)
	}
	sep()
	if stream {
		out = append(out, `"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}`...)
	} else {
		out = append(out, `"stream":false`...)
	}
	out = append(out, '}')
	return out
}

func transportError(ctx context.Context, err error, afterHeaders bool) *Error {
	if ctx.Err() != nil {
		// Our own cancellation or deadline: the attempt ran (or queued) and
		// was cut; retry counts as an attempt.
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return &Error{Class: Transient, Code: "timeout", Msg: "attempt timed out", Err: err}
		}
		return &Error{Class: Transient, Code: "cancelled", Msg: "attempt cancelled", Err: ctx.Err()}
	}
	if afterHeaders {
		return &Error{Class: Transient, Code: "request_failed", Msg: "connection dropped mid-response", Err: err}
	}
	return &Error{Class: Unreachable, Code: "server_unreachable", Msg: "server unreachable", Err: err}
}

// errorMessage extracts the message of an SGLang (flat) or vLLM/OpenAI
// (nested) error body.
func errorMessage(raw []byte) string {
	var e struct {
		Message string          `json:"message"`
		Error   json.RawMessage `json:"error"`
	}
	if json.Unmarshal(raw, &e) != nil {
		s := strings.TrimSpace(string(raw))
		if len(s) > 300 {
			s = s[:300]
		}
		return s
	}
	if e.Message != "" {
		return e.Message
	}
	if len(e.Error) > 0 {
		var inner struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(e.Error, &inner) == nil && inner.Message != "" {
			return inner.Message
		}
		var s string
		if json.Unmarshal(e.Error, &s) == nil {
			return s
		}
	}
	return ""
}

var promptTooLong = []string{
	"longer than the model's context length",
	"Requested token count exceeds",
	"exceeds the maximum allowed length",
	"maximum context length is",
	"is too large",
}

// classifyStatus maps a non-200 reply to a class (reference §6).
func classifyStatus(status int, raw []byte) *Error {
	msg := errorMessage(raw)
	e := &Error{Status: status, Body: raw, Msg: msg, Code: "request_failed"}
	switch {
	case status == http.StatusServiceUnavailable:
		if len(bytes.TrimSpace(raw)) == 0 {
			// Empty 503: the server is starting or shutting down.
			e.Class = Unreachable
			e.Code = "server_unavailable"
		} else if strings.Contains(msg, "priority") && strings.Contains(msg, "disabled") {
			e.Class = Fatal
		} else {
			e.Class = Overload
			e.Code = "overloaded"
		}
	case status == http.StatusTooManyRequests || status == http.StatusRequestTimeout:
		e.Class = Overload
		e.Code = "overloaded"
	case status == http.StatusBadRequest:
		switch {
		case containsAny(msg, promptTooLong):
			e.Class = Permanent
			e.Code = "prompt_too_long"
		case strings.Contains(msg, "Duplicate request ID"):
			e.Class = Fatal
		default:
			e.Class = Permanent
		}
	case status == http.StatusNotFound && strings.Contains(msg, "does not exist"):
		e.Class = Fatal
	case status == http.StatusNotFound || status == http.StatusMethodNotAllowed:
		e.Class = Fatal
		if msg == "" {
			e.Msg = "endpoint not found on server"
		}
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		e.Class = Fatal
	case status >= 500:
		e.Class = Transient
		if strings.Contains(msg, "Out of memory even after retracting") {
			e.Code = "out_of_memory"
		}
	case status == http.StatusRequestEntityTooLarge || status == http.StatusUnprocessableEntity:
		e.Class = Permanent
	default:
		e.Class = Permanent
	}
	return e
}

func containsAny(s string, subs []string) bool {
	for _, x := range subs {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}

type usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

type bodySummary struct {
	ID      string `json:"id"`
	Choices []struct {
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage          `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// parseBody validates a 200 JSON body and extracts what gend accounts. The
// body itself is kept byte for byte (it is the output record's body).
func parseBody(raw []byte) (Response, error) {
	s, ok := scanSummary(raw)
	if !ok {
		var err *Error
		if s, err = slowSummary(raw); err != nil {
			return Response{}, err
		}
	}
	if s.choices == 0 {
		return Response{}, &Error{Class: Transient, Status: 200, Body: raw, Code: "request_failed", Msg: "response has no choices"}
	}
	r := Response{Status: 200, Body: raw, RequestID: s.id}
	if s.finish != nil {
		r.FinishReason = *s.finish
	}
	if r.FinishReason == "abort" || r.FinishReason == "error" {
		return Response{}, &Error{Class: Transient, Status: 200, Body: raw, Code: "request_failed", Msg: "finish_reason " + r.FinishReason}
	}
	if s.hasUsage {
		r.PromptTokens, r.CompletionTokens = s.promptTok, s.complTokens
	}
	return r, nil
}

// slowSummary is scanSummary through encoding/json, for every body the
// fast scan does not take: invalid JSON, an "error" field, odd spellings.
func slowSummary(raw []byte) (summary, *Error) {
	var b bodySummary
	if err := json.Unmarshal(raw, &b); err != nil {
		return summary{}, &Error{Class: Transient, Status: 200, Code: "request_failed", Msg: "invalid JSON response", Err: err}
	}
	if len(b.Error) > 0 && string(b.Error) != "null" {
		return summary{}, classifyStatus(errorCode(b.Error, 500), raw)
	}
	s := summary{id: b.ID, choices: len(b.Choices)}
	if len(b.Choices) > 0 {
		s.finish = b.Choices[0].FinishReason
	}
	if b.Usage != nil {
		s.hasUsage, s.promptTok, s.complTokens = true, b.Usage.PromptTokens, b.Usage.CompletionTokens
	}
	return s, nil
}

// errorCode reads "code" of an error object, defaulting to def.
func errorCode(raw json.RawMessage, def int) int {
	var e struct {
		Code json.RawMessage `json:"code"`
	}
	if json.Unmarshal(raw, &e) == nil {
		var n int
		if json.Unmarshal(e.Code, &n) == nil && n >= 400 {
			return n
		}
		var s string
		if json.Unmarshal(e.Code, &s) == nil {
			var m int
			if _, err := fmt.Sscanf(s, "%d", &m); err == nil && m >= 400 {
				return m
			}
		}
	}
	return def
}
