package backend

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// pool is the HTTP/1.1 client for generations to plain-HTTP servers. gend
// keeps one connection per request in flight (20,000 and more), and
// net/http's Transport costs two goroutines per connection (a read and a
// write loop: ~16 KB of stacks) and hands a finished connection back to its
// idle pool asynchronously, so the next request to the same server often
// dials a new one (measured: a third of gend's CPU at 256 servers). Here the
// calling goroutine writes the request and reads the response itself, and a
// connection is back in the pool before Generate returns. No goroutines:
// cancellation closes the connection through context.AfterFunc.
type pool struct {
	dialer      net.Dialer
	maxIdle     int           // idle connections kept per server
	idleTimeout time.Duration // an idle connection older than this is closed

	mu        sync.Mutex
	idle      map[string][]*conn // by dial address; oldest first
	lastPrune time.Time
}

// conn is one kept-alive connection to a server.
type conn struct {
	nc        net.Conn
	br        *bufio.Reader
	addr      string
	idleSince time.Time
}

func newPool(maxIdle int, idleTimeout time.Duration) *pool {
	return &pool{
		dialer:      net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second},
		maxIdle:     maxIdle,
		idleTimeout: idleTimeout,
		idle:        make(map[string][]*conn),
	}
}

// postRequest is what http.ReadResponse is told the request was (it only
// reads the method); shared read-only.
var postRequest = &http.Request{Method: http.MethodPost}

var aLongTimeAgo = time.Unix(1, 0)

// generate sends one attempt over a pooled connection.
func (p *pool) generate(ctx context.Context, r Request, body []byte) (Response, error) {
	u, err := url.Parse(r.BaseURL + r.Endpoint)
	if err != nil || u.Host == "" {
		if err == nil {
			err = errors.New("no host")
		}
		return Response{}, &Error{Class: Fatal, Code: "request_failed", Msg: "build request", Err: err}
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	cn, err := p.get(ctx, addr)
	if err != nil {
		return Response{}, transportError(ctx, err, false)
	}
	stop := context.AfterFunc(ctx, func() { _ = cn.nc.SetDeadline(aLongTimeAgo) })
	reuse := false
	defer func() {
		// stop reports false when ctx was cancelled meanwhile: the deadline
		// is (being) set and the connection is spent.
		if stop() && reuse {
			p.put(cn)
		} else {
			cn.nc.Close()
		}
	}()
	bufs := net.Buffers{requestHeader(u.RequestURI(), u.Host, len(body), r.Stream), body}
	if _, err := bufs.WriteTo(cn.nc); err != nil {
		return Response{}, transportError(ctx, err, false)
	}
	resp, err := http.ReadResponse(cn.br, postRequest)
	if err != nil {
		return Response{}, transportError(ctx, err, false)
	}
	out, err := readResponse(ctx, resp, r)
	reuse = !resp.Close && drained(resp.Body) && cn.br.Buffered() == 0
	return out, err
}

// requestHeader is the request line and headers of a JSON POST.
func requestHeader(path, host string, n int, stream bool) []byte {
	b := make([]byte, 0, 128+len(path)+len(host))
	b = append(b, "POST "...)
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\nUser-Agent: Go-http-client/1.1\r\nContent-Type: application/json\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(n), 10)
	if stream {
		b = append(b, "\r\nAccept: text/event-stream"...)
	}
	return append(b, "\r\n\r\n"...)
}

// drained reads what is left of a body (up to 1 MiB, like the net/http
// path) and reports whether it reached the end, so the connection can
// carry the next request.
func drained(body io.Reader) bool {
	if _, err := io.Copy(io.Discard, io.LimitReader(body, 1<<20)); err != nil {
		return false
	}
	var b [1]byte
	n, err := body.Read(b[:])
	return n == 0 && err == io.EOF
}

// get returns the most recently used live idle connection to addr, or
// dials a new one.
func (p *pool) get(ctx context.Context, addr string) (*conn, error) {
	now := time.Now()
	for {
		p.mu.Lock()
		cs := p.idle[addr]
		if len(cs) == 0 {
			p.mu.Unlock()
			break
		}
		cn := cs[len(cs)-1]
		cs[len(cs)-1] = nil
		p.idle[addr] = cs[:len(cs)-1]
		p.mu.Unlock()
		if now.Sub(cn.idleSince) <= p.idleTimeout && alive(cn.nc) {
			return cn, nil
		}
		cn.nc.Close()
	}
	nc, err := p.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &conn{nc: nc, br: bufio.NewReaderSize(nc, 4<<10), addr: addr}, nil
}

// put returns a connection to the pool; at most once a second it also
// closes the connections that have been idle too long, on every server.
func (p *pool) put(cn *conn) {
	now := time.Now()
	cn.idleSince = now
	var stale []*conn
	p.mu.Lock()
	if len(p.idle[cn.addr]) >= p.maxIdle {
		stale = append(stale, cn)
	} else {
		p.idle[cn.addr] = append(p.idle[cn.addr], cn)
	}
	if now.Sub(p.lastPrune) >= time.Second {
		p.lastPrune = now
		for addr, cs := range p.idle {
			i := 0
			for i < len(cs) && now.Sub(cs[i].idleSince) > p.idleTimeout {
				i++
			}
			if i == 0 {
				continue
			}
			stale = append(stale, cs[:i]...)
			if i == len(cs) {
				delete(p.idle, addr)
			} else {
				p.idle[addr] = append(cs[:0:0], cs[i:]...)
			}
		}
	}
	p.mu.Unlock()
	for _, c := range stale {
		c.nc.Close()
	}
}

// closeIdle closes every idle connection.
func (p *pool) closeIdle() {
	p.mu.Lock()
	all := p.idle
	p.idle = make(map[string][]*conn)
	p.mu.Unlock()
	for _, cs := range all {
		for _, c := range cs {
			c.nc.Close()
		}
	}
}

// idleCount is the number of idle connections (tests).
func (p *pool) idleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, cs := range p.idle {
		n += len(cs)
	}
	return n
}
