// Command gend is the generation daemon: it runs offline LLM generation
// jobs against a fleet of SGLang/vLLM servers. See DESIGN.md and docs/.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/gend-dev/gend/api"
	"github.com/gend-dev/gend/internal/daemon"
	"github.com/gend-dev/gend/internal/rlimit"
	"github.com/gend-dev/gend/internal/spec"
	"github.com/gend-dev/gend/internal/splitjob"
)

func main() { os.Exit(run(os.Args[1:], os.Stderr, os.Getenv)) }

type options struct {
	listen, stateDir, config, tokenFile, nvml, logFormat, logLevel, s3Endpoint string
	drainTimeout, controlPeriod                                                time.Duration
}

func run(args []string, stderr io.Writer, getenv func(string) string) int {
	if len(args) > 0 && args[0] == "merge" {
		return runMerge(args[1:], os.Stdout, stderr, getenv)
	}
	fs := flag.NewFlagSet("gend", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	env := func(name, def string) string {
		if v := getenv("GEND_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))); v != "" {
			return v
		}
		return def
	}
	envDur := func(name string, def time.Duration) time.Duration {
		if v := env(name, ""); v != "" {
			if d, err := time.ParseDuration(v); err == nil {
				return d
			}
		}
		return def
	}
	fs.StringVar(&o.listen, "listen", env("listen", "127.0.0.1:9410"), "API and /metrics address (GEND_LISTEN)")
	fs.StringVar(&o.stateDir, "state-dir", env("state-dir", "./gend-state"), "durable daemon state (GEND_STATE_DIR)")
	fs.StringVar(&o.config, "config", env("config", ""), "YAML fleet config (GEND_CONFIG)")
	fs.StringVar(&o.tokenFile, "token-file", env("token-file", ""), "file holding the bearer token for mutating requests (GEND_TOKEN_FILE; or GEND_TOKEN)")
	fs.StringVar(&o.nvml, "nvml", env("nvml", "auto"), "GPU telemetry: auto, off, or sim (read gensim's /sim/gpu) (GEND_NVML)")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", envDur("drain-timeout", 2*time.Minute), "on SIGTERM, how long in-flight requests may finish (GEND_DRAIN_TIMEOUT)")
	fs.StringVar(&o.logFormat, "log-format", env("log-format", "json"), "json or console (GEND_LOG_FORMAT)")
	fs.StringVar(&o.logLevel, "log-level", env("log-level", "info"), "debug, info, warn, error (GEND_LOG_LEVEL)")
	fs.StringVar(&o.s3Endpoint, "s3-endpoint", env("s3-endpoint", ""), "S3 endpoint URL (GEND_S3_ENDPOINT; default AWS or AWS_ENDPOINT_URL)")
	fs.DurationVar(&o.controlPeriod, "control-period", envDur("control-period", 500*time.Millisecond), "scheduler control period (GEND_CONTROL_PERIOD)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gend: unexpected arguments: %v\n", fs.Args())
		return 2
	}
	log, err := newLogger(o.logFormat, o.logLevel, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "gend: %v\n", err)
		return 2
	}
	token, err := readToken(getenv("GEND_TOKEN"), o.tokenFile)
	if err != nil {
		log.Error().Err(err).Msg("token")
		return 1
	}
	switch o.nvml {
	case "auto", "off", "sim":
	default:
		log.Error().Str("nvml", o.nvml).Msg("--nvml must be auto, off or sim")
		return 2
	}
	var cfg api.Config
	if o.config != "" {
		raw, err := os.ReadFile(o.config)
		if err != nil {
			log.Error().Err(err).Msg("read config")
			return 1
		}
		if cfg, err = spec.DecodeConfig(raw); err != nil {
			log.Error().Err(err).Str("config", o.config).Msg("invalid config")
			return 1
		}
	}
	checkFileLimit(log, cfg)
	d, err := daemon.New(daemon.Options{Listen: o.listen, StateDir: o.stateDir, Config: cfg, Token: token, NVML: o.nvml,
		DrainTimeout: o.drainTimeout, S3Endpoint: o.s3Endpoint, Logger: log, ControlPeriod: o.controlPeriod})
	if err != nil {
		log.Error().Err(err).Msg("start")
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := d.Run(ctx); err != nil {
		log.Error().Err(err).Msg("gend")
		return 1
	}
	return 0
}

// fileReserve is what gend needs besides the sockets of in-flight requests:
// listener and API clients, probes, shards, journals, input files.
const fileReserve = 512

// checkFileLimit raises the open-file limit as far as gend may, logs what it
// got, and warns when the configured fleet can hold more requests in flight
// (one socket each) than the limit leaves.
func checkFileLimit(log zerolog.Logger, cfg api.Config) {
	res, err := rlimit.Raise()
	res.Log(log, err)
	perServer, total := spec.DefaultPerServerMax, 0
	if d := cfg.Defaults; d != nil && d.Scheduler != nil {
		if d.Scheduler.PerServerMax > 0 {
			perServer = d.Scheduler.PerServerMax
		}
		total = d.Scheduler.TotalMax
	}
	inFlight := len(cfg.Servers) * perServer
	if total > 0 {
		inFlight = min(inFlight, total)
	}
	if need := inFlight + fileReserve; inFlight > 0 && !res.Enough(need) {
		log.Warn().Uint64("open_file_limit", res.After.Soft).Int("servers", len(cfg.Servers)).
			Int("per_server_max", perServer).Int("max_in_flight", inFlight).Int("files_needed", need).
			Msg("open-file limit below what the fleet can hold in flight (one socket per request): " +
				"past it attempts fail with \"too many open files\"; raise LimitNOFILE (or ulimit -n) or lower per_server_max/total_max")
	}
}

func newLogger(format, level string, w io.Writer) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Logger{}, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	switch format {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	default:
		return zerolog.Logger{}, fmt.Errorf("--log-format %q: want json or console", format)
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

// readToken takes GEND_TOKEN or the token file; both given and different is an error.
func readToken(env, file string) (string, error) {
	var fromFile string
	if file != "" {
		raw, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("read token file: %w", err)
		}
		fromFile = strings.TrimSpace(string(raw))
		if fromFile == "" {
			return "", fmt.Errorf("token file %s is empty", file)
		}
	}
	env = strings.TrimSpace(env)
	if env != "" && fromFile != "" && env != fromFile {
		return "", errors.New("GEND_TOKEN and --token-file are both set and differ: keep one")
	}
	if env != "" {
		return env, nil
	}
	return fromFile, nil
}

// runMerge is `gend merge [flags] s3://bucket/prefix/`: merge the manifests
// of a job split across controllers (docs/scale.md).
func runMerge(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("gend merge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gend merge [--s3-endpoint URL] [--partial] [--verify] s3://bucket/prefix/")
		fs.PrintDefaults()
	}
	o := splitjob.Options{Region: getenv("AWS_REGION")}
	ep := getenv("GEND_S3_ENDPOINT")
	if ep == "" {
		ep = getenv("AWS_ENDPOINT_URL")
	}
	fs.StringVar(&o.Endpoint, "s3-endpoint", ep, "S3 endpoint URL (GEND_S3_ENDPOINT; default AWS or AWS_ENDPOINT_URL)")
	fs.BoolVar(&o.Partial, "partial", false, "write the merged manifest even while some shards' manifests are missing, exit 0")
	fs.BoolVar(&o.Verify, "verify", false, "download every shard: check sha256, sizes, record counts and that no custom_id repeats")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	o.URL = fs.Arg(0)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if _, err := splitjob.Merge(ctx, o, stdout); err != nil {
		fmt.Fprintf(stderr, "gend merge: %v\n", err)
		return 1
	}
	return 0
}
