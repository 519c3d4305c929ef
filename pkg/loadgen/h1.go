package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// h1.go is the client's own HTTP/1.1 for the streamed requests of a run
// against an http:// server: one goroutine writes a request and reads its
// response on one connection, where net/http's transport hands each
// request and response between three goroutines (the caller's, a
// connection's reader and its writer) and builds a header map per
// response. It speaks only what a streamed completion needs: a POST with
// a Content-Length, a response framed by chunked transfer coding, a
// Content-Length or the connection's end. Redirects are answers, never
// followed (there is no code to follow one).

// Errors of a response that is not HTTP/1.1 as the client reads it; their
// text names the fault, never quotes the server.
var (
	errMalformed = errors.New("malformed response")
	errHeadSize  = errors.New("response head too large")
)

// maxHeadBytes bounds a response's status line and headers.
const maxHeadBytes = 1 << 20

// tailWait bounds the wait for the end of a body after the stream's
// [DONE] (the chunked coding's last chunk, which servers write right
// after it): a connection whose body did not end by then is closed rather
// than reused.
const tailWait = 100 * time.Millisecond

// h1Pool holds a run's kept-alive connections to one server: at most
// maxIdle idle, none idle for IdleKeepAlive or longer (the client closes
// an idle connection before the server's own idle timeout does).
type h1Pool struct {
	addr    string // host:port
	head    []byte // request line and fixed headers, up to Content-Length's value
	dialer  net.Dialer
	maxIdle int

	mu     sync.Mutex
	idle   []*h1Conn // guarded by mu; the most recently used last
	closed bool      // guarded by mu: closeIdle was called; put closes
}

// newH1Pool returns the pool of POSTs to rawURL, an http:// URL, with at
// most maxIdle idle connections; false when rawURL is not one it serves
// (https, a proxy's: net/http carries those).
func newH1Pool(rawURL string, maxIdle int) (*h1Pool, bool) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "http" || u.Host == "" || u.User != nil {
		return nil, false
	}
	host := u.Host
	addr := host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	// The header net/http's transport writes for such a request, in its
	// order (DisableCompression: no Accept-Encoding).
	head := fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: Go-http-client/1.1\r\n"+
		"Accept: text/event-stream\r\nContent-Type: application/json\r\nContent-Length: ", u.RequestURI(), host)
	return &h1Pool{addr: addr, head: head, maxIdle: max(1, maxIdle),
		dialer: net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}}, true
}

// h1Conn is one connection and the state of the response it is reading.
type h1Conn struct {
	nc     net.Conn
	br     *bufio.Reader
	wbuf   []byte
	idleAt time.Time // when it was put back idle

	// The response body's framing (readHead) and progress.
	chunked   bool
	remain    int64 // Content-Length bytes left; -1: until the connection ends
	chunkLeft int64 // bytes left in the current chunk
	crlf      bool  // a chunk's data ended: its CRLF comes next
	ended     bool  // the body was read to its end
	keep      bool  // the response allows reusing the connection
	scratch   []byte
}

// get returns an idle connection that is still open or dials a new one.
// An idle connection the server closed, or that holds bytes nobody asked
// for, is closed and skipped.
func (p *h1Pool) get(ctx context.Context) (*h1Conn, error) {
	now := time.Now()
	for {
		p.mu.Lock()
		// The oldest first: past IdleKeepAlive they are closed.
		for len(p.idle) > 0 && now.Sub(p.idle[0].idleAt) >= IdleKeepAlive {
			old := p.idle[0]
			p.idle = p.idle[1:]
			old.nc.Close()
		}
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			break
		}
		c := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if c.open() {
			return c, nil
		}
		c.nc.Close()
	}
	nc, err := p.dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	return &h1Conn{nc: nc, br: bufio.NewReaderSize(nc, 2<<10)}, nil
}

// open reports whether an idle connection can carry a request: nothing
// buffered, and the socket neither at its end nor holding unread bytes
// (one non-blocking peek).
func (c *h1Conn) open() bool {
	if c.br.Buffered() > 0 {
		return false
	}
	sc, ok := c.nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		alive = rerr == syscall.EAGAIN
		return true
	})
	return err == nil && alive
}

// put returns a connection whose response was read to its end, or closes
// it when the pool is full or closed.
func (p *h1Pool) put(c *h1Conn) {
	c.idleAt = time.Now()
	p.mu.Lock()
	if !p.closed && len(p.idle) < p.maxIdle {
		p.idle = append(p.idle, c)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	c.nc.Close()
}

// closeIdle closes the idle connections; connections put back later are
// closed too.
func (p *h1Pool) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, c := range idle {
		c.nc.Close()
	}
}

// write sends the request: the pool's head, body's length, and body, in
// one write (a body over 4 KiB: one writev).
func (c *h1Conn) write(p *h1Pool, body []byte) error {
	w := append(c.wbuf[:0], p.head...)
	w = strconv.AppendInt(w, int64(len(body)), 10)
	w = append(w, "\r\n\r\n"...)
	var err error
	if len(body) <= 4<<10 {
		w = append(w, body...)
		_, err = c.nc.Write(w)
	} else {
		bufs := net.Buffers{w, body}
		_, err = bufs.WriteTo(c.nc)
	}
	c.wbuf = w[:0]
	return err
}

// readHead reads a response's status line and headers, skipping interim
// (1xx) responses, and sets the body's framing. It returns the status.
func (c *h1Conn) readHead() (int, error) {
	total := 0
	for {
		line, err := c.headLine(&total)
		if err != nil {
			return 0, err
		}
		status, minor, ok := parseStatusLine(line)
		if !ok {
			return 0, errMalformed
		}
		c.chunked, c.remain, c.chunkLeft, c.crlf, c.ended = false, -1, 0, false, false
		c.keep = minor == 1
		te, cl := false, false
		for {
			line, err := c.headLine(&total)
			if err != nil {
				return 0, err
			}
			if len(line) == 0 {
				break
			}
			name, value, ok := bytes.Cut(line, []byte(":"))
			if !ok || len(name) == 0 || bytes.ContainsAny(name, " \t") {
				return 0, errMalformed
			}
			value = bytes.TrimSpace(value)
			switch {
			case asciiEqualFold(name, "transfer-encoding"):
				te = true
				c.chunked = hasToken(value, "chunked")
			case asciiEqualFold(name, "content-length"):
				n, ok := contentLength(value)
				if !ok || cl && n != c.remain {
					return 0, errMalformed
				}
				cl, c.remain = true, n
			case asciiEqualFold(name, "connection"):
				switch {
				case hasToken(value, "close"):
					c.keep = false
				case hasToken(value, "keep-alive"):
					c.keep = true
				}
			}
		}
		if status >= 100 && status < 200 && status != 101 {
			continue
		}
		switch {
		case status == 101:
			return 0, errMalformed
		case status == 204 || status == 304:
			c.remain, c.chunked, c.ended = 0, false, true
		case te:
			// Transfer-Encoding overrides Content-Length; without chunked
			// last, the body runs to the connection's end.
			c.remain = -1
			c.keep = c.keep && c.chunked && !cl
		case !cl:
			c.keep = false
		}
		return status, nil
	}
}

// headLine reads one line of a response head without its line ending,
// counting its bytes into total.
func (c *h1Conn) headLine(total *int) ([]byte, error) {
	line, err := nextLine(c.br, &c.scratch)
	*total += len(line)
	switch {
	case err != nil && *total > maxHeadBytes:
		return nil, errHeadSize
	case err != nil:
		return nil, err
	case *total > maxHeadBytes:
		return nil, errHeadSize
	}
	return bytes.TrimRight(line, "\r\n"), nil
}

// contentLength reads a Content-Length value: digits only.
func contentLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, d := range v {
		if d < '0' || d > '9' {
			return 0, false
		}
		n = n*10 + int64(d-'0')
	}
	return n, true
}

// parseStatusLine reads "HTTP/1.x NNN reason".
func parseStatusLine(l []byte) (status, minor int, ok bool) {
	if len(l) < 12 || !bytes.HasPrefix(l, []byte("HTTP/1.")) || l[8] != ' ' || len(l) > 12 && l[12] != ' ' {
		return 0, 0, false
	}
	if l[7] < '0' || l[7] > '9' {
		return 0, 0, false
	}
	for _, d := range l[9:12] {
		if d < '0' || d > '9' {
			return 0, 0, false
		}
		status = status*10 + int(d-'0')
	}
	return status, int(l[7] - '0'), status >= 100
}

// asciiEqualFold compares a header name with a lower-case one.
func asciiEqualFold(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// hasToken reports whether a comma-separated header value lists token
// (compared without case).
func hasToken(v []byte, token string) bool {
	for len(v) > 0 {
		var t []byte
		t, v, _ = bytes.Cut(v, []byte(","))
		if asciiEqualFold(bytes.TrimSpace(t), token) {
			return true
		}
	}
	return false
}

// Read reads the response body, undoing its framing; io.EOF at its end,
// io.ErrUnexpectedEOF when the connection ends before it.
func (c *h1Conn) Read(p []byte) (int, error) {
	switch {
	case c.ended:
		return 0, io.EOF
	case c.chunked:
		return c.readChunked(p)
	case c.remain < 0:
		return c.br.Read(p)
	}
	if c.remain == 0 {
		c.ended = true
		return 0, io.EOF
	}
	if int64(len(p)) > c.remain {
		p = p[:c.remain]
	}
	n, err := c.br.Read(p)
	c.remain -= int64(n)
	c.ended = c.remain == 0
	if err == io.EOF && !c.ended {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// readChunked reads chunked transfer coding's data.
func (c *h1Conn) readChunked(p []byte) (int, error) {
	for c.chunkLeft == 0 {
		if err := c.nextChunk(); err != nil {
			return 0, err
		}
		if c.ended {
			return 0, io.EOF
		}
	}
	if int64(len(p)) > c.chunkLeft {
		p = p[:c.chunkLeft]
	}
	n, err := c.br.Read(p)
	c.chunkLeft -= int64(n)
	c.crlf = c.chunkLeft == 0
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// nextChunk reads the CRLF ending the previous chunk's data and the next
// chunk's size line; at the last chunk (size 0) its trailer too, and sets
// ended.
func (c *h1Conn) nextChunk() error {
	line, err := c.chunkLine()
	if err != nil {
		return err
	}
	if c.crlf {
		if len(line) != 0 {
			return errMalformed
		}
		c.crlf = false
		if line, err = c.chunkLine(); err != nil {
			return err
		}
	}
	size, _, _ := bytes.Cut(line, []byte(";"))
	size = bytes.TrimRight(size, " \t")
	n, err := strconv.ParseUint(string(size), 16, 62)
	if err != nil || len(size) == 0 {
		return errMalformed
	}
	if n > 0 {
		c.chunkLeft = int64(n)
		return nil
	}
	for { // the trailer, up to its empty line
		line, err := c.chunkLine()
		if err != nil {
			return err
		}
		if len(line) == 0 {
			c.ended = true
			return nil
		}
	}
}

// chunkLine reads one line of the chunked coding without its ending.
func (c *h1Conn) chunkLine() ([]byte, error) {
	line, err := c.br.ReadSlice('\n')
	switch {
	case err == bufio.ErrBufferFull:
		return nil, errMalformed
	case err == io.EOF:
		return nil, io.ErrUnexpectedEOF
	case err != nil:
		return nil, err
	}
	return bytes.TrimRight(line, "\r\n"), nil
}

// lastChunk is the end of a chunked body after a chunk's data: its CRLF,
// the last chunk, no trailer.
const lastChunk = "\r\n0\r\n\r\n"

// finishBody reads what is left of a body whose stream is over (after
// [DONE]: the last chunk), waiting at most tailWait, and reports whether
// the connection can carry another request.
func (c *h1Conn) finishBody() bool {
	if !c.keep {
		return false
	}
	if c.chunked && c.crlf && c.chunkLeft == 0 {
		// Most often the end is read already: no deadline to set.
		if b, _ := c.br.Peek(min(c.br.Buffered(), len(lastChunk))); string(b) == lastChunk {
			_, _ = c.br.Discard(len(lastChunk))
			c.ended = true
		}
	}
	if c.ended {
		return true
	}
	if c.nc.SetReadDeadline(time.Now().Add(tailWait)) != nil {
		return false
	}
	var sink [256]byte
	for n := 0; !c.ended; {
		k, err := c.Read(sink[:])
		n += k
		if err != nil && err != io.EOF || n > 64<<10 {
			return false
		}
	}
	return c.nc.SetReadDeadline(time.Time{}) == nil
}
