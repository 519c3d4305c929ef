package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"warden/pkg/dirlayout"
	"warden/pkg/gpu/fakegpu"
	"warden/pkg/lockfile"
	"warden/pkg/state"
)

// Resume after a reboot, when the recorded identities no longer name the
// processes: the controller in a PID namespace that is destroyed. A pid
// reused by an unrelated process in the same boot is reconcile's rule,
// tested in pkg/runner (TestPIDReuseNotSignalled).

// rewriteProcs changes the recorded processes of the campaign's only live
// attempt (the controller is dead) and returns the attempt.
func (c *campaign) rewriteProcs(mutate func(p *state.Proc)) state.Attempt {
	c.t.Helper()
	s, err := state.Open(dirlayout.State(c.dir), state.Options{Timeout: 5 * time.Second, Strict: true})
	if err != nil {
		c.t.Fatal(err)
	}
	defer s.Close()
	live, err := s.LiveAttempts()
	if err != nil || len(live) != 1 {
		c.t.Fatalf("live attempts %+v (%v), want one", live, err)
	}
	a, err := s.UpdateAttempt(live[0].RunID, live[0].N, func(at *state.Attempt) error {
		for i := range at.Procs {
			mutate(&at.Procs[i])
		}
		return nil
	})
	if err != nil {
		c.t.Fatal(err)
	}
	return a
}

func (c *campaign) requireComplete(s *state.Store) {
	c.t.Helper()
	cp, err := s.Campaign()
	if err != nil {
		c.t.Fatal(err)
	}
	if cp.State != state.CampaignComplete {
		c.t.Fatalf("campaign %s (%s: %s)", cp.State, cp.StopReason, cp.StopDetail)
	}
	runs, _ := s.Runs()
	for _, r := range runs {
		if !r.Done {
			c.t.Fatalf("run %s not done", r.ID)
		}
	}
}

// The controller and its children run in a PID namespace that is then
// destroyed (as a reboot ends every process), and the boot id changes:
// resume signals nothing, marks the attempt interrupted and completes the
// campaign. One recorded process is rewritten to name a live process by
// pid and start time; only the boot id tells it is not ours.
func TestRebootNothingSignalled(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("a PID namespace needs root")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare (util-linux) not found")
	}
	if out, err := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "true").CombinedOutput(); err != nil {
		t.Skipf("cannot make a PID namespace here: %v %s", err, out)
	}
	bootFile := filepath.Join(t.TempDir(), "boot_id")
	if err := os.WriteFile(bootFile, []byte("boot-before\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{bootIDFileEnv + "=" + bootFile}

	c := newCampaign(t)
	proto := writeProtocol(t, scenario{measureS: "3"})
	ns := exec.Command("unshare", "--pid", "--fork", "--mount-proc", controllerBin,
		"start", "-f", proto, "-d", c.dir, "--gpu-backend", "fake", "--foreground")
	ns.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	ns.Stdout, ns.Stderr = &out, &out
	if err := ns.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Process.Kill(); ns.Wait() })
	c.waitMeasuring()

	// the namespace's init is unshare's only child: the controller
	children, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", ns.Process.Pid, ns.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	init, err := strconv.Atoi(strings.TrimSpace(string(children)))
	if err != nil {
		t.Fatalf("children of unshare: %q", children)
	}
	if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", init)); !bytes.HasPrefix(cmdline, []byte(controllerBin+"\x00")) {
		t.Fatalf("pid %d is not the controller: %q", init, cmdline)
	}
	if owner := lockfile.Owner(dirlayout.Lock(c.dir)); owner != 1 {
		t.Fatalf("the controller records pid %d; in its namespace it is 1", owner)
	}
	// killing the init of a PID namespace kills every process in it
	if err := syscall.Kill(init, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ns.Wait()
	waitFor(t, "the namespace's processes to end", 30*time.Second, func() bool { return len(c.campaignPIDs()) == 0 })

	// the host "rebooted"; an unrelated process now has a recorded pid
	// and start time
	sleeper := unrelated(t)
	pid := sleeper.Process.Pid
	st, err := fakegpu.StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	var recorded []state.Proc
	a := c.rewriteProcs(func(p *state.Proc) {
		if p.Role == "server" {
			p.PID, p.PGID, p.StartTime = pid, pid, st
		}
		recorded = append(recorded, *p)
	})
	for _, p := range recorded {
		if p.BootID != "boot-before" {
			t.Fatalf("process %+v recorded with boot id %q, want the injected one", p, p.BootID)
		}
	}
	if err := os.WriteFile(bootFile, []byte("boot-after\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	res, st2 := c.run(controllerBin, env, "resume", "-d", c.dir, "--foreground")
	if st2.ExitCode() != 0 {
		t.Fatalf("resume exited %d:\n%s", st2.ExitCode(), tail(res, 3000))
	}
	if !running(pid) {
		t.Fatalf("process %d, recorded by pid and start time in the boot before, was killed", pid)
	}
	s := c.store()
	c.requireComplete(s)
	got, err := s.Attempt(a.RunID, a.N)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != state.Interrupted || len(got.Signals) != 0 {
		t.Fatalf("attempt %d: %s, signals %+v; want interrupted with nothing signalled", got.N, got.State, got.Signals)
	}
	if got.Figures["gpu_seconds"] <= 0 {
		t.Fatalf("the interrupted attempt charged nothing: %v", got.Figures)
	}
	as := c.attempts(s, a.RunID)
	last := as[len(as)-1]
	if last.State != state.Complete || len(last.Procs) == 0 || last.Procs[0].BootID != "boot-after" {
		t.Fatalf("the new attempt %+v", last)
	}
	c.assertNoProcesses()
}
