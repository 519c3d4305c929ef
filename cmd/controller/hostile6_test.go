package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"warden/internal/testutil/testcampaign"
	"warden/pkg/api"
	"warden/pkg/dirlayout"
	"warden/pkg/lockfile"
	"warden/pkg/state"
)

// Hostile inputs, round four: what needs a detached controller.

// TestResumeRefusesAForeignCampaign: a campaign directory whose settings
// others may write, or that another user owns, chooses what a resume
// runs (its notify command, its workdir, its commands): resume, the
// root flag's --resume and readjudicate refuse it with exit 7, naming
// the file and the fix, and run nothing recorded in it. Put right, the
// same campaign resumes.
func TestResumeRefusesAForeignCampaign(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	mark := filepath.Join(t.TempDir(), "notified")
	c.start(writeProtocol(t, scenario{patterns: 2, measureS: "1.5"}), "--notify", "touch "+mark)
	c.waitMeasuring()
	c.killController()

	refused := func(what, path, problem, fix string) {
		t.Helper()
		for _, args := range [][]string{
			{"resume", "-d", c.dir, "--foreground"},
			{"--resume", "-d", c.dir},
			{"resume", "-d", c.dir, "-o", "json"},
			{"readjudicate", "-d", c.dir, "--amendment", "A-1"},
			// check runs the recorded notify command for the dead controller
			{"check", "-d", c.dir},
		} {
			out, code := c.controller(args...)
			if code != exitNotOwned || !strings.Contains(out, path+" is "+problem) || !strings.Contains(out, fix) {
				t.Fatalf("%s: %v: exit %d, want %d naming %s (%s; %s):\n%s", what, args, code, exitNotOwned, path, problem, fix, out)
			}
		}
		if _, err := os.Stat(mark); err == nil {
			t.Fatalf("%s: the recorded notify command ran", what)
		}
		s := c.store()
		cp, err := s.Campaign()
		s.Close()
		if err != nil || cp.State != state.CampaignRunning {
			t.Fatalf("%s: campaign %s (%v): a refused resume records nothing", what, cp.State, err)
		}
	}

	settings := dirlayout.Settings(c.dir)
	if err := os.Chmod(settings, 0o664); err != nil {
		t.Fatal(err)
	}
	refused("group-writable settings", settings, "writable by its group", "chmod go-w "+settings)
	if err := os.Chmod(settings, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(c.dir, 0o777); err != nil {
		t.Fatal(err)
	}
	refused("a world-writable directory", c.dir, "writable by its group and others", "chmod go-w "+c.dir)
	if err := os.Chmod(c.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		plan := dirlayout.Plan(c.dir)
		if err := os.Lchown(plan, 65534, -1); err != nil {
			t.Fatal(err)
		}
		refused("a plan another user owns", plan, "owned by uid 65534, not by uid 0 (who runs this)", "chown -R 0 "+c.dir)
		if err := os.Lchown(plan, 0, -1); err != nil {
			t.Fatal(err)
		}
	}

	if out, code := c.controller("resume", "-d", c.dir, "--foreground"); code != 0 {
		t.Fatalf("the campaign put right: resume exited %d:\n%s", code, tail(out, 3000))
	}
	if _, err := os.Stat(mark); err != nil {
		t.Fatalf("the notify command of the campaign put right did not run: %v", err)
	}
	c.assertNoProcesses()
}

// TestStopReachesAStartingController: 50 ms after --resume the lock was
// held but the socket not open yet; controller stop exited 1 and the
// campaign went on. A resume whose start-up ends a server that ignores
// SIGTERM holds the lock for seconds with no socket: stop waits for the
// socket, the resume stops before it launches anything, and the campaign
// is stopped by the operator, resumable.
func TestStopReachesAStartingController(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	c.start(writeProtocol(t, scenario{serverArgs: `, "--ignore-sigterm"`, measureS: "60"}))
	c.waitMeasuring()
	c.killController()
	s := c.store()
	before := len(c.attempts(s, "p1.saturation"))
	s.Close()

	resume := exec.Command(controllerBin, "resume", "-d", c.dir)
	var rout bytes.Buffer
	resume.Stdout, resume.Stderr = &rout, &rout
	if err := resume.Start(); err != nil {
		t.Fatal(err)
	}
	resumed := make(chan error, 1)
	go func() { resumed <- resume.Wait() }()
	lock := dirlayout.Lock(c.dir)
	waitFor(t, "the resume to take the lock", 60*time.Second, func() bool { return lockfile.Held(lock) })
	if _, err := api.NewClient(c.dir, time.Second).Status(t.Context()); err == nil {
		t.Fatal("the resume answers on its socket already: its start-up is not what this test stops")
	}
	out, code := c.controller("stop", "-d", c.dir)
	if code != 0 || !strings.Contains(out, "is starting: sent it SIGTERM; waiting for it") {
		t.Fatalf("stop of a starting controller: exit %d:\n%s", code, out)
	}
	if err := <-resumed; err != nil {
		t.Fatalf("resume: %v\n%s", err, rout.String())
	}
	s = c.store()
	defer s.Close()
	cp, err := s.Campaign()
	if err != nil || cp.State != state.CampaignStopped || cp.StopReason != state.StopOperator {
		t.Fatalf("campaign %s %s (%v), want stopped by the operator", cp.State, cp.StopReason, err)
	}
	if as := c.attempts(s, "p1.saturation"); len(as) != before || as[len(as)-1].State != state.Interrupted {
		t.Fatalf("attempts %v: the stopped resume launched one, or left one live", attemptStates(as))
	}
	c.assertNoProcesses()
}

// TestCapacityNoPointMeetsTheSLO: with an SLO that no point met the
// campaign was complete while six points stayed pending for ever. Once
// rate_min fails (30 requests/s against a stand-in that sustains 24), the
// search's other points are not run, with the reason, and ctlq status
// says where the search ended.
func TestCapacityNoPointMeetsTheSLO(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := testcampaign.Edit(t, capacityProtocol(t, writeTokenManifest(t, 3000)), "rate_min: 4", "rate_min: 30", "resolution: 8", "resolution: 2")
	c.runForeground(proto)
	s := c.store()
	defer s.Close()
	cp, err := s.Campaign()
	if err != nil || cp.State != state.CampaignComplete {
		t.Fatalf("campaign %s (%v)", cp.State, err)
	}
	runs, err := s.Runs()
	if err != nil {
		t.Fatal(err)
	}
	notRun := 0
	for _, r := range runs {
		switch {
		case r.ID == "s.open.b1":
			if r.State() != state.RunComplete || c.gateVerdict(s, r.ID, "capacity-slo").Verdict != state.VerdictFail {
				t.Fatalf("b1 %s, want complete and failing the SLO", r.State())
			}
		case r.State() == state.RunNotRun && strings.Contains(r.NotRunReason, "capacity search search/s ended below range: its first point s.open.b1, at rate_min 30 requests/s, failed the SLO"):
			notRun++
		default:
			t.Fatalf("run %s is %s (%q), want not run with the reason", r.ID, r.State(), r.NotRunReason)
		}
	}
	if notRun != 6 {
		t.Fatalf("%d runs not run, want the search's 6 other points", notRun)
	}
	out, _ := c.run(ctlqBin, nil, "status", "-d", c.dir)
	if !strings.Contains(out, "not-run 6") || !strings.Contains(out, "capacity   search/s: ended below-range, nothing found (1 points judged, done)") || strings.Contains(out, "pending") {
		t.Fatalf("ctlq status:\n%s", out)
	}
}

// TestNotifyOutlivesNoController: a controller killed while its end
// notification runs left the hook running for ever (a complete campaign
// has no next controller to end it). Each notification runs under a
// supervisor of its own, which ends the hook at its bound, and the child
// it left, however its controller died.
func TestNotifyOutlivesNoController(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	files := t.TempDir()
	hook, child := filepath.Join(files, "hook"), filepath.Join(files, "child")
	c.start(writeProtocol(t, scenario{}), "--notify", "sleep 600 & echo $! > "+child+"; echo $$ > "+hook+"; exec sleep 600", "--notify-timeout-s", "2")
	waitFor(t, "the end notification to start", 120*time.Second, func() bool {
		_, err1 := os.Stat(hook)
		_, err2 := os.Stat(child)
		return err1 == nil && err2 == nil
	})
	c.killController()
	pids := map[string]int{}
	for _, p := range []string{hook, child} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		pids[filepath.Base(p)] = pid
		t.Cleanup(func() {
			if running(pid) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		})
	}
	for what, pid := range pids {
		waitFor(t, "the notification's "+what+" to be ended without its controller", 90*time.Second, func() bool { return !running(pid) })
	}
}
