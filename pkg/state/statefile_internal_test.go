package state

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// recorder is a write function that notes the states it was given and
// fails while fail is set.
type recorder struct {
	mu     sync.Mutex
	writes []int // Attempt.N of every write, in order
	fail   error
}

func (r *recorder) write(job stateJob) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes = append(r.writes, job.a.N)
	return r.fail
}

func (r *recorder) got() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.writes...)
}

func jobOf(dir string, n int) stateJob { return stateJob{a: Attempt{Dir: dir, N: n}} }

// States queued within the window are written once, as the latest; a
// waiting caller is answered once its state is on disk, without the
// window.
func TestFileWriterCoalesces(t *testing.T) {
	var r recorder
	w := newFileWriter(r.write, time.Hour)
	for n := 1; n <= 5; n++ {
		if err := w.queue(jobOf("a", n), false); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.queue(jobOf("a", 6), true); err != nil {
		t.Fatal(err)
	}
	if got := r.got(); len(got) != 1 || got[0] != 6 {
		t.Fatalf("writes %v, want the latest state alone [6]", got)
	}
	// close writes what is still queued, whatever the window.
	if err := w.queue(jobOf("b", 1), false); err != nil {
		t.Fatal(err)
	}
	if err := w.close(); err != nil {
		t.Fatal(err)
	}
	if got := r.got(); len(got) != 2 || got[1] != 1 {
		t.Fatalf("writes %v, want b's state written at close", got)
	}
	// After close a queue writes at once.
	if err := w.queue(jobOf("c", 7), false); err != nil || r.got()[2] != 7 {
		t.Fatalf("queue after close: %v, writes %v", err, r.got())
	}
}

// A failed write no caller waited for is returned by the next queue of
// the same file, or by flush; a durable rewrite is not made undurable by a
// later state queued before it is written.
func TestFileWriterFailures(t *testing.T) {
	r := recorder{fail: errors.New("disk full")}
	w := newFileWriter(r.write, time.Hour)
	defer w.close()
	if err := w.queue(jobOf("a", 1), false); err != nil {
		t.Fatal(err)
	}
	if err := w.flush(); err == nil {
		t.Fatal("flush after a failed write: nil error")
	}
	if err := w.queue(jobOf("a", 2), true); err == nil {
		t.Fatal("waited write that failed: nil error")
	}
	if err := w.queue(jobOf("a", 3), false); err != nil {
		t.Fatalf("the waited failure was told twice: %v", err)
	}
	if err := w.flush(); err == nil {
		t.Fatal("flush of a failing write: nil error")
	}
	// Written without anyone waiting (no window): kept for the next change.
	w0 := newFileWriter(r.write, 0)
	defer w0.close()
	if err := w0.queue(jobOf("a", 4), false); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		w0.mu.Lock()
		kept := len(w0.failed)
		w0.mu.Unlock()
		if kept == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the failed write of a:4 was never kept")
		}
		time.Sleep(time.Millisecond)
	}
	if err := w0.queue(jobOf("a", 5), false); err == nil {
		t.Fatal("the failure of an unwaited write was not told to the next change")
	}
	r.mu.Lock()
	r.fail = nil
	r.mu.Unlock()
	if err := w.flush(); err != nil {
		t.Fatalf("flush after a write that succeeded: %v", err)
	}
	var durable []bool
	w2 := newFileWriter(func(job stateJob) error { durable = append(durable, job.durable); return nil }, time.Hour)
	d := jobOf("a", 1)
	d.durable = true
	w2.queue(d, false)
	w2.queue(jobOf("a", 2), false)
	if err := w2.close(); err != nil || len(durable) != 1 || !durable[0] {
		t.Fatalf("writes durable %v (%v), want one durable write", durable, err)
	}
}
