package testterm

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// A command that asks for the cursor position gets the answer on its
// terminal, and what it draws comes back with its control sequences.
func TestAnswersTheCursorQuery(t *testing.T) {
	cmd := exec.Command("sh", "-c", `printf '\033[6n'; stty raw -echo; ans=$(dd bs=6 count=1 2>/dev/null); stty sane; printf '\033[1mgot %s' "$(printf %s "$ans" | tr -d '\033')"`)
	term, err := Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	if !term.Wait(cmd, time.Minute) {
		t.Fatalf("the command did not exit: %q", term.Output())
	}
	out := term.Close()
	if !strings.Contains(out, "\x1b[1m") || !strings.Contains(Plain(out), "got [1;1R") {
		t.Fatalf("output %q", out)
	}
}

// A command that does not exit within the wait is killed and waited for.
func TestWaitKillsALateCommand(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	term, err := Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	if term.Wait(cmd, 50*time.Millisecond) {
		t.Fatal("a sleeping command was said to have exited")
	}
	if cmd.ProcessState == nil || cmd.ProcessState.Success() {
		t.Fatalf("the command was not ended and waited for: %v", cmd.ProcessState)
	}
}
