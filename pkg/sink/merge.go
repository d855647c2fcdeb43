package sink

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
)

// A job split across controllers by input shards ("shard: i/n" in the job
// spec) uploads under its own sub-prefix of output.s3, so controllers that
// share a prefix never write the same key:
//
//	s3://bucket/prefix/shard-0-of-2/shards/part-00000.jsonl
//	s3://bucket/prefix/shard-0-of-2/manifest.json
//	s3://bucket/prefix/shard-1-of-2/...
//	s3://bucket/prefix/manifest.json     ← MergeShardManifests
//
// See docs/scale.md.

// ShardPrefix is the S3 prefix the controller of input shard index/count
// writes under: prefix + "shard-<index>-of-<count>/". A job that is not
// split (count ≤ 1) keeps prefix.
func ShardPrefix(prefix string, index, count int) string {
	if count <= 1 {
		return prefix
	}
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return fmt.Sprintf("%sshard-%d-of-%d/", prefix, index, count)
}

var shardDirRe = regexp.MustCompile(`^shard-(\d+)-of-(\d+)/$`)

// MergedManifest is the manifest.json MergeShardManifests writes at the
// root of a split job's prefix. Shard names are relative to that prefix
// ("shard-0-of-2/shards/part-00000.jsonl"); S3Key is the full object key.
type MergedManifest struct {
	UpdatedAt time.Time `json:"updated_at"`
	// ShardCount is n of "i/n"; Parts has one entry per controller found.
	ShardCount int          `json:"shard_count"`
	Parts      []MergedPart `json:"parts"`
	// Missing lists the "i/n" whose manifest is not in S3 yet.
	Missing []string    `json:"missing,omitempty"`
	Shards  []ShardInfo `json:"shards"`
	Records int64       `json:"records"`
	Bytes   int64       `json:"bytes"`
}

// MergedPart is one controller's manifest as merged.
type MergedPart struct {
	Shard     string    `json:"shard"` // "i/n"
	Prefix    string    `json:"prefix"`
	JobID     string    `json:"job_id"`
	UpdatedAt time.Time `json:"updated_at"`
	Shards    int       `json:"shards"`
	Records   int64     `json:"records"`
	// NotUploaded counts shards its manifest lists without an s3_key yet
	// (left out of the merge).
	NotUploaded int `json:"not_uploaded,omitempty"`
}

// ErrIncomplete is returned (wrapped) by MergeShardManifests when some
// parts' manifests are missing; the merged manifest is still written.
var ErrIncomplete = errors.New("some shards of the split job have no manifest yet")

// MergeShardManifests reads the manifest of every "shard-<i>-of-<n>/" under
// the uploader's prefix, writes the merged manifest.json at the prefix root
// and returns it. It is idempotent: run it again as parts progress. Parts
// with different n under one prefix are an error; missing parts give a
// wrapped ErrIncomplete after the (partial) merged manifest is written.
func (s *S3) MergeShardManifests(ctx context.Context) (MergedManifest, error) {
	m := MergedManifest{UpdatedAt: time.Now().UTC(), Shards: []ShardInfo{}, Parts: []MergedPart{}}
	if s.opts.Bucket == "" {
		return m, errors.New("merge manifests: no bucket")
	}
	found := map[int]string{} // index → sub-prefix
	for obj := range s.client.ListObjects(ctx, s.opts.Bucket, minio.ListObjectsOptions{Prefix: s.opts.Prefix}) {
		if obj.Err != nil {
			return m, fmt.Errorf("merge manifests: list s3://%s/%s: %w", s.opts.Bucket, s.opts.Prefix, obj.Err)
		}
		rel := strings.TrimPrefix(obj.Key, s.opts.Prefix)
		sm := shardDirRe.FindStringSubmatch(rel)
		if sm == nil {
			continue
		}
		i, _ := strconv.Atoi(sm[1])
		n, _ := strconv.Atoi(sm[2])
		if n < 2 || i >= n {
			continue
		}
		if m.ShardCount != 0 && n != m.ShardCount {
			return m, fmt.Errorf("merge manifests: s3://%s/%s holds splits into %d and into %d shards: use one prefix per split",
				s.opts.Bucket, s.opts.Prefix, m.ShardCount, n)
		}
		m.ShardCount = n
		found[i] = rel
	}
	if m.ShardCount == 0 {
		return m, fmt.Errorf("merge manifests: no shard-<i>-of-<n>/ under s3://%s/%s", s.opts.Bucket, s.opts.Prefix)
	}
	for i := range m.ShardCount {
		rel, ok := found[i]
		if !ok {
			m.Missing = append(m.Missing, fmt.Sprintf("%d/%d", i, m.ShardCount))
			continue
		}
		part, shards, err := s.readPart(ctx, rel)
		if errors.Is(err, errNoManifest) {
			m.Missing = append(m.Missing, fmt.Sprintf("%d/%d", i, m.ShardCount))
			continue
		}
		if err != nil {
			return m, err
		}
		part.Shard = fmt.Sprintf("%d/%d", i, m.ShardCount)
		m.Parts = append(m.Parts, part)
		m.Shards = append(m.Shards, shards...)
	}
	for _, sh := range m.Shards {
		m.Records += sh.Records
		m.Bytes += sh.Bytes
	}
	data, err := json.MarshalIndent(&m, "", "  ")
	if err != nil {
		return m, fmt.Errorf("merge manifests: marshal: %w", err)
	}
	data = append(data, '\n')
	key := s.Key(manifestName)
	if _, err := s.client.PutObject(ctx, s.opts.Bucket, key, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: "application/json"}); err != nil {
		return m, fmt.Errorf("merge manifests: upload %s: %w", key, err)
	}
	if len(m.Missing) > 0 {
		return m, fmt.Errorf("merge manifests: %s missing: %w", strings.Join(m.Missing, ", "), ErrIncomplete)
	}
	return m, nil
}

var errNoManifest = errors.New("no manifest")

// readPart reads one controller's manifest under rel (a sub-prefix).
func (s *S3) readPart(ctx context.Context, rel string) (MergedPart, []ShardInfo, error) {
	key := s.opts.Prefix + rel + manifestName
	raw, err := s.getObject(ctx, key, 64<<20)
	if err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return MergedPart{}, nil, errNoManifest
		}
		return MergedPart{}, nil, fmt.Errorf("merge manifests: read %s: %w", key, err)
	}
	var pm Manifest
	if err := json.Unmarshal(raw, &pm); err != nil {
		return MergedPart{}, nil, fmt.Errorf("merge manifests: decode %s: %w", key, err)
	}
	part := MergedPart{Prefix: rel, JobID: pm.JobID, UpdatedAt: pm.UpdatedAt}
	var out []ShardInfo
	for _, sh := range pm.Shards {
		if sh.S3Key == "" {
			part.NotUploaded++
			continue
		}
		sh.Name = rel + sh.Name
		out = append(out, sh)
		part.Shards++
		part.Records += sh.Records
	}
	return part, out, nil
}

func (s *S3) getObject(ctx context.Context, key string, limit int64) ([]byte, error) {
	obj, err := s.client.GetObject(ctx, s.opts.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	return io.ReadAll(io.LimitReader(obj, limit))
}

// MergeReport is what VerifyMerged found.
type MergeReport struct {
	Shards  int
	Records int64
	Bytes   int64
	// Duplicates are custom_ids found more than once across all shards
	// (at most 20 listed); DuplicateCount counts them all.
	Duplicates     []string
	DuplicateCount int
	// Problems are objects whose bytes or sha256 differ from the manifest,
	// or whose record count does not match.
	Problems []string
}

// VerifyMerged downloads every shard of m, checks its size, sha256 and
// record count against the manifest and reports custom_ids that occur more
// than once across the whole split job. It keeps every custom_id in memory
// (tens of bytes each): meant for checks, not for 10^8-record outputs.
func (s *S3) VerifyMerged(ctx context.Context, m MergedManifest) (MergeReport, error) {
	var r MergeReport
	seen := map[string]struct{}{}
	for _, sh := range m.Shards {
		obj, err := s.client.GetObject(ctx, s.opts.Bucket, sh.S3Key, minio.GetObjectOptions{})
		if err != nil {
			return r, fmt.Errorf("verify: get %s: %w", sh.S3Key, err)
		}
		h := sha256.New()
		br := bufio.NewReaderSize(io.TeeReader(obj, h), 1<<20)
		var n, records int64
		for {
			line, err := br.ReadSlice('\n')
			if errors.Is(err, bufio.ErrBufferFull) {
				// A record longer than the buffer: read the rest of it.
				rest, err2 := br.ReadBytes('\n')
				line = append(append([]byte(nil), line...), rest...)
				err = err2
			}
			n += int64(len(line))
			if len(bytes.TrimSpace(line)) > 0 {
				records++
				var rec struct {
					CustomID string `json:"custom_id"`
				}
				if jerr := json.Unmarshal(line, &rec); jerr != nil {
					r.Problems = append(r.Problems, fmt.Sprintf("%s record %d: %v", sh.S3Key, records, jerr))
				} else if _, dup := seen[rec.CustomID]; dup {
					r.DuplicateCount++
					if len(r.Duplicates) < 20 {
						r.Duplicates = append(r.Duplicates, rec.CustomID)
					}
				} else {
					seen[rec.CustomID] = struct{}{}
				}
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				obj.Close()
				return r, fmt.Errorf("verify: read %s: %w", sh.S3Key, err)
			}
		}
		obj.Close()
		sum := hex.EncodeToString(h.Sum(nil))
		if n != sh.Bytes || sum != sh.SHA256 {
			r.Problems = append(r.Problems, fmt.Sprintf("%s: %d bytes sha256 %s, manifest says %d bytes sha256 %s", sh.S3Key, n, sum, sh.Bytes, sh.SHA256))
		}
		if records != sh.Records {
			r.Problems = append(r.Problems, fmt.Sprintf("%s: %d records, manifest says %d", sh.S3Key, records, sh.Records))
		}
		r.Shards++
		r.Records += records
		r.Bytes += n
	}
	sort.Strings(r.Duplicates)
	return r, nil
}
