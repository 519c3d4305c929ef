package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"warden/bench/crashcheck"
	"warden/pkg/failpoint"
)

// Crash tests: a controller built with failpoints kills itself (SIGKILL)
// at a named point between durable steps; a plain controller resumes the
// campaign to the end; then the promises of crash-consistent resume are
// checked (package crashcheck).

var (
	failpointOnce sync.Once
	failpointBin  string
	failpointErr  error
)

// failpointController builds the controller with -tags failpoints, once,
// beside the plain one.
func failpointController(t *testing.T) string {
	t.Helper()
	failpointOnce.Do(func() {
		failpointBin = filepath.Join(filepath.Dir(controllerBin), "controller-failpoints")
		out, err := exec.Command("go", "build", "-tags", "failpoints", "-o", failpointBin, ".").CombinedOutput()
		if err != nil {
			failpointErr = fmt.Errorf("build the failpoints controller: %v\n%s", err, out)
		}
	})
	if failpointErr != nil {
		t.Fatal(failpointErr)
	}
	return failpointBin
}

// run runs bin with args and extra environment and waits for it; it
// returns the combined output and how the process ended.
func (c *campaign) run(bin string, env []string, args ...string) (string, *os.ProcessState) {
	c.t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(withoutFailpoint(os.Environ()), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		c.t.Fatalf("run %s %v: %v", bin, args, err)
	}
	return out.String(), cmd.ProcessState
}

func withoutFailpoint(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, failpoint.EnvVar+"=") {
			out = append(out, kv)
		}
	}
	return out
}

func killedBySIGKILL(st *os.ProcessState) bool {
	ws, ok := st.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// crashAndResume runs a small campaign (a saturation run and the moderate
// run that needs its result) with the failpoint armed, resumes it with a
// plain controller until it completes, and checks every promise. It
// reports whether the failpoint fired.
func crashAndResume(t *testing.T, bin, point string) bool {
	c := newCampaign(t)
	proto := writeProtocol(t, scenario{patterns: 1, loadsModer: true, measureS: "0.3"})
	out, st := c.run(bin, []string{failpoint.EnvVar + "=" + point}, "start", "-f", proto, "-d", c.dir, "--gpu-backend", "fake", "--foreground")
	fired := killedBySIGKILL(st)
	switch {
	case fired && !strings.Contains(out, "failpoint "+point+": killing the process"):
		t.Fatalf("controller died by SIGKILL, but not at the failpoint:\n%s", tail(out, 3000))
	case !fired && st.ExitCode() != 0:
		t.Fatalf("controller exited %d without reaching the failpoint:\n%s", st.ExitCode(), tail(out, 3000))
	}

	var before *crashcheck.Snapshot
	if fired {
		var vs []string
		var err error
		before, vs, err = crashcheck.Take(c.dir)
		if err != nil {
			t.Fatalf("after the crash: %v", err)
		}
		for _, v := range vs {
			t.Errorf("after the crash: %s", v)
		}
		out, st = c.run(controllerBin, nil, "resume", "-d", c.dir, "--foreground")
		if st.ExitCode() != 0 {
			t.Fatalf("resume exited %d:\n%s", st.ExitCode(), tail(out, 3000))
		}
	}
	after, vs, err := crashcheck.Take(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	if before != nil {
		vs = append(vs, crashcheck.Compare(before, after)...)
	}
	final, err := crashcheck.Final(c.dir, after)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range append(vs, final...) {
		t.Errorf("%s", v)
	}
	if t.Failed() {
		t.Logf("resume output:\n%s", tail(out, 4000))
	}
	c.assertNoProcesses()
	return fired
}

// TestCrashAtEveryFailpoint kills the controller once at each failpoint
// of a real campaign and resumes it.
func TestCrashAtEveryFailpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: a campaign per failpoint")
	}
	bin := failpointController(t)
	// Points this scenario cannot reach, with the reason.
	unreachable := map[string]string{}
	var fired, missed []string
	for _, point := range failpoint.Names {
		_ = t.Run(point, func(t *testing.T) {
			if crashAndResume(t, bin, point) {
				fired = append(fired, point)
			} else {
				missed = append(missed, point)
			}
		})
	}
	t.Logf("failpoints fired: %d of %d; not reached: %v", len(fired), len(failpoint.Names), missed)
	for _, p := range missed {
		if _, ok := unreachable[p]; !ok {
			t.Errorf("failpoint %s was never reached: the crash test does not cover it", p)
		}
	}
}
