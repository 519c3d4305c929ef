package testgroup

import (
	"bufio"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// startChild runs script (sh, ending in an exec of sleep, so one
// process) under Start in a subtest, waits until it says ready and
// returns its command once the subtest, and so its cleanup, has ended.
func startChild(t *testing.T, script string, grace time.Duration) *exec.Cmd {
	cmd := exec.Command("sh", "-c", script+"; echo ready; exec sleep 1000")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd.Stdout = w
	t.Run("child", func(t *testing.T) {
		Start(t, cmd, grace)
		w.Close()
		if line, err := bufio.NewReader(r).ReadString('\n'); line != "ready\n" {
			t.Fatalf("child said %q, %v", line, err)
		}
		if pgid, err := syscall.Getpgid(cmd.Process.Pid); err != nil || pgid != cmd.Process.Pid {
			t.Errorf("child's group %d, %v; want its own, %d", pgid, err, cmd.Process.Pid)
		}
	})
	return cmd
}

// A child that ends on SIGTERM is waited for when the test ends.
func TestStopsWithSIGTERM(t *testing.T) {
	cmd := startChild(t, "true", time.Hour)
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("child ended %v, want killed by SIGTERM", cmd.ProcessState)
	}
}

// A child that ignores SIGTERM is killed with its group past the grace.
func TestKillsGroupPastGrace(t *testing.T) {
	cmd := startChild(t, "trap '' TERM", 50*time.Millisecond)
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended %v, want killed by SIGKILL", cmd.ProcessState)
	}
}
