package contract

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
)

// The stream is read once, its lines checked on several cores: one
// goroutine splits the stream into lines (lineReader: the newline, the
// partial last line and the 64 MiB bound are read there, in order) and
// copies them into batches; workers classify each batch's lines, each
// line alone; the caller applies the results batch by batch in the
// stream's order, so that what depends on order (line numbers, the
// footer's place, the steps' sequence) is what a single pass would find.

// batchBytes and batchLines are about how much of the stream one batch
// holds.
const (
	batchBytes = 1 << 20
	batchLines = 1 << 14
)

// drainBatches waits until every batch but the splitter's own is back in
// free: none is in flight.
func drainBatches(free chan *lineBatch) {
	held := make([]*lineBatch, 0, cap(free)-1)
	for range cap(free) - 1 {
		held = append(held, <-free)
	}
	for _, h := range held {
		free <- h
	}
}

// lineBatch is a run of consecutive complete lines.
type lineBatch struct {
	buf   []byte
	lines []batchLine
	res   []lineResult
	done  chan struct{} // closed when res is filled
}

// batchLine is one line's bytes in buf, trimmed; over: longer than
// maxLine, not held.
type batchLine struct {
	lo, hi int
	over   bool
}

// splitEnd is what the splitter found besides the lines.
type splitEnd struct {
	bytes   int64
	partial bool
	err     error
}

// scanStream reads the stream once: every complete line is parsed and,
// unless it is the footer, checked against schema v1 (layer1schema.go).
func scanStream(r io.Reader) (streamScan, error) {
	workers := max(1, min(runtime.GOMAXPROCS(0), 8))
	free := make(chan *lineBatch, workers+2)
	for range cap(free) {
		free <- &lineBatch{}
	}
	work := make(chan *lineBatch, cap(free))
	order := make(chan *lineBatch, cap(free))
	var end splitEnd
	var wg sync.WaitGroup
	wg.Go(func() { end = splitLines(r, free, work, order) })
	for range workers {
		wg.Go(func() {
			var l layer1Line
			var rec Layer1Record
			for b := range work {
				b.res = b.res[:0]
				for _, ln := range b.lines {
					if ln.over {
						b.res = append(b.res, lineResult{kind: lineBad, why: fmt.Sprintf("does not decode: longer than the %d MiB a line may hold", maxLine>>20)})
						continue
					}
					b.res = append(b.res, classify(b.buf[ln.lo:ln.hi], &l, &rec))
				}
				close(b.done)
			}
		})
	}
	var s streamScan
	for b := range order {
		<-b.done
		for _, res := range b.res {
			s.lines++
			s.apply(s.lines, res)
		}
		if cap(b.buf) > 4*batchBytes {
			b.buf = nil // a long line's: not kept
		}
		free <- b
	}
	wg.Wait()
	s.bytes, s.partial = end.bytes, end.partial
	return s, end.err
}

// splitLines reads r's lines into batches taken from free and hands each
// to work and, in order, to order; it closes both at the stream's end or
// at a read error, which it returns.
func splitLines(r io.Reader, free chan *lineBatch, work, order chan<- *lineBatch) (end splitEnd) {
	defer close(order)
	defer close(work)
	lr := newLineReader(r)
	b := <-free
	b.buf, b.lines, b.done = b.buf[:0], b.lines[:0], make(chan struct{})
	for {
		line, err := lr.next()
		end.bytes += lr.n
		switch {
		case len(line) > 0 && line[len(line)-1] == '\n':
			ln := batchLine{over: lr.over}
			if !lr.over {
				t := trimSpace(line)
				if len(t) > batchBytes {
					// a long line: held alone, after the batches in
					// flight, so that memory holds one such line at a time
					drainBatches(free)
				}
				ln.lo = len(b.buf)
				b.buf = append(b.buf, t...)
				ln.hi = len(b.buf)
			}
			b.lines = append(b.lines, ln)
		case len(trimSpace(line)) > 0 || lr.tailText:
			end.partial = true
		}
		last := err != nil
		if len(b.lines) > 0 && (len(b.buf) >= batchBytes || len(b.lines) >= batchLines || last) {
			work <- b
			order <- b
			if !last {
				b = <-free
				b.buf, b.lines, b.done = b.buf[:0], b.lines[:0], make(chan struct{})
			}
		}
		if errors.Is(err, io.EOF) {
			return end
		}
		if err != nil {
			end.err = err
			return end
		}
	}
}
