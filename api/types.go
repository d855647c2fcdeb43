// Package api is the wire contract shared by gend, genctl and the tests:
// the JSON types of the REST API and a small client for it.
package api

import "time"

// Job statuses.
const (
	StatusQueued    = "queued"
	StatusRunning   = "running"
	StatusPaused    = "paused"
	StatusCompleted = "completed"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
)

// Terminal reports whether a job status is final.
func Terminal(status string) bool {
	return status == StatusCompleted || status == StatusFailed || status == StatusCancelled
}

// JobSpec is what an operator submits (YAML or JSON). See DESIGN.md "Jobs".
type JobSpec struct {
	Name        string        `json:"name"`
	Input       string        `json:"input"`
	Order       string        `json:"order,omitempty"` // "input" (default) or "shuffle"
	Seed        int64         `json:"seed,omitempty"`  // shuffle seed
	Priority    int           `json:"priority"`
	Request     RequestSpec   `json:"request"`
	Output      OutputSpec    `json:"output"`
	Servers     []string      `json:"servers,omitempty"`
	Scheduler   SchedulerSpec `json:"scheduler"`
	MaxAttempts int           `json:"max_attempts,omitempty"`
	// Shard "i/n" processes only the input lines whose index ≡ i (mod n), so
	// several controllers can split one input by disjoint shards.
	Shard string `json:"shard,omitempty"`
}

// RequestSpec says how each input line becomes a request.
type RequestSpec struct {
	Endpoint string         `json:"endpoint,omitempty"` // /v1/chat/completions (default) or /v1/completions
	Model    string         `json:"model,omitempty"`
	Params   map[string]any `json:"params,omitempty"`
	Stream   bool           `json:"stream,omitempty"` // use SSE to the servers (gives live token counts)
	// TimeoutSeconds bounds one attempt; default is sized from max tokens.
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
}

// OutputSpec says where results go.
type OutputSpec struct {
	Dir          string  `json:"dir"`
	S3           string  `json:"s3,omitempty"`
	ShardRecords int     `json:"shard_records,omitempty"`
	ShardSeconds float64 `json:"shard_seconds,omitempty"`
}

// Scheduler modes.
const (
	ModeAdaptive = "adaptive"
	ModeStatic   = "static"
)

// SchedulerSpec bounds or pins the per-server concurrency.
type SchedulerSpec struct {
	Mode         string `json:"mode,omitempty"`           // adaptive (default) or static
	PerServer    int    `json:"per_server,omitempty"`     // static limit per server
	PerServerMax int    `json:"per_server_max,omitempty"` // cap in either mode (default 1024)
	TotalMax     int    `json:"total_max,omitempty"`      // cap on the job's in-flight total (0 = unbounded)
}

// ResizeRequest is the body of POST /v1/jobs/{id}/resize. Fields left nil are unchanged.
type ResizeRequest struct {
	Mode         string `json:"mode,omitempty"`
	PerServer    *int   `json:"per_server,omitempty"`
	PerServerMax *int   `json:"per_server_max,omitempty"`
	TotalMax     *int   `json:"total_max,omitempty"`
}

// Progress is the progress.json document and the "progress" of a job.
type Progress struct {
	Total           int64   `json:"total"`
	TotalKnown      bool    `json:"total_known"`
	Completed       int64   `json:"completed"`
	Failed          int64   `json:"failed"`
	InFlight        int64   `json:"in_flight"`
	Retries         int64   `json:"retries"`
	RatePerSec      float64 `json:"rate_per_sec"`
	TokensPerSec    float64 `json:"tokens_per_sec"`
	ETAHours        float64 `json:"eta_hours"`
	ETASeconds      float64 `json:"eta_seconds"`
	ETALowSeconds   float64 `json:"eta_low_seconds"`
	ETAHighSeconds  float64 `json:"eta_high_seconds"`
	NaiveETASeconds float64 `json:"naive_eta_seconds"`
	// EstRemainingTokens and EstMeanOutputTokens are the ETA model's
	// estimates; FleetTokensPerSec the throughput it divides by.
	EstRemainingTokens  float64 `json:"est_remaining_output_tokens"`
	EstMeanOutputTokens float64 `json:"est_mean_output_tokens"`
	FleetTokensPerSec   float64 `json:"fleet_tokens_per_sec"`
	TotalInputTokens    int64   `json:"total_input_tokens"`
	TotalOutputTokens   int64   `json:"total_output_tokens"`
	AvgOutputTokens     float64 `json:"avg_output_tokens"`
	ElapsedHours        float64 `json:"elapsed_hours"`
	ElapsedSeconds      float64 `json:"elapsed_seconds"`
	S3Uploaded          int64   `json:"s3_uploaded"`
	S3Bytes             int64   `json:"s3_bytes"`
	S3Pending           int64   `json:"s3_pending"`
	Status              string  `json:"status"`
	UpdatedAt           string  `json:"updated_at,omitempty"`
}

// Job is what the API returns for a job.
type Job struct {
	ID         string        `json:"id"`
	Name       string        `json:"name"`
	Status     string        `json:"status"`
	Reason     string        `json:"reason,omitempty"` // why paused or failed
	Priority   int           `json:"priority"`
	CreatedAt  time.Time     `json:"created_at"`
	StartedAt  *time.Time    `json:"started_at,omitempty"`
	FinishedAt *time.Time    `json:"finished_at,omitempty"`
	Progress   Progress      `json:"progress"`
	Servers    []JobServer   `json:"servers"`
	Spec       JobSpec       `json:"spec"`
	Scheduler  SchedulerSpec `json:"scheduler"` // current (after resizes)
}

// JobServer is one server's share of a job.
type JobServer struct {
	Name         string  `json:"name"`
	Limit        int     `json:"limit"`
	InFlight     int     `json:"in_flight"`
	QueueTarget  int     `json:"queue_target"`
	Completed    int64   `json:"completed"`
	State        string  `json:"state"`
	LastReason   string  `json:"last_reason,omitempty"`
	TokensPerSec float64 `json:"tokens_per_sec"`
}

// JobList is GET /v1/jobs.
type JobList struct {
	Jobs []Job `json:"jobs"`
}

// ETA is GET /v1/eta and /v1/jobs/{id}/eta with Accept: application/json.
type ETA struct {
	JobID          string  `json:"job_id"`
	Status         string  `json:"status"`
	ETASeconds     float64 `json:"eta_seconds"`
	ETALowSeconds  float64 `json:"eta_low_seconds"`
	ETAHighSeconds float64 `json:"eta_high_seconds"`
	PercentDone    float64 `json:"percent_done"`
	RatePerSec     float64 `json:"rate_per_sec"`
	TokensPerSec   float64 `json:"tokens_per_sec"`
	Line           string  `json:"line"`
}

// ServerSpec is one fleet entry (YAML config or POST /v1/servers).
type ServerSpec struct {
	Name string `json:"name"`
	URL  string `json:"url"`
	GPUs []int  `json:"gpus,omitempty"`
	// Host is the base URL of the gend on the server's GPU host, for remote
	// GPU telemetry (its /v1/gpus). Empty: local NVML (or gensim's /sim/gpu with --nvml sim).
	Host string `json:"host,omitempty"`
}

// ModelSpec describes the model for the roofline in the diagnosis.
type ModelSpec struct {
	WeightBytes     float64 `json:"weight_bytes,omitempty"`
	KVBytesPerToken float64 `json:"kv_bytes_per_token,omitempty"`
	// ActiveParams is used for the compute roof (2 FLOPs per param per token).
	ActiveParams float64 `json:"active_params,omitempty"`
}

// Config is the --config file.
type Config struct {
	Servers []ServerSpec `json:"servers"`
	Model   *ModelSpec   `json:"model,omitempty"`
	// Defaults are merged into every job spec that leaves the field empty.
	Defaults *JobDefaults `json:"defaults,omitempty"`
}

// JobDefaults are optional per-daemon defaults for job specs.
type JobDefaults struct {
	Request     *RequestSpec   `json:"request,omitempty"`
	Scheduler   *SchedulerSpec `json:"scheduler,omitempty"`
	MaxAttempts int            `json:"max_attempts,omitempty"`
	OutputS3    string         `json:"output_s3,omitempty"`
}

// Gauges are what a server's own metrics said at the last poll.
type Gauges struct {
	At             time.Time `json:"at"`
	Source         string    `json:"source"` // sglang-loads, sglang-metrics, vllm-metrics, none
	Running        int       `json:"running"`
	Queued         int       `json:"queued"`
	TokenUsage     float64   `json:"token_usage"` // KV fraction 0-1
	Retractions    float64   `json:"retractions_total"`
	GenTokensTotal float64   `json:"generation_tokens_total"`
	GenThroughput  float64   `json:"gen_throughput"`
	MaxRunning     int       `json:"max_running_requests"`
	MaxTotalTokens int64     `json:"max_total_num_tokens"`
}

// Server is one fleet entry with its live state (GET /v1/servers).
type Server struct {
	ServerSpec
	State         string  `json:"state"` // healthy, probing, down, draining
	Limit         int     `json:"limit"`
	InFlight      int     `json:"in_flight"`
	QueueTarget   int     `json:"queue_target"`
	LastReason    string  `json:"last_reason,omitempty"`
	Capacity      int     `json:"capacity"` // max_running_requests as read from the server
	RatePerSec    float64 `json:"rate_per_sec"`
	TokensPerSec  float64 `json:"tokens_per_sec"`
	ErrorsPerSec  float64 `json:"errors_per_sec"`
	Completed     int64   `json:"completed"`
	Errors        int64   `json:"errors"`
	Gauges        *Gauges `json:"gauges,omitempty"`
	ContextLength int     `json:"context_length,omitempty"`
	// TimeScale is server seconds per wall second: 1 for real servers, the
	// speedup of a gensim server. The diagnosis compares rates in server time.
	TimeScale float64 `json:"time_scale,omitempty"`
}

// ServerList is GET /v1/servers.
type ServerList struct {
	Servers []Server `json:"servers"`
}

// GPU is one GPU's telemetry snapshot.
type GPU struct {
	Index              int       `json:"index"`
	UUID               string    `json:"uuid"`
	Name               string    `json:"name"`
	Server             string    `json:"server,omitempty"` // fleet server running on it, if known
	Source             string    `json:"source"`           // nvml, sim, remote
	UtilizationRatio   float64   `json:"utilization_ratio"`
	MemoryUtilRatio    float64   `json:"memory_utilization_ratio"`
	DRAMBandwidthRatio *float64  `json:"dram_bandwidth_ratio"` // GPM; null when unsupported
	SMUtilRatio        *float64  `json:"sm_utilization_ratio"`
	SMOccupancyRatio   *float64  `json:"sm_occupancy_ratio"`
	TensorActiveRatio  *float64  `json:"tensor_active_ratio"`
	MemoryUsedBytes    uint64    `json:"memory_used_bytes"`
	MemoryTotalBytes   uint64    `json:"memory_total_bytes"`
	PowerWatts         float64   `json:"power_watts"`
	PowerLimitWatts    float64   `json:"power_limit_watts"`
	EnergyJoules       float64   `json:"energy_joules"`
	TemperatureCelsius float64   `json:"temperature_celsius"`
	SMClockHz          float64   `json:"sm_clock_hz"`
	MemClockHz         float64   `json:"mem_clock_hz"`
	ClockEventReasons  uint64    `json:"clock_event_reasons"`
	ClockEventNames    []string  `json:"clock_event_names,omitempty"`
	PeakBandwidthBytes float64   `json:"peak_bandwidth_bytes_per_second"`
	SampledAt          time.Time `json:"sampled_at"`
}

// GPUs is GET /v1/gpus.
type GPUs struct {
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"`
	Source    string `json:"source,omitempty"`
	Driver    string `json:"driver_version,omitempty"`
	GPUs      []GPU  `json:"gpus"`
}

// Diagnosis verdict codes.
const (
	VerdictHealthy           = "healthy"
	VerdictClientLimited     = "client_limited"
	VerdictConcurrencyCapped = "concurrency_capped"
	VerdictKVBound           = "kv_bound"
	VerdictBandwidthBound    = "bandwidth_bound"
	VerdictServerDown        = "server_down"
	VerdictErroring          = "erroring"
	VerdictIdle              = "idle"
)

// Diagnosis is GET /v1/diagnosis.
type Diagnosis struct {
	Verdict  string            `json:"verdict"`
	Summary  string            `json:"summary"`
	Action   string            `json:"action"`
	Evidence []string          `json:"evidence"`
	Servers  []ServerDiagnosis `json:"servers"`
	At       time.Time         `json:"at"`
}

// ServerDiagnosis is one server's verdict.
type ServerDiagnosis struct {
	Name              string   `json:"name"`
	Verdict           string   `json:"verdict"`
	Summary           string   `json:"summary"`
	Action            string   `json:"action,omitempty"`
	Evidence          []string `json:"evidence"`
	TokensPerSec      float64  `json:"tokens_per_sec"`
	RooflineTokPerSec float64  `json:"roofline_tokens_per_sec,omitempty"`
	EfficiencyRatio   float64  `json:"efficiency_ratio,omitempty"`
	WhatIf            []WhatIf `json:"what_if,omitempty"`
}

// WhatIf is the roofline estimate of a change.
type WhatIf struct {
	Change       string  `json:"change"`
	TokensPerSec float64 `json:"tokens_per_sec"`
	Gain         float64 `json:"gain_ratio"`
}

// ErrorBody is every API error: {"error": {"code", "message"}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail carries a machine code, a human message and, for spec
// validation, every problem found.
type ErrorDetail struct {
	Code     string   `json:"code"`
	Message  string   `json:"message"`
	Problems []string `json:"problems,omitempty"`
}
