package runner

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"warden/pkg/launch"
	"warden/pkg/state"
)

// startSleeper starts a real child that lives until the test ends, with
// env as its whole environment (empty: /proc/PID/environ is empty, as a
// server that rewrote its title over its environment leaves it) in a
// process group of its own when ownGroup.
func startSleeper(t *testing.T, env []string, ownGroup bool) (state.Proc, launch.Identity) {
	t.Helper()
	cmd := exec.Command("/bin/sleep", "60")
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: ownGroup}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	// Start returns once the child is in execve, which sets the new
	// program's arguments, then its environment, after that: until then
	// /proc/PID/environ reads empty.
	proc := fmt.Sprintf("/proc/%d/", cmd.Process.Pid)
	for deadline := time.Now().Add(10 * time.Second); ; {
		args, _ := os.ReadFile(proc + "cmdline")
		environ, _ := os.ReadFile(proc + "environ")
		if string(args) == "/bin/sleep\x0060\x00" && (len(env) == 0 || len(environ) > 0) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child's arguments and environment are not sleep's after 10 s")
		}
		time.Sleep(time.Millisecond) // polling the kernel's view of the child
	}
	id, err := launch.Lookup(cmd.Process.Pid, nil)
	if err != nil {
		t.Fatal(err)
	}
	// the spawn records the group it made: the leader's pid
	p := state.Proc{Role: "server", PID: id.PID, StartTime: id.StartTime, BootID: id.BootID, PGID: id.PID}
	return p, id
}

// TestForeignDoesNotRestOnTheEnvironment: a live recorded process whose
// identity matched is this campaign's when its environment names this
// campaign, or names none (empty, as after setproctitle) while it is still
// in the process group it was started in; it is foreign when its
// environment names another campaign, or names none and it left its
// process group.
func TestForeignDoesNotRestOnTheEnvironment(t *testing.T) {
	c := &Runner{dir: "/campaigns/this"}
	for _, tc := range []struct {
		name     string
		env      []string
		ownGroup bool
		want     string // "" for ours, else a part of the reason
	}{
		{"this campaign's environment", []string{"WARDEN_CAMPAIGN_DIR=/campaigns/this"}, true, ""},
		{"empty environment, its own group", []string{}, true, ""},
		{"environment without the entry, its own group", []string{"SPT_TITLE=vllm serve"}, true, ""},
		{"another campaign's environment", []string{"WARDEN_CAMPAIGN_DIR=/campaigns/other"}, true, "not this campaign's /campaigns/this"},
		{"empty environment, out of its recorded group", []string{}, false, "where it was started"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, id := startSleeper(t, tc.env, tc.ownGroup)
			if alive, err := id.Alive(nil); !alive || err != nil {
				t.Fatalf("the child is not alive: %v", err)
			}
			got := c.foreign(p, id, true)
			switch {
			case tc.want == "" && got != "":
				t.Fatalf("foreign: %q, want ours", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Fatalf("foreign: %q, want a reason with %q", got, tc.want)
			}
		})
	}
}
