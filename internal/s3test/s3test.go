// Package s3test runs a real S3 server (gofakes3 with an in-memory backend)
// on 127.0.0.1 for tests, with Stop and Restart on the same port and the
// same data, to simulate outages.
//
// The server's goroutines belong to the net/http server it starts; Stop
// closes them, and t.Cleanup stops the server at the end of the test.
package s3test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// Credentials accepted by the server (it does not check signatures; these
// are what clients in tests should use).
const (
	AccessKey = "test-access-key"
	SecretKey = "test-secret-key"
)

// Server is a loopback S3 server.
type Server struct {
	t       testing.TB
	backend *s3mem.Backend
	handler http.Handler
	addr    string

	mu   sync.Mutex
	srv  *http.Server
	done chan struct{}
	puts map[string]int // successful PUTs (object or multipart completion) by "bucket/key"
}

// Start starts a server on 127.0.0.1 on a free port and stops it when the
// test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	backend := s3mem.New()
	faker := gofakes3.New(backend, gofakes3.WithAutoBucket(true))
	s := &Server{t: t, backend: backend, puts: map[string]int{}}
	s.handler = s.countPuts(decodeStreamingParts(faker.Server()))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("s3test: listen: %v", err)
	}
	s.addr = ln.Addr().String()
	s.serve(ln)
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) serve(ln net.Listener) {
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	s.srv, s.done = srv, done
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
}

// URL returns the endpoint, "http://127.0.0.1:PORT".
func (s *Server) URL() string { return "http://" + s.addr }

// Stop closes the listener and every connection; requests fail with
// connection refused until Restart. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil {
		return
	}
	_ = s.srv.Close()
	<-s.done
	s.srv = nil
}

// Restart listens again on the same port, with the same data.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return
	}
	var ln net.Listener
	var err error
	for range 50 { // the port can take a moment to be released
		ln, err = net.Listen("tcp", s.addr)
		if err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("s3test: relisten on %s: %v", s.addr, err)
	}
	s.serve(ln)
}

// CreateBucket creates a bucket (buckets are also created on first use).
func (s *Server) CreateBucket(name string) {
	s.t.Helper()
	if err := s.backend.CreateBucket(name); err != nil && !errors.Is(err, gofakes3.ErrBucketAlreadyExists) &&
		!strings.Contains(err.Error(), "BucketAlreadyExists") {
		s.t.Fatalf("s3test: create bucket %s: %v", name, err)
	}
}

// Keys lists the object keys of a bucket, sorted.
func (s *Server) Keys(bucket string) []string {
	s.t.Helper()
	list, err := s.backend.ListBucket(bucket, nil, gofakes3.ListBucketPage{})
	if err != nil {
		s.t.Fatalf("s3test: list %s: %v", bucket, err)
	}
	var keys []string
	for _, c := range list.Contents {
		keys = append(keys, c.Key)
	}
	sort.Strings(keys)
	return keys
}

// Get returns an object's content.
func (s *Server) Get(bucket, key string) ([]byte, error) {
	obj, err := s.backend.GetObject(bucket, key, nil)
	if err != nil {
		return nil, fmt.Errorf("get %s/%s: %w", bucket, key, err)
	}
	defer obj.Contents.Close()
	return io.ReadAll(obj.Contents)
}

// Put stores an object directly (for download tests).
func (s *Server) Put(bucket, key string, data []byte) {
	s.t.Helper()
	s.CreateBucket(bucket)
	if _, err := s.backend.PutObject(bucket, key, map[string]string{"Last-Modified": time.Now().UTC().Format(http.TimeFormat)}, strings.NewReader(string(data)), int64(len(data)), nil); err != nil {
		s.t.Fatalf("s3test: put %s/%s: %v", bucket, key, err)
	}
}

// Puts returns how many times bucket/key was stored successfully (a
// single PUT or a completed multipart upload).
func (s *Server) Puts(bucket, key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.puts[bucket+"/"+key]
}

// Parts returns how many multipart part uploads the server accepted for
// bucket/key.
func (s *Server) Parts(bucket, key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.puts["part:"+bucket+"/"+key]
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// decodeStreamingParts decodes aws-chunked ("STREAMING-AWS4-HMAC-SHA256-
// PAYLOAD") bodies of multipart part uploads, which gofakes3 v1.2.0 decodes
// for single PUTs only (real S3 and MinIO decode both). Signatures are not
// checked, as gofakes3 checks none.
func decodeStreamingParts(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		const streaming = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
		if r.Method != http.MethodPut || !r.URL.Query().Has("partNumber") || r.Header.Get("X-Amz-Content-Sha256") != streaming {
			next.ServeHTTP(w, r)
			return
		}
		data, err := decodeChunked(bufio.NewReader(r.Body))
		if err != nil {
			http.Error(w, "s3test: bad aws-chunked body: "+err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(data))
		r.ContentLength = int64(len(data))
		r.Header.Set("Content-Length", strconv.Itoa(len(data)))
		r.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
		r.Header.Del("Content-Encoding")
		next.ServeHTTP(w, r)
	})
}

// decodeChunked reads "<hex size>;chunk-signature=<sig>\r\n<data>\r\n"
// chunks up to the zero-size one.
func decodeChunked(r *bufio.Reader) ([]byte, error) {
	var out bytes.Buffer
	for range 1 << 20 {
		header, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		sizeHex, _, _ := strings.Cut(strings.TrimSpace(header), ";")
		size, err := strconv.ParseInt(sizeHex, 16, 64)
		if err != nil || size < 0 {
			return nil, fmt.Errorf("chunk header %q", header)
		}
		if size == 0 {
			return out.Bytes(), nil
		}
		if _, err := io.CopyN(&out, r, size); err != nil {
			return nil, err
		}
		if _, err := r.Discard(2); err != nil { // "\r\n"
			return nil, err
		}
	}
	return nil, errors.New("too many chunks")
}

func (s *Server) countPuts(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		if rec.status/100 != 2 {
			return
		}
		path := strings.TrimPrefix(r.URL.Path, "/")
		q := r.URL.Query()
		var k string
		switch {
		case r.Method == http.MethodPut && q.Has("partNumber"):
			k = "part:" + path
		case r.Method == http.MethodPut && !q.Has("uploadId"):
			k = path
		case r.Method == http.MethodPost && q.Has("uploadId"):
			k = path
		default:
			return
		}
		s.mu.Lock()
		s.puts[k]++
		s.mu.Unlock()
	})
}
