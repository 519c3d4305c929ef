package contract

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"warden/pkg/jsonscan"
)

// A trace is read in one pass over its decompressed bytes: the gzip is
// inflated on a goroutine of its own, a chunk ahead of the parser
// (prefetcher), and the parser walks the JSON through a window of the
// stream (traceWindow) that holds the value being read and no more.
// Whitespace between values costs no memory; one value (a top-level
// member's value, one event) may be at most maxTraceValue bytes: a longer
// one is refused, so a small gzip that inflates to one huge string is
// refused after reading that much, not held.

// maxTraceValue bounds one value of a trace: an event, or the value of a
// top-level member other than traceEvents. Kineto's events are a few
// hundred bytes; its other members (deviceProperties, distributedInfo)
// a few kilobytes.
const maxTraceValue = 16 << 20

// traceChunk is what the window reads at a time and what the prefetcher
// inflates ahead.
const traceChunk = 1 << 20

// traceWindow is a window over a stream of JSON text: buf[i:n] are the
// bytes read and not yet consumed; off is the stream offset of buf[0].
type traceWindow struct {
	r    io.Reader
	buf  []byte
	i, n int
	off  int64
	eof  bool
	err  error // a read error other than the end of the stream
}

func newTraceWindow(r io.Reader) *traceWindow {
	return &traceWindow{r: r, buf: make([]byte, traceChunk)}
}

// fill reads more of the stream into the window, keeping buf[i:n]; it
// reports whether it read anything. The window grows only while one
// value fills it, never past maxTraceValue + traceChunk.
func (w *traceWindow) fill() bool {
	if w.eof || w.err != nil {
		return false
	}
	if w.i > 0 {
		w.off += int64(w.i)
		w.n = copy(w.buf, w.buf[w.i:w.n])
		w.i = 0
	}
	if len(w.buf)-w.n < traceChunk/2 && len(w.buf) < maxTraceValue+traceChunk {
		nb := make([]byte, min(2*len(w.buf), maxTraceValue+traceChunk))
		copy(nb, w.buf[:w.n])
		w.buf = nb
	}
	start := w.n
	for w.n < len(w.buf) {
		k, err := w.r.Read(w.buf[w.n:])
		w.n += k
		if errors.Is(err, io.EOF) {
			w.eof = true
			break
		}
		if err != nil {
			w.err = err
			break
		}
	}
	return w.n > start
}

// skipSpace consumes whitespace; it reports whether a byte follows.
func (w *traceWindow) skipSpace() bool {
	for {
		w.i = jsonscan.SkipSpace(w.buf[:w.n], w.i)
		if w.i < w.n {
			return true
		}
		if !w.fill() {
			return false
		}
	}
}

// expect consumes c, after whitespace, if it is the next byte.
func (w *traceWindow) expect(c byte) bool {
	if w.skipSpace() && w.buf[w.i] == c {
		w.i++
		return true
	}
	return false
}

// scan consumes the value at the window's start (no leading whitespace)
// with walk, a scanner of buf that returns the index past the value or
// -1; it returns the value's bytes, valid until the next read. A value
// that does not end in the window is read further until it does, the
// stream ends, or it is longer than maxTraceValue.
func (w *traceWindow) scan(walk func(p []byte, i int) int) ([]byte, error) {
	for {
		end := walk(w.buf[:w.n], w.i)
		// a value that ends where the window does may go on (a number)
		if end >= 0 && (end < w.n || w.eof) {
			v := w.buf[w.i:end]
			w.i = end
			return v, nil
		}
		if end < 0 && (w.eof || w.i < w.n && !startsValue(w.buf[w.i])) {
			return nil, w.syntax()
		}
		if w.n-w.i > maxTraceValue {
			// too long, or invalid: the scan cannot tell which without
			// reading on, and reads no further
			return nil, fmt.Errorf("parse: no valid JSON value ends within %d MiB of byte %d of the trace (a value may be at most %d MiB)",
				maxTraceValue>>20, w.off+int64(w.i)+1, maxTraceValue>>20)
		}
		if !w.fill() && !w.eof {
			return nil, w.syntax()
		}
	}
}

// startsValue: c may begin a JSON value.
func startsValue(c byte) bool {
	switch c {
	case '{', '[', '"', '-', 't', 'f', 'n':
		return true
	}
	return c >= '0' && c <= '9'
}

// value consumes one JSON value.
func (w *traceWindow) value() ([]byte, error) { return w.scan(jsonscan.Skip) }

// syntax is the error at the window's position: the read error, if the
// stream broke, else invalid JSON.
func (w *traceWindow) syntax() error {
	switch {
	case w.err != nil:
		return fmt.Errorf("gunzip: %w", w.err)
	case w.i >= w.n && w.eof:
		return errors.New("parse: unexpected end of the trace")
	}
	return fmt.Errorf("parse: invalid JSON at byte %d of the trace", w.off+int64(w.i)+1)
}

// key consumes an object's key and its colon and returns the key,
// unescaped.
func (w *traceWindow) key() (string, error) {
	if !w.skipSpace() || w.buf[w.i] != '"' {
		return "", w.syntax()
	}
	k, err := w.value()
	if err != nil {
		return "", err
	}
	s, ok := plainString(k)
	if !ok {
		if err := json.Unmarshal(k, &s); err != nil {
			return "", fmt.Errorf("parse: key: %w", err)
		}
	}
	if !w.expect(':') || !w.skipSpace() {
		return "", w.syntax()
	}
	return s, nil
}

// members walks the object that starts after whitespace: each calls
// member with its key, the window at the member's value, which member
// must consume.
func (w *traceWindow) members(what string, member func(key string) error) error {
	if !w.expect('{') {
		if w.err != nil {
			return w.syntax()
		}
		return fmt.Errorf("parse: %s is not a JSON object", what)
	}
	if w.expect('}') {
		return nil
	}
	for {
		k, err := w.key()
		if err != nil {
			return err
		}
		if err := member(k); err != nil {
			return err
		}
		if w.expect(',') {
			continue
		}
		if w.expect('}') {
			return nil
		}
		return w.syntax()
	}
}

// items walks the array that starts after whitespace: item must consume
// each item from the window.
func (w *traceWindow) items(what string, item func() error) error {
	if !w.expect('[') {
		if w.err != nil {
			return w.syntax()
		}
		return fmt.Errorf("parse: %s is not an array", what)
	}
	if w.expect(']') {
		return nil
	}
	for {
		if err := item(); err != nil {
			return err
		}
		if w.expect(',') {
			if !w.skipSpace() {
				return w.syntax()
			}
			continue
		}
		if w.expect(']') {
			return nil
		}
		return w.syntax()
	}
}

// end checks that only whitespace follows the trace object, reading the
// stream to its end (so that the gzip's checksum and length are checked).
func (w *traceWindow) end() error {
	if w.skipSpace() {
		return fmt.Errorf("parse: data after the trace object at byte %d", w.off+int64(w.i)+1)
	}
	if w.err != nil {
		return w.syntax()
	}
	return nil
}

// prefetcher reads its source a chunk ahead on a goroutine of its own, so
// that inflating and parsing a trace use two cores. Close ends the
// goroutine and waits for it.
type prefetcher struct {
	full chan []byte
	free chan []byte
	done chan struct{}
	wg   sync.WaitGroup
	cur  []byte // the unread part of chunk
	held []byte // the chunk being read, whole
	err  error  // the source's last error, set before full is closed
}

const prefetchDepth = 3

func newPrefetcher(src io.Reader) *prefetcher {
	p := &prefetcher{full: make(chan []byte, prefetchDepth), free: make(chan []byte, prefetchDepth+1), done: make(chan struct{})}
	for range prefetchDepth + 1 {
		p.free <- make([]byte, traceChunk)
	}
	p.wg.Go(func() { p.run(src) })
	return p
}

func (p *prefetcher) run(src io.Reader) {
	defer close(p.full)
	for {
		var b []byte
		select {
		case b = <-p.free:
		case <-p.done:
			return
		}
		n := 0
		var err error
		for n < len(b) && err == nil {
			var k int
			k, err = src.Read(b[n:])
			n += k
		}
		if n > 0 {
			select {
			case p.full <- b[:n]:
			case <-p.done:
				return
			}
		}
		if err != nil {
			p.err = err
			return
		}
	}
}

func (p *prefetcher) Read(b []byte) (int, error) {
	for len(p.cur) == 0 {
		if p.held != nil {
			p.free <- p.held[:cap(p.held)] // never blocks: free holds every chunk
			p.held = nil
		}
		c, ok := <-p.full
		if !ok {
			return 0, p.err
		}
		p.cur, p.held = c, c
	}
	k := copy(b, p.cur)
	p.cur = p.cur[k:]
	return k, nil
}

// Close stops the read-ahead and waits for its goroutine.
func (p *prefetcher) Close() {
	close(p.done)
	p.wg.Wait()
}
