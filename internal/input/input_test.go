package input

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// writeInput writes content to dir/name, compressed as the name says.
func writeInput(t testing.TB, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	var buf bytes.Buffer
	switch {
	case strings.HasSuffix(name, ".gz"):
		zw := gzip.NewWriter(&buf)
		if _, err := zw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	case strings.HasSuffix(name, ".zst"):
		zw, err := zstd.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := zw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	default:
		buf.WriteString(content)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// result is one Next outcome in a comparable form.
type result struct {
	Line int64
	ID   string
	Code string // "" for an item
	Body string
}

func readAll(t testing.TB, path string, opts Options) []result {
	t.Helper()
	r, err := Open(context.Background(), path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	var out []result
	for range 1_000_000 {
		it, bad, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		if bad != nil {
			if it.Body != nil {
				t.Fatalf("Next returned both an item and a bad line")
			}
			if !strings.HasPrefix(bad.Message, fmt.Sprintf("line %d: ", bad.Line)) {
				t.Errorf("message %q does not name line %d", bad.Message, bad.Line)
			}
			out = append(out, result{Line: bad.Line, ID: bad.CustomID, Code: bad.Code})
			continue
		}
		out = append(out, result{Line: it.Line, ID: it.CustomID, Body: string(it.Body)})
	}
	t.Fatal("Next never returned io.EOF")
	return nil
}

func count(t testing.TB, path string, opts Options) int64 {
	t.Helper()
	n, err := Count(context.Background(), path, opts)
	if err != nil {
		t.Fatalf("Count: %v", err)
	}
	return n
}

// mixed is an input with every form, empty and blank lines, CRLF, bad lines
// and duplicates; want is what input order gives.
const mixed = "\xef\xbb\xbf" + `{"custom_id":"a","messages":[{"role":"user","content":"1"}]}
{"id":"b","conversations":[{"from":"human","value":"2"},{"from":"gpt","value":"x"}]}

{"custom_id":"c","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"3"}]}}` + "\r\n" + `not json
   ` + "\t" + `
{"id":"a","messages":[{"role":"user","content":"dup"}]}
{"id":7,"messages":"bad"}
{"id":"7","messages":[{"role":"user","content":"dup of 7"}]}
{"custom_id":"d","url":"/v1/completions","body":{"prompt":"4"}}`

var mixedWant = []result{
	{Line: 1, ID: "a", Body: `{"messages":[{"role":"user","content":"1"}]}`},
	{Line: 2, ID: "b", Body: `{"messages":[{"role":"user","content":"2"}]}`},
	{Line: 4, ID: "c", Body: `{"messages":[{"role":"user","content":"3"}]}`},
	{Line: 5, Code: CodeInvalidInput},
	{Line: 7, ID: "a", Code: CodeDuplicateID},
	{Line: 8, ID: "7", Code: CodeInvalidInput},
	{Line: 9, ID: "7", Code: CodeDuplicateID},
	{Line: 10, ID: "d", Body: `{"prompt":"4"}`},
}

func TestReaderFormsAndCompression(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, name := range []string{"in.jsonl", "in.jsonl.gz", "in.jsonl.zst", "gzip-without-suffix"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			content := mixed
			if name == "gzip-without-suffix" {
				name += ".gz" // written compressed; the reader must sniff it
			}
			path := writeInput(t, dir, name, content)
			if name == "gzip-without-suffix.gz" {
				renamed := filepath.Join(dir, "gzip-without-suffix")
				if err := os.Rename(path, renamed); err != nil {
					t.Fatal(err)
				}
				path = renamed
			}
			got := readAll(t, path, Options{})
			if !reflect.DeepEqual(got, mixedWant) {
				t.Errorf("got\n%v\nwant\n%v", got, mixedWant)
			}
			if n := count(t, path, Options{}); n != int64(len(mixedWant)) {
				t.Errorf("Count = %d, want %d", n, len(mixedWant))
			}
			shuffled := readAll(t, path, Options{Order: OrderShuffle, Seed: 3, TempDir: t.TempDir()})
			sortResults(shuffled)
			if !reflect.DeepEqual(shuffled, mixedWant) {
				t.Errorf("shuffle (sorted) got\n%v\nwant\n%v", shuffled, mixedWant)
			}
		})
	}
}

func sortResults(rs []result) {
	slices.SortFunc(rs, func(a, b result) int { return int(a.Line - b.Line) })
}

// genLines makes n chat lines with ids id-0..id-(n-1), with an empty line
// after every 7th and a duplicate of an earlier id every 11th line.
func genLines(n int) string {
	var sb strings.Builder
	for i := range n {
		id := fmt.Sprintf("id-%d", i)
		if i%11 == 10 {
			id = fmt.Sprintf("id-%d", i/2)
		}
		fmt.Fprintf(&sb, `{"custom_id":%q,"messages":[{"role":"user","content":"p%d"}]}`+"\n", id, i)
		if i%7 == 6 {
			sb.WriteString("\n")
		}
	}
	return sb.String()
}

func TestShardsAreDisjointAndCover(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := writeInput(t, dir, "in.jsonl.zst", genLines(500))
	for _, order := range []string{OrderInput, OrderShuffle} {
		t.Run(order, func(t *testing.T) {
			t.Parallel()
			all := readAll(t, path, Options{Order: order, TempDir: t.TempDir()})
			sortResults(all)
			if int64(len(all)) != count(t, path, Options{}) {
				t.Fatalf("read %d lines, Count says %d", len(all), count(t, path, Options{}))
			}
			const n = 3
			var union []result
			for i := range n {
				opts := Options{Order: order, ShardIndex: i, ShardCount: n, TempDir: t.TempDir()}
				part := readAll(t, path, opts)
				if c := count(t, path, opts); c != int64(len(part)) {
					t.Errorf("shard %d: Count = %d, read %d", i, c, len(part))
				}
				union = append(union, part...)
			}
			sortResults(union)
			if !reflect.DeepEqual(union, all) {
				t.Errorf("shards do not partition the input: union has %d lines, all %d", len(union), len(all))
			}
		})
	}
}

func TestShuffle(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	content := genLines(300)
	plain := writeInput(t, dir, "in.jsonl", content)
	gz := writeInput(t, dir, "in.jsonl.gz", content)
	inOrder := readAll(t, plain, Options{})

	a := readAll(t, plain, Options{Order: OrderShuffle, Seed: 1})
	b := readAll(t, plain, Options{Order: OrderShuffle, Seed: 1})
	tmp := t.TempDir()
	c := readAll(t, gz, Options{Order: OrderShuffle, Seed: 1, TempDir: tmp})
	d := readAll(t, plain, Options{Order: OrderShuffle, Seed: 2})
	if !reflect.DeepEqual(a, b) || !reflect.DeepEqual(a, c) {
		t.Error("the same seed gave different orders (plain twice, gz)")
	}
	if reflect.DeepEqual(a, d) {
		t.Error("seeds 1 and 2 gave the same order")
	}
	if reflect.DeepEqual(a, inOrder) {
		t.Error("shuffle kept the input order")
	}
	sorted := slices.Clone(a)
	sortResults(sorted)
	if !reflect.DeepEqual(sorted, inOrder) {
		t.Error("shuffle is not a permutation of the input (or changed an item or which copy is the duplicate)")
	}
	if left, err := os.ReadDir(tmp); err != nil || len(left) != 0 {
		t.Errorf("TempDir after close: %v, %v; want empty", left, err)
	}
}

func TestShuffleIsUniformish(t *testing.T) {
	t.Parallel()
	// Over many seeds, each line should come first about equally often.
	path := writeInput(t, t.TempDir(), "in.jsonl", genLines(5)) // no duplicates, no empties in 5 lines
	firsts := map[int64]int{}
	const seeds = 400
	for s := range seeds {
		got := readAll(t, path, Options{Order: OrderShuffle, Seed: int64(s)})
		firsts[got[0].Line]++
	}
	for line := int64(1); line <= 5; line++ {
		if n := firsts[line]; n < seeds/5/2 || n > seeds/5*2 {
			t.Errorf("line %d came first %d times out of %d, want about %d", line, n, seeds, seeds/5)
		}
	}
}

func TestSkip(t *testing.T) {
	t.Parallel()
	// Line 2 is skipped (done before a restart); line 4 duplicates its id
	// and must still be reported; line 3 is a duplicate on a skipped line
	// and must not be reported again.
	content := `{"id":"a","prompt":"1"}
{"id":"b","prompt":"2"}
{"id":"a","prompt":"3"}
{"id":"b","prompt":"4"}
{"id":"c","prompt":"5"}
`
	path := writeInput(t, t.TempDir(), "in.jsonl", content)
	want := []result{
		{Line: 1, ID: "a", Body: `{"prompt":"1"}`},
		{Line: 4, ID: "b", Code: CodeDuplicateID},
		{Line: 5, ID: "c", Body: `{"prompt":"5"}`},
	}
	skip := func(line int64) bool { return line == 2 || line == 3 }
	for _, order := range []string{OrderInput, OrderShuffle} {
		t.Run(order, func(t *testing.T) {
			t.Parallel()
			got := readAll(t, path, Options{Endpoint: EndpointCompletions, Order: order, Skip: skip})
			sortResults(got)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %v, want %v", got, want)
			}
			if n := count(t, path, Options{Skip: skip}); n != 5 {
				t.Errorf("Count = %d, want 5 (skipped lines are part of the total)", n)
			}
		})
	}
}

func TestLongLines(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 3<<20) // larger than the read buffer
	content := `{"id":"big","messages":[{"role":"user","content":"` + big + `"}]}
{"id":"next","messages":[{"role":"user","content":"y"}]}
{"id":"last-no-newline","messages":[{"role":"user","content":"` + big + `"}]}`
	path := writeInput(t, t.TempDir(), "in.jsonl", content)
	tests := []struct {
		name    string
		maxLine int
		codes   []string
	}{
		{"fits", 0, []string{"", "", ""}},
		{"too long", 1 << 20, []string{CodeInvalidInput, "", CodeInvalidInput}},
	}
	for _, tc := range tests {
		for _, order := range []string{OrderInput, OrderShuffle} {
			t.Run(tc.name+"/"+order, func(t *testing.T) {
				t.Parallel()
				got := readAll(t, path, Options{Order: order, MaxLineBytes: tc.maxLine})
				sortResults(got)
				if len(got) != 3 {
					t.Fatalf("got %d results, want 3", len(got))
				}
				for i, r := range got {
					if r.Code != tc.codes[i] || r.Line != int64(i+1) {
						t.Errorf("line %d: code %q, want %q", r.Line, r.Code, tc.codes[i])
					}
				}
				if tc.maxLine == 0 && len(got[0].Body) < len(big) {
					t.Errorf("big body is %d bytes", len(got[0].Body))
				}
				if n := count(t, path, Options{MaxLineBytes: tc.maxLine}); n != 3 {
					t.Errorf("Count = %d, want 3", n)
				}
			})
		}
	}
}

func TestOpenRejectsBadOptions(t *testing.T) {
	t.Parallel()
	path := writeInput(t, t.TempDir(), "in.jsonl", mixed)
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"endpoint", Options{Endpoint: "/v1/embeddings"}, "endpoint"},
		{"order", Options{Order: "random"}, "order"},
		{"shard index", Options{ShardIndex: 3, ShardCount: 3}, "shard index"},
		{"shard without count", Options{ShardIndex: 1}, "shard index"},
		{"negative count", Options{ShardCount: -1}, "shard count"},
		{"params", Options{Params: map[string]any{"max_tokens": 0}}, "params.max_tokens"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if r, err := Open(context.Background(), path, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open error = %v, want one naming %q", err, tc.want)
				if r != nil {
					r.Close()
				}
			}
		})
	}
	if _, err := Open(context.Background(), filepath.Join(t.TempDir(), "missing.jsonl"), Options{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open of a missing file: %v, want ErrNotExist", err)
	}
	if _, err := Count(context.Background(), path, Options{Order: "random"}); err == nil {
		t.Error("Count accepted a bad order")
	}
}

func TestCancelledContext(t *testing.T) {
	t.Parallel()
	path := writeInput(t, t.TempDir(), "in.jsonl", genLines(10000))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Count(ctx, path, Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Count: %v, want context.Canceled", err)
	}
	if _, err := Open(ctx, path, Options{Order: OrderShuffle}); !errors.Is(err, context.Canceled) {
		t.Errorf("Open shuffle: %v, want context.Canceled", err)
	}
	r, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, _, err := r.Next(); !errors.Is(err, context.Canceled) {
		t.Errorf("Next: %v, want context.Canceled", err)
	}
}

func TestIDSet(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		expected int64
		estimate func() int64
	}{
		{"sized", 100000, nil},
		{"grows by doubling", 0, nil},
		{"grows by estimate", 0, func() int64 { return 90000 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := newMem()
			defer m.releaseAll()
			s := newIDSet(m, tc.expected)
			s.estimate = tc.estimate
			for i := range 100000 {
				if s.add(fmt.Appendf(nil, "id-%d", i)) {
					t.Fatalf("id-%d reported as a duplicate on first insert", i)
				}
			}
			for i := range 100000 {
				if !s.add(fmt.Appendf(nil, "id-%d", i)) {
					t.Fatalf("id-%d not found after growth", i)
				}
			}
			if load := float64(s.n) / float64(len(s.slots)); s.n != 100000 || load > idSetMaxLoad {
				t.Errorf("n = %d, load = %.2f", s.n, load)
			}
		})
	}
}
