package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"warden/pkg/dirlayout"
	"warden/pkg/lockfile"
	"warden/pkg/state"
)

// End-to-end tests: the real controller binary runs campaigns of real
// stand-in servers and clients on fake GPUs. Each test reads the outcome
// from the campaign's state database and directory, checks the store's
// invariants, and makes sure no process of the campaign is left.

func TestServerIgnoresSIGTERM(t *testing.T) {
	t.Parallel()
	c, s := ranScenario(t, scenario{serverArgs: `, --ignore-sigterm`})
	as := c.soleAttempt(s, "p1.saturation", state.Complete)
	var seq []string
	for _, sg := range as[0].Signals {
		if sg.Role == "server" {
			seq = append(seq, sg.Signal+"/"+sg.Target)
		}
	}
	got := strings.Join(seq, " ")
	if !strings.HasPrefix(got, "SIGTERM/pid SIGTERM/group") || !strings.Contains(got, "SIGKILL/group") {
		t.Fatalf("server signals %q: want SIGTERM to the API parent, then the group, then SIGKILL", got)
	}
	for i := 1; i < len(as[0].Signals); i++ {
		if as[0].Signals[i].At.Before(as[0].Signals[i-1].At) {
			t.Fatalf("signal times go back: %+v", as[0].Signals)
		}
	}
	c.assertNoProcesses()
}

func TestEscapedGrandchildIsCleanedUp(t *testing.T) {
	t.Parallel()
	c, s := ranScenario(t, scenario{serverArgs: `, --setsid-grandchild`})
	c.soleAttempt(s, "p1.saturation", state.Complete)
	if v := c.gateVerdict(s, "p1.saturation", "cleanup"); v.Verdict != "pass" || v.Figures["gpu0_used_mib"] != 0 {
		t.Fatalf("cleanup gate %+v", v)
	}
	c.assertNoProcesses()
}

// TestEscapedCgroupGrandchildIsCleanedUp: a root daemon can leave its
// cgroup as well as its process group and session. With cgroups on, the
// leaf no longer holds it: the sweep for descendants that escaped, marked
// by the attempt's directory and reparented to the controller, runs with
// cgroups too, and ends it.
func TestEscapedCgroupGrandchildIsCleanedUp(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	out := c.runForeground(writeProtocol(t, scenario{serverArgs: `, --setsid-grandchild, --escape-cgroup`}))
	s := c.store()
	a := c.soleAttempt(s, "p1.saturation", state.Complete)[0]
	for _, p := range a.Procs {
		if p.Role == "server" && p.Cgroup == "" {
			t.Skip("the server ran without a cgroup (cgroup v2 is not writable here): the escape from a cgroup is not what this test drives")
		}
	}
	if v := c.gateVerdict(s, "p1.saturation", "cleanup"); v.Verdict != "pass" || v.Figures["gpu0_used_mib"] != 0 {
		t.Fatalf("cleanup gate %+v", v)
	}
	if !strings.Contains(out, "killed a descendant that escaped its process group") {
		t.Fatalf("the controller did not say it ended the escapee:\n%s", tail(out, 3000))
	}
	c.assertNoProcesses()
}

func TestClientHangsWatchdog(t *testing.T) {
	t.Parallel()
	c, s := ranScenario(t, scenario{clientArgs: `, --hang`, drainS: "1", watchdogS: "2"})
	c.soleAttempt(s, "p1.saturation", state.Failed, state.ReasonDrainWatchdog)
	cp, _ := s.Campaign()
	if cp.State != state.CampaignStopped {
		t.Fatalf("campaign %s", cp.State)
	}
	c.assertNoProcesses()
}

func TestSecondControllerRefusedAndStopResume(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := writeProtocol(t, scenario{patterns: 3, measureS: "3"})
	out, code := c.controller("start", "-f", proto, "-d", c.dir, "--gpu-backend", "fake")
	if code != 0 || !strings.Contains(out, "controller running, pid") {
		t.Fatalf("start exited %d:\n%s", code, out)
	}
	lock := dirlayout.Lock(c.dir)
	pid := lockfile.Owner(lock)

	// a second controller on the same directory is refused with the first's pid
	out, code = c.controller("resume", "-d", c.dir, "--foreground")
	if code == 0 || !strings.Contains(out, fmt.Sprintf("controller pid %d already runs campaign", pid)) {
		t.Fatalf("second controller: exit %d:\n%s", code, out)
	}
	out, code = c.controller("--resume", "-d", c.dir)
	if code == 0 || !strings.Contains(out, fmt.Sprintf("pid %d", pid)) {
		t.Fatalf("second detached controller: exit %d:\n%s", code, out)
	}

	// stop while a run measures
	c.waitMeasuring()
	out, code = c.controller("stop", "-d", c.dir)
	if code != 0 || !strings.Contains(out, "controller exited") {
		t.Fatalf("stop exited %d:\n%s", code, out)
	}
	if lockfile.Held(lock) {
		t.Fatal("controller still holds the lock after stop returned")
	}
	c.assertNoProcesses()
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignStopped || cp.StopReason != "operator-stop" {
		t.Fatalf("after stop: %s %s", cp.State, cp.StopReason)
	}
	interrupted := len(c.attemptsIn(s, state.Interrupted))
	if interrupted == 0 {
		t.Fatal("no attempt was interrupted by the stop")
	}
	s.Close()

	// resume finishes the campaign; interrupted attempts stay beside the new ones
	out, code = c.controller("--resume", "-d", c.dir)
	if code != 0 {
		t.Fatalf("resume exited %d:\n%s", code, out)
	}
	c.waitUnlocked("the controller to finish", 120*time.Second)
	s2 := c.store()
	cp, _ = s2.Campaign()
	if cp.State != state.CampaignComplete {
		t.Fatalf("after resume: %s %s %s", cp.State, cp.StopReason, cp.StopDetail)
	}
	runs, _ := s2.Runs()
	after := 0
	for _, r := range runs {
		as := c.attempts(s2, r.ID)
		if !r.Done || as[len(as)-1].State != state.Complete {
			t.Fatalf("run %s not complete after resume: %+v", r.ID, as)
		}
		for _, a := range as {
			if a.State == state.Interrupted {
				after++
			}
		}
	}
	if after != interrupted {
		t.Fatalf("interrupted attempts: %d before resume, %d after", interrupted, after)
	}
	c.assertNoProcesses()
}

// SIGTERM to the daemon does what controller stop does: in-flight runs end
// through their API parent, their attempts are interrupted, the campaign is
// left stopped and resumable.
func TestSIGTERMStopsGracefully(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := writeProtocol(t, scenario{patterns: 2, measureS: "3"})
	c.signalWhileMeasuring(proto, syscall.SIGTERM, "the controller to exit", 60*time.Second)
	c.assertNoProcesses()
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignStopped || cp.StopReason != "operator-stop" {
		t.Fatalf("after SIGTERM: %s %s", cp.State, cp.StopReason)
	}
	interrupted := c.attemptsIn(s, state.Interrupted)
	for _, a := range interrupted {
		sent := false
		for _, sg := range a.Signals {
			sent = sent || (sg.Role == "server" && sg.Signal == "SIGTERM" && sg.Target == "pid")
		}
		if !sent {
			t.Fatalf("%s a%d: the server was not stopped through its API parent: %+v", a.RunID, a.N, a.Signals)
		}
	}
	if len(interrupted) == 0 {
		t.Fatal("no attempt interrupted")
	}
}

func TestKilledControllerResumes(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := writeProtocol(t, scenario{patterns: 2, measureS: "3"})
	// the controller dies without a chance to clean up; its children live on
	c.signalWhileMeasuring(proto, syscall.SIGKILL, "the controller to die", 30*time.Second)
	orphans := c.campaignPIDs()
	if len(orphans) == 0 {
		t.Fatal("no server or client outlived the killed controller; the test shows nothing")
	}
	// ctlq says the controller is gone while the campaign is unfinished
	c.ctlqStatusExits(4)

	if out, code := c.controller("--resume", "-d", c.dir); code != 0 {
		t.Fatalf("resume exited %d:\n%s", code, out)
	}
	c.waitUnlocked("the campaign to finish", 120*time.Second)
	for _, p := range orphans {
		if running(p) {
			t.Fatalf("left-over pid %d still alive after resume", p)
		}
	}
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignComplete {
		t.Fatalf("campaign %s %s", cp.State, cp.StopDetail)
	}
	interrupted := 0
	runs, _ := s.Runs()
	for _, r := range runs {
		for _, a := range c.attempts(s, r.ID) {
			if a.State == state.Interrupted {
				interrupted++
				if a.Figures["gpu_seconds"] <= 0 {
					t.Fatalf("interrupted attempt %s a%d charged nothing", r.ID, a.N)
				}
				kills := 0
				for _, sg := range a.Signals {
					if sg.Signal == "SIGTERM" || sg.Signal == "SIGKILL" {
						kills++
					}
				}
				if kills == 0 {
					t.Fatalf("left-overs of %s a%d were not signalled", r.ID, a.N)
				}
			}
		}
		if !r.Done {
			t.Fatalf("run %s not done", r.ID)
		}
	}
	if interrupted == 0 {
		t.Fatal("no attempt marked interrupted after the crash")
	}
	c.assertNoProcesses()
}

func TestStartRefusesAnotherCampaign(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	c.runForeground(writeProtocol(t, scenario{}))
	// the same protocol again: told to resume instead
	out, code := c.controller("start", "-f", writeProtocol(t, scenario{}), "-d", c.dir, "--gpu-backend", "fake", "--foreground")
	if code == 0 || !strings.Contains(out, "holds") {
		t.Fatalf("second start in the same directory: exit %d:\n%s", code, out)
	}
	// a different protocol: refused, naming the campaign there
	out, code = c.controller("start", "-f", writeProtocol(t, scenario{measureS: "0.7"}), "-d", c.dir, "--gpu-backend", "fake", "--foreground")
	if code == 0 || !strings.Contains(out, "holds another campaign (e2e-") {
		t.Fatalf("other protocol: exit %d:\n%s", code, out)
	}
	// a directory with other files
	other := t.TempDir()
	os.WriteFile(filepath.Join(other, "notes.txt"), []byte("x"), 0o644)
	out, code = c.controller("start", "-f", writeProtocol(t, scenario{}), "-d", other, "--gpu-backend", "fake", "--foreground")
	if code == 0 || !strings.Contains(out, "is not empty and holds no campaign") {
		t.Fatalf("non-empty directory: exit %d:\n%s", code, out)
	}
	// an invalid protocol: exit 2 with the problems, nothing created
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("warden: 1\nname: x\nbogus: 1\n"), 0o644)
	fresh := filepath.Join(t.TempDir(), "fresh")
	out, code = c.controller("start", "-f", bad, "-d", fresh, "--gpu-backend", "fake")
	if code != 2 || !strings.Contains(out, `bad.yaml:3:1: bogus: unknown field "bogus"`) {
		t.Fatalf("invalid protocol: exit %d:\n%s", code, out)
	}
	if _, err := os.Stat(fresh); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an invalid protocol created %s", fresh)
	}
}
