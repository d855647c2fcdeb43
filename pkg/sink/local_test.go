package sink

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"
)

func openT(t *testing.T, opts Options) (*Local, Recovered) {
	t.Helper()
	if opts.JobID == "" {
		opts.JobID = testJob
	}
	opts.Logger = zerolog.Nop()
	l, rec, err := Open(opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return l, rec
}

func TestEncodeLines(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		body     string
		wantBody string // JSON of the decoded body
	}{
		{"verbatim", `{"a":1,"b":[true,null]}`, `{"a":1,"b":[true,null]}`},
		{"multi-line compacted", "{\n  \"a\": 1,\n  \"s\": \"x\\ny\"\n}", `{"a":1,"s":"x\ny"}`},
		{"invalid stored as string", `{"a":`, `"{\"a\":"`},
		{"empty stored as empty string", ``, `""`},
	}
	for _, trusted := range []struct{ name, body, want string }{
		{"trusted verbatim", `{"a":[1,2]}`, `{"a":[1,2]}`},
		{"trusted multi-line compacted", "{\n\"a\": 1\n}", `{"a":1}`},
	} {
		t.Run(trusted.name, func(t *testing.T) {
			t.Parallel()
			r := Result{Line: 1, Status: 200, Body: []byte(trusted.body), BodyIsJSON: true}
			b := appendResult(nil, "job", &r)
			var got struct {
				Response struct {
					Body json.RawMessage `json:"body"`
				} `json:"response"`
			}
			if err := json.Unmarshal(b, &got); err != nil || strings.Count(string(b), "\n") != 1 {
				t.Fatalf("%q: %v", b, err)
			}
			if string(got.Response.Body) != trusted.want {
				t.Errorf("body %s, want %s", got.Response.Body, trusted.want)
			}
		})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := Result{Line: 7, CustomID: "id \"q\" \n\x01 é \xff", RequestID: "rid", Status: 200, Body: []byte(tt.body)}
			b := appendResult(nil, "job", &r)
			if strings.Count(string(b), "\n") != 1 || b[len(b)-1] != '\n' {
				t.Fatalf("not one line: %q", b)
			}
			var got struct {
				ID       string `json:"id"`
				CustomID string `json:"custom_id"`
				Response struct {
					StatusCode int             `json:"status_code"`
					RequestID  string          `json:"request_id"`
					Body       json.RawMessage `json:"body"`
				} `json:"response"`
				Error json.RawMessage `json:"error"`
			}
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("decode %q: %v", b, err)
			}
			if got.ID != "job-7" || got.CustomID != "id \"q\" \n\x01 é \ufffd" || got.Response.StatusCode != 200 ||
				got.Response.RequestID != "rid" || string(got.Error) != "null" {
				t.Errorf("decoded %+v", got)
			}
			if string(got.Response.Body) != tt.wantBody {
				t.Errorf("body = %s, want %s", got.Response.Body, tt.wantBody)
			}
		})
	}
}

func TestEncodeFailure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		f    Failure
		want string
	}{
		{"bad input line", Failure{Line: 3, Code: "invalid_input", Message: "not JSON"},
			`{"id":"job-3","custom_id":null,"response":null,"error":{"code":"invalid_input","message":"not JSON","line":3}}`},
		{"server error", Failure{Line: 9, CustomID: "c9", Status: 400, RequestID: "r9", Body: []byte(`{"error":"too long"}`), Code: "prompt_too_long", Message: "m"},
			`{"id":"job-9","custom_id":"c9","response":{"status_code":400,"request_id":"r9","body":{"error":"too long"}},"error":{"code":"prompt_too_long","message":"m","line":9}}`},
		{"non-JSON body", Failure{Line: 4, CustomID: "c4", Status: 502, Body: []byte("Bad Gateway"), Code: "request_failed", Message: "m"},
			`{"id":"job-4","custom_id":"c4","response":{"status_code":502,"request_id":"","body":"Bad Gateway"},"error":{"code":"request_failed","message":"m","line":4}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := string(appendFailure(nil, "job", &tt.f))
			if got != tt.want+"\n" {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			if !json.Valid([]byte(got)) {
				t.Errorf("invalid JSON")
			}
		})
	}
}

func TestBitmap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		set  []int64
		want int64
	}{
		{"empty", nil, 0},
		{"dups counted once", []int64{1, 1, 64, 64, 65}, 3},
		{"grows far", []int64{5, 10_000_000, 99_999_999}, 3},
		{"negative ignored", []int64{-1, 0}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var b Bitmap
			for _, i := range tt.set {
				b.Set(i)
			}
			if b.Count() != tt.want || b.recount() != tt.want {
				t.Errorf("count %d/%d, want %d", b.Count(), b.recount(), tt.want)
			}
			for _, i := range tt.set {
				if i >= 0 && !b.Get(i) {
					t.Errorf("Get(%d) false", i)
				}
			}
			if b.Get(3) || b.Get(1<<40) {
				t.Errorf("unset bit reported set")
			}
			c := b.Clone()
			c.Set(7)
			if b.Get(7) {
				t.Errorf("clone shares storage")
			}
		})
	}
}

func TestIndexRoundTrip(t *testing.T) {
	t.Parallel()
	ix := &shardIndex{lines: []int64{5, 3, 1000000, 4, 1}, bytes: 12345, promptTokens: 7, completionTokens: 99}
	ix.sha256[0], ix.sha256[31] = 0xab, 0xcd
	data := encodeIndex(ix)
	got, err := decodeIndex(data)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.lines, ix.lines) || got.bytes != ix.bytes || got.promptTokens != 7 ||
		got.completionTokens != 99 || got.sha256 != ix.sha256 {
		t.Errorf("round trip: %+v", got)
	}
	for _, cut := range []int{0, 5, len(data) / 2, len(data) - 1} {
		if _, err := decodeIndex(data[:cut]); err == nil {
			t.Errorf("truncated at %d: no error", cut)
		}
	}
	bad := slices.Clone(data)
	bad[10] ^= 1
	if _, err := decodeIndex(bad); err == nil {
		t.Errorf("flipped bit: no error")
	}
}

func TestRotationByRecords(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var mu sync.Mutex
	var closed []ShardInfo
	l, rec := openT(t, Options{Dir: dir, ShardRecords: 10, OnShardClosed: func(s ShardInfo) {
		mu.Lock()
		closed = append(closed, s)
		mu.Unlock()
	}})
	if rec.Completed != 0 || rec.Done.Count() != 0 {
		t.Fatalf("fresh dir recovered %+v", rec)
	}
	for i := int64(1); i <= 35; i++ {
		if err := l.WriteResult(result(i, 500)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.WriteFailure(failure(36)); err != nil {
		t.Fatal(err)
	}
	if got := len(l.Manifest().Shards); got != 3 {
		t.Errorf("%d shards closed before Close, want 3", got)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	out := readOutput(t, dir)
	out.checkOnce(t, 36)
	var recs []int64
	for _, s := range out.manifest.Shards {
		recs = append(recs, s.Records)
	}
	if !slices.Equal(recs, []int64{10, 10, 10, 5}) {
		t.Errorf("records per shard %v", recs)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(closed) != 4 {
		t.Fatalf("OnShardClosed called %d times", len(closed))
	}
	for i, s := range closed {
		if s != out.manifest.Shards[i] {
			t.Errorf("callback %d = %+v, manifest %+v", i, s, out.manifest.Shards[i])
		}
	}
	if st := l.Stats(); st.Completed != 35 || st.Failed != 1 || st.S3Pending != 4 {
		t.Errorf("stats %+v", st)
	}
	if err := l.WriteResult(result(99, 10)); !errors.Is(err, ErrClosed) {
		t.Errorf("write after close: %v", err)
	}
}

func TestRotationBySeconds(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		l, _ := openT(t, Options{Dir: dir, ShardRecords: 1000, ShardSeconds: 5, SyncEvery: time.Second})
		for i := int64(1); i <= 3; i++ {
			if err := l.WriteResult(result(i, 100)); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(4 * time.Second)
		synctest.Wait()
		if n := len(l.Manifest().Shards); n != 0 {
			t.Fatalf("shard closed after 4s: %d", n)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		m := l.Manifest()
		if len(m.Shards) != 1 || m.Shards[0].Records != 3 {
			t.Fatalf("after 6s: %+v", m.Shards)
		}
		// Idle time makes no empty shard.
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := len(l.Manifest().Shards); n != 1 {
			t.Fatalf("idle produced shards: %d", n)
		}
		// A new shard's age counts from its first record.
		if err := l.WriteResult(result(4, 100)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if n := len(l.Manifest().Shards); n != 1 {
			t.Fatalf("second shard closed early")
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		out := readOutput(t, dir)
		out.checkOnce(t, 4)
		if len(out.manifest.Shards) != 2 {
			t.Errorf("shards %+v", out.manifest.Shards)
		}
	})
}

func TestDuplicateRejected(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, _ := openT(t, Options{Dir: dir})
	tests := []struct {
		name string
		op   func() error
		want error
	}{
		{"first result", func() error { return l.WriteResult(result(1, 10)) }, nil},
		{"same result again", func() error { return l.WriteResult(result(1, 10)) }, ErrDuplicate},
		{"failure for a completed line", func() error { return l.WriteFailure(failure(1)) }, ErrDuplicate},
		{"failure", func() error { return l.WriteFailure(failure(2)) }, nil},
		{"result for a failed line", func() error { return l.WriteResult(result(2, 10)) }, ErrDuplicate},
		{"line 0", func() error { return l.WriteResult(result(0, 10)) }, errors.New("any")},
	}
	for _, tt := range tests {
		err := tt.op()
		switch {
		case tt.want == nil && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != nil && err == nil:
			t.Errorf("%s: no error", tt.name)
		case tt.want == ErrDuplicate && !errors.Is(err, ErrDuplicate):
			t.Errorf("%s: %v, want ErrDuplicate", tt.name, err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	readOutput(t, dir).checkOnce(t, 2)
}

func TestJobMismatchRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, _ := openT(t, Options{Dir: dir})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Open(Options{Dir: dir, JobID: "other", Logger: zerolog.Nop()}); err == nil ||
		!strings.Contains(err.Error(), "belongs to job") {
		t.Errorf("open with another job id: %v", err)
	}
}

func TestConcurrentWriters(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, _ := openT(t, Options{Dir: dir, ShardRecords: 97})
	const writers, per = 8, 250
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range per {
				line := int64(w*per + i + 1)
				var err error
				if line%50 == 0 {
					err = l.WriteFailure(failure(line))
				} else {
					err = l.WriteResult(result(line, 300))
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			if err := l.Sync(); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	out := readOutput(t, dir)
	out.checkOnce(t, writers*per)
	if out.errRec != writers*per/50 {
		t.Errorf("errors %d", out.errRec)
	}
}

// TestRestartResumes writes part of a job, stops cleanly, reopens and
// finishes: the recovered state is exact and nothing is written twice.
func TestRestartResumes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, _ := openT(t, Options{Dir: dir, ShardRecords: 7})
	for i := int64(1); i <= 40; i++ {
		var err error
		if i%9 == 0 {
			err = l.WriteFailure(failure(i))
		} else {
			err = l.WriteResult(result(i, 200))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, rec := openT(t, Options{Dir: dir, ShardRecords: 7})
	if rec.Completed != 36 || rec.Failed != 4 || rec.Done.Count() != 40 || len(rec.Repaired) != 0 {
		t.Fatalf("recovered %+v", rec)
	}
	var wantPrompt, wantCompl int64
	for i := int64(1); i <= 40; i++ {
		if i%9 != 0 {
			r := result(i, 0)
			wantPrompt += r.PromptTokens
			wantCompl += r.CompletionTokens
		}
	}
	if rec.PromptTokens != wantPrompt || rec.CompletionTokens != wantCompl {
		t.Errorf("tokens %d/%d, want %d/%d", rec.PromptTokens, rec.CompletionTokens, wantPrompt, wantCompl)
	}
	for i := int64(41); i <= 50; i++ {
		if err := l2.WriteResult(result(i, 200)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	readOutput(t, dir).checkOnce(t, 50)
}

// crashScenario writes lines, leaves the directory as a crash at some point
// would, reopens, finishes the job and checks exactly-once.
func TestCrashRecovery(t *testing.T) {
	t.Parallel()
	const n = 60
	tests := []struct {
		name string
		// failOp makes the close protocol stop at that step (then kill -9).
		failOp string
		// damage changes the directory after the crash.
		damage func(t *testing.T, dir string, rng *rand.Rand)
	}{
		{name: "kill without close"},
		{name: "crash before index", failOp: "atomic"},
		{name: "crash before rename", failOp: "rename"},
		{name: "crash before dir fsync", failOp: "syncdir"},
		{name: "crash before fsync of shard", failOp: "sync"},
		{name: "torn open shard", damage: func(t *testing.T, dir string, rng *rand.Rand) {
			truncateRandom(t, openShard(t, dir), rng)
		}},
		{name: "torn errors.jsonl", damage: func(t *testing.T, dir string, rng *rand.Rand) {
			truncateRandom(t, filepath.Join(dir, errorsName), rng)
		}},
		{name: "garbage tail", damage: func(t *testing.T, dir string, rng *rand.Rand) {
			appendTo(t, openShard(t, dir), "\x00\x00\x00{\"id\":")
			appendTo(t, filepath.Join(dir, errorsName), "{\"id\":\"job-1-5\"}\n{bad")
		}},
		{name: "leftover temp files and stale index", damage: func(t *testing.T, dir string, rng *rand.Rand) {
			appendTo(t, filepath.Join(dir, manifestName+tmpMarker+"123"), "{")
			appendTo(t, filepath.Join(dir, metaDirName, "part-00042.lines"), "junk")
			appendTo(t, filepath.Join(dir, metaDirName, "part-00000.lines"+tmpMarker+"9"), "junk")
		}},
		{name: "manifest lost an entry", damage: func(t *testing.T, dir string, rng *rand.Rand) {
			editManifest(t, dir, func(m *Manifest) { m.Shards = m.Shards[:len(m.Shards)-1] })
		}},
		{name: "manifest unreadable", damage: func(t *testing.T, dir string, rng *rand.Rand) {
			if err := os.WriteFile(filepath.Join(dir, manifestName), []byte("{not json"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "index missing and corrupt", damage: func(t *testing.T, dir string, rng *rand.Rand) {
			if err := os.Remove(filepath.Join(dir, metaDirName, "part-00000.lines")); err != nil {
				t.Fatal(err)
			}
			appendTo(t, filepath.Join(dir, metaDirName, "part-00001.lines"), "x")
		}},
		{name: "closed shard damaged", damage: func(t *testing.T, dir string, rng *rand.Rand) {
			truncateRandom(t, filepath.Join(dir, shardsDirName, "part-00001.jsonl"), rng)
		}},
		{name: "duplicate copied into open shard", damage: func(t *testing.T, dir string, rng *rand.Rand) {
			first, err := os.ReadFile(filepath.Join(dir, shardsDirName, "part-00000.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			line := string(first[:strings.IndexByte(string(first), '\n')+1])
			appendTo(t, openShard(t, dir), line+line)
		}},
		{name: "closed shard deleted", damage: func(t *testing.T, dir string, rng *rand.Rand) {
			if err := os.Remove(filepath.Join(dir, shardsDirName, "part-00002.jsonl")); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		for seed := range uint64(4) {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				rng := rand.New(rand.NewPCG(seed, 42))
				dir := t.TempDir()
				ff := &switchFault{ops: map[string]bool{}}
				if tt.failOp != "" {
					ff.ops[tt.failOp] = true
				}
				opts := Options{Dir: dir, ShardRecords: 10, fs: faultFS{fail: ff.fail}}
				l, _ := openT(t, opts)
				stop := 47 + rng.IntN(8) // lines written before the crash (the 5th shard is open)
				for i := 1; i <= stop; i++ {
					if i == 41 {
						ff.set(true) // the close of the 5th shard stops at failOp
					}
					var err error
					if i%7 == 0 {
						err = l.WriteFailure(failure(int64(i)))
					} else {
						err = l.WriteResult(result(int64(i), 100+rng.IntN(3000)))
					}
					if err != nil && !errors.Is(err, ErrOutputUnwritable) {
						t.Fatal(err)
					}
					if i == 38 && tt.failOp == "" {
						if err := l.Sync(); err != nil {
							t.Fatal(err)
						}
					}
				}
				if tt.failOp == "" {
					_ = l.Sync()
				}
				l.abandon()
				if tt.damage != nil {
					tt.damage(t, dir, rng)
				}
				l2, rec := openT(t, Options{Dir: dir, ShardRecords: 10})
				t.Logf("repaired: %q", rec.Repaired)
				before := readOutput(t, dir)
				for line, c := range before.count {
					if c != 1 || !rec.Done.Get(line) || line < 1 || line > int64(stop) {
						t.Errorf("after recovery line %d: count %d, done %v", line, c, rec.Done.Get(line))
					}
				}
				if rec.Done.Count() != int64(len(before.count)) || rec.Completed != before.shardRec || rec.Failed != before.errRec {
					t.Errorf("recovered done=%d completed=%d failed=%d; files hold %d lines, %d records, %d errors (%v)",
						rec.Done.Count(), rec.Completed, rec.Failed, len(before.count), before.shardRec, before.errRec, rec.Repaired)
				}
				if _, err := os.Stat(filepath.Join(dir, shardsDirName, "part-00000.jsonl"+openSuffix)); err == nil {
					t.Errorf("open shard left after recovery")
				}
				for i := int64(1); i <= n; i++ {
					if rec.Done.Get(i) {
						continue
					}
					var err error
					if i%7 == 0 {
						err = l2.WriteFailure(failure(i))
					} else {
						err = l2.WriteResult(result(i, 100))
					}
					if err != nil {
						t.Fatal(err)
					}
				}
				if err := l2.Close(); err != nil {
					t.Fatal(err)
				}
				readOutput(t, dir).checkOnce(t, n)
				// A clean reopen repairs nothing.
				l3, rec3 := openT(t, Options{Dir: dir, ShardRecords: 10})
				if len(rec3.Repaired) != 0 || rec3.Done.Count() != n {
					t.Errorf("second recovery: %+v", rec3)
				}
				_ = l3.Close()
			})
		}
	}
}

func openShard(t *testing.T, dir string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, shardsDirName, "*"+openSuffix))
	if len(m) != 1 {
		t.Fatalf("open shards: %v", m)
	}
	return m[0]
}

func truncateRandom(t *testing.T, path string, rng *rand.Rand) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() == 0 {
		return
	}
	if err := os.Truncate(path, rng.Int64N(st.Size())); err != nil {
		t.Fatal(err)
	}
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func editManifest(t *testing.T, dir string, edit func(*Manifest)) {
	t.Helper()
	p := filepath.Join(dir, manifestName)
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	edit(&m)
	data, _ = json.Marshal(&m)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestUnwritableThenRetry: with the disk full, writes report
// ErrOutputUnwritable but keep the records; once space is back, Retry
// writes them, each exactly once.
func TestUnwritableThenRetry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ops  []string
	}{
		{"writes fail halfway", []string{"write"}},
		{"fsync fails", []string{"sync"}},
		{"everything fails", []string{"write", "sync", "atomic", "rename", "syncdir", "create"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			ff := &switchFault{ops: map[string]bool{}}
			for _, op := range tt.ops {
				ff.ops[op] = true
			}
			l, _ := openT(t, Options{Dir: dir, ShardRecords: 10, fs: faultFS{fail: ff.fail}})
			for i := int64(1); i <= 15; i++ {
				if err := l.WriteResult(result(i, 1000)); err != nil {
					t.Fatal(err)
				}
			}
			ff.set(true)
			var sawErr bool
			for i := int64(16); i <= 40; i++ {
				var err error
				if i%5 == 0 {
					err = l.WriteFailure(failure(i))
				} else {
					err = l.WriteResult(result(i, 1000))
				}
				if err != nil {
					if !errors.Is(err, ErrOutputUnwritable) {
						t.Fatalf("line %d: %v", i, err)
					}
					sawErr = true
				}
			}
			if err := l.Sync(); !errors.Is(err, ErrOutputUnwritable) {
				t.Fatalf("Sync on a full disk: %v", err)
			}
			if err := l.Close(); !errors.Is(err, ErrOutputUnwritable) {
				t.Fatalf("Close on a full disk: %v", err)
			}
			if !sawErr && !slices.Contains(tt.ops, "sync") {
				t.Errorf("no write reported ErrOutputUnwritable")
			}
			if l.Stats().Unwritable == "" {
				t.Errorf("Stats().Unwritable empty")
			}
			ff.set(false) // the operator freed space
			if err := l.Retry(); err != nil {
				t.Fatalf("Retry: %v", err)
			}
			if l.Stats().Unwritable != "" {
				t.Errorf("still unwritable after Retry")
			}
			if err := l.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			out := readOutput(t, dir)
			out.checkOnce(t, 40)
			if out.errRec != 5 {
				t.Errorf("errors %d", out.errRec)
			}
		})
	}
}

// TestUnwritableDirectory uses real permissions (skipped as root, which
// ignores them; TestUnwritableThenRetry covers the logic there).
func TestUnwritableDirectory(t *testing.T) {
	t.Parallel()
	if os.Geteuid() == 0 {
		t.Skip("root ignores directory permissions")
	}
	dir := t.TempDir()
	l, _ := openT(t, Options{Dir: dir, ShardRecords: 5})
	shards := filepath.Join(dir, shardsDirName)
	if err := os.Chmod(shards, 0o500); err != nil {
		t.Fatal(err)
	}
	var sawErr bool
	for i := int64(1); i <= 12; i++ {
		if err := l.WriteResult(result(i, 100)); err != nil {
			if !errors.Is(err, ErrOutputUnwritable) {
				t.Fatal(err)
			}
			sawErr = true
		}
	}
	if !sawErr {
		t.Fatal("no ErrOutputUnwritable with a read-only shards dir")
	}
	if err := os.Chmod(shards, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := l.Retry(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	readOutput(t, dir).checkOnce(t, 12)
}

func TestVerify(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, _ := openT(t, Options{Dir: dir, ShardRecords: 5})
	for i := int64(1); i <= 12; i++ {
		if err := l.WriteResult(result(i, 100)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if p, err := l.Verify(); err != nil || len(p) != 0 {
		t.Fatalf("Verify on intact shards: %v %v", p, err)
	}
	path := filepath.Join(dir, shardsDirName, "part-00001.jsonl")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[20] ^= 1
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := l.Verify()
	if err != nil || len(p) != 1 || !strings.Contains(p[0], "part-00001") {
		t.Errorf("Verify after corruption: %v %v", p, err)
	}
}
