package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"

	"github.com/gend-dev/gend/api"
)

// DefaultAddr is where genctl looks for gend when neither --addr nor
// GEND_ADDR says otherwise.
const DefaultAddr = "http://127.0.0.1:9410"

// Exit codes.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// callTimeout bounds one API call of a one-shot command.
const callTimeout = 2 * time.Minute

// Main runs genctl with args (without the program name) and returns the exit
// code: 0 ok, 1 error, 2 usage.
func Main(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	return Run(context.Background(), args, stdout, stderr, getenv)
}

// Run is Main with a context; cancelling it stops a watch.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	a := &app{
		stdout: stdout,
		stderr: stderr,
		tty:    isTerminal(stdout),
		g: globals{
			addr:   firstNonEmpty(getenv("GEND_ADDR"), DefaultAddr),
			token:  getenv("GEND_TOKEN"),
			output: "table",
		},
	}
	err := a.run(ctx, args)
	if err == nil {
		return ExitOK
	}
	var ue *usageError
	switch {
	case errors.Is(err, flag.ErrHelp):
		a.usage(stdout, a.cmd)
		return ExitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "genctl: %s\n", ue.msg)
		a.usage(stderr, a.cmd)
		return ExitUsage
	default:
		printError(stderr, err, a.g.addr)
		return ExitError
	}
}

// printError prints "genctl: <message>", with an API error's problems one per
// line and a hint when gend is not listening.
func printError(w io.Writer, err error, addr string) {
	msg := err.Error()
	var ae *api.Error
	if errors.As(err, &ae) && len(ae.Problems) > 0 {
		msg = strings.TrimSuffix(msg, ": "+strings.Join(ae.Problems, "; "))
		fmt.Fprintf(w, "genctl: %s:\n", msg)
		for _, p := range ae.Problems {
			fmt.Fprintf(w, "  - %s\n", p)
		}
		return
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		msg += fmt.Sprintf(" (is gend running at %s? set --addr or GEND_ADDR)", addr)
	}
	fmt.Fprintf(w, "genctl: %s\n", msg)
}

// usageError is a command line that cannot be run: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// globals are the flags allowed before or after the command.
type globals struct {
	addr   string
	token  string
	output string
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.addr, "addr", g.addr, "gend address (env GEND_ADDR)")
	fs.StringVar(&g.token, "token", g.token, "bearer token (env GEND_TOKEN)")
	fs.StringVar(&g.output, "o", g.output, "output: table or json")
	fs.StringVar(&g.output, "output", g.output, "output: table or json")
}

// app is one genctl invocation.
type app struct {
	stdout, stderr io.Writer
	tty            bool
	g              globals
	cmd            *command // the command being run, for its usage text
	client         *api.Client
}

// command is one genctl command.
type command struct {
	name    string
	args    string // synopsis after the name
	summary string
	run     func(ctx context.Context, a *app, args []string) error
}

func commands() []*command {
	return []*command{
		{"start", "-f FILE", "submit a job spec (YAML or JSON)", runStart},
		{"status", "[ID] [--all]", "show a job (default: the most recent running job), or all jobs", runStatus},
		{"watch", "[ID] [--interval 1s]", "live progress until the job ends (exit 0 completed, 1 failed/cancelled)", runWatch},
		{"pause", "ID", "stop dispatching; in-flight requests finish and are kept", runPause},
		{"resume", "ID", "resume a paused job", runResume},
		{"resize", "ID --per-server-max N | --total-max N | --static N | --adaptive", "change a job's concurrency", runResize},
		{"cancel", "ID", "cancel a job", runCancel},
		{"eta", "[ID]", "one line: ETA, interval, % done, rate", runETA},
		{"servers", "ls | add --name N --url U [--gpus 0,1] [--host URL] | rm NAME", "the fleet", runServers},
		{"gpus", "", "GPU telemetry", runGPUs},
		{"doctor", "", "what limits throughput, and what to do", runDoctor},
	}
}

func findCommand(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return nil
}

func (a *app) run(ctx context.Context, args []string) error {
	fs := a.flagSet("genctl")
	if err := fs.Parse(args); err != nil {
		return a.flagError(err)
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return usagef("no command")
	}
	name := rest[0]
	if name == "help" {
		if len(rest) > 1 {
			a.cmd = findCommand(rest[1])
		}
		return flag.ErrHelp
	}
	a.cmd = findCommand(name)
	if a.cmd == nil {
		return usagef("unknown command %q", name)
	}
	return a.cmd.run(ctx, a, rest[1:])
}

// flagSet returns a FlagSet that already holds the global flags.
func (a *app) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	a.g.register(fs)
	return fs
}

func (a *app) flagError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usagef("%s", err.Error())
}

// parse parses flags interspersed with positional arguments (so global and
// command flags may come before or after them) and checks the globals. want
// bounds the number of positional arguments: min and max (-1: any).
func (a *app) parse(fs *flag.FlagSet, args []string, minArgs, maxArgs int) ([]string, error) {
	var pos []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return nil, a.flagError(err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if rest[0] == "--" {
			pos = append(pos, rest[1:]...)
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	if a.g.output != "table" && a.g.output != "json" {
		return nil, usagef("-o must be table or json, not %q", a.g.output)
	}
	if len(pos) < minArgs {
		return nil, usagef("%s: missing argument", a.cmd.name)
	}
	if maxArgs >= 0 && len(pos) > maxArgs {
		return nil, usagef("%s: unexpected argument %q", a.cmd.name, pos[maxArgs])
	}
	return pos, nil
}

// api returns the client for the parsed --addr and --token.
func (a *app) api() *api.Client {
	if a.client == nil {
		addr := a.g.addr
		if !strings.Contains(addr, "://") {
			addr = "http://" + addr
		}
		a.client = api.NewClient(addr, a.g.token, &http.Client{})
	}
	return a.client
}

func (a *app) json() bool { return a.g.output == "json" }

// printRaw sends a request and prints the API's answer as it came.
func (a *app) printRaw(ctx context.Context, method, path, contentType string, body []byte) error {
	_, raw, err := a.api().DoContent(ctx, method, path, contentType, api.ContentTypeJSON, body)
	if err != nil {
		return err
	}
	return a.writeRaw(raw)
}

func (a *app) writeRaw(raw []byte) error {
	if len(raw) == 0 {
		return nil
	}
	if _, err := a.stdout.Write(raw); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	if raw[len(raw)-1] != '\n' {
		if _, err := io.WriteString(a.stdout, "\n"); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
	}
	return nil
}

// resolveJob returns id, or when it is empty the most recent running job,
// else the most recent job.
func (a *app) resolveJob(ctx context.Context, id string) (string, error) {
	if id != "" {
		return id, nil
	}
	jobs, err := a.api().ListJobs(ctx)
	if err != nil {
		return "", err
	}
	j, ok := pickJob(jobs)
	if !ok {
		return "", errors.New("no jobs: submit one with genctl start -f FILE")
	}
	return j.ID, nil
}

// pickJob is the most recently created running job, else the most recently
// created job.
func pickJob(jobs []api.Job) (api.Job, bool) {
	if len(jobs) == 0 {
		return api.Job{}, false
	}
	sorted := append([]api.Job(nil), jobs...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].CreatedAt.After(sorted[j].CreatedAt) })
	for _, j := range sorted {
		if j.Status == api.StatusRunning {
			return j, true
		}
	}
	return sorted[0], true
}

func (a *app) usage(w io.Writer, c *command) {
	if c != nil {
		fmt.Fprintf(w, "usage: %s\n  %s\n", strings.TrimSpace("genctl [global flags] "+c.name+" "+c.args), c.summary)
		fmt.Fprint(w, globalHelp)
		return
	}
	fmt.Fprint(w, "usage: genctl [--addr URL] [--token T] [-o table|json] COMMAND [ARGS]\n\ncommands:\n")
	for _, c := range commands() {
		fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf("  %-8s %s", c.name, c.args), " "))
		fmt.Fprintf(w, "           %s\n", c.summary)
	}
	fmt.Fprint(w, globalHelp)
}

const globalHelp = `
global flags (before or after the command):
  --addr URL        gend address (env GEND_ADDR, default ` + DefaultAddr + `)
  --token T         bearer token (env GEND_TOKEN)
  -o table|json     output format; json prints the API's JSON as it came
exit codes: 0 ok, 1 error, 2 usage
`

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// isTerminal reports whether w is a terminal, for watch's redrawing view.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}
