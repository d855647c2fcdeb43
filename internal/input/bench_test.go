package input

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strconv"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// BenchmarkRead reads a generated file of ~1 KB chat lines end to end and
// reports lines/s, MB/s, the peak Go heap and the process's peak RSS.
// GEND_INPUT_BENCH_LINES sets the size (default 100000); the 10^7-line
// run of the report is
//
//	GEND_INPUT_BENCH_LINES=10000000 go test -run '^$' -bench 'Read/(count|input-plain$|input-zst|shuffle)' -benchtime 1x -timeout 30m ./internal/input/
//
// The files live in a temporary directory that is removed afterwards.
func BenchmarkRead(b *testing.B) {
	n := 100_000
	if s := os.Getenv("GEND_INPUT_BENCH_LINES"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			b.Fatalf("GEND_INPUT_BENCH_LINES=%q: want a positive integer", s)
		}
		n = v
	}
	dir := b.TempDir()
	plain := filepath.Join(dir, "in.jsonl")
	zst := filepath.Join(dir, "in.jsonl.zst")
	size := generate(b, plain, n, false)
	generate(b, zst, n, true)
	params := map[string]any{"temperature": 0.6, "max_tokens": 16384, "chat_template_kwargs": map[string]any{"enable_thinking": true}}

	cases := []struct {
		name string
		path string
		opts Options
	}{
		{"count", plain, Options{}},
		{"input-plain", plain, Options{Model: "Qwen/Qwen3-32B", Params: params}},
		{"input-plain-sized", plain, Options{Model: "Qwen/Qwen3-32B", Params: params, ExpectedLines: int64(n)}},
		{"input-zst", zst, Options{Model: "Qwen/Qwen3-32B", Params: params}},
		{"shuffle-plain", plain, Options{Model: "Qwen/Qwen3-32B", Params: params, Order: OrderShuffle, Seed: 1}},
		{"shuffle-zst", zst, Options{Model: "Qwen/Qwen3-32B", Params: params, Order: OrderShuffle, Seed: 1, TempDir: dir}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			resetPeakRSS()
			var peak peakHeap
			start := time.Now()
			for b.Loop() {
				var got int64
				if tc.name == "count" {
					c, err := Count(context.Background(), tc.path, tc.opts)
					if err != nil {
						b.Fatal(err)
					}
					got = c
				} else {
					got = readCount(b, tc.path, tc.opts, &peak)
				}
				if got != int64(n) {
					b.Fatalf("read %d lines, want %d", got, n)
				}
			}
			sec := time.Since(start).Seconds()
			b.ReportMetric(float64(n)*float64(b.N)/sec, "lines/s")
			b.ReportMetric(float64(size)*float64(b.N)/sec/1e6, "MB/s")
			b.ReportMetric(float64(peak.max)/(1<<20), "peak-heap-MiB")
			b.ReportMetric(float64(peakRSS())/(1<<20), "peak-rss-MiB")
		})
	}
}

func readCount(b *testing.B, path string, opts Options, peak *peakHeap) int64 {
	r, err := Open(context.Background(), path, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	var n int64
	for {
		it, bad, err := r.Next()
		if errors.Is(err, io.EOF) {
			return n
		}
		if err != nil {
			b.Fatal(err)
		}
		if bad != nil || len(it.Body) == 0 {
			b.Fatalf("unexpected bad line %+v", bad)
		}
		n++
		if n%65536 == 0 {
			peak.sample()
		}
	}
}

// peakHeap tracks the largest heap seen (live objects and not yet swept garbage).
type peakHeap struct {
	s   []metrics.Sample
	max uint64
}

func (p *peakHeap) sample() {
	if p.s == nil {
		p.s = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	}
	metrics.Read(p.s)
	p.max = max(p.max, p.s[0].Value.Uint64())
}

// resetPeakRSS resets VmHWM (Linux); elsewhere peakRSS reports 0.
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

func peakRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("VmHWM:")); ok {
			kb, _ := strconv.ParseUint(string(bytes.TrimSuffix(bytes.TrimSpace(v), []byte(" kB"))), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// generate writes n chat lines of about 1 KB each and returns the
// uncompressed size.
func generate(b *testing.B, path string, n int, compress bool) int64 {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var w io.Writer = f
	var zw *zstd.Encoder
	if compress {
		zw, err = zstd.NewWriter(f, zstd.WithEncoderLevel(zstd.SpeedFastest))
		if err != nil {
			b.Fatal(err)
		}
		w = zw
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	// Varying text so that lines differ (and zstd cannot shrink them to nothing).
	text := make([]byte, 8192)
	x := uint32(2463534242)
	for i := range text {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		text[i] = "abcdefghijklmnopqrstuvwxyz     ,.ETAOINS"[x%40]
	}
	var size int64
	line := make([]byte, 0, 2048)
	for i := range n {
		off := (i * 7919) % (len(text) - 900)
		line = fmt.Appendf(line[:0], `{"custom_id":"req-%09d","messages":[{"role":"system","content":"You are a helpful assistant.\nThink step by step."},{"role":"user","content":"%s"}],"temperature":0.7,"source":"bench"}`+"\n",
			i, text[off:off+800+i%100])
		size += int64(len(line))
		if _, err := bw.Write(line); err != nil {
			b.Fatal(err)
		}
	}
	if err := bw.Flush(); err != nil {
		b.Fatal(err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	return size
}
