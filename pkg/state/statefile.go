package state

import (
	"errors"
	"sync"
	"time"
)

// StateFileWindow is how long a change of a live attempt may wait for the
// next one before its state.json is written: transitions that come within
// it of each other are written once, as the later state.
const StateFileWindow = 50 * time.Millisecond

// stateJob is one state.json to write: the attempt as a commit left it.
type stateJob struct {
	campaign, campaignDir string
	a                     Attempt
	events                []Event
	durable               bool
}

// pendingFile is the latest state not yet written for one attempt's file.
type pendingFile struct {
	job     stateJob
	since   time.Time    // when the oldest state it replaced was queued
	urgent  bool         // a caller waits: written without the window
	waiters []chan error // told the error of the write that holds their state
}

// fileWriter writes the attempts' state.json files in the background, one
// at a time, in the order of the commits (the Store's fileMu serializes
// queueing), keeping only the latest state of each file. Its goroutine
// ends at close, after every queued state is written.
type fileWriter struct {
	write  func(stateJob) error
	window time.Duration

	mu       sync.Mutex
	pending  map[string]*pendingFile // by attempt directory
	order    []string                // directories in the order first queued
	failed   map[string]error        // a write that failed, not yet told to a caller
	inflight *pendingFile            // the file being written
	closed   bool
	kick     chan struct{} // capacity 1: something was queued or close was asked
	done     chan struct{} // closed when the goroutine has ended
}

func newFileWriter(write func(stateJob) error, window time.Duration) *fileWriter {
	w := &fileWriter{write: write, window: window, pending: map[string]*pendingFile{},
		failed: map[string]error{}, kick: make(chan struct{}, 1), done: make(chan struct{})}
	go w.loop()
	return w
}

// queue replaces the state queued for job's attempt. When wait is set it
// returns the error of the write that puts this state (or a later one) on
// disk; otherwise it returns at once, with the error of an earlier write of
// the same file that no caller has been told of.
func (w *fileWriter) queue(job stateJob, wait bool) error {
	dir := job.a.Dir
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		<-w.done // the goroutine has written what was queued
		return w.write(job)
	}
	p := w.pending[dir]
	if p == nil {
		p = &pendingFile{since: time.Now()}
		w.pending[dir] = p
		w.order = append(w.order, dir)
	}
	p.job.durable = p.job.durable || job.durable // a durable rewrite stays durable
	job.durable = p.job.durable
	p.job = job
	var ch chan error
	if wait {
		p.urgent = true
		ch = make(chan error, 1)
		p.waiters = append(p.waiters, ch)
	}
	earlier := w.failed[dir]
	delete(w.failed, dir)
	w.mu.Unlock()
	w.signal()
	if !wait {
		return earlier
	}
	return <-ch // a later write of the file succeeding makes an earlier failure moot
}

func (w *fileWriter) signal() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// loop writes the queued files until close, then the rest, and ends.
func (w *fileWriter) loop() {
	defer close(w.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		dir, p, wait, closed := w.next()
		switch {
		case p != nil:
			w.finish(dir, p, w.write(p.job))
			continue
		case closed:
			return
		}
		if wait > 0 {
			timer.Reset(wait)
			select {
			case <-w.kick:
				timer.Stop()
			case <-timer.C:
			}
		} else {
			<-w.kick
		}
	}
}

// next takes the file to write now: an urgent one, else the oldest whose
// window has passed (every one once close was asked). Otherwise it says
// how long until the oldest is due (zero: nothing queued).
func (w *fileWriter) next() (string, *pendingFile, time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.order) == 0 {
		return "", nil, 0, w.closed
	}
	pick := -1
	for i, dir := range w.order {
		if w.pending[dir].urgent {
			pick = i
			break
		}
	}
	if pick < 0 {
		wait := w.window - time.Since(w.pending[w.order[0]].since)
		if wait > 0 && !w.closed {
			return "", nil, wait, false
		}
		pick = 0
	}
	dir := w.order[pick]
	p := w.pending[dir]
	w.order = append(w.order[:pick], w.order[pick+1:]...)
	delete(w.pending, dir)
	w.inflight = p
	return dir, p, 0, false
}

// finish tells the waiters of p the result of its write, or keeps a
// failure for the next caller that changes the same attempt.
func (w *fileWriter) finish(dir string, p *pendingFile, err error) {
	w.mu.Lock()
	w.inflight = nil
	waiters := p.waiters
	if err != nil && len(waiters) == 0 {
		w.failed[dir] = err
	} else {
		delete(w.failed, dir)
	}
	w.mu.Unlock()
	for _, ch := range waiters {
		ch <- err
	}
}

// flush waits until every state queued so far is on disk and returns the
// errors of the writes no caller has been told of.
func (w *fileWriter) flush() error {
	w.mu.Lock()
	var chs []chan error
	for _, p := range append(w.queued(), w.inflight) {
		if p != nil {
			ch := make(chan error, 1)
			p.urgent, p.waiters = true, append(p.waiters, ch)
			chs = append(chs, ch)
		}
	}
	w.mu.Unlock()
	w.signal()
	errs := make([]error, 0, len(chs))
	for _, ch := range chs {
		errs = append(errs, <-ch)
	}
	return errors.Join(append(errs, w.takeFailed())...)
}

// queued returns the pending files in order; w.mu is held.
func (w *fileWriter) queued() []*pendingFile {
	out := make([]*pendingFile, 0, len(w.order)+1)
	for _, dir := range w.order {
		out = append(out, w.pending[dir])
	}
	return out
}

// takeFailed returns and forgets the failures no caller has been told of.
func (w *fileWriter) takeFailed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	errs := make([]error, 0, len(w.failed))
	for dir, err := range w.failed {
		errs = append(errs, err)
		delete(w.failed, dir)
	}
	return errors.Join(errs...)
}

// close writes what is queued, ends the goroutine and returns the errors
// no caller has been told of. Later queues write at once.
func (w *fileWriter) close() error {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.signal()
	<-w.done
	return w.takeFailed()
}
