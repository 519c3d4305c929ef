package loadgen

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// scriptServer is a loopback server that answers each request with the
// bytes its answer function writes, on a connection of its own or a kept
// one; it counts the connections it accepted and sees each end.
type scriptServer struct {
	url      string
	accepted atomic.Int32
	ended    chan struct{} // a connection ended (either side closed it), one send each while fewer than 64 are unread
}

// newScriptServer serves answer(conn, n) for the n-th request (from 0,
// over all connections); answer returns false to close the connection.
func newScriptServer(t testing.TB, answer func(c net.Conn, n int) bool) *scriptServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &scriptServer{url: "http://" + ln.Addr().String(), ended: make(chan struct{}, 64)}
	var wg sync.WaitGroup
	var requests atomic.Int32
	var mu sync.Mutex
	var open []net.Conn
	wg.Add(1)
	go func() { // ends when ln is closed
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			wg.Add(1)
			go func() { // ends at the connection's end
				defer wg.Done()
				defer func() {
					c.Close()
					select { // a benchmark's many connections never read
					case s.ended <- struct{}{}:
					default:
					}
				}()
				br := bufio.NewReader(c)
				for readRequest(br) && answer(c, int(requests.Add(1)-1)) {
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return s
}

// chunked renders s as one chunk of chunked transfer coding.
func chunked(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }

// sseBody is a stream of four token chunks, usage and [DONE].
const sseBody = "data: " + tokenChunk + "\n\ndata: " + tokenChunk + "\n\ndata: " + tokenChunk + "\n\ndata: " + tokenChunk +
	"\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\ndata: [DONE]\n\n"

const okChunked = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

func h1Sender(t *testing.T, url string) *sender {
	clock, err := NewClock()
	if err != nil {
		t.Fatal(err)
	}
	return testSenders(t, url, clock)["h1"]
}

var fourTokens = expect{output: 4, exact: true, input: 3, inputExact: true}

// TestH1Framings: every body framing HTTP/1.1 allows a response is read
// to the same outcome: chunked (with extensions, a trailer, one chunk per
// event or the whole stream in one), a Content-Length, a body up to the
// connection's end, after an interim 100 response, with header names in
// any case.
func TestH1Framings(t *testing.T) {
	events := strings.SplitAfter(sseBody, "\n\n")
	perEvent := ""
	for _, e := range events[:len(events)-1] {
		perEvent += chunked(e)
	}
	for name, resp := range map[string]string{
		"chunked, a chunk per event": okChunked + perEvent + "0\r\n\r\n",
		"chunked, one chunk, extension and trailer": okChunked + fmt.Sprintf("%x;name=v\r\n%s\r\n", len(sseBody), sseBody) +
			"0\r\nX-Trailer: 1\r\n\r\n",
		"content-length":       fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(sseBody), sseBody),
		"to the end":           "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + sseBody,
		"interim 100 first":    "HTTP/1.1 100 Continue\r\n\r\n" + okChunked + chunked(sseBody) + "0\r\n\r\n",
		"header names in case": "HTTP/1.1 200 OK\r\ntransfer-ENCODING: Chunked\r\n\r\n" + chunked(sseBody) + "0\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			srv := newScriptServer(t, func(c net.Conn, _ int) bool {
				_, err := io.WriteString(c, resp)
				return err == nil && !strings.Contains(resp, "Connection: close")
			})
			o := h1Sender(t, srv.url).send(context.Background(), []byte(`{}`), fourTokens)
			if o.class != Success || o.status != 200 || o.chunks != 4 || o.outputTokens != 4 {
				t.Fatalf("outcome %+v", o)
			}
		})
	}
}

// TestH1Malformed: a response that is not HTTP/1.1 as framed is a
// transport error naming the fault, whether in its head or in its body.
func TestH1Malformed(t *testing.T) {
	for _, tc := range []struct{ name, resp, reason string }{
		{"not HTTP", "SSH-2.0-x\r\n\r\n", "no response: malformed response"},
		{"HTTP/2 status line", "HTTP/2 200\r\n\r\n", "no response: malformed response"},
		{"a header without a colon", "HTTP/1.1 200 OK\r\nbroken\r\n\r\n", "no response: malformed response"},
		{"a signed content length", "HTTP/1.1 200 OK\r\nContent-Length: +4\r\n\r\nabcd", "no response: malformed response"},
		{"two content lengths", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", "no response: malformed response"},
		{"switching protocols", "HTTP/1.1 101 Switching Protocols\r\n\r\n", "no response: malformed response"},
		{"a head over its bound", "HTTP/1.1 200 OK\r\n" + strings.Repeat("X-Pad: "+strings.Repeat("p", 1000)+"\r\n", 1100) + "\r\n",
			"no response: response head too large"},
		{"a chunk size not in hex", okChunked + "zz\r\ndata: x\r\n", "stream ended before [DONE]: malformed response"},
		{"chunk data without its CRLF", okChunked + "6\r\ndata: xy\r\n", "stream ended before [DONE]: malformed response"},
		{"a stream cut in a chunk", okChunked + "40\r\ndata: ", "stream ended before [DONE]: connection closed"},
		{"a content length cut", "HTTP/1.1 200 OK\r\nContent-Length: 900\r\n\r\n" + sseBody[:40], "stream ended before [DONE]: connection closed"},
		{"no response at all", "", "no response: connection closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newScriptServer(t, func(c net.Conn, _ int) bool {
				_, _ = io.WriteString(c, tc.resp)
				return false
			})
			o := h1Sender(t, srv.url).send(context.Background(), []byte(`{}`), fourTokens)
			if o.class != TransportError || o.reason != tc.reason {
				t.Fatalf("class %s reason %q, want transport-error %q", o.class, o.reason, tc.reason)
			}
		})
	}
}

// TestH1Reuse: a connection is reused after a stream that ended, its
// body included; never after Connection: close, after a body that did not
// end within tailWait (the request itself is a success, ended before the
// wait), or after the server closed it while it was idle (seen before the
// next request is written, which then goes on a new connection).
func TestH1Reuse(t *testing.T) {
	full := okChunked + chunked(sseBody) + "0\r\n\r\n"
	for _, tc := range []struct {
		name   string
		answer func(c net.Conn, n int) bool
		conns  int32
	}{
		{"kept alive", func(c net.Conn, _ int) bool { _, err := io.WriteString(c, full); return err == nil }, 1},
		{"connection close", func(c net.Conn, _ int) bool {
			_, _ = io.WriteString(c, strings.Replace(full, "\r\n\r\n", "\r\nConnection: close\r\n\r\n", 1))
			return true // the client must close it, not the server
		}, 3},
		{"no last chunk", func(c net.Conn, _ int) bool {
			_, err := io.WriteString(c, okChunked+chunked(sseBody))
			return err == nil
		}, 3},
		{"closed while idle", func(c net.Conn, _ int) bool { _, _ = io.WriteString(c, full); return false }, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newScriptServer(t, tc.answer)
			s := h1Sender(t, srv.url)
			for i := range 3 {
				if i > 0 && tc.name == "closed while idle" {
					<-srv.ended // the server closed it: the client's socket has the end
				}
				o := s.send(context.Background(), []byte(`{}`), fourTokens)
				returned := s.clock.Now()
				if o.class != Success {
					t.Fatalf("request %d: %+v", i, o)
				}
				if tc.name == "no last chunk" && returned-o.end < int64(tailWait) {
					t.Fatalf("request %d: send returned %v after its end: the wait for the last chunk came before the end was taken",
						i, time.Duration(returned-o.end))
				}
			}
			if got := srv.accepted.Load(); got != tc.conns {
				t.Fatalf("%d connections for 3 requests, want %d", got, tc.conns)
			}
		})
	}
}

// TestH1CancelClosesTheConnection: a request whose context ends
// mid-stream is client-cancelled, and the server sees its connection end.
func TestH1CancelClosesTheConnection(t *testing.T) {
	wrote := make(chan struct{}, 1)
	srv := newScriptServer(t, func(c net.Conn, _ int) bool {
		_, _ = io.WriteString(c, okChunked+chunked("data: "+tokenChunk+"\n\n"))
		wrote <- struct{}{}
		return true // then waits for another request, or the connection's end
	})
	s := h1Sender(t, srv.url)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { // ends once the server wrote its first chunk
		<-wrote
		cancel()
	}()
	o := s.send(ctx, []byte(`{}`), fourTokens)
	if o.class != ClientCancelled || o.status != 200 && o.status != 0 {
		t.Fatalf("outcome %+v", o)
	}
	select {
	case <-srv.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the server never saw the connection end")
	}
	if len(s.conns.idle) != 0 {
		t.Fatal("the cancelled request's connection was kept")
	}
}

// TestH1PoolBounds: at most maxIdle connections are kept idle, one idle
// for IdleKeepAlive or longer is closed instead of reused, and after
// closeIdle every connection put back is closed.
func TestH1PoolBounds(t *testing.T) {
	srv := newScriptServer(t, func(net.Conn, int) bool { return true })
	p, ok := newH1Pool(srv.url, 1)
	if !ok {
		t.Fatal("no pool")
	}
	a, errA := p.get(context.Background())
	b, errB := p.get(context.Background())
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	p.put(a)
	p.put(b)
	if len(p.idle) != 1 || p.idle[0] != a {
		t.Fatalf("%d idle, want the first put back only", len(p.idle))
	}
	a.idleAt = time.Now().Add(-IdleKeepAlive)
	c, err := p.get(context.Background())
	if err != nil || c == a || c == b {
		t.Fatalf("get after the keep-alive: %v, reused the expired one %v, the one closed %v", err, c == a, c == b)
	}
	p.closeIdle()
	p.put(c)
	if len(p.idle) != 0 {
		t.Fatal("a connection was kept after closeIdle")
	}
	for _, u := range []string{"https://127.0.0.1:1/v1/completions", "http://user@127.0.0.1:1/", "::"} {
		if _, ok := newH1Pool(u, 1); ok {
			t.Errorf("%s: own HTTP/1.1 pool, want net/http", u)
		}
	}
}
