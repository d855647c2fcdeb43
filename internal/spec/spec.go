// Package spec decodes and validates job specs and the daemon's fleet
// config: strictly (unknown fields are errors), reporting every problem at
// once, and fills in the documented defaults.
package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/gend-dev/gend/api"
	"sigs.k8s.io/yaml"
)

// Defaults of DESIGN.md.
const (
	DefaultEndpoint     = "/v1/chat/completions"
	DefaultShardRecords = 10000
	DefaultShardSeconds = 300
	DefaultMaxAttempts  = 5
	DefaultPerServerMax = 1024
)

// Invalid lists every problem of a spec.
type Invalid struct {
	What     string
	Problems []string
}

func (e *Invalid) Error() string {
	return fmt.Sprintf("invalid %s: %s", e.What, strings.Join(e.Problems, "; "))
}

// decodeStrict turns YAML or JSON into v, rejecting unknown fields.
func decodeStrict(raw []byte, v any) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return errors.New("empty document")
	}
	js := raw
	if raw[0] != '{' {
		var err error
		js, err = yaml.YAMLToJSON(raw)
		if err != nil {
			return fmt.Errorf("parse YAML: %w", err)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	if dec.More() {
		return errors.New("decode: trailing data after the document")
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("decode: trailing data after the document")
	}
	return nil
}

// DecodeJob parses a job spec (YAML or JSON), fills defaults and validates
// it. fleet, when non-nil, is the set of server names the spec may name.
func DecodeJob(raw []byte, fleet map[string]bool) (api.JobSpec, error) {
	var s api.JobSpec
	if err := decodeStrict(raw, &s); err != nil {
		return s, &Invalid{What: "job spec", Problems: []string{err.Error()}}
	}
	s.Request.Params = normalizeNumbers(s.Request.Params)
	Defaults(&s)
	if p := ValidateJob(s, fleet); len(p) > 0 {
		return s, &Invalid{What: "job spec", Problems: p}
	}
	return s, nil
}

// normalizeNumbers turns json.Number values back into int64 or float64 so
// they re-encode as numbers.
func normalizeNumbers(m map[string]any) map[string]any {
	for k, v := range m {
		m[k] = normalizeValue(v)
	}
	return m
}

func normalizeValue(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		return normalizeNumbers(x)
	case []any:
		for i := range x {
			x[i] = normalizeValue(x[i])
		}
		return x
	}
	return v
}

// Defaults fills what DESIGN.md says a spec leaves out.
func Defaults(s *api.JobSpec) {
	if s.Order == "" {
		s.Order = "input"
	}
	if s.Request.Endpoint == "" {
		s.Request.Endpoint = DefaultEndpoint
	}
	if s.Output.ShardRecords == 0 {
		s.Output.ShardRecords = DefaultShardRecords
	}
	if s.Output.ShardSeconds == 0 {
		s.Output.ShardSeconds = DefaultShardSeconds
	}
	if s.MaxAttempts == 0 {
		s.MaxAttempts = DefaultMaxAttempts
	}
	if s.Scheduler.Mode == "" {
		s.Scheduler.Mode = api.ModeAdaptive
	}
	if s.Scheduler.PerServerMax == 0 {
		s.Scheduler.PerServerMax = DefaultPerServerMax
	}
	if s.Scheduler.Mode == api.ModeStatic && s.Scheduler.PerServer == 0 {
		s.Scheduler.PerServer = 64
	}
	if s.Name == "" {
		s.Name = "job"
	}
}

var shardRe = regexp.MustCompile(`^(\d+)/(\d+)$`)

// ParseShard parses "i/n".
func ParseShard(s string) (i, n int, err error) {
	if s == "" {
		return 0, 1, nil
	}
	m := shardRe.FindStringSubmatch(s)
	if m == nil {
		return 0, 0, fmt.Errorf("shard %q: want i/n, e.g. 0/4", s)
	}
	i, _ = strconv.Atoi(m[1])
	n, _ = strconv.Atoi(m[2])
	if n < 1 || i >= n {
		return 0, 0, fmt.Errorf("shard %q: need 0 <= i < n", s)
	}
	return i, n, nil
}

// ValidateJob returns every problem of a defaulted spec.
func ValidateJob(s api.JobSpec, fleet map[string]bool) []string {
	var p []string
	add := func(f string, a ...any) { p = append(p, fmt.Sprintf(f, a...)) }
	if strings.TrimSpace(s.Input) == "" {
		add("input: required (a local path or s3://bucket/key)")
	} else if strings.HasPrefix(s.Input, "s3://") {
		if u, err := url.Parse(s.Input); err != nil || u.Host == "" || strings.Trim(u.Path, "/") == "" {
			add("input: %q is not s3://bucket/key", s.Input)
		}
	}
	if s.Order != "input" && s.Order != "shuffle" {
		add("order: %q is not input or shuffle", s.Order)
	}
	if s.Request.Endpoint != "/v1/chat/completions" && s.Request.Endpoint != "/v1/completions" {
		add("request.endpoint: %q is not /v1/chat/completions or /v1/completions", s.Request.Endpoint)
	}
	for _, k := range []string{"stream", "rid", "request_id", "n"} {
		if _, ok := s.Request.Params[k]; ok {
			add("request.params.%s: set by gend, remove it (use request.stream for streaming)", k)
		}
	}
	if v, ok := s.Request.Params["max_tokens"]; ok && !positive(v) {
		add("request.params.max_tokens: must be a positive integer")
	}
	if v, ok := s.Request.Params["max_completion_tokens"]; ok && !positive(v) {
		add("request.params.max_completion_tokens: must be a positive integer")
	}
	if s.Request.TimeoutSeconds < 0 {
		add("request.timeout_seconds: must not be negative")
	}
	if strings.TrimSpace(s.Output.Dir) == "" {
		add("output.dir: required")
	}
	if s.Output.S3 != "" {
		if u, err := url.Parse(s.Output.S3); err != nil || u.Scheme != "s3" || u.Host == "" {
			add("output.s3: %q is not s3://bucket/prefix/", s.Output.S3)
		}
	}
	if s.Output.ShardRecords < 1 {
		add("output.shard_records: must be >= 1")
	}
	if s.Output.ShardSeconds <= 0 {
		add("output.shard_seconds: must be > 0")
	}
	if s.MaxAttempts < 1 || s.MaxAttempts > 100 {
		add("max_attempts: must be 1..100")
	}
	switch s.Scheduler.Mode {
	case api.ModeAdaptive:
		if s.Scheduler.PerServer != 0 {
			add("scheduler.per_server: only with mode static")
		}
	case api.ModeStatic:
		if s.Scheduler.PerServer < 1 {
			add("scheduler.per_server: must be >= 1 in static mode")
		}
	default:
		add("scheduler.mode: %q is not adaptive or static", s.Scheduler.Mode)
	}
	if s.Scheduler.PerServerMax < 1 {
		add("scheduler.per_server_max: must be >= 1")
	}
	if s.Scheduler.TotalMax < 0 {
		add("scheduler.total_max: must not be negative")
	}
	seen := map[string]bool{}
	for i, n := range s.Servers {
		if seen[n] {
			add("servers[%d]: %q listed twice", i, n)
		}
		seen[n] = true
		if fleet != nil && !fleet[n] {
			add("servers[%d]: %q is not in the fleet", i, n)
		}
	}
	if _, _, err := ParseShard(s.Shard); err != nil {
		add("shard: %v", err)
	}
	return p
}

func positive(v any) bool {
	switch x := v.(type) {
	case int64:
		return x > 0
	case float64:
		return x > 0 && x == float64(int64(x))
	case int:
		return x > 0
	}
	return false
}

// MaxTokens is the effective output cap of a spec's params (0 if unset).
func MaxTokens(params map[string]any) int {
	for _, k := range []string{"max_completion_tokens", "max_tokens"} {
		switch x := params[k].(type) {
		case int64:
			return int(x)
		case float64:
			return int(x)
		case int:
			return x
		}
	}
	return 0
}

var nameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// ValidateServer checks one fleet entry.
func ValidateServer(s api.ServerSpec, prefix string) []string {
	var p []string
	if !nameRe.MatchString(s.Name) {
		p = append(p, fmt.Sprintf("%sname: %q must be 1-63 of [A-Za-z0-9_.-]", prefix, s.Name))
	}
	if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		p = append(p, fmt.Sprintf("%surl: %q is not an http(s) URL", prefix, s.URL))
	}
	for i, g := range s.GPUs {
		if g < 0 {
			p = append(p, fmt.Sprintf("%sgpus[%d]: must not be negative", prefix, i))
		}
	}
	if s.Host != "" {
		if u, err := url.Parse(s.Host); err != nil || u.Host == "" {
			p = append(p, fmt.Sprintf("%shost: %q is not a URL", prefix, s.Host))
		}
	}
	return p
}

// DecodeServer parses one fleet entry (POST /v1/servers).
func DecodeServer(raw []byte) (api.ServerSpec, error) {
	var s api.ServerSpec
	if err := decodeStrict(raw, &s); err != nil {
		return s, &Invalid{What: "server", Problems: []string{err.Error()}}
	}
	s.URL = strings.TrimRight(s.URL, "/")
	if p := ValidateServer(s, ""); len(p) > 0 {
		return s, &Invalid{What: "server", Problems: p}
	}
	return s, nil
}

// DecodeConfig parses the --config file.
func DecodeConfig(raw []byte) (api.Config, error) {
	var c api.Config
	if err := decodeStrict(raw, &c); err != nil {
		return c, &Invalid{What: "config", Problems: []string{err.Error()}}
	}
	var p []string
	names := map[string]bool{}
	for i := range c.Servers {
		s := &c.Servers[i]
		s.URL = strings.TrimRight(s.URL, "/")
		p = append(p, ValidateServer(*s, fmt.Sprintf("servers[%d].", i))...)
		if names[s.Name] {
			p = append(p, fmt.Sprintf("servers[%d].name: %q is used twice", i, s.Name))
		}
		names[s.Name] = true
	}
	if c.Model != nil && (c.Model.WeightBytes < 0 || c.Model.KVBytesPerToken < 0) {
		p = append(p, "model: sizes must not be negative")
	}
	if len(p) > 0 {
		return c, &Invalid{What: "config", Problems: p}
	}
	return c, nil
}

// DecodeResize parses a resize body.
func DecodeResize(raw []byte) (api.ResizeRequest, error) {
	var r api.ResizeRequest
	if err := decodeStrict(raw, &r); err != nil {
		return r, &Invalid{What: "resize", Problems: []string{err.Error()}}
	}
	var p []string
	if r.Mode != "" && r.Mode != api.ModeStatic && r.Mode != api.ModeAdaptive {
		p = append(p, fmt.Sprintf("mode: %q is not static or adaptive", r.Mode))
	}
	if r.Mode == api.ModeStatic && (r.PerServer == nil || *r.PerServer < 1) {
		p = append(p, "per_server: required (>= 1) with mode static")
	}
	if r.Mode != api.ModeStatic && r.PerServer != nil {
		if *r.PerServer < 1 {
			p = append(p, "per_server: must be >= 1")
		}
	}
	if r.PerServerMax != nil && *r.PerServerMax < 1 {
		p = append(p, "per_server_max: must be >= 1")
	}
	if r.TotalMax != nil && *r.TotalMax < 0 {
		p = append(p, "total_max: must not be negative (0 = unbounded)")
	}
	if r.Mode == "" && r.PerServer == nil && r.PerServerMax == nil && r.TotalMax == nil {
		p = append(p, "nothing to change: give per_server_max, total_max, or mode (static with per_server, or adaptive)")
	}
	if len(p) > 0 {
		return r, &Invalid{What: "resize", Problems: p}
	}
	return r, nil
}

// ApplyResize returns the scheduler spec after a resize (DESIGN "Resize").
func ApplyResize(cur api.SchedulerSpec, r api.ResizeRequest) api.SchedulerSpec {
	if r.PerServerMax != nil {
		cur.PerServerMax = *r.PerServerMax
	}
	if r.TotalMax != nil {
		cur.TotalMax = *r.TotalMax
	}
	switch r.Mode {
	case api.ModeStatic:
		cur.Mode = api.ModeStatic
		cur.PerServer = *r.PerServer
	case api.ModeAdaptive:
		cur.Mode = api.ModeAdaptive
		cur.PerServer = 0
	default:
		if r.PerServer != nil && cur.Mode == api.ModeStatic {
			cur.PerServer = *r.PerServer
		}
	}
	if cur.Mode == api.ModeStatic && cur.PerServerMax > 0 && cur.PerServer > cur.PerServerMax {
		cur.PerServer = cur.PerServerMax
	}
	return cur
}
