package sink

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// BenchmarkWriteResult measures the sink with ~8 KB responses written by
// concurrent callers, shards of 10,000 records, fsync every second: the
// numbers gend needs are results/s and MB/s.
func BenchmarkWriteResult(b *testing.B) {
	for _, trusted := range []bool{false, true} {
		b.Run(fmt.Sprintf("body_is_json=%v", trusted), func(b *testing.B) { benchWrite(b, trusted) })
	}
}

func benchWrite(b *testing.B, trusted bool) {
	dir := b.TempDir()
	l, _, err := Open(Options{Dir: dir, JobID: testJob, Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	tmpl := result(1, 8000)
	tmpl.BodyIsJSON = trusted
	b.SetBytes(int64(len(appendResult(nil, testJob, &tmpl))))
	var next atomic.Int64
	start := time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := tmpl
		for pb.Next() {
			r.Line = next.Add(1)
			if err := l.WriteResult(r); err != nil {
				b.Error(err)
				return
			}
		}
	})
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "results/s")
}

// BenchmarkRecover10M measures Open on an output directory holding 10^7
// records in 1,000 closed shards: recovery reads the indexes and stats the
// shards, it does not parse them (the shard files here are sparse, so a
// scan would find no valid line).
func BenchmarkRecover10M(b *testing.B) {
	const shards, per = 1000, 10000
	dir := b.TempDir()
	m := Manifest{JobID: testJob}
	for s := range shards {
		ix := &shardIndex{bytes: per * 8200, promptTokens: per, completionTokens: per}
		for i := range per {
			ix.lines = append(ix.lines, int64(s*per+i+1))
		}
		ix.sha256[0] = byte(s)
		name := shardName(s)
		if err := os.MkdirAll(filepath.Join(dir, shardsDirName), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, metaDirName), 0o755); err != nil {
			b.Fatal(err)
		}
		f, err := os.Create(filepath.Join(dir, shardsDirName, name))
		if err != nil {
			b.Fatal(err)
		}
		if err := f.Truncate(ix.bytes); err != nil {
			b.Fatal(err)
		}
		_ = f.Close()
		if err := os.WriteFile(filepath.Join(dir, metaDirName, fmt.Sprintf("part-%05d.lines", s)), encodeIndex(ix), 0o644); err != nil {
			b.Fatal(err)
		}
		m.Shards = append(m.Shards, ShardInfo{Name: shardsDirName + "/" + name, Records: per, Bytes: ix.bytes,
			SHA256: hex.EncodeToString(ix.sha256[:]), PromptTokens: per, CompletionTokens: per})
	}
	data, _ := json.Marshal(&m)
	if err := os.WriteFile(filepath.Join(dir, manifestName), data, 0o644); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		l, rec, err := Open(Options{Dir: dir, JobID: testJob, Logger: zerolog.Nop()})
		if err != nil {
			b.Fatal(err)
		}
		if rec.Completed != shards*per || rec.Done.Count() != shards*per || len(rec.Repaired) != 0 {
			b.Fatalf("recovered %d/%d, repaired %v", rec.Completed, rec.Done.Count(), rec.Repaired)
		}
		if err := l.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
