package sink

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/gend-dev/gend/internal/s3test"
)

func TestParseS3URL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, bucket, key string
		ok              bool
	}{
		{"s3://datasets/infinity/", "datasets", "infinity/", true},
		{"s3://b/k/x.jsonl.zst", "b", "k/x.jsonl.zst", true},
		{"s3://b", "b", "", true},
		{"s3:///k", "", "", false},
		{"http://b/k", "", "", false},
	}
	for _, tt := range tests {
		b, k, err := ParseS3URL(tt.in)
		if (err == nil) != tt.ok || b != tt.bucket || k != tt.key {
			t.Errorf("ParseS3URL(%q) = %q, %q, %v", tt.in, b, k, err)
		}
	}
}

func TestEndpointHost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in     string
		secure bool
		host   string
		tls    bool
		ok     bool
	}{
		{"", false, "s3.amazonaws.com", true, true},
		{"http://127.0.0.1:9000", true, "127.0.0.1:9000", false, true},
		{"https://s3.example.com/", false, "s3.example.com", true, true},
		{"minio.local:9000", true, "minio.local:9000", true, true},
		{"minio.local:9000", false, "minio.local:9000", false, true},
		{"ftp://x", false, "", false, false},
		{"http://x/path", false, "", false, false},
	}
	for _, tt := range tests {
		h, tls, err := endpointHost(tt.in, tt.secure)
		if (err == nil) != tt.ok || h != tt.host || tls != tt.tls {
			t.Errorf("endpointHost(%q, %v) = %q, %v, %v", tt.in, tt.secure, h, tls, err)
		}
	}
}

func newTestS3(t *testing.T, srv *s3test.Server, bucket, prefix string, partSize uint64) *S3 {
	t.Helper()
	s, err := NewS3(S3Options{
		Endpoint: srv.URL(), Bucket: bucket, Prefix: prefix, Region: "us-east-1",
		Creds:      credentials.NewStaticV4(s3test.AccessKey, s3test.SecretKey, ""),
		PartSize:   partSize,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Logger: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// checkUploaded verifies that every shard of the manifest is in the bucket
// with the local content, that nothing else is, and that the uploaded
// manifest records every key.
func checkUploaded(t *testing.T, srv *s3test.Server, bucket, prefix, dir string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, manifestName))
	if err != nil {
		t.Fatal(err)
	}
	var local Manifest
	if err := json.Unmarshal(data, &local); err != nil {
		t.Fatal(err)
	}
	want := []string{prefix + manifestName}
	for _, s := range local.Shards {
		if s.S3Key != prefix+s.Name {
			t.Errorf("%s: s3_key %q", s.Name, s.S3Key)
		}
		want = append(want, prefix+s.Name)
		obj, err := srv.Get(bucket, prefix+s.Name)
		if err != nil {
			t.Errorf("%s: %v", s.Name, err)
			continue
		}
		sum := sha256.Sum256(obj)
		if hex.EncodeToString(sum[:]) != s.SHA256 {
			t.Errorf("%s: object sha256 differs from the manifest", s.Name)
		}
	}
	slices.Sort(want)
	if got := srv.Keys(bucket); !slices.Equal(got, want) {
		t.Errorf("bucket keys %v, want %v", got, want)
	}
	remote, err := srv.Get(bucket, prefix+manifestName)
	if err != nil {
		t.Fatal(err)
	}
	var rm Manifest
	if err := json.Unmarshal(remote, &rm); err != nil {
		t.Fatal(err)
	}
	if len(rm.Shards) != len(local.Shards) {
		t.Fatalf("uploaded manifest has %d shards, local %d", len(rm.Shards), len(local.Shards))
	}
	for i := range rm.Shards {
		if rm.Shards[i] != local.Shards[i] {
			t.Errorf("uploaded manifest entry %+v, local %+v", rm.Shards[i], local.Shards[i])
		}
	}
}

// TestS3Outage: shards close while S3 is down; the sink keeps writing;
// when S3 comes back every shard is uploaded, once, and the manifest
// records every key.
func TestS3Outage(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	srv.CreateBucket("out")
	dir := t.TempDir()
	up := newTestS3(t, srv, "out", "jobs/a", 0)
	l, _ := openT(t, Options{Dir: dir, ShardRecords: 10, OnShardClosed: func(ShardInfo) { up.Notify() }})
	ctx, cancel := context.WithCancel(context.Background())
	var g errgroup.Group
	g.Go(func() error { return up.Run(ctx, l) })
	defer func() {
		cancel()
		if err := g.Wait(); err != nil {
			t.Error(err)
		}
	}()
	write := func(from, to int64) {
		for i := from; i <= to; i++ {
			if err := l.WriteResult(result(i, 2000)); err != nil {
				t.Fatal(err)
			}
		}
	}
	drain := func() {
		dctx, dcancel := context.WithTimeout(ctx, 20*time.Second)
		defer dcancel()
		if err := up.Drain(dctx, l); err != nil {
			t.Fatal(err)
		}
	}
	write(1, 25)
	drain()
	if up.Uploaded() != 2 || up.Pending() != 0 {
		t.Fatalf("before outage: uploaded %d pending %d", up.Uploaded(), up.Pending())
	}

	srv.Stop()
	write(26, 60) // four more shards close during the outage
	if up.Pending() != 4 || up.Uploaded() != 2 {
		t.Errorf("during outage: uploaded %d pending %d", up.Uploaded(), up.Pending())
	}
	short, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if err := up.Drain(short, l); err == nil {
		t.Errorf("Drain succeeded with S3 down")
	}
	scancel()

	srv.Restart()
	drain()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	drain()
	if up.Uploaded() != 6 || up.Pending() != 0 || len(l.Manifest().Shards) != 6 {
		t.Errorf("after outage: uploaded %d pending %d", up.Uploaded(), up.Pending())
	}
	var bytes int64
	for _, s := range l.Manifest().Shards {
		bytes += s.Bytes
		if n := srv.Puts("out", "jobs/a/"+s.Name); n != 1 {
			t.Errorf("%s stored %d times", s.Name, n)
		}
	}
	if up.UploadedBytes() != bytes {
		t.Errorf("UploadedBytes %d, want %d", up.UploadedBytes(), bytes)
	}
	checkUploaded(t, srv, "out", "jobs/a/", dir)
	readOutput(t, dir).checkOnce(t, 60)
}

// TestS3ResumeAfterRestart: shards closed by a run that never uploaded
// them are uploaded by the next run.
func TestS3ResumeAfterRestart(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	dir := t.TempDir()
	l, _ := openT(t, Options{Dir: dir, ShardRecords: 4})
	for i := int64(1); i <= 10; i++ {
		if err := l.WriteResult(result(i, 100)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	l.abandon() // kill -9 before any upload: 2 closed shards, 2 records in the open one
	l2, rec := openT(t, Options{Dir: dir, ShardRecords: 4})
	if rec.Completed != 10 {
		t.Fatalf("recovered %d", rec.Completed)
	}
	up := newTestS3(t, srv, "bkt", "", 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := up.Drain(ctx, l2); err != nil {
		t.Fatal(err)
	}
	if up.Uploaded() != 3 {
		t.Errorf("uploaded %d, want 3", up.Uploaded())
	}
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	checkUploaded(t, srv, "bkt", "", dir)
}

func TestS3Multipart(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	dir := t.TempDir()
	l, _ := openT(t, Options{Dir: dir, ShardRecords: 1000})
	for i := int64(1); i <= 70; i++ { // ~7 MB: two 5 MiB parts
		if err := l.WriteResult(result(i, 100_000)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	up := newTestS3(t, srv, "big", "p/", 5<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := up.Drain(ctx, l); err != nil {
		t.Fatal(err)
	}
	if n := srv.Parts("big", "p/shards/part-00000.jsonl"); n != 2 {
		t.Errorf("%d parts uploaded, want 2", n)
	}
	checkUploaded(t, srv, "big", "p/", dir)
}

func TestS3Download(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	content := []byte(strings.Repeat(`{"custom_id":"a","prompt":"hi"}`+"\n", 1000))
	srv.Put("inputs", "data/prompts.jsonl", content)
	up := newTestS3(t, srv, "", "", 0)
	dir := t.TempDir()
	tests := []struct {
		name string
		url  string
		ok   bool
	}{
		{"object", "s3://inputs/data/prompts.jsonl", true},
		{"missing key", "s3://inputs/data/none.jsonl", false},
		{"prefix, not a key", "s3://inputs/data/", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			dst := filepath.Join(dir, tt.name, "prompts.jsonl")
			err := up.Download(ctx, tt.url, dst)
			if (err == nil) != tt.ok {
				t.Fatalf("Download: %v", err)
			}
			got, rerr := os.ReadFile(dst)
			if tt.ok && (rerr != nil || string(got) != string(content)) {
				t.Errorf("downloaded %d bytes (%v), want %d", len(got), rerr, len(content))
			}
			if !tt.ok && rerr == nil {
				t.Errorf("a file was left after a failed download")
			}
		})
	}
}

func TestDefaultCredentials(t *testing.T) {
	// Not parallel: it sets environment variables.
	tests := []struct {
		name       string
		env        map[string]string
		file       string
		wantAccess string
	}{
		{"environment", map[string]string{"AWS_ACCESS_KEY_ID": "AKENV", "AWS_SECRET_ACCESS_KEY": "senv"}, "", "AKENV"},
		{"shared credentials file", nil, "[default]\naws_access_key_id = AKFILE\naws_secret_access_key = sfile\n", "AKFILE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_CONFIG_FILE"} {
				t.Setenv(k, "")
			}
			t.Setenv("HOME", t.TempDir())
			t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			if tt.file != "" {
				p := filepath.Join(t.TempDir(), "credentials")
				if err := os.WriteFile(p, []byte(tt.file), 0o600); err != nil {
					t.Fatal(err)
				}
				t.Setenv("AWS_SHARED_CREDENTIALS_FILE", p)
			}
			v, err := DefaultCredentials().GetWithContext(nil)
			if err != nil {
				t.Fatal(err)
			}
			if v.AccessKeyID != tt.wantAccess {
				t.Errorf("access key %q, want %q", v.AccessKeyID, tt.wantAccess)
			}
		})
	}
}
