// Package testgroup starts a test's helper process in a process group of
// its own and stops it when the test ends, as the controller stops a
// server: SIGTERM to the process, then, past a grace period, SIGKILL to
// its whole group.
package testgroup

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// Start starts cmd as the leader of a new process group and reaps it.
// When t ends it sends the process SIGTERM and, when it has not exited
// within grace, SIGKILL to its group; it waits for the process either
// way, so cmd.ProcessState is set once t's cleanups have run.
func Start(t testing.TB, cmd *exec.Cmd, grace time.Duration) {
	t.Helper()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }() // ends when the process exits
	t.Cleanup(func() {
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(grace):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
}
