package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warden/pkg/campaignfs"
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

	settings := campaignfs.Settings(c.dir)
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
		plan := campaignfs.Plan(c.dir)
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
