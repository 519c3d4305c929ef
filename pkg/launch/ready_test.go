package launch

import (
	"errors"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readyPipe is a pipe whose write end is a bare descriptor, as a detached
// process inherits it.
func readyPipe(t *testing.T) (*os.File, *Ready) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	fd, err := syscall.Dup(int(w.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	return r, NewReady(fd)
}

// TestReadyOK: the first report reaches the starter; a later one is not
// sent (the descriptor is closed after the first).
func TestReadyOK(t *testing.T) {
	r, ready := readyPipe(t)
	ready.OK(4242)
	ready.Fail(errors.New("too late"))
	pid, err := AwaitReady(r, time.Minute)
	if err != nil || pid != 4242 {
		t.Fatalf("AwaitReady = %d, %v; want 4242", pid, err)
	}
}

// TestReadyFail: the reason, over several lines, reaches the starter whole.
func TestReadyFail(t *testing.T) {
	r, ready := readyPipe(t)
	ready.Fail(errors.New("refused: inputs changed:\n/a changed\n/b is missing"))
	_, err := AwaitReady(r, time.Minute)
	var nr *NotReadyError
	if !errors.As(err, &nr) || nr.Reason != "refused: inputs changed:\n/a changed\n/b is missing" {
		t.Fatalf("AwaitReady = %v", err)
	}
}

// TestReadyFailNeverBlocks: a reason longer than a pipe holds is cut to
// MaxReport, so the report never blocks a process whose starter reads
// nothing (the whole reason is the process's own log's).
func TestReadyFailNeverBlocks(t *testing.T) {
	r, ready := readyPipe(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ready.Fail(errors.New(strings.Repeat("x", 200<<10)))
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("a 200 KB reason blocked the report")
	}
	_, err := AwaitReady(r, time.Minute)
	var nr *NotReadyError
	if !errors.As(err, &nr) || len(nr.Reason) > MaxReport+64 || !strings.HasSuffix(nr.Reason, "... (188416 bytes more in the process's log)") {
		t.Fatalf("AwaitReady = %.80v... (%d bytes)", err, len(nr.Reason))
	}
}

// TestAwaitReadyWithoutReport: a process that dies says nothing; one
// that neither reports nor dies runs out of time; a report that names no
// pid gives none.
func TestAwaitReadyWithoutReport(t *testing.T) {
	if _, err := AwaitReady(strings.NewReader(""), time.Minute); !errors.Is(err, ErrNoReport) {
		t.Fatalf("nothing said: %v", err)
	}
	if _, err := AwaitReady(strings.NewReader("panic: boom\n"), time.Minute); !errors.Is(err, ErrNoReport) {
		t.Fatalf("something else said: %v", err)
	}
	if pid, err := AwaitReady(strings.NewReader("ok x\n"), time.Minute); err != nil || pid != 0 {
		t.Fatalf("ok without a pid: %d, %v", pid, err)
	}
	r, w := io.Pipe()
	defer w.Close()
	if _, err := AwaitReady(r, 50*time.Millisecond); !errors.Is(err, ErrReadyTimeout) {
		t.Fatalf("no report: %v", err)
	}
}
