package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gend-dev/gend/api"
	"github.com/gend-dev/gend/internal/s3test"
)

// s3Manifest is manifest.json as far as this test reads it.
type s3Manifest struct {
	JobID  string `json:"job_id"`
	Shards []struct {
		Name   string `json:"name"`
		Bytes  int64  `json:"bytes"`
		SHA256 string `json:"sha256"`
		S3Key  string `json:"s3_key"`
	} `json:"shards"`
}

// TestS3Outage: gensim + gend (real binaries) + a real S3 server on
// loopback. The input is read from s3://, the output goes to output.s3;
// the S3 server is stopped mid-job while shards keep closing locally, then
// restarted. At the end every shard and the manifest are in S3 exactly once
// and byte-identical to the local files, the manifest records every key,
// s3_uploaded / s3_bytes tell the truth, and the credentials appear nowhere
// in gend's log.
func TestS3Outage(t *testing.T) {
	dir := t.TempDir()
	srv := s3test.Start(t)
	const (
		inBucket  = "inputs"
		outBucket = "datasets"
		prefix    = "e2e/run1/"
		// Distinctive values so a leak into the log cannot be a coincidence;
		// the loopback server does not check signatures.
		accessKey = "AKIAOBSE2E7QX3LEAKCHECK"
		secretKey = "obs-e2e-secret/K7MDENGbPxRfiCYzzLEAKCHECK"
	)
	in := writeInput(t, dir, 1500, "s3")
	raw, err := os.ReadFile(in.path)
	if err != nil {
		t.Fatal(err)
	}
	srv.Put(inBucket, "prompts/input.jsonl", raw)
	srv.CreateBucket(outBucket)
	if err := os.Remove(in.path); err != nil { // gend must read it from S3
		t.Fatal(err)
	}

	// startGend passes the test process's environment to gend.
	t.Setenv("AWS_ACCESS_KEY_ID", accessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secretKey)
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "no-such-credentials"))

	_, urls := startSim(t, "--servers", "2", "--speedup", "100", "--seed", "5")
	g := startGend(t, filepath.Join(dir, "state"), writeFleet(t, dir, urls), "",
		"--s3-endpoint", srv.URL(), "--log-level", "debug")
	out := filepath.Join(dir, "out")
	spec := strings.Replace(jobSpec("s3://"+inBucket+"/prompts/input.jsonl", out, ""),
		"output: {dir: "+out+", shard_records: 200, shard_seconds: 5}",
		"output: {dir: "+out+", s3: s3://"+outBucket+"/"+prefix+", shard_records: 100, shard_seconds: 2}", 1)
	if !strings.Contains(spec, "s3: s3://"+outBucket) {
		t.Fatalf("job spec lacks output.s3:\n%s", spec)
	}
	ctx := context.Background()
	j, err := g.c.SubmitJob(ctx, []byte(spec), api.ContentTypeYAML)
	if err != nil {
		t.Fatal(err)
	}

	// Uploads work before the outage.
	j = waitJob(t, g.c, j.ID, 30*time.Second, func(j api.Job) bool { return j.Progress.S3Uploaded >= 1 })
	if api.Terminal(j.Status) {
		t.Fatalf("job ended (%s) before the outage could start; make it longer", j.Status)
	}
	srv.Stop()
	down := time.Now()
	before := j.Progress.Completed
	// While S3 is down the job goes on and shards close locally.
	j = waitJob(t, g.c, j.ID, 30*time.Second, func(j api.Job) bool {
		return j.Progress.S3Pending >= 2 || api.Terminal(j.Status)
	})
	if j.Progress.S3Pending < 2 {
		t.Fatalf("during the outage only %d shards closed locally (status %s)", j.Progress.S3Pending, j.Status)
	}
	if j.Progress.Completed <= before {
		t.Fatalf("no progress while S3 was down: completed %d → %d", before, j.Progress.Completed)
	}
	upDuringOutage := j.Progress.S3Uploaded
	t.Logf("outage: %v, %d shards pending, %d uploaded", time.Since(down).Round(time.Millisecond), j.Progress.S3Pending, upDuringOutage)
	srv.Restart()
	restarted := time.Now()
	// Uploads resume on their own (backoff 1 s doubling, capped at 2 min).
	waitJob(t, g.c, j.ID, 60*time.Second, func(j api.Job) bool { return j.Progress.S3Uploaded > upDuringOutage })
	t.Logf("uploads resumed %v after the restart", time.Since(restarted).Round(time.Millisecond))

	j = waitJob(t, g.c, j.ID, 90*time.Second, func(j api.Job) bool {
		return api.Terminal(j.Status) && j.Progress.S3Pending == 0
	})
	t.Logf("job done and every shard uploaded %v after the restart", time.Since(restarted).Round(time.Millisecond))
	if j.Status != api.StatusCompleted {
		t.Fatalf("job ended %s (%s)", j.Status, j.Reason)
	}
	verifyOutput(t, out, in)

	// The manifest in S3 is uploaded after the last shard's key is recorded;
	// allow the uploader a moment to put it.
	localMF := filepath.Join(out, "manifest.json")
	var local []byte
	deadline := time.Now().Add(15 * time.Second)
	for {
		local, err = os.ReadFile(localMF)
		if err != nil {
			t.Fatal(err)
		}
		remote, _ := srv.Get(outBucket, prefix+"manifest.json")
		if bytes.Equal(local, remote) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("manifest in S3 differs from the local one:\nlocal:\n%s\nS3:\n%s", local, remote)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var mf s3Manifest
	if err := json.Unmarshal(local, &mf); err != nil {
		t.Fatal(err)
	}
	want := []string{prefix + "manifest.json"}
	var shardBytes int64
	for _, s := range mf.Shards {
		key := prefix + s.Name
		if s.S3Key != key {
			t.Errorf("manifest: shard %s has s3_key %q, want %q", s.Name, s.S3Key, key)
		}
		want = append(want, key)
		shardBytes += s.Bytes
		localData, err := os.ReadFile(filepath.Join(out, s.Name))
		if err != nil {
			t.Fatal(err)
		}
		remote, err := srv.Get(outBucket, key)
		if err != nil {
			t.Errorf("shard %s not in S3: %v", s.Name, err)
			continue
		}
		if !bytes.Equal(localData, remote) {
			t.Errorf("shard %s: S3 object (%d bytes) differs from the local file (%d bytes)", s.Name, len(remote), len(localData))
		}
		if n := srv.Puts(outBucket, key); n > 1 {
			t.Logf("shard %s stored %d times (an upload cut by the outage was redone)", s.Name, n)
		}
	}
	sort.Strings(want)
	if got := srv.Keys(outBucket); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("objects in s3://%s:\n%s\nwant exactly:\n%s", outBucket, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(mf.Shards) < 5 {
		t.Errorf("only %d shards: the outage did not span several shard closes", len(mf.Shards))
	}

	// s3_uploaded / s3_bytes tell the truth, in the API, progress.json and /metrics.
	if j.Progress.S3Uploaded != int64(len(mf.Shards)) || j.Progress.S3Bytes != shardBytes {
		t.Errorf("API progress: s3_uploaded %d s3_bytes %d; S3 holds %d shards, %d bytes",
			j.Progress.S3Uploaded, j.Progress.S3Bytes, len(mf.Shards), shardBytes)
	}
	var p api.Progress
	raw, err = os.ReadFile(filepath.Join(out, "progress.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	if p.S3Uploaded != int64(len(mf.Shards)) || p.S3Bytes != shardBytes || p.S3Pending != 0 {
		t.Errorf("progress.json: s3_uploaded %d s3_bytes %d s3_pending %d; S3 holds %d shards, %d bytes",
			p.S3Uploaded, p.S3Bytes, p.S3Pending, len(mf.Shards), shardBytes)
	}
	metrics := scrape(t, g.addr)
	for name, v := range map[string]float64{
		"gend_s3_uploaded_shards_total": float64(len(mf.Shards)),
		"gend_s3_uploaded_bytes_total":  float64(shardBytes),
		"gend_s3_pending_shards":        0,
	} {
		if got, ok := metrics[name]; !ok || got != v {
			t.Errorf("/metrics %s = %v (present %v), want %v", name, got, ok, v)
		}
	}

	// The outage was noticed (one warning) and the catch-up reported, and
	// the credentials appear nowhere in what gend wrote or serves.
	log := g.p.output()
	if !strings.Contains(log, "s3 upload failed") || !strings.Contains(log, "s3 uploads caught up") {
		t.Errorf("gend's log lacks the outage warning or the catch-up line")
	}
	jobJSON, _ := json.Marshal(j)
	for _, secret := range []string{accessKey, secretKey} {
		for what, text := range map[string]string{"gend's log": log, "the job API": string(jobJSON), "progress.json": string(raw)} {
			if strings.Contains(text, secret) {
				t.Errorf("a credential appears in %s", what)
			}
		}
	}
}

// scrape reads gend's /metrics into name{labels} → value (unlabelled
// series under their bare name).
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(b.String(), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		var v float64
		if err := json.Unmarshal([]byte(line[i+1:]), &v); err != nil {
			continue // NaN, +Inf
		}
		out[line[:i]] = v
	}
	return out
}
