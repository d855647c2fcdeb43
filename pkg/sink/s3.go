package sink

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/rs/zerolog"
)

// S3Options configures the S3 uploader and downloader.
type S3Options struct {
	// Endpoint is a URL ("http://127.0.0.1:9000", "https://s3.example.com")
	// or host[:port]; "" means AWS (s3.amazonaws.com). The caller takes it
	// from --s3-endpoint / GEND_S3_ENDPOINT or AWS_ENDPOINT_URL.
	Endpoint string
	Bucket   string // output bucket; may be empty for a downloader only
	Prefix   string // key prefix for output objects; "/" is appended when missing
	Region   string // "" lets the client discover it
	Secure   bool   // TLS, when Endpoint has no scheme
	// Creds defaults to the chain: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY,
	// then the shared credentials file (AWS_SHARED_CREDENTIALS_FILE or
	// ~/.aws/credentials, profile AWS_PROFILE), then EC2/ECS instance roles.
	Creds *credentials.Credentials
	// PartSize is the multipart part size (0: minio-go's default, 16 MiB
	// minimum); objects larger than it are uploaded in parts.
	PartSize uint64
	// MinBackoff and MaxBackoff bound the retry delay while S3 is
	// unreachable (defaults 1s and 2m; full jitter).
	MinBackoff, MaxBackoff time.Duration
	Transport              http.RoundTripper // optional
	Logger                 zerolog.Logger
}

// S3 uploads the closed shards of a Local sink, then its manifest, and
// downloads s3:// inputs. See doc.go for its goroutine.
type S3 struct {
	client *minio.Client
	opts   S3Options
	log    zerolog.Logger
	wake   chan struct{}
	src    atomic.Pointer[Local]

	upMu         sync.Mutex // one upload pass at a time (Run and Drain)
	lastManifest [32]byte   // sha256 of the manifest last uploaded (under upMu)
	lastErr      string     // last upload error logged (under upMu)
}

// ParseS3URL splits "s3://bucket/key/or/prefix" into bucket and key.
func ParseS3URL(s string) (bucket, key string, err error) {
	rest, ok := strings.CutPrefix(s, "s3://")
	if !ok {
		return "", "", fmt.Errorf("parse s3 url %q: not s3://bucket/key", s)
	}
	bucket, key, _ = strings.Cut(rest, "/")
	if bucket == "" {
		return "", "", fmt.Errorf("parse s3 url %q: empty bucket", s)
	}
	return bucket, key, nil
}

// endpointHost turns an endpoint (URL or host[:port]) into minio-go's host
// and TLS flag.
func endpointHost(endpoint string, secure bool) (string, bool, error) {
	if endpoint == "" {
		return "s3.amazonaws.com", true, nil
	}
	if !strings.Contains(endpoint, "://") {
		return strings.TrimSuffix(endpoint, "/"), secure, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", false, fmt.Errorf("parse s3 endpoint: %w", err)
	}
	if u.Host == "" || (u.Path != "" && u.Path != "/") {
		return "", false, fmt.Errorf("parse s3 endpoint %q: want scheme://host[:port]", endpoint)
	}
	switch u.Scheme {
	case "http":
		return u.Host, false, nil
	case "https":
		return u.Host, true, nil
	default:
		return "", false, fmt.Errorf("parse s3 endpoint %q: scheme %q is not http or https", endpoint, u.Scheme)
	}
}

// DefaultCredentials is the credentials chain used when S3Options.Creds is nil.
func DefaultCredentials() *credentials.Credentials {
	return credentials.NewChainCredentials([]credentials.Provider{
		&credentials.EnvAWS{},
		&credentials.FileAWSCredentials{},
		&credentials.IAM{},
	})
}

// NewS3 builds the client; it starts nothing and makes no request.
func NewS3(opts S3Options) (*S3, error) {
	host, secure, err := endpointHost(opts.Endpoint, opts.Secure)
	if err != nil {
		return nil, err
	}
	if opts.Creds == nil {
		opts.Creds = DefaultCredentials()
	}
	if opts.Prefix != "" && !strings.HasSuffix(opts.Prefix, "/") {
		opts.Prefix += "/"
	}
	opts.Prefix = strings.TrimPrefix(opts.Prefix, "/")
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = time.Second
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(2*time.Minute, opts.MinBackoff)
	}
	client, err := minio.New(host, &minio.Options{
		Creds:     opts.Creds,
		Secure:    secure,
		Region:    opts.Region,
		Transport: opts.Transport,
		// Few client-level retries: outages are handled by our backoff, so
		// that a dead endpoint does not hold a call for minutes.
		MaxRetries: 3,
	})
	if err != nil {
		return nil, fmt.Errorf("new s3 client for %s: %w", host, err)
	}
	s := &S3{
		client: client,
		opts:   opts,
		wake:   make(chan struct{}, 1),
		log: opts.Logger.With().Str("component", "s3").Str("endpoint", host).
			Str("bucket", opts.Bucket).Str("prefix", opts.Prefix).Logger(),
	}
	return s, nil
}

// Notify wakes the uploader (use it as, or from, Options.OnShardClosed).
// It never blocks.
func (s *S3) Notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Key returns the object key of a file named relative to output.dir.
func (s *S3) Key(name string) string { return s.opts.Prefix + name }

// Run uploads, in order, every closed shard of l that has no s3_key yet
// (also those left by an earlier run), records each key with l.SetS3Key,
// then uploads manifest.json; it then waits for Notify. While S3 fails it
// retries with exponential backoff and jitter; the sink keeps writing
// locally meanwhile. It returns nil when ctx is cancelled.
func (s *S3) Run(ctx context.Context, l *Local) error {
	if s.opts.Bucket == "" {
		return errors.New("run s3 uploader: no bucket")
	}
	s.src.Store(l)
	backoff := s.opts.MinBackoff
	for {
		err := s.uploadPending(ctx, l)
		if ctx.Err() != nil {
			return nil
		}
		var retry <-chan time.Time
		if err != nil {
			t := time.NewTimer(jitter(backoff))
			retry = t.C
			backoff = min(2*backoff, s.opts.MaxBackoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-retry:
			}
			continue
		}
		backoff = s.opts.MinBackoff
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
		}
	}
}

// Drain uploads everything pending now (shards, then the manifest),
// retrying with backoff, and returns nil once nothing is pending, or ctx's
// error. Use it at the end of a job, after l.Close.
func (s *S3) Drain(ctx context.Context, l *Local) error {
	if s.opts.Bucket == "" {
		return errors.New("drain s3 uploads: no bucket")
	}
	s.src.Store(l)
	backoff := s.opts.MinBackoff
	for {
		err := s.uploadPending(ctx, l)
		if err == nil {
			return nil
		}
		t := time.NewTimer(jitter(backoff))
		backoff = min(2*backoff, s.opts.MaxBackoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("drain s3 uploads: %w (last error: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// Uploaded returns how many shard objects the manifest records as uploaded.
func (s *S3) Uploaded() int64 {
	if l := s.src.Load(); l != nil {
		return l.Stats().S3Uploaded
	}
	return 0
}

// UploadedBytes returns the bytes of those shards (the manifest excluded).
func (s *S3) UploadedBytes() int64 {
	if l := s.src.Load(); l != nil {
		return l.Stats().S3Bytes
	}
	return 0
}

// Pending returns how many closed shards await upload.
func (s *S3) Pending() int64 {
	if l := s.src.Load(); l != nil {
		return l.Stats().S3Pending
	}
	return 0
}

// jitter returns a uniformly random duration in [d/2, d].
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// uploadPending is one pass: every shard without a key, then the manifest
// if it changed since it was last uploaded.
func (s *S3) uploadPending(ctx context.Context, l *Local) error {
	s.upMu.Lock()
	defer s.upMu.Unlock()
	err := s.uploadPass(ctx, l)
	if err != nil && ctx.Err() == nil {
		if msg := err.Error(); msg != s.lastErr {
			s.log.Warn().Err(err).Int64("pending", l.Stats().S3Pending).Msg("s3 upload failed; retrying with backoff")
			s.lastErr = msg
		}
	} else if err == nil && s.lastErr != "" {
		s.log.Info().Msg("s3 uploads caught up")
		s.lastErr = ""
	}
	return err
}

func (s *S3) uploadPass(ctx context.Context, l *Local) error {
	m := l.Manifest()
	for _, sh := range m.Shards {
		if sh.S3Key != "" {
			continue
		}
		key := s.Key(sh.Name)
		if err := s.putShard(ctx, filepath.Join(l.Dir(), filepath.FromSlash(sh.Name)), key, sh); err != nil {
			return err
		}
		if err := l.SetS3Key(sh.Name, key); err != nil {
			return err
		}
		s.log.Debug().Str("key", key).Int64("bytes", sh.Bytes).Msg("shard uploaded")
	}
	m = l.Manifest()
	data, err := json.MarshalIndent(&m, "", "  ")
	if err != nil {
		return fmt.Errorf("marshal manifest: %w", err)
	}
	data = append(data, '\n')
	sum := sha256.Sum256(data)
	if sum == s.lastManifest {
		return nil
	}
	key := s.Key(manifestName)
	_, err = s.client.PutObject(ctx, s.opts.Bucket, key, strings.NewReader(string(data)), int64(len(data)),
		minio.PutObjectOptions{ContentType: "application/json"})
	if err != nil {
		return fmt.Errorf("upload %s: %w", key, err)
	}
	s.lastManifest = sum
	return nil
}

func (s *S3) putShard(ctx context.Context, path, key string, sh ShardInfo) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("upload %s: %w", key, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("upload %s: %w", key, err)
	}
	if st.Size() != sh.Bytes {
		return fmt.Errorf("upload %s: %s has %d bytes, the manifest says %d", key, path, st.Size(), sh.Bytes)
	}
	_, err = s.client.PutObject(ctx, s.opts.Bucket, key, f, st.Size(), minio.PutObjectOptions{
		ContentType:  "application/x-ndjson",
		PartSize:     s.opts.PartSize,
		UserMetadata: map[string]string{"sha256": sh.SHA256},
	})
	if err != nil {
		return fmt.Errorf("upload %s: %w", key, err)
	}
	return nil
}

// permanentS3 reports whether an S3 error will not go away by retrying.
func permanentS3(err error) bool {
	switch minio.ToErrorResponse(err).Code {
	case "NoSuchKey", "NoSuchBucket", "AccessDenied", "InvalidAccessKeyId",
		"SignatureDoesNotMatch", "InvalidBucketName", "InvalidObjectName":
		return true
	}
	return false
}

// Download copies the object at s3url ("s3://bucket/key") to localPath
// atomically (temporary file, fsync, rename), retrying transient failures
// a few times with backoff.
func (s *S3) Download(ctx context.Context, s3url, localPath string) error {
	bucket, key, err := ParseS3URL(s3url)
	if err != nil {
		return err
	}
	if key == "" || strings.HasSuffix(key, "/") {
		return fmt.Errorf("download %s: not an object key", s3url)
	}
	backoff := s.opts.MinBackoff
	const attempts = 5
	for i := 1; ; i++ {
		err = s.downloadOnce(ctx, bucket, key, localPath)
		if err == nil || permanentS3(err) || ctx.Err() != nil || i == attempts {
			break
		}
		s.log.Warn().Err(err).Int("attempt", i).Msg("s3 download failed; retrying")
		t := time.NewTimer(jitter(backoff))
		backoff = min(2*backoff, s.opts.MaxBackoff)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
	if err != nil {
		return fmt.Errorf("download %s: %w", s3url, err)
	}
	return nil
}

func (s *S3) downloadOnce(ctx context.Context, bucket, key, localPath string) error {
	obj, err := s.client.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return err
	}
	defer obj.Close()
	dir, base := filepath.Split(localPath)
	if dir == "" {
		dir = "."
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, base+tmpMarker+"*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err := io.Copy(f, obj); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, localPath); err != nil {
		return err
	}
	ok = true
	return syncDir(dir)
}
