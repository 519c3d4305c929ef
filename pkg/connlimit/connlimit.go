// Package connlimit bounds what a listener can cost the process that
// serves it: how many connections are open at once, how long each may sit
// idle or take over a request, and how many descriptors are left for
// everything else.
//
// A local client that opens kept-alive connections and never closes them
// (a leaky poller, or another user on the loopback port) would otherwise
// take one descriptor each until the process has none left to stop what
// it started.
package connlimit

import (
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Timeouts of every connection an HTTP server built by Server takes.
const (
	// HeaderTimeout bounds the wait for a request's headers, from the
	// connection's start or the previous response.
	HeaderTimeout = 5 * time.Second
	// ReadTimeout bounds reading a whole request.
	ReadTimeout = 10 * time.Second
	// WriteTimeout bounds a request from its headers to the end of its
	// response (a report of a large campaign included).
	WriteTimeout = time.Minute
	// IdleTimeout closes a kept-alive connection without a request for
	// this long.
	IdleTimeout = 30 * time.Second
)

// Server returns an HTTP server for h with the timeouts above.
func Server(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: HeaderTimeout, ReadTimeout: ReadTimeout,
		WriteTimeout: WriteTimeout, IdleTimeout: IdleTimeout}
}

// Listener returns ln with at most max connections open at once: Accept
// waits for one of them to close before it takes another (the others wait
// in the kernel's backlog, costing this process no descriptor).
func Listener(ln net.Listener, max int) net.Listener {
	return &listener{Listener: ln, slots: make(chan struct{}, max), done: make(chan struct{})}
}

type listener struct {
	net.Listener
	slots chan struct{} // one token per open connection
	once  sync.Once     // closes done
	done  chan struct{} // closed by Close: a waiting Accept returns
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &conn{Conn: c, release: func() { <-l.slots }}, nil
}

func (l *listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// conn gives its slot back once, at its first Close.
type conn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// Reserve raises the soft limit on open files to the hard limit (the Go
// runtime does so at start; this covers a process whose limit was lowered
// since)
// and checks that it leaves at least reserve descriptors beyond the
// listeners' caps, caps being the sum of their maxima. It returns the
// limit.
func Reserve(caps, reserve int) (uint64, error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("read the open-files limit: %w", err)
	}
	if lim.Cur < lim.Max {
		raised := unix.Rlimit{Cur: lim.Max, Max: lim.Max}
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &raised); err == nil {
			lim = raised
		}
	}
	if need := uint64(caps + reserve); lim.Cur < need {
		return lim.Cur, fmt.Errorf("the open-files limit (RLIMIT_NOFILE) is %d: the listeners may hold %d and the controller keeps %d in reserve to stop what it starts; raise it to at least %d (ulimit -n)",
			lim.Cur, caps, reserve, need)
	}
	return lim.Cur, nil
}
