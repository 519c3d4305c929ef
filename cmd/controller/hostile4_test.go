package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"warden/pkg/api"
	"warden/pkg/lockfile"
	"warden/pkg/state"
)

// childWithArg finds a direct child of parent whose argv holds arg.
func childWithArg(parent int, arg string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(st, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(st[i+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(parent) {
			continue
		}
		argv, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		for _, a := range bytes.Split(argv, []byte{0}) {
			if string(a) == arg {
				return pid
			}
		}
	}
	return 0
}

// The controller stopped (SIGSTOP) while a run measures; its client ends
// within the measuring deadline meanwhile, and the controller stays stopped
// until the deadline has passed. At SIGCONT the deadline timer and the
// client's exit are both pending: the run is judged on the exit (complete),
// not failed measure-deadline, and no signal is sent to the client.
func TestFrozenControllerJudgesClientOnItsExit(t *testing.T) {
	c := newCampaign(t)
	const deadlineS = 4
	proto := writeProtocol(t, scenario{patterns: 1})
	y, err := os.ReadFile(proto)
	if err != nil {
		t.Fatal(err)
	}
	withDeadline := strings.Replace(string(y), "    expected_s: 10\n    client:", "    expected_s: 10\n    deadline_s: "+strconv.Itoa(deadlineS)+"\n    client:", 1)
	if withDeadline == string(y) {
		t.Fatal("protocol template changed: no place for deadline_s")
	}
	if err := os.WriteFile(proto, []byte(withDeadline), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := c.controller("start", "-f", proto, "-d", c.dir, "--gpu-backend", "fake"); code != 0 {
		t.Fatalf("start exited %d:\n%s", code, out)
	}
	lock := filepath.Join(c.dir, api.LockFile)
	ctl := lockfile.Owner(lock)
	cur := c.waitMeasuring()
	measuring := time.Now() // the client started before this
	client := childWithArg(ctl, "client")
	if client == 0 {
		t.Fatal("no client process under the controller while measuring")
	}
	if err := syscall.Kill(ctl, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			syscall.Kill(ctl, syscall.SIGCONT)
		}
	}()
	waitFor(t, "the client to exit while the controller is stopped", 60*time.Second, func() bool { return procState(client) == 'Z' })
	waitFor(t, "the measuring deadline to pass", 60*time.Second, func() bool {
		return time.Since(measuring) > deadlineS*time.Second
	})
	if err := syscall.Kill(ctl, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	waitFor(t, "the controller to finish", 60*time.Second, func() bool { return !lockfile.Held(lock) })
	c.assertNoProcesses()
	s := c.store()
	r, err := s.Run(cur.Run)
	if err != nil {
		t.Fatal(err)
	}
	as := c.attempts(s, cur.Run)
	last := as[len(as)-1]
	if r.State() != state.RunComplete || last.Reason != "" {
		t.Fatalf("run %s: %s, last attempt %s %s %v", cur.Run, r.State(), last.State, last.Reason, last.Figures)
	}
	for _, sig := range last.Signals {
		if sig.Role == "client" {
			t.Fatalf("the exited client was signalled: %+v", sig)
		}
	}
}
