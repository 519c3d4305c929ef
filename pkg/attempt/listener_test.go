package attempt_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"warden/internal/testutil/testports"
	"warden/pkg/attempt"
	"warden/pkg/launch"
	"warden/pkg/state"
)

// phaseLine is a shell command appending one phase line to
// $WARDEN_PHASE_FILE.
func phaseLine(phase string) string {
	return `printf '{"phase":"` + phase + `","t":"%s","mono_ns":1}\n' "$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)" >> "$WARDEN_PHASE_FILE"`
}

// TestListenerRecheckedWhileMeasuring: a server that binds with
// SO_REUSEPORT, as vLLM does, lets a same-user process join its port
// after the readiness gate; an impostor that joined 1 s into measuring
// answered 3,843 of 9,692 requests and the run was complete. The port's
// holders are checked again at each profile window the client reports
// and at the end of measuring: an impostor fails the run harness-error,
// named by pid and command; without one the checks pass and are counted.
func TestListenerRecheckedWhileMeasuring(t *testing.T) {
	t.Parallel()
	drain := []string{phaseLine("drain"), phaseLine("drained"), phaseLine("done")}
	for _, c := range []struct {
		name     string
		impostor bool
		after    []string // the client's steps once the impostor joined
		when     string   // where the failure is found
	}{
		// the client reports a profile window and then waits for ever on a
		// fifo no one opens for writing (not $GO: its writer may not have
		// closed it yet, and the read would end at its close): only the
		// check at the window can end the run
		{"at a profile window", true, []string{phaseLine("profile"), "read never < $NEVER"}, "at profile window 1"},
		{"at the end of measuring", true, drain, "at the end of measuring"},
		{"no impostor", false, append([]string{phaseLine("profile")}, drain...), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			port := testports.Free(t, 1)[0]
			l := &launch.Launcher{Reaper: testReaper}
			fifo := filepath.Join(dir, "go")
			never := filepath.Join(dir, "never")
			for _, f := range []string{fifo, never} {
				if err := syscall.Mkfifo(f, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			client := []string{"/bin/sh", "-c", "GO=" + fifo + "; NEVER=" + never + "; read go < $GO; " + strings.Join(c.after, "; ")}
			server := []string{standinBin, "server", "--port", strconv.Itoa(port), "--load-s", "0", "--reuse-port"}
			type measured struct {
				reason state.Reason
				detail string
				checks float64
				err    error
			}
			done := make(chan measured, 1)
			go func() {
				var m measured
				m.reason, m.detail, m.checks, m.err = attempt.MeasuredOf(l, dir, port, server, client)
				done <- m
			}()

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := launch.Probe(ctx, fmt.Sprintf("http://127.0.0.1:%d/health", port), http.StatusOK, 20*time.Millisecond, nil); err != nil {
				t.Fatalf("the server never answered: %v", err)
			}
			pid := 0
			if c.impostor {
				pid = joinPort(t, ctx, l, dir, port)
			}
			tell(t, ctx, fifo)
			m := <-done
			if m.err != nil {
				t.Fatal(m.err)
			}
			if !c.impostor {
				if m.reason != "" || m.checks < 1 {
					t.Fatalf("no impostor: %s %q after %v checks, want none failed and at least one passed", m.reason, m.detail, m.checks)
				}
				return
			}
			holder := fmt.Sprintf("held by pid %d (standin, command \"%s impostor --port %d", pid, standinBin, port)
			if m.reason != state.ReasonHarnessError || !strings.Contains(m.detail, c.when) || !strings.Contains(m.detail, holder) {
				t.Fatalf("%s %q, want harness-error %s naming the impostor: %s", m.reason, m.detail, c.when, holder)
			}
		})
	}
}

// joinPort starts an impostor on port through l, waits until it has
// joined it, and returns its pid; the test's cleanup ends it.
func joinPort(t *testing.T, ctx context.Context, l *launch.Launcher, dir string, port int) int {
	t.Helper()
	ready := filepath.Join(dir, "impostor.ready")
	p, err := l.Start(launch.Spec{Role: "impostor", Argv: []string{standinBin, "impostor", "--port", strconv.Itoa(port), "--ready-file", ready},
		Stop: launch.StopOptions{Grace: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		if _, err := p.Shutdown(sctx); err != nil {
			t.Error(err)
		}
	})
	for {
		if _, err := os.Stat(ready); err == nil {
			return p.PID
		}
		select {
		case <-p.Done():
			t.Fatalf("the impostor exited: %s", attempt.ExitText(p.Exit()))
		case <-ctx.Done():
			t.Fatalf("the impostor never joined port %d", port)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// tell writes a line to the fifo the client reads, once the client has
// it open (polled, with ctx's deadline).
func tell(t *testing.T, ctx context.Context, fifo string) {
	t.Helper()
	for {
		f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			_, err = f.WriteString("go\n")
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			return
		}
		if !errors.Is(err, syscall.ENXIO) {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatal("the client never opened its fifo")
		case <-time.After(10 * time.Millisecond):
		}
	}
}
