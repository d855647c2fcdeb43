// Package splitjob is the tooling for a job split across controllers by
// input shards: `gend merge s3://bucket/prefix/` merges the manifests the
// controllers uploaded under prefix/shard-<i>-of-<n>/ into prefix/manifest.json
// (see docs/scale.md). It runs in the caller's goroutine and starts none.
package splitjob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/rs/zerolog"

	"github.com/gend-dev/gend/pkg/sink"
)

// Options configure Merge.
type Options struct {
	URL      string // s3://bucket/prefix/ that every controller's output.s3 names
	Endpoint string // S3 endpoint ("" = AWS); see docs/s3.md
	Region   string
	// Partial writes and accepts a merged manifest while some parts have
	// no manifest yet (a trainer may start on what is there).
	Partial bool
	// Verify downloads every shard and checks sizes, sha256, record counts
	// and that no custom_id occurs twice across the parts.
	Verify bool
	Logger zerolog.Logger
}

// ErrVerify is returned when Verify finds a problem.
var ErrVerify = errors.New("merged output failed verification")

// Merge merges the parts' manifests (and verifies them when asked), writing
// a summary to w.
func Merge(ctx context.Context, o Options, w io.Writer) (sink.MergedManifest, error) {
	bucket, prefix, err := sink.ParseS3URL(o.URL)
	if err != nil {
		return sink.MergedManifest{}, err
	}
	s3, err := sink.NewS3(sink.S3Options{Endpoint: o.Endpoint, Bucket: bucket, Prefix: prefix, Region: o.Region,
		Secure: true, Logger: o.Logger})
	if err != nil {
		return sink.MergedManifest{}, fmt.Errorf("merge %s: %w", o.URL, err)
	}
	m, err := s3.MergeShardManifests(ctx)
	incomplete := errors.Is(err, sink.ErrIncomplete)
	if err != nil && !incomplete {
		return m, err
	}
	root := strings.TrimSuffix(o.URL, "/") + "/"
	fmt.Fprintf(w, "merged %d of %d parts into %smanifest.json: %d shards, %d records, %d bytes\n",
		len(m.Parts), m.ShardCount, root, len(m.Shards), m.Records, m.Bytes)
	for _, p := range m.Parts {
		fmt.Fprintf(w, "  shard %-6s job %s: %d shards, %d records", p.Shard, p.JobID, p.Shards, p.Records)
		if p.NotUploaded > 0 {
			fmt.Fprintf(w, " (%d closed shards not uploaded yet)", p.NotUploaded)
		}
		fmt.Fprintln(w)
	}
	if incomplete {
		fmt.Fprintf(w, "  missing: %s\n", strings.Join(m.Missing, ", "))
		if !o.Partial {
			return m, err
		}
	}
	if o.Verify {
		r, err := s3.VerifyMerged(ctx, m)
		if err != nil {
			return m, err
		}
		fmt.Fprintf(w, "verified %d shards: %d records, %d bytes; %d duplicate custom_ids, %d problems\n",
			r.Shards, r.Records, r.Bytes, r.DuplicateCount, len(r.Problems))
		for _, p := range r.Problems {
			fmt.Fprintf(w, "  problem: %s\n", p)
		}
		if r.DuplicateCount > 0 {
			fmt.Fprintf(w, "  duplicate custom_ids (first %d): %s\n", len(r.Duplicates), strings.Join(r.Duplicates, ", "))
		}
		if len(r.Problems) > 0 || r.DuplicateCount > 0 {
			return m, ErrVerify
		}
	}
	return m, nil
}
