package sink

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
)

const testJob = "job-1"

// result makes a deterministic result for an input line, with a body of
// about size bytes.
func result(line int64, size int) Result {
	pad := strings.Repeat("x", max(0, size-160))
	body := fmt.Sprintf(`{"id":"cmpl-%d","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"answer %d %s"},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`,
		line, line, pad, 10+line%7, 100+line%13)
	return Result{
		Line: line, CustomID: fmt.Sprintf("req-%d", line), RequestID: fmt.Sprintf("rid-%d", line),
		Status: 200, Body: []byte(body), PromptTokens: 10 + line%7, CompletionTokens: 100 + line%13,
	}
}

func failure(line int64) Failure {
	return Failure{Line: line, CustomID: fmt.Sprintf("req-%d", line), Status: 400, RequestID: fmt.Sprintf("rid-%d", line),
		Body: []byte(`{"error":{"message":"prompt too long"}}`), Code: "prompt_too_long", Message: "prompt too long"}
}

// abandon simulates kill -9: the timer goroutine stops and the files are
// closed without writing what is still buffered in memory.
func (l *Local) abandon() {
	l.stopOnce.Do(func() { close(l.stop) })
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur != nil && l.cur.f != nil {
		_ = l.cur.f.Close()
	}
	for _, s := range l.sealed {
		if s.f != nil {
			_ = s.f.Close()
		}
	}
	if l.errFile != nil {
		_ = l.errFile.Close()
	}
	l.closed = true
}

// output is what an independent reader finds in an output directory.
type output struct {
	count    map[int64]int // occurrences of each input line in shards ∪ errors
	shardRec int64
	errRec   int64
	manifest Manifest
}

var partRe = regexp.MustCompile(`^part-\d{5,}\.jsonl$`)

// readOutput parses every closed shard and errors.jsonl with encoding/json
// and checks the manifest against the files.
func readOutput(t *testing.T, dir string) output {
	t.Helper()
	out := output{count: map[int64]int{}}
	data, err := os.ReadFile(filepath.Join(dir, manifestName))
	if err != nil {
		t.Fatalf("read manifest: %v", err)
	}
	if err := json.Unmarshal(data, &out.manifest); err != nil {
		t.Fatalf("decode manifest: %v", err)
	}
	if out.manifest.JobID != testJob {
		t.Errorf("manifest job_id = %q", out.manifest.JobID)
	}
	listed := map[string]ShardInfo{}
	for _, s := range out.manifest.Shards {
		listed[s.Name] = s
	}
	ents, err := os.ReadDir(filepath.Join(dir, shardsDirName))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if partRe.MatchString(e.Name()) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	if len(names) != len(out.manifest.Shards) {
		t.Errorf("%d shard files, %d manifest entries", len(names), len(out.manifest.Shards))
	}
	for _, n := range names {
		rel := shardsDirName + "/" + n
		content, err := os.ReadFile(filepath.Join(dir, shardsDirName, n))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(content)
		m, ok := listed[rel]
		if !ok {
			t.Errorf("%s not in manifest", rel)
		} else if m.SHA256 != hex.EncodeToString(sum[:]) || m.Bytes != int64(len(content)) {
			t.Errorf("%s: manifest sha/bytes %s/%d, file %x/%d", rel, m.SHA256, m.Bytes, sum, len(content))
		}
		var recs int64
		sc := bufio.NewScanner(strings.NewReader(string(content)))
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			var rec struct {
				ID       string          `json:"id"`
				CustomID string          `json:"custom_id"`
				Response json.RawMessage `json:"response"`
				Error    json.RawMessage `json:"error"`
			}
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				t.Fatalf("%s: bad line %q: %v", rel, sc.Text(), err)
			}
			line, ok := lineFromID(rec.ID, testJob)
			if !ok || string(rec.Error) != "null" || rec.CustomID != fmt.Sprintf("req-%d", line) {
				t.Fatalf("%s: bad record %q", rel, sc.Text())
			}
			out.count[line]++
			recs++
		}
		if ok && m.Records != recs {
			t.Errorf("%s: manifest records %d, file %d", rel, m.Records, recs)
		}
		out.shardRec += recs
	}
	if content, err := os.ReadFile(filepath.Join(dir, errorsName)); err == nil {
		for _, ln := range strings.Split(strings.TrimSuffix(string(content), "\n"), "\n") {
			if ln == "" {
				continue
			}
			var rec struct {
				Error struct {
					Line int64 `json:"line"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(ln), &rec); err != nil {
				t.Fatalf("errors.jsonl: bad line %q: %v", ln, err)
			}
			out.count[rec.Error.Line]++
			out.errRec++
		}
	}
	return out
}

// checkOnce fails the test unless every line of 1..n is present exactly once.
func (o output) checkOnce(t *testing.T, n int64) {
	t.Helper()
	for i := int64(1); i <= n; i++ {
		if o.count[i] != 1 {
			t.Errorf("line %d present %d times", i, o.count[i])
		}
	}
	if int64(len(o.count)) != n {
		t.Errorf("%d distinct lines, want %d", len(o.count), n)
	}
}

// faultFS injects errors: fail(op, path) is asked before each operation;
// a failing write writes half of its data first, like a disk filling up.
type faultFS struct {
	osFS
	fail func(op, path string) error
}

func (f faultFS) Create(name string) (outFile, error) {
	if err := f.fail("create", name); err != nil {
		return nil, err
	}
	of, err := f.osFS.Create(name)
	if err != nil {
		return nil, err
	}
	return &faultFile{f: of, name: name, fs: f}, nil
}

func (f faultFS) OpenAppend(name string) (outFile, error) {
	if err := f.fail("create", name); err != nil {
		return nil, err
	}
	of, err := f.osFS.OpenAppend(name)
	if err != nil {
		return nil, err
	}
	return &faultFile{f: of, name: name, fs: f}, nil
}

func (f faultFS) WriteFileAtomic(path string, data []byte) error {
	if err := f.fail("atomic", path); err != nil {
		return err
	}
	return f.osFS.WriteFileAtomic(path, data)
}

func (f faultFS) Rename(o, n string) error {
	if err := f.fail("rename", n); err != nil {
		return err
	}
	return f.osFS.Rename(o, n)
}

func (f faultFS) SyncDir(dir string) error {
	if err := f.fail("syncdir", dir); err != nil {
		return err
	}
	return f.osFS.SyncDir(dir)
}

type faultFile struct {
	f    outFile
	name string
	fs   faultFS
}

func (w *faultFile) Write(p []byte) (int, error) {
	if err := w.fs.fail("write", w.name); err != nil {
		n, _ := w.f.Write(p[:len(p)/2])
		return n, err
	}
	return w.f.Write(p)
}

func (w *faultFile) Sync() error {
	if err := w.fs.fail("sync", w.name); err != nil {
		return err
	}
	return w.f.Sync()
}

func (w *faultFile) Close() error { return w.f.Close() }

// switchFault fails every operation whose op is in ops while on is set.
type switchFault struct {
	mu  sync.Mutex
	on  bool
	ops map[string]bool
	hit int
}

func (s *switchFault) fail(op, _ string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.on && s.ops[op] {
		s.hit++
		return syscall.ENOSPC
	}
	return nil
}

func (s *switchFault) set(on bool) {
	s.mu.Lock()
	s.on = on
	s.mu.Unlock()
}
