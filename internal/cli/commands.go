package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gend-dev/gend/api"
)

func runStart(ctx context.Context, a *app, args []string) error {
	fs := a.flagSet("start")
	file := fs.String("f", "", "job spec file (YAML or JSON)")
	fs.StringVar(file, "file", "", "job spec file (YAML or JSON)")
	if _, err := a.parse(fs, args, 0, 0); err != nil {
		return err
	}
	if *file == "" {
		return usagef("start: -f FILE is required")
	}
	spec, err := os.ReadFile(*file)
	if err != nil {
		return fmt.Errorf("read job spec: %w", err)
	}
	ct := specContentType(*file, spec)
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if a.json() {
		return a.printRaw(ctx, http.MethodPost, "/v1/jobs", ct, spec)
	}
	j, err := a.api().SubmitJob(ctx, spec, ct)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "job %s submitted: %s (%s)\n", j.ID, j.Name, j.Status)
	fmt.Fprintf(a.stdout, "follow it with: genctl watch %s\n", j.ID)
	return nil
}

// specContentType is JSON for a .json file or a document starting with '{',
// YAML otherwise.
func specContentType(name string, spec []byte) string {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".json":
		return api.ContentTypeJSON
	case ".yaml", ".yml":
		return api.ContentTypeYAML
	}
	if t := bytes.TrimSpace(spec); len(t) > 0 && t[0] == '{' {
		return api.ContentTypeJSON
	}
	return api.ContentTypeYAML
}

func runStatus(ctx context.Context, a *app, args []string) error {
	fs := a.flagSet("status")
	all := fs.Bool("all", false, "list all jobs")
	fs.BoolVar(all, "a", false, "list all jobs")
	pos, err := a.parse(fs, args, 0, 1)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if *all {
		if len(pos) > 0 {
			return usagef("status: --all takes no ID")
		}
		if a.json() {
			return a.printRaw(ctx, http.MethodGet, "/v1/jobs", "", nil)
		}
		jobs, err := a.api().ListJobs(ctx)
		if err != nil {
			return err
		}
		return writeJobList(a.stdout, jobs)
	}
	id, err := a.resolveJob(ctx, first(pos))
	if err != nil {
		return err
	}
	if a.json() {
		return a.printRaw(ctx, http.MethodGet, api.JobPath(id, ""), "", nil)
	}
	j, err := a.api().GetJob(ctx, id)
	if err != nil {
		return err
	}
	return writeJob(a.stdout, j)
}

func runPause(ctx context.Context, a *app, args []string) error {
	return jobAction(ctx, a, args, "pause", (*api.Client).PauseJob)
}

func runResume(ctx context.Context, a *app, args []string) error {
	return jobAction(ctx, a, args, "resume", (*api.Client).ResumeJob)
}

func runCancel(ctx context.Context, a *app, args []string) error {
	return jobAction(ctx, a, args, "cancel", (*api.Client).CancelJob)
}

func jobAction(ctx context.Context, a *app, args []string, action string,
	call func(*api.Client, context.Context, string) (api.Job, error)) error {
	fs := a.flagSet(action)
	pos, err := a.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if a.json() {
		return a.printRaw(ctx, http.MethodPost, api.JobPath(pos[0], action), "", nil)
	}
	j, err := call(a.api(), ctx, pos[0])
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "job %s: %s\n", j.ID, j.Status)
	return nil
}

func runResize(ctx context.Context, a *app, args []string) error {
	fs := a.flagSet("resize")
	perServerMax := fs.Int("per-server-max", 0, "cap each server's limit at N")
	totalMax := fs.Int("total-max", 0, "cap the job's in-flight total at N")
	static := fs.Int("static", 0, "pin each server's limit at N (static mode)")
	adaptive := fs.Bool("adaptive", false, "let the scheduler adapt the limit again")
	pos, err := a.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var r api.ResizeRequest
	for _, f := range []struct {
		name string
		v    int
		dst  **int
	}{
		{"per-server-max", *perServerMax, &r.PerServerMax},
		{"total-max", *totalMax, &r.TotalMax},
		{"static", *static, &r.PerServer},
	} {
		if !set[f.name] {
			continue
		}
		if f.v < 1 {
			return usagef("resize: --%s must be at least 1", f.name)
		}
		v := f.v
		*f.dst = &v
	}
	switch {
	case set["static"] && *adaptive:
		return usagef("resize: --static and --adaptive exclude each other")
	case set["static"]:
		r.Mode = api.ModeStatic
	case *adaptive:
		r.Mode = api.ModeAdaptive
	}
	if r.Mode == "" && r.PerServerMax == nil && r.TotalMax == nil {
		return usagef("resize: give --per-server-max N, --total-max N, --static N or --adaptive")
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if a.json() {
		body, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("encode resize: %w", err)
		}
		return a.printRaw(ctx, http.MethodPost, api.JobPath(pos[0], "resize"), api.ContentTypeJSON, body)
	}
	j, err := a.api().ResizeJob(ctx, pos[0], r)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "job %s: scheduler %s\n", j.ID, formatScheduler(j.Scheduler))
	return nil
}

func runETA(ctx context.Context, a *app, args []string) error {
	fs := a.flagSet("eta")
	pos, err := a.parse(fs, args, 0, 1)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	id, err := a.resolveJob(ctx, first(pos))
	if err != nil {
		return err
	}
	if a.json() {
		return a.printRaw(ctx, http.MethodGet, api.ETAPath(id), "", nil)
	}
	line, err := a.api().ETALine(ctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintln(a.stdout, line)
	return nil
}

func runServers(ctx context.Context, a *app, args []string) error {
	sub, rest := splitSubcommand(args)
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	switch sub {
	case "ls", "list":
		return serversList(ctx, a, rest)
	case "add":
		return serversAdd(ctx, a, rest)
	case "rm", "remove":
		return serversRemove(ctx, a, rest)
	default:
		return usagef("servers: unknown subcommand %q (ls, add, rm)", sub)
	}
}

// splitSubcommand finds the servers subcommand ("ls" when none is given):
// the first argument that is neither a flag nor a flag's value. Every flag
// of the servers commands except -h takes a value.
func splitSubcommand(args []string) (string, []string) {
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			break
		}
		if !strings.HasPrefix(arg, "-") || arg == "-" {
			rest := append(append([]string(nil), args[:i]...), args[i+1:]...)
			return arg, rest
		}
		name := strings.TrimLeft(arg, "-")
		if !strings.Contains(name, "=") && name != "h" && name != "help" {
			i++ // skip the flag's value
		}
	}
	return "ls", args
}

func serversList(ctx context.Context, a *app, args []string) error {
	if _, err := a.parse(a.flagSet("servers ls"), args, 0, 0); err != nil {
		return err
	}
	if a.json() {
		return a.printRaw(ctx, http.MethodGet, "/v1/servers", "", nil)
	}
	servers, err := a.api().Servers(ctx)
	if err != nil {
		return err
	}
	return writeServers(a.stdout, servers)
}

func serversAdd(ctx context.Context, a *app, args []string) error {
	fs := a.flagSet("servers add")
	var s api.ServerSpec
	fs.StringVar(&s.Name, "name", "", "unique server name")
	fs.StringVar(&s.URL, "url", "", "server base URL")
	gpus := fs.String("gpus", "", "NVML GPU indices, comma-separated")
	fs.StringVar(&s.Host, "host", "", "gend on the server's GPU host, for remote telemetry")
	if _, err := a.parse(fs, args, 0, 0); err != nil {
		return err
	}
	if s.Name == "" || s.URL == "" {
		return usagef("servers add: --name and --url are required")
	}
	if *gpus != "" {
		for _, f := range strings.Split(*gpus, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 0 {
				return usagef("servers add: --gpus: %q is not a GPU index", f)
			}
			s.GPUs = append(s.GPUs, n)
		}
	}
	if a.json() {
		body, err := json.Marshal(s)
		if err != nil {
			return fmt.Errorf("encode server: %w", err)
		}
		return a.printRaw(ctx, http.MethodPost, "/v1/servers", api.ContentTypeJSON, body)
	}
	out, err := a.api().AddServer(ctx, s)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "server %s added: %s (%s)\n", out.Name, out.URL, firstNonEmpty(out.State, "added"))
	return nil
}

func serversRemove(ctx context.Context, a *app, args []string) error {
	pos, err := a.parse(a.flagSet("servers rm"), args, 1, 1)
	if err != nil {
		return err
	}
	if a.json() {
		return a.printRaw(ctx, http.MethodDelete, api.ServerPath(pos[0]), "", nil)
	}
	if err := a.api().RemoveServer(ctx, pos[0]); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "server %s removed\n", pos[0])
	return nil
}

func runGPUs(ctx context.Context, a *app, args []string) error {
	if _, err := a.parse(a.flagSet("gpus"), args, 0, 0); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if a.json() {
		return a.printRaw(ctx, http.MethodGet, "/v1/gpus", "", nil)
	}
	g, err := a.api().GPUs(ctx)
	if err != nil {
		return err
	}
	return writeGPUs(a.stdout, g)
}

func runDoctor(ctx context.Context, a *app, args []string) error {
	if _, err := a.parse(a.flagSet("doctor"), args, 0, 0); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if a.json() {
		return a.printRaw(ctx, http.MethodGet, "/v1/diagnosis", "", nil)
	}
	d, err := a.api().Diagnosis(ctx)
	if err != nil {
		return err
	}
	return writeDiagnosis(a.stdout, d)
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}
