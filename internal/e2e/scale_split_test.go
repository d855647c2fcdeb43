package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gend-dev/gend/api"
	"github.com/gend-dev/gend/internal/s3test"
)

// TestSplitJobS3: one job split across two controllers (two gend processes,
// each with its own gensim servers) by `shard: 0/2` and `shard: 1/2`, both
// writing to the same output.s3 prefix of a real S3 server on loopback.
// Their objects must not collide (each writes under shard-<i>-of-2/), and
// `gend merge --verify` must produce a manifest.json at the prefix root whose
// shards, with the two controllers' errors.jsonl, hold every input line
// exactly once.
func TestSplitJobS3(t *testing.T) {
	dir := t.TempDir()
	srv := s3test.Start(t)
	const bucket, prefix = "datasets", "split/run1/"
	srv.CreateBucket(bucket)
	env := []string{"AWS_ACCESS_KEY_ID=split-test", "AWS_SECRET_ACCESS_KEY=split-test-secret", "AWS_REGION=us-east-1",
		"AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(dir, "none")}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v) // startGend passes the test's environment on
	}

	// The input: unique ids, plus bad lines (id-less, reported in the
	// errors.jsonl of whichever controller owns the line).
	const n = 1200
	in := filepath.Join(dir, "input.jsonl")
	var b strings.Builder
	ids := map[string]bool{}
	bad := 0
	for i := range n {
		id := fmt.Sprintf("split-%05d", i)
		ids[id] = true
		fmt.Fprintf(&b, `{"custom_id":%q,"messages":[{"role":"user","content":"Split question %d: explain it."}]}`+"\n", id, i)
		if i%101 == 7 {
			b.WriteString("{broken line\n")
			bad++
		}
	}
	if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}

	_, urls := startSim(t, "--servers", "4", "--speedup", "200", "--seed", "9", "--output-mean", "400", "--model", "8b", "--gpu", "h200")
	var gends [2]*gendRun
	var outs [2]string
	var jobs [2]api.Job
	for i := range 2 {
		d := filepath.Join(dir, fmt.Sprintf("ctl%d", i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		gends[i] = startGend(t, filepath.Join(d, "state"), writeFleet(t, d, urls[2*i:2*i+2]), "", "--s3-endpoint", srv.URL())
		outs[i] = filepath.Join(d, "out")
		spec := fmt.Sprintf(`name: split
input: %s
shard: "%d/2"
request:
  endpoint: /v1/chat/completions
  model: default
  params: {max_tokens: 2048, chat_template_kwargs: {enable_thinking: true}}
output: {dir: %s, s3: "s3://%s/%s", shard_records: 100, shard_seconds: 2}
`, in, i, outs[i], bucket, prefix)
		j, err := gends[i].c.SubmitJob(context.Background(), []byte(spec), api.ContentTypeYAML)
		if err != nil {
			t.Fatalf("controller %d: submit: %v", i, err)
		}
		jobs[i] = j
	}
	for i := range 2 {
		jobs[i] = waitJob(t, gends[i].c, jobs[i].ID, 90*time.Second, func(j api.Job) bool {
			return api.Terminal(j.Status) && j.Progress.S3Pending == 0
		})
		if jobs[i].Status != api.StatusCompleted {
			t.Fatalf("controller %d: job %s (%s)", i, jobs[i].Status, jobs[i].Reason)
		}
	}
	completed := jobs[0].Progress.Completed + jobs[1].Progress.Completed
	if jobs[0].Progress.Total+jobs[1].Progress.Total != int64(n+bad) {
		t.Fatalf("totals %d + %d, want %d lines split between the controllers", jobs[0].Progress.Total, jobs[1].Progress.Total, n+bad)
	}
	if jobs[0].Progress.Completed == 0 || jobs[1].Progress.Completed == 0 {
		t.Fatalf("completed %d and %d: each controller must do its share", jobs[0].Progress.Completed, jobs[1].Progress.Completed)
	}

	// No collisions: every key lives under one controller's sub-prefix.
	for _, k := range srv.Keys(bucket) {
		if !strings.HasPrefix(k, prefix+"shard-0-of-2/") && !strings.HasPrefix(k, prefix+"shard-1-of-2/") {
			t.Errorf("object %s is outside the controllers' sub-prefixes", k)
		}
		if c := srv.Puts(bucket, k); c > 1 && !strings.HasSuffix(k, "manifest.json") {
			t.Errorf("shard object %s written %d times", k, c)
		}
	}

	// Merge (the last manifest upload may trail s3_pending reaching 0).
	mergeRe := regexp.MustCompile(`merged 2 of 2 parts .*: (\d+) shards, (\d+) records`)
	var out string
	deadline := time.Now().Add(20 * time.Second)
	for {
		cmd := exec.Command(filepath.Join(binDir, "gend"), "merge", "--verify", "--s3-endpoint", srv.URL(), "s3://"+bucket+"/"+prefix)
		cmd.Env = append(os.Environ(), env...)
		raw, err := cmd.CombinedOutput()
		out = string(raw)
		m := mergeRe.FindStringSubmatch(out)
		if err == nil && m != nil && m[2] == fmt.Sprint(completed) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gend merge (err %v) never covered the %d completed records:\n%s", err, completed, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(out, "0 duplicate custom_ids, 0 problems") {
		t.Fatalf("gend merge --verify:\n%s", out)
	}

	// Independent check of the merged manifest: shards ∪ errors = input, once each.
	raw, err := srv.Get(bucket, prefix+"manifest.json")
	if err != nil {
		t.Fatalf("merged manifest: %v", err)
	}
	var mf struct {
		ShardCount int `json:"shard_count"`
		Parts      []struct {
			Shard string `json:"shard"`
			JobID string `json:"job_id"`
		} `json:"parts"`
		Shards []struct {
			Name    string `json:"name"`
			Records int    `json:"records"`
			S3Key   string `json:"s3_key"`
		} `json:"shards"`
	}
	if err := json.Unmarshal(raw, &mf); err != nil {
		t.Fatal(err)
	}
	if mf.ShardCount != 2 || len(mf.Parts) != 2 || mf.Parts[0].JobID != jobs[0].ID || mf.Parts[1].JobID != jobs[1].ID {
		t.Fatalf("merged manifest parts: %s", raw)
	}
	seen := map[string]int{}
	records := 0
	for _, s := range mf.Shards {
		if s.S3Key != prefix+s.Name {
			t.Errorf("shard %s: s3_key %s, want the prefix + name", s.Name, s.S3Key)
		}
		data, err := srv.Get(bucket, s.S3Key)
		if err != nil {
			t.Fatalf("shard %s: %v", s.S3Key, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		k := 0
		for sc.Scan() {
			var l outLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.CustomID == nil || l.Error != nil {
				t.Fatalf("%s: bad record %q", s.S3Key, sc.Text())
			}
			seen[*l.CustomID]++
			k++
		}
		if k != s.Records {
			t.Errorf("%s: %d records, manifest says %d", s.S3Key, k, s.Records)
		}
		records += k
	}
	errLines, noID := 0, 0
	for i := range 2 {
		data, err := os.ReadFile(filepath.Join(outs[i], "errors.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			if line == "" {
				continue
			}
			var l outLine
			if err := json.Unmarshal([]byte(line), &l); err != nil || l.Error == nil {
				t.Fatalf("controller %d errors.jsonl: %q", i, line)
			}
			errLines++
			if l.CustomID == nil {
				noID++
			} else {
				seen[*l.CustomID]++
			}
		}
	}
	for id := range ids {
		if seen[id] != 1 {
			t.Errorf("custom_id %s: %d times in merged shards ∪ errors, want 1", id, seen[id])
		}
	}
	for id := range seen {
		if !ids[id] {
			t.Errorf("custom_id %s in the output is not in the input", id)
		}
	}
	if noID != bad {
		t.Errorf("%d id-less error lines, want %d", noID, bad)
	}
	if int64(records) != completed {
		t.Errorf("merged shards hold %d records, the controllers completed %d", records, completed)
	}
	t.Logf("split job: %d + %d completed, %d error lines, %d merged shards", jobs[0].Progress.Completed, jobs[1].Progress.Completed, errLines, len(mf.Shards))
}

// TestRemoteTelemetry: a gend on the "GPU host" reads its GPUs (gensim's
// /sim/gpu, --nvml sim) and serves them at /v1/gpus; the controller gend,
// whose fleet config names that gend as the servers' host, reads them and
// its /v1/diagnosis shows GPU evidence (the roofline from the GPUs' peak
// bandwidth) for those servers.
func TestRemoteTelemetry(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, urls := startSim(t, "--servers", "2", "--speedup", "20", "--seed", "3", "--model", "8b", "--gpu", "h200")
	hostDir := filepath.Join(dir, "host")
	if err := os.MkdirAll(hostDir, 0o755); err != nil {
		t.Fatal(err)
	}
	host := startGend(t, filepath.Join(hostDir, "state"), writeFleet(t, hostDir, urls), "", "--nvml", "sim")
	var g api.GPUs
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		g, err = host.c.GPUs(context.Background())
		if err == nil && g.Available && len(g.GPUs) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("host gend /v1/gpus never had the 2 simulated GPUs: %+v err %v", g, err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The controller: same servers, their telemetry from the host's gend.
	var b strings.Builder
	b.WriteString("servers:\n")
	for i, u := range urls {
		fmt.Fprintf(&b, "  - {name: node1-gpu%d, url: %s, gpus: [%d], host: %s}\n", i, u, i, host.addr)
	}
	b.WriteString("model: {weight_bytes: 16000000000, kv_bytes_per_token: 131072}\n")
	fleet := filepath.Join(dir, "controller.yaml")
	if err := os.WriteFile(fleet, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ctl := startGend(t, filepath.Join(dir, "ctl-state"), fleet, "")
	in := writeInput(t, dir, 400, "tele")
	spec := jobSpec(in.path, filepath.Join(dir, "out"), "scheduler: {mode: static, per_server: 32}")
	j, err := ctl.c.SubmitJob(context.Background(), []byte(spec), api.ContentTypeYAML)
	if err != nil {
		t.Fatal(err)
	}
	var dg api.Diagnosis
	deadline = time.Now().Add(30 * time.Second)
	for {
		if dg, err = ctl.c.Diagnosis(context.Background()); err != nil {
			t.Fatal(err)
		}
		ok := len(dg.Servers) == 2
		for _, s := range dg.Servers {
			if s.RooflineTokPerSec <= 0 || !strings.Contains(strings.Join(s.Evidence, "\n"), "vs roofline") {
				ok = false
			}
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			raw, _ := json.MarshalIndent(dg, "", "  ")
			t.Fatalf("controller diagnosis never showed GPU evidence for both remote servers:\n%s", raw)
		}
		time.Sleep(250 * time.Millisecond)
	}
	for _, s := range dg.Servers {
		if strings.Contains(strings.Join(s.Evidence, "\n"), "no GPU telemetry mapped") {
			t.Errorf("server %s: %v", s.Name, s.Evidence)
		}
	}
	if _, err := ctl.c.CancelJob(context.Background(), j.ID); err != nil {
		t.Fatal(err)
	}
}
