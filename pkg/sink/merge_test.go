package sink

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gend-dev/gend/internal/s3test"
)

func TestShardPrefix(t *testing.T) {
	tests := []struct {
		prefix     string
		index, cnt int
		want       string
	}{
		{"run/", 0, 1, "run/"},
		{"run/", 1, 2, "run/shard-1-of-2/"},
		{"run", 3, 4, "run/shard-3-of-4/"},
		{"", 0, 2, "shard-0-of-2/"},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s_%d_%d", tc.prefix, tc.index, tc.cnt), func(t *testing.T) {
			if got := ShardPrefix(tc.prefix, tc.index, tc.cnt); got != tc.want {
				t.Fatalf("ShardPrefix(%q, %d, %d) = %q, want %q", tc.prefix, tc.index, tc.cnt, got, tc.want)
			}
		})
	}
}

// putPart uploads one controller's manifest and shard (records custom_ids ids).
func putPart(t *testing.T, srv *s3test.Server, bucket, sub string, ids ...string) {
	t.Helper()
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, `{"id":"x","custom_id":%q,"response":{"status_code":200},"error":null}`+"\n", id)
	}
	data := []byte(b.String())
	sum := sha256.Sum256(data)
	name := "shards/part-00000.jsonl"
	srv.Put(bucket, sub+name, data)
	m := Manifest{JobID: "job-" + sub, Shards: []ShardInfo{{Name: name, Records: int64(len(ids)), Bytes: int64(len(data)),
		SHA256: hex.EncodeToString(sum[:]), S3Key: sub + name}}}
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	srv.Put(bucket, sub+"manifest.json", raw)
}

func TestMergeShardManifests(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	tests := []struct {
		name    string
		parts   map[string][]string // sub-prefix → ids
		wantErr error
		records int64
		dups    int
	}{
		{"complete", map[string][]string{"shard-0-of-2/": {"a", "c"}, "shard-1-of-2/": {"b"}}, nil, 3, 0},
		{"missing part", map[string][]string{"shard-1-of-3/": {"b"}}, ErrIncomplete, 1, 0},
		{"duplicate across parts", map[string][]string{"shard-0-of-2/": {"a"}, "shard-1-of-2/": {"a"}}, nil, 2, 1},
		{"mixed splits", map[string][]string{"shard-0-of-2/": {"a"}, "shard-0-of-3/": {"b"}}, errors.New("mixed"), 0, 0},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bucket := fmt.Sprintf("merge%d", i)
			srv.CreateBucket(bucket)
			for sub, ids := range tc.parts {
				putPart(t, srv, bucket, "run/"+sub, ids...)
			}
			s := newTestS3(t, srv, bucket, "run/", 0)
			m, err := s.MergeShardManifests(ctx)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("merge: %v", err)
			case tc.wantErr != nil && err == nil:
				t.Fatalf("merge: no error, want %v", tc.wantErr)
			case errors.Is(tc.wantErr, ErrIncomplete) && !errors.Is(err, ErrIncomplete):
				t.Fatalf("merge: %v, want ErrIncomplete", err)
			}
			if tc.wantErr != nil && !errors.Is(tc.wantErr, ErrIncomplete) {
				return
			}
			if m.Records != tc.records {
				t.Fatalf("merged %d records, want %d", m.Records, tc.records)
			}
			raw, err := srv.Get(bucket, "run/manifest.json")
			if err != nil {
				t.Fatalf("merged manifest not written: %v", err)
			}
			var got MergedManifest
			if err := json.Unmarshal(raw, &got); err != nil || got.Records != tc.records {
				t.Fatalf("merged manifest in S3: %s (%v)", raw, err)
			}
			for _, sh := range m.Shards {
				if !strings.HasPrefix(sh.S3Key, "run/"+sh.Name) || !strings.HasPrefix(sh.Name, "shard-") {
					t.Fatalf("shard name %q key %q", sh.Name, sh.S3Key)
				}
			}
			r, err := s.VerifyMerged(ctx, m)
			if err != nil {
				t.Fatal(err)
			}
			if r.DuplicateCount != tc.dups || len(r.Problems) != 0 || r.Records != tc.records {
				t.Fatalf("verify: %+v, want %d duplicates", r, tc.dups)
			}
		})
	}
}
