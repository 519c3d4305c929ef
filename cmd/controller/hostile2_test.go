package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"warden/internal/testutil/testcampaign"
	"warden/pkg/dirlayout"
	"warden/pkg/lockfile"
	"warden/pkg/state"
)

// Resume of a finished campaign says it is finished, starts nothing and
// exits 0: it used to start a daemon that died on "illegal transition from
// complete to complete".
func TestResumeFinishedCampaign(t *testing.T) {
	t.Parallel()
	c, s := ranScenario(t, scenario{patterns: 1, measureS: "0.2"})
	before, _ := s.LastEventSeq()
	s.Close()
	for _, args := range [][]string{{"resume", "-d", c.dir}, {"--resume", "-d", c.dir}, {"resume", "-d", c.dir, "--foreground"}} {
		out, code := c.controller(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d:\n%s", args, code, out)
		}
		if args[len(args)-1] != "--foreground" && !strings.Contains(out, "is complete (1 runs); nothing to resume") {
			t.Errorf("%v said:\n%s", args, out)
		}
		if lockfile.Held(dirlayout.Lock(c.dir)) {
			t.Fatalf("%v left a controller running", args)
		}
	}
	s = c.store()
	after, _ := s.LastEventSeq()
	cp, _ := s.Campaign()
	if after != before || cp.State != state.CampaignComplete {
		t.Errorf("resume of a finished campaign changed the records: events %d -> %d, state %s", before, after, cp.State)
	}
}

// controller stop against a controller that is not alive while it left
// attempts live says so and exits 4; it used to print "controller exited;
// resume with ..." and exit 0, and ctlq status then said "stopped for
// review". Resume then reclaims what it left.
func TestStopAfterTheControllerDied(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := writeProtocol(t, scenario{patterns: 1, measureS: "30"})
	c.signalWhileMeasuring(proto, syscall.SIGKILL, "the controller to die", 30*time.Second)
	out, code := c.controller("stop", "-d", c.dir)
	if code != exitDied || !strings.Contains(out, "is not alive, but it left 1 attempt(s) live: p1.saturation attempt 1 (measuring)") ||
		!strings.Contains(out, "controller resume -d") {
		t.Fatalf("stop after the controller died: exit %d:\n%s", code, out)
	}
	c.ctlqStatusExits(4)
	// resume reclaims the left-overs and runs again; a stop of a live
	// controller then succeeds, leaving nothing live
	if out, code := c.controller("resume", "-d", c.dir); code != 0 {
		t.Fatalf("resume exited %d:\n%s", code, out)
	}
	c.waitMeasuring()
	if out, code := c.controller("stop", "-d", c.dir); code != 0 || !strings.Contains(out, "stopped (operator-stop) and resumable") {
		t.Fatalf("stop of a live controller: exit %d:\n%s", code, out)
	}
	c.assertNoProcesses()
}

// Another campaign's database copied into a campaign directory is refused
// at resume, naming both campaigns; the other campaign's live server is
// never signalled (it used to be stopped by the impostor's resume).
func TestResumeRefusesAnotherCampaignsDatabase(t *testing.T) {
	t.Parallel()
	victim := newCampaign(t)
	if out, code := victim.controller("start", "-f", writeProtocol(t, scenario{patterns: 1, measureS: "30"}), "-d", victim.dir, "--gpu-backend", "fake"); code != 0 {
		t.Fatalf("start the victim: exit %d:\n%s", code, out)
	}
	t.Cleanup(func() { victim.controller("stop", "-d", victim.dir) })
	victim.waitMeasuring()
	before := victim.campaignPIDs()

	res := newCampaign(t)
	res.runForeground(writeProtocol(t, scenario{patterns: 1, measureS: "0.2", serverArgs: `, --token-ms, "2"`}))
	b, err := os.ReadFile(dirlayout.State(victim.dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dirlayout.State(res.dir), b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := res.controller("--resume", "-d", res.dir, "--foreground")
	if code == 0 || !strings.Contains(out, "holds another campaign's database") || !strings.Contains(out, victim.dir) {
		t.Fatalf("resume with another campaign's database: exit %d:\n%s", code, out)
	}
	after := victim.campaignPIDs()
	if len(before) == 0 || len(after) < len(before) {
		t.Fatalf("the victim's processes: %v before, %v after the refused resume", before, after)
	}
	if st := victim.liveStatus(); st.Campaign.State != string(state.CampaignRunning) || len(st.Current) != 1 {
		t.Fatalf("the victim after the refused resume: %+v", st)
	}
}

// Any name plan accepts works with containment: a 120-character run id
// and a 110-character protocol name used to stop the campaign at cgroup
// creation, or to turn containment off silently.
func TestLongNamesKeepContainment(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	long := "p" + strings.Repeat("x", 109) // run id: 121 characters
	proto := testcampaign.Edit(t, writeProtocol(t, scenario{patterns: 1, measureS: "0.2"}),
		"name: e2e", "name: e2e"+strings.Repeat("n", 107),
		"{id: p1,", "{id: "+long+",",
		"matrix: {pattern: [p1]}", "matrix: {pattern: ["+long+"]}")
	out := c.runForeground(proto)
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignComplete {
		t.Fatalf("campaign %s (%s: %s)\n%s", cp.State, cp.StopReason, cp.StopDetail, tail(out, 2000))
	}
	as := c.attempts(s, long+".saturation")
	if len(as) != 1 || len(as[0].Procs) == 0 {
		t.Fatalf("attempts %+v", as)
	}
	log, _ := os.ReadFile(dirlayout.Log(c.dir))
	if strings.Contains(string(log), "cgroups unavailable") {
		t.Skip("cgroup v2 is not writable here: containment by process group, as the log says")
	}
	for _, p := range as[0].Procs {
		if p.Cgroup == "" {
			t.Errorf("%s pid %d is in no cgroup although cgroup v2 is writable", p.Role, p.PID)
		}
	}
}

// The campaign directory is owner-only: another local user (uid 65534)
// cannot read what a client printed (a leaked prompt, say), the plan or
// the log.
func TestCampaignDirectoryOwnerOnly(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs root to run a reader as another user")
	}
	c := newCampaign(t)
	c.runForeground(writeProtocol(t, scenario{patterns: 1, measureS: "0.2"}))
	fi, err := os.Stat(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("campaign directory mode %v, want 0700", fi.Mode().Perm())
	}
	for _, f := range []string{dirlayout.PlanFile, dirlayout.LogFile, "runs/p1.saturation/a1/client.out", "runs/p1.saturation/a1/state.json"} {
		cmd := exec.Command("cat", filepath.Join(c.dir, f))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Errorf("uid 65534 read %s (%d bytes)", f, len(out))
		}
	}
}

// A file system that turns read-only under a running campaign (ext4's
// errors=remount-ro, tripped through /sys/fs/ext4/DEV/trigger_fs_error)
// ends the work: the children are stopped the usual way and the controller
// exits naming the error, instead of spinning on EROFS while ctlq status
// says all is well; ctlq status then exits 4, and resume completes once
// the file system is writable again.
func TestReadOnlyFileSystemEndsTheWork(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs root to mount a file system")
	}
	tmp := t.TempDir()
	img, mnt := filepath.Join(tmp, "fs.img"), filepath.Join(tmp, "mnt")
	run := func(name string, args ...string) error {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s %v: %v %s", name, args, err, out)
		}
		return nil
	}
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(run("truncate", "-s", "256M", img), run("mkfs.ext4", "-q", "-F", img)); err != nil {
		t.Skipf("no ext4 image here: %v", err)
	}
	mount := func() error { return run("mount", "-o", "loop,errors=remount-ro", img, mnt) }
	if err := mount(); err != nil {
		t.Skipf("cannot loop-mount an ext4 image here: %v", err)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	c := &campaign{t: t, dir: filepath.Join(mnt, "camp")}
	t.Cleanup(c.killLeftovers)
	proto := writeProtocol(t, scenario{patterns: 1, measureS: "12"})
	if out, code := c.controller("start", "-f", proto, "-d", c.dir, "--gpu-backend", "fake", "--fake-gpus", filepath.Join(tmp, "gpus")); code != 0 {
		t.Fatalf("start exited %d:\n%s", code, out)
	}
	c.waitMeasuring()
	dev, err := filepath.EvalSymlinks(loopOf(t, mnt))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("/sys/fs/ext4", filepath.Base(dev), "trigger_fs_error"), []byte("1"), 0o200); err != nil {
		t.Skipf("cannot trip the file system's error behaviour here: %v", err)
	}
	c.waitUnlocked("the controller to exit", 90*time.Second)
	waitFor(t, "the campaign's processes to end", 30*time.Second, func() bool { return len(c.campaignPIDs()) == 0 })
	c.ctlqStatusExits(4)
	// the file system back: unmounted, checked, mounted again
	if err := errors.Join(run("umount", mnt), run("e2fsck", "-fy", img)); err != nil && !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("repair the file system: %v", err)
	}
	if err := mount(); err != nil {
		t.Fatal(err)
	}
	if out, code := c.controller("resume", "-d", c.dir, "--foreground"); code != 0 {
		t.Fatalf("resume exited %d:\n%s", code, out)
	}
	s := c.store()
	if cp, _ := s.Campaign(); cp.State != state.CampaignComplete {
		t.Fatalf("after resume: %s (%s: %s)", cp.State, cp.StopReason, cp.StopDetail)
	}
	c.assertNoProcesses()
}

// loopOf is the block device mounted at mnt, from /proc/self/mountinfo.
func loopOf(t *testing.T, mnt string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 9 && f[4] == mnt {
			for i, x := range f {
				if x == "-" && i+2 < len(f) {
					return f[i+2]
				}
			}
		}
	}
	t.Fatalf("%s is not mounted", mnt)
	return ""
}
