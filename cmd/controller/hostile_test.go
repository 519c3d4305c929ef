package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"warden/pkg/state"
)

// Hostile children, beside the SIGTERM-ignoring server and the setsid
// grandchild of e2e_test.go: a server whose engine leaves a hundred
// processes in its group, and one whose engine is stopped (SIGSTOP, the
// stand-in for uninterruptible sleep). Each runs with a cgroup per process
// and with process groups only.

// engines lists the live stand-in engines of the campaign.
func (c *campaign) engines() []int {
	var out []int
	for _, pid := range c.campaignPIDs() {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if bytes.Contains(cmd, []byte("\x00engine\x00")) {
			out = append(out, pid)
		}
	}
	return out
}

// serverSignals is the server's recorded signal sequence, "SIGNAL/target".
func serverSignals(a state.Attempt) string {
	var seq []string
	for _, sg := range a.Signals {
		if sg.Role == "server" {
			seq = append(seq, sg.Signal+"/"+sg.Target)
		}
	}
	return strings.Join(seq, " ")
}

func TestServerForksAHundred(t *testing.T) {
	t.Parallel()
	for _, cg := range []string{"auto", "off"} {
		t.Run("cgroups="+cg, func(t *testing.T) {
			t.Parallel()
			c := newCampaign(t)
			// The engine execs its hundred children before it is ready:
			// built with -race, beside other tests on two cores, that
			// took more than the e2e default of 10 s once. The ready
			// timeout is not what this test is about: 50 s, within
			// waitMeasuring's 60.
			c.startDetached(writeProtocol(t, scenario{serverArgs: `, --fork, "100"`, measureS: "3", readyS: "50"}), cg)
			c.waitMeasuring()
			n := 0
			waitFor(t, "the engine's hundred children", 60*time.Second, func() bool {
				n = len(c.campaignPIDs())
				return n >= 102 // API parent, engine, 100 children (and the client)
			})
			c.waitExit()
			s := c.store()
			as := c.soleAttempt(s, "p1.saturation", state.Complete)
			// the API parent exited on SIGTERM; the children were left in
			// the group and ended by the group (and cgroup) signals
			if got := serverSignals(as[0]); !strings.HasPrefix(got, "SIGTERM/pid SIGTERM/group") {
				t.Fatalf("server signals %q: want SIGTERM to the API parent, then to the group it left behind", got)
			}
			if v := c.gateVerdict(s, "p1.saturation", "cleanup"); v.Verdict != "pass" || v.Figures["gpu0_used_mib"] != 0 {
				t.Fatalf("cleanup gate %+v", v)
			}
			c.assertNoProcesses()
			t.Logf("%d processes of the campaign seen while measuring; signals %s", n, serverSignals(as[0]))
		})
	}
}

func TestStoppedEngineIsKilled(t *testing.T) {
	t.Parallel()
	for _, cg := range []string{"auto", "off"} {
		t.Run("cgroups="+cg, func(t *testing.T) {
			t.Parallel()
			c := newCampaign(t)
			c.startDetached(writeProtocol(t, scenario{measureS: "2"}), cg)
			c.waitMeasuring()
			var engine int
			waitFor(t, "the engine", 30*time.Second, func() bool {
				if es := c.engines(); len(es) == 1 {
					engine = es[0]
					return true
				}
				return false
			})
			if err := syscall.Kill(engine, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the engine to stop", 30*time.Second, func() bool { return procState(engine) == 'T' })
			c.waitExit()
			if st := procState(engine); st != 0 && st != 'Z' {
				t.Fatalf("the stopped engine %d survived the campaign (state %c)", engine, st)
			}
			s := c.store()
			as := c.soleAttempt(s, "p1.saturation", state.Complete)
			// a stopped engine cannot take its parent's word or SIGTERM;
			// only SIGKILL (or cgroup.kill) ends it
			got := serverSignals(as[0])
			if !strings.Contains(got, "SIGKILL/group") && !strings.Contains(got, "SIGKILL/cgroup") {
				t.Fatalf("server signals %q: want SIGKILL to the group or cgroup", got)
			}
			if v := c.gateVerdict(s, "p1.saturation", "cleanup"); v.Verdict != "pass" || v.Figures["gpu0_used_mib"] != 0 {
				t.Fatalf("cleanup gate %+v", v)
			}
			c.assertNoProcesses()
		})
	}
}
