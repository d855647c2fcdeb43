// Package e2e runs the real binaries (gensim, gend, genctl) end to end. The
// tests build them once (TestMain) unless GEND_BIN_DIR points at built ones.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gend-dev/gend/api"
)

var binDir string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	binDir = os.Getenv("GEND_BIN_DIR")
	if binDir == "" {
		dir, err := os.MkdirTemp("", "gend-e2e-bin")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		for _, c := range []string{"gend", "genctl", "gensim"} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(dir, c), "github.com/gend-dev/gend/cmd/"+c)
			cmd.Stderr = os.Stderr
			cmd.Env = append(os.Environ(), "CGO_CFLAGS=-O2 -Wno-deprecated-declarations")
			if err := cmd.Run(); err != nil {
				fmt.Fprintf(os.Stderr, "build %s: %v\n", c, err)
				return 1
			}
		}
		binDir = dir
	}
	return m.Run()
}

// proc is a started binary whose output is captured.
type proc struct {
	t    *testing.T
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	err  error
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func start(t *testing.T, env []string, name string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, done: make(chan struct{})}
	p.cmd = exec.Command(filepath.Join(binDir, name), args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			out := p.output()
			if len(out) > 6000 {
				out = "..." + out[len(out)-6000:]
			}
			t.Logf("%s output:\n%s", name, out)
		}
	})
	return p
}

// waitFor polls the process output for a regexp match.
func (p *proc) waitFor(re *regexp.Regexp, timeout time.Duration) []string {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if m := re.FindAllStringSubmatch(p.output(), -1); m != nil {
			var out []string
			for _, x := range m {
				out = append(out, x[1])
			}
			return out
		}
		select {
		case <-p.done:
			p.t.Fatalf("%s exited (%v) before %q", p.cmd.Path, p.err, re)
		case <-time.After(50 * time.Millisecond):
		}
	}
	p.t.Fatalf("%s: no %q within %v", p.cmd.Path, re, timeout)
	return nil
}

func (p *proc) signal(sig syscall.Signal) { _ = p.cmd.Process.Signal(sig) }

func (p *proc) wait(timeout time.Duration) (int, bool) {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), true
	case <-time.After(timeout):
		return -1, false
	}
}

var simRe = regexp.MustCompile(`gensim: server \S+ listening on (http://\S+)`)
var readyRe = regexp.MustCompile(`(gensim: ready)`)

// startSim starts gensim and returns its server URLs.
func startSim(t *testing.T, args ...string) (*proc, []string) {
	t.Helper()
	p := start(t, nil, "gensim", append([]string{"--port", "0"}, args...)...)
	p.waitFor(readyRe, 20*time.Second)
	return p, simURLs(p)
}

func simURLs(p *proc) []string {
	var urls []string
	for _, m := range simRe.FindAllStringSubmatch(p.output(), -1) {
		urls = append(urls, m[1])
	}
	return urls
}

var listenRe = regexp.MustCompile(`"listen":"([0-9.:]+)"`)

// gendRun is one gend process on a state dir.
type gendRun struct {
	p    *proc
	addr string
	c    *api.Client
}

func writeFleet(t *testing.T, dir string, urls []string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("servers:\n")
	for i, u := range urls {
		fmt.Fprintf(&b, "  - {name: gpu%d, url: %s, gpus: [%d]}\n", i, u, i)
	}
	path := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func startGend(t *testing.T, stateDir, fleet, token string, extra ...string) *gendRun {
	t.Helper()
	env := []string{}
	if token != "" {
		env = append(env, "GEND_TOKEN="+token)
	}
	args := append([]string{"--listen", "127.0.0.1:0", "--state-dir", stateDir, "--config", fleet, "--nvml", "off",
		"--control-period", "200ms"}, extra...)
	p := start(t, env, "gend", args...)
	addr := p.waitFor(listenRe, 20*time.Second)[0]
	g := &gendRun{p: p, addr: "http://" + addr, c: api.NewClient("http://"+addr, token, nil)}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(g.addr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return g
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("gend at %s not ready", addr)
	return nil
}

// genctl runs the CLI and returns stdout and the exit code.
func genctl(t *testing.T, addr, token string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "genctl"), args...)
	cmd.Env = append(os.Environ(), "GEND_ADDR="+addr, "GEND_TOKEN="+token)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			t.Fatalf("genctl: %v", err)
		}
	}
	return out.String() + errb.String(), code
}

// writeInput writes n chat prompts, plus bad lines and duplicates, and
// returns the path and the set of distinct valid-or-invalid line identities
// (every custom_id expected in shards ∪ errors, and the bad line numbers).
type inputInfo struct {
	path     string
	ids      map[string]int // custom_id → expected occurrences in shards ∪ errors
	badLines int            // lines without a readable id
	total    int
}

func writeInput(t *testing.T, dir string, n int, salt string) inputInfo {
	t.Helper()
	info := inputInfo{path: filepath.Join(dir, "input.jsonl"), ids: map[string]int{}}
	var b strings.Builder
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("%s-%05d", salt, i)
		fmt.Fprintf(&b, `{"custom_id":%q,"messages":[{"role":"user","content":"Question %d about %s: explain it."}]}`+"\n", id, i, salt)
		info.ids[id]++
		info.total++
		switch i % 97 {
		case 13:
			b.WriteString("{not json at all\n") // bad line, no id
			info.badLines++
			info.total++
		case 29:
			// duplicate id: reported in errors.jsonl with the same custom_id
			fmt.Fprintf(&b, `{"custom_id":%q,"prompt":"dup"}`+"\n", id)
			info.ids[id]++
			info.total++
		case 41:
			b.WriteString("\n") // empty line: not counted
		}
	}
	if err := os.WriteFile(info.path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return info
}

type outLine struct {
	ID       string          `json:"id"`
	CustomID *string         `json:"custom_id"`
	Response json.RawMessage `json:"response"`
	Error    *struct {
		Code string `json:"code"`
		Line int64  `json:"line"`
	} `json:"error"`
}

// verifyOutput checks exactly-once, progress.json and the manifest.
func verifyOutput(t *testing.T, outDir string, in inputInfo) (shardRecords, errorLines int) {
	t.Helper()
	seen := map[string]int{}
	noID := 0
	readLines := func(path string, f func(outLine)) int {
		fh, err := os.Open(path)
		if err != nil {
			t.Fatalf("open %s: %v", path, err)
		}
		defer fh.Close()
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		n := 0
		for sc.Scan() {
			var l outLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("%s line %d: invalid JSON: %v", path, n+1, err)
			}
			f(l)
			n++
		}
		return n
	}
	var mf struct {
		JobID  string `json:"job_id"`
		Shards []struct {
			Name    string `json:"name"`
			Records int    `json:"records"`
			Bytes   int64  `json:"bytes"`
			SHA256  string `json:"sha256"`
		} `json:"shards"`
	}
	raw, err := os.ReadFile(filepath.Join(outDir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &mf); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(outDir, "shards", "part-*.jsonl"))
	if len(files) != len(mf.Shards) {
		t.Fatalf("%d shard files but %d in the manifest", len(files), len(mf.Shards))
	}
	for _, s := range mf.Shards {
		data, err := os.ReadFile(filepath.Join(outDir, s.Name))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		if hex.EncodeToString(sum[:]) != s.SHA256 || int64(len(data)) != s.Bytes {
			t.Fatalf("shard %s: manifest sha256/bytes do not match the file", s.Name)
		}
		n := readLines(filepath.Join(outDir, s.Name), func(l outLine) {
			if l.CustomID == nil || l.Error != nil || len(l.Response) == 0 {
				t.Fatalf("shard %s: bad record %+v", s.Name, l)
			}
			seen[*l.CustomID]++
		})
		if n != s.Records {
			t.Fatalf("shard %s: %d lines, manifest says %d", s.Name, n, s.Records)
		}
		shardRecords += n
	}
	errorLines = readLines(filepath.Join(outDir, "errors.jsonl"), func(l outLine) {
		if l.Error == nil || l.Error.Code == "" {
			t.Fatalf("errors.jsonl: line without error code: %+v", l)
		}
		if l.CustomID == nil {
			noID++
			return
		}
		seen[*l.CustomID]++
	})
	for id, want := range in.ids {
		if seen[id] != want {
			t.Errorf("custom_id %s: %d times in shards ∪ errors, want %d", id, seen[id], want)
		}
	}
	for id := range seen {
		if _, ok := in.ids[id]; !ok {
			t.Errorf("custom_id %s in the output is not in the input", id)
		}
	}
	if noID != in.badLines {
		t.Errorf("%d id-less error lines, want %d bad lines", noID, in.badLines)
	}
	var p api.Progress
	raw, err = os.ReadFile(filepath.Join(outDir, "progress.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	if int(p.Completed) != shardRecords || int(p.Failed) != errorLines || int(p.Total) != in.total {
		t.Errorf("progress.json completed=%d failed=%d total=%d; shards hold %d, errors %d, input %d",
			p.Completed, p.Failed, p.Total, shardRecords, errorLines, in.total)
	}
	if p.Completed+p.Failed != p.Total {
		t.Errorf("progress.json: completed+failed = %d, total %d", p.Completed+p.Failed, p.Total)
	}
	return shardRecords, errorLines
}

func waitJob(t *testing.T, c *api.Client, id string, timeout time.Duration, cond func(api.Job) bool) api.Job {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var j api.Job
	var err error
	for time.Now().Before(deadline) {
		j, err = c.GetJob(context.Background(), id)
		if err == nil && cond(j) {
			return j
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("job %s: condition not met within %v (last: status %s progress %+v err %v)", id, timeout, j.Status, j.Progress, err)
	return j
}

func jobSpec(in, outDir string, extra string) string {
	return fmt.Sprintf(`name: e2e
input: %s
request:
  endpoint: /v1/chat/completions
  model: default
  params: {temperature: 0.6, max_tokens: 4096, chat_template_kwargs: {enable_thinking: true}}
output: {dir: %s, shard_records: 200, shard_seconds: 5}
max_attempts: 8
%s`, in, outDir, extra)
}

var _ = io.Discard
