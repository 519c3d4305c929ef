package testgroup

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// childEnv, set in this test binary's environment, makes it the child:
// "ignore" ignores SIGTERM, "default" keeps its default action; either
// says "ready" on stdout and then sleeps.
const childEnv = "WARDEN_TESTGROUP_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		if mode == "ignore" {
			signal.Ignore(syscall.SIGTERM)
		}
		fmt.Println("ready")
		for {
			time.Sleep(time.Hour)
		}
	}
	os.Exit(m.Run())
}

// startChild starts this binary as a child of the mode under Start in a
// subtest, waits until it is ready and returns its command once the
// subtest, and so its cleanup, has ended.
func startChild(t *testing.T, mode string, grace time.Duration) *exec.Cmd {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd.Stdout = w
	t.Run(mode, func(t *testing.T) {
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
	cmd := startChild(t, "default", time.Hour)
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("child ended %v, want killed by SIGTERM", cmd.ProcessState)
	}
}

// A child that ignores SIGTERM is killed with its group past the grace.
func TestKillsGroupPastGrace(t *testing.T) {
	cmd := startChild(t, "ignore", 50*time.Millisecond)
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended %v, want killed by SIGKILL", cmd.ProcessState)
	}
}
