package backend

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingServer counts the connections clients open to it.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			n.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &n
}

func plain(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, chatBody)
}

func gen(t *testing.T, c *Client, ctx context.Context, url string) (Response, error) {
	t.Helper()
	return c.Generate(ctx, Request{BaseURL: url, Endpoint: "/v1/chat/completions", Body: []byte(`{"messages":[]}`), RID: "r-1"})
}

func TestPoolReusesConnections(t *testing.T) {
	srv, conns := countingServer(t, plain)
	c := New(Options{})
	for i := range 20 {
		resp, err := gen(t, c, context.Background(), srv.URL)
		if err != nil || string(resp.Body) != chatBody || resp.CompletionTokens != 881 {
			t.Fatalf("request %d: %+v %v", i, resp, err)
		}
		// The connection is back in the pool when Generate returns.
		if n := c.pool.idleCount(); n != 1 {
			t.Fatalf("request %d: %d idle connections, want 1", i, n)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("20 sequential requests opened %d connections, want 1", n)
	}
	c.CloseIdle()
	if n := c.pool.idleCount(); n != 0 {
		t.Fatalf("CloseIdle left %d", n)
	}
}

func TestPoolConcurrent(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Millisecond)
		plain(w, r)
	})
	c := New(Options{})
	const workers, each = 32, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for range workers {
		wg.Go(func() {
			for range each {
				if _, err := gen(t, c, context.Background(), srv.URL); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := conns.Load(); n > workers {
		t.Fatalf("%d workers opened %d connections", workers, n)
	}
	if n := c.pool.idleCount(); n < 1 || n > workers {
		t.Fatalf("%d idle connections after %d workers", n, workers)
	}
}

func TestPoolServerClosedIdle(t *testing.T) {
	srv, conns := countingServer(t, plain)
	c := New(Options{})
	if _, err := gen(t, c, context.Background(), srv.URL); err != nil {
		t.Fatal(err)
	}
	// The server drops its keep-alive connections (idle timeout, restart):
	// the next request must not fail on the dead one.
	srv.CloseClientConnections()
	if _, err := gen(t, c, context.Background(), srv.URL); err != nil {
		t.Fatalf("after the server closed the idle connection: %v", err)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

func TestPoolNoReuse(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    http.HandlerFunc
	}{
		{"connection close", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "close")
			plain(w, r)
		}},
		{"body longer than drained", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(500)
			io.WriteString(w, strings.Repeat("x", 3<<20))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, conns := countingServer(t, tc.h)
			c := New(Options{})
			for range 3 {
				_, _ = gen(t, c, context.Background(), srv.URL)
			}
			if n := conns.Load(); n != 3 {
				t.Fatalf("%d connections for 3 requests, want 3", n)
			}
			if n := c.pool.idleCount(); n != 0 {
				t.Fatalf("%d idle", n)
			}
		})
	}
}

func TestPoolChunkedAndErrorsReuse(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/busy/v1/chat/completions" {
			w.WriteHeader(503)
			io.WriteString(w, `{"object":"error","message":"The request queue is full.","code":503}`)
			return
		}
		// No Content-Length: chunked.
		io.WriteString(w, chatBody[:40])
		w.(http.Flusher).Flush()
		io.WriteString(w, chatBody[40:])
	})
	c := New(Options{})
	for range 3 {
		resp, err := gen(t, c, context.Background(), srv.URL)
		if err != nil || string(resp.Body) != chatBody {
			t.Fatalf("chunked: %q %v", resp.Body, err)
		}
		_, err = gen(t, c, context.Background(), srv.URL+"/busy")
		var be *Error
		if !errors.As(err, &be) || be.Class != Overload {
			t.Fatalf("503: %v", err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

func TestPoolCancel(t *testing.T) {
	started := make(chan struct{}, 1)
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // then the server notices the client leaving
		started <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	c := New(Options{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel()
	}()
	_, err := gen(t, c, ctx, srv.URL)
	var be *Error
	if !errors.As(err, &be) || be.Class != Transient || be.Code != "cancelled" {
		t.Fatalf("cancelled attempt: %v", err)
	}
	if n := c.pool.idleCount(); n != 0 {
		t.Fatalf("a cancelled connection went back to the pool (%d idle)", n)
	}
}

func TestPoolPrunesIdle(t *testing.T) {
	var srvs []*httptest.Server
	c := New(Options{})
	for range 3 {
		srv, _ := countingServer(t, plain)
		srvs = append(srvs, srv)
		if _, err := gen(t, c, context.Background(), srv.URL); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.pool.idleCount(); n != 3 {
		t.Fatalf("%d idle, want 3", n)
	}
	// Age every idle connection past the timeout; the next put prunes them
	// on every server, not only its own.
	c.pool.mu.Lock()
	for _, cs := range c.pool.idle {
		for _, cn := range cs {
			cn.idleSince = time.Now().Add(-time.Minute)
		}
	}
	c.pool.lastPrune = time.Time{}
	c.pool.mu.Unlock()
	if _, err := gen(t, c, context.Background(), srvs[0].URL); err != nil {
		t.Fatal(err)
	}
	if n := c.pool.idleCount(); n != 1 {
		t.Fatalf("%d idle after pruning, want 1 (the fresh one)", n)
	}
}

func TestRequestHeader(t *testing.T) {
	got := string(requestHeader("/v1/completions?x=1", "127.0.0.1:30000", 42, true))
	want := "POST /v1/completions?x=1 HTTP/1.1\r\nHost: 127.0.0.1:30000\r\nUser-Agent: Go-http-client/1.1\r\n" +
		"Content-Type: application/json\r\nContent-Length: 42\r\nAccept: text/event-stream\r\n\r\n"
	if got != want {
		t.Fatalf("header:\n%q\nwant\n%q", got, want)
	}
	for _, bad := range []string{"http://", "http://[::1"} {
		_, err := New(Options{}).Generate(context.Background(), Request{BaseURL: bad, Endpoint: "/v1/completions", Body: []byte(`{}`)})
		var be *Error
		if !errors.As(err, &be) || be.Class != Fatal {
			t.Fatalf("%s: %v", bad, err)
		}
	}
}
