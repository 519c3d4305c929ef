package launch

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// A process started detached reports once, on a pipe its starter handed
// it, that it runs ("ok PID") or why it could not ("error: ..."; the
// reason may span lines), and closes its end. Its starter reads to the
// end: a process that dies first closes it too, having said nothing.

// Ready is the reporting end of a readiness pipe.
type Ready struct{ fd int }

// NewReady reports on file descriptor fd; fd < 0 means nobody listens.
func NewReady(fd int) *Ready { return &Ready{fd: fd} }

// OK reports that the process runs as pid. Only the first report is sent.
func (r *Ready) OK(pid int) { r.report(fmt.Sprintf("ok %d", pid)) }

// Fail reports why the process could not run, its first MaxReport bytes
// (the whole reason belongs in the process's own log). Only the first
// report is sent.
func (r *Ready) Fail(err error) {
	msg := err.Error()
	if len(msg) > MaxReport {
		cut := MaxReport
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = fmt.Sprintf("%s... (%d bytes more in the process's log)", msg[:cut], len(msg)-cut)
	}
	r.report("error: " + msg)
}

// MaxReport bounds a report's reason: far below a pipe's 64 KiB, so that
// the report never blocks a process whose starter does not read it.
const MaxReport = 16 << 10

func (r *Ready) report(msg string) {
	if r.fd < 0 {
		return
	}
	f := os.NewFile(uintptr(r.fd), "ready")
	fmt.Fprintln(f, msg)
	f.Close()
	r.fd = -1
}

// NotReadyError is the reason a process reported for not running.
type NotReadyError struct{ Reason string }

func (e *NotReadyError) Error() string { return e.Reason }

// ErrNoReport says that the reporting end was closed without a report:
// the process died before it ran.
var ErrNoReport = errors.New("closed without a report")

// ErrReadyTimeout says that no report came within the time allowed.
var ErrReadyTimeout = errors.New("no report in time")

// AwaitReady reads the report on r, for at most timeout: the pid the
// process runs as (0 when its report named none that parses), a
// *NotReadyError with its reason, ErrNoReport or ErrReadyTimeout.
func AwaitReady(r io.Reader, timeout time.Duration) (int, error) {
	report := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		report <- strings.TrimSpace(string(b))
	}()
	select {
	case msg := <-report:
		switch {
		case strings.HasPrefix(msg, "ok "):
			pid, _ := strconv.Atoi(strings.TrimPrefix(msg, "ok "))
			return pid, nil
		case strings.HasPrefix(msg, "error: "):
			return 0, &NotReadyError{strings.TrimPrefix(msg, "error: ")}
		}
		return 0, ErrNoReport
	case <-time.After(timeout):
		return 0, ErrReadyTimeout
	}
}
