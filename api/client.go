package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Content types the API speaks.
const (
	ContentTypeJSON = "application/json"
	ContentTypeYAML = "application/yaml"
	ContentTypeText = "text/plain"
)

// maxResponseBytes bounds what the client reads from one response.
const maxResponseBytes = 64 << 20

// Error is a non-2xx answer of the API, decoded from
// {"error": {"code", "message", "problems"}}.
type Error struct {
	Status   int      // HTTP status code
	Code     string   // machine-readable code, e.g. "not_found", "invalid_spec"
	Message  string   // human message
	Problems []string // every problem found, for spec validation
}

// Error renders the message followed by the problems, if any.
func (e *Error) Error() string {
	msg := e.Message
	if msg == "" {
		msg = fmt.Sprintf("HTTP %d %s", e.Status, http.StatusText(e.Status))
		if e.Code != "" {
			msg += " (" + e.Code + ")"
		}
	}
	if len(e.Problems) > 0 {
		msg += ": " + strings.Join(e.Problems, "; ")
	}
	return msg
}

// Client calls gend's REST API. It is safe for concurrent use.
type Client struct {
	base  string
	token string
	hc    *http.Client
}

// NewClient returns a client for the gend at baseURL (e.g.
// "http://127.0.0.1:9410"). A non-empty token is sent as a bearer token on
// every request. hc nil means a client without a timeout: calls are bounded
// by their context.
func NewClient(baseURL, token string, hc *http.Client) *Client {
	if hc == nil {
		// An own transport, not http.DefaultTransport: whoever else closes
		// the default transport's idle connections must not break ours.
		hc = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), token: token, hc: hc}
}

// BaseURL is the address the client talks to.
func (c *Client) BaseURL() string { return c.base }

// Do sends one request with a JSON body (nil for none), asking for JSON, and
// returns the status and the response body exactly as it came. A non-2xx
// status gives the body and an error wrapping *Error.
func (c *Client) Do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	ct := ""
	if body != nil {
		ct = ContentTypeJSON
	}
	return c.DoContent(ctx, method, path, ct, ContentTypeJSON, body)
}

// DoContent is Do with an explicit request Content-Type and Accept header
// (either may be empty to send none).
func (c *Client) DoContent(ctx context.Context, method, path, contentType, accept string, body []byte) (int, []byte, error) {
	status, raw, err := c.send(ctx, method, path, contentType, accept, body)
	if err != nil {
		return status, raw, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return status, raw, nil
}

// send does one round trip. Errors are not wrapped with the operation.
func (c *Client) send(ctx context.Context, method, path, contentType, accept string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return resp.StatusCode, raw, fmt.Errorf("read response: %w", err)
	}
	if len(raw) > maxResponseBytes {
		return resp.StatusCode, raw[:maxResponseBytes], fmt.Errorf("response larger than %d bytes", maxResponseBytes)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, raw, decodeError(resp.StatusCode, raw)
	}
	return resp.StatusCode, raw, nil
}

// decodeError builds the *Error of a non-2xx answer. A body that is not the
// API's error document (a proxy's page, plain text) becomes the message.
func decodeError(status int, raw []byte) *Error {
	e := &Error{Status: status}
	var body ErrorBody
	if err := json.Unmarshal(raw, &body); err == nil && (body.Error.Code != "" || body.Error.Message != "") {
		e.Code = body.Error.Code
		e.Message = body.Error.Message
		e.Problems = body.Error.Problems
		return e
	}
	msg := strings.TrimSpace(string(raw))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	if msg != "" {
		e.Message = fmt.Sprintf("HTTP %d: %s", status, msg)
	}
	return e
}

// call sends a JSON request (in == nil: no body) and decodes a JSON answer
// into out (nil: ignore the body). op names the operation in errors.
func (c *Client) call(ctx context.Context, op, method, path string, in, out any) error {
	var body []byte
	ct := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s: encode request: %w", op, err)
		}
		body, ct = b, ContentTypeJSON
	}
	_, raw, err := c.send(ctx, method, path, ct, ContentTypeJSON, body)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return decodeInto(op, raw, out)
}

func decodeInto(op string, raw []byte, out any) error {
	if out == nil {
		return nil
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return fmt.Errorf("%s: empty response", op)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s: decode response: %w", op, err)
	}
	return nil
}

// JobPath is the API path of a job, or of one of its actions when action is
// not empty ("pause", "eta", ...).
func JobPath(id, action string) string {
	p := "/v1/jobs/" + url.PathEscape(id)
	if action != "" {
		p += "/" + action
	}
	return p
}

// ETAPath is /v1/eta for id "" and /v1/jobs/{id}/eta otherwise.
func ETAPath(id string) string {
	if id == "" {
		return "/v1/eta"
	}
	return JobPath(id, "eta")
}

// ServerPath is the API path of one fleet server.
func ServerPath(name string) string { return "/v1/servers/" + url.PathEscape(name) }

// SubmitJob posts a job spec as read from a file: contentType is
// ContentTypeYAML or ContentTypeJSON. The answer is the created job.
func (c *Client) SubmitJob(ctx context.Context, spec []byte, contentType string) (Job, error) {
	const op = "submit job"
	var j Job
	_, raw, err := c.send(ctx, http.MethodPost, "/v1/jobs", contentType, ContentTypeJSON, spec)
	if err != nil {
		return j, fmt.Errorf("%s: %w", op, err)
	}
	return j, decodeInto(op, raw, &j)
}

// ListJobs returns every job the daemon knows.
func (c *Client) ListJobs(ctx context.Context) ([]Job, error) {
	var l JobList
	err := c.call(ctx, "list jobs", http.MethodGet, "/v1/jobs", nil, &l)
	return l.Jobs, err
}

// GetJob returns one job with live progress.
func (c *Client) GetJob(ctx context.Context, id string) (Job, error) {
	var j Job
	err := c.call(ctx, "get job "+id, http.MethodGet, JobPath(id, ""), nil, &j)
	return j, err
}

// PauseJob stops dispatching for a job; in-flight requests finish.
func (c *Client) PauseJob(ctx context.Context, id string) (Job, error) {
	return c.jobAction(ctx, id, "pause", nil)
}

// ResumeJob resumes a paused job.
func (c *Client) ResumeJob(ctx context.Context, id string) (Job, error) {
	return c.jobAction(ctx, id, "resume", nil)
}

// CancelJob cancels a job.
func (c *Client) CancelJob(ctx context.Context, id string) (Job, error) {
	return c.jobAction(ctx, id, "cancel", nil)
}

// ResizeJob changes a job's concurrency limits.
func (c *Client) ResizeJob(ctx context.Context, id string, r ResizeRequest) (Job, error) {
	return c.jobAction(ctx, id, "resize", r)
}

func (c *Client) jobAction(ctx context.Context, id, action string, in any) (Job, error) {
	var j Job
	err := c.call(ctx, action+" job "+id, http.MethodPost, JobPath(id, action), in, &j)
	return j, err
}

// ETA returns the ETA of job id, or of the daemon's current job for id "".
func (c *Client) ETA(ctx context.Context, id string) (ETA, error) {
	var e ETA
	err := c.call(ctx, "get eta", http.MethodGet, ETAPath(id), nil, &e)
	return e, err
}

// ETALine returns the plain-text ETA line (without the trailing newline).
func (c *Client) ETALine(ctx context.Context, id string) (string, error) {
	_, raw, err := c.send(ctx, http.MethodGet, ETAPath(id), "", ContentTypeText, nil)
	if err != nil {
		return "", fmt.Errorf("get eta: %w", err)
	}
	return strings.TrimRight(string(raw), "\r\n"), nil
}

// Servers returns the fleet with each server's live state.
func (c *Client) Servers(ctx context.Context) ([]Server, error) {
	var l ServerList
	err := c.call(ctx, "list servers", http.MethodGet, "/v1/servers", nil, &l)
	return l.Servers, err
}

// AddServer adds a server to the fleet and returns it as the daemon sees it.
func (c *Client) AddServer(ctx context.Context, s ServerSpec) (Server, error) {
	var out Server
	err := c.call(ctx, "add server "+s.Name, http.MethodPost, "/v1/servers", s, &out)
	return out, err
}

// RemoveServer drains a server and removes it from the fleet.
func (c *Client) RemoveServer(ctx context.Context, name string) error {
	return c.call(ctx, "remove server "+name, http.MethodDelete, ServerPath(name), nil, nil)
}

// GPUs returns the GPU telemetry snapshot.
func (c *Client) GPUs(ctx context.Context) (GPUs, error) {
	var g GPUs
	err := c.call(ctx, "get gpus", http.MethodGet, "/v1/gpus", nil, &g)
	return g, err
}

// Diagnosis returns what limits the fleet's throughput.
func (c *Client) Diagnosis(ctx context.Context) (Diagnosis, error) {
	var d Diagnosis
	err := c.call(ctx, "get diagnosis", http.MethodGet, "/v1/diagnosis", nil, &d)
	return d, err
}

// Health checks GET /healthz; nil means the daemon answered 2xx.
func (c *Client) Health(ctx context.Context) error {
	if _, _, err := c.send(ctx, http.MethodGet, "/healthz", "", "", nil); err != nil {
		return fmt.Errorf("health: %w", err)
	}
	return nil
}

// IsNotFound reports whether err is an API 404.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}
