package main

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"warden/internal/testutil/testcampaign"
	"warden/pkg/dirlayout"
	"warden/pkg/lockfile"
	"warden/pkg/state"
)

// The controller stopped (SIGSTOP) while a run measures; its client ends
// within the measuring deadline meanwhile, and the controller stays stopped
// until the deadline has passed. At SIGCONT the deadline timer and the
// client's exit are both pending: the run is judged on the exit (complete),
// not failed measure-deadline, and no signal is sent to the client.
func TestFrozenControllerJudgesClientOnItsExit(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	const deadlineS = 4
	proto := testcampaign.Edit(t, writeProtocol(t, scenario{patterns: 1}),
		"    expected_s: 10\n    client:", "    expected_s: 10\n    deadline_s: "+strconv.Itoa(deadlineS)+"\n    client:")
	c.start(proto)
	lock := dirlayout.Lock(c.dir)
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
	c.waitUnlocked("the controller to finish", 60*time.Second)
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

// The campaign's file system runs out of inodes while a run measures
// (blocks remain, so the database still commits): the client cannot create
// its result directory and exits non-zero, and the controller's own state.json
// write fails with ENOSPC. The attempt is the harness's (harness-error,
// naming the full file system and the client's exit), not client-failed;
// the campaign stops for the full directory.
func TestInodesOutIsTheHarnesss(t *testing.T) {
	t.Parallel()
	c, fs := runOnTmpfs(t, "64m,nr_inodes=4000", 1, `mkdir "$WARDEN_ATTEMPT_DIR/fill" && i=0 && while : > "$WARDEN_ATTEMPT_DIR/fill/$i" 2>/dev/null; do i=$$((i+1)); done`)
	var st syscall.Statfs_t
	if err := syscall.Statfs(fs, &st); err != nil || st.Ffree > 8 || st.Bavail == 0 {
		t.Fatalf("test bug: inodes not used up, or blocks too (%d inodes, %d blocks free, %v)", st.Ffree, st.Bavail, err)
	}
	s := c.store()
	as := c.attempts(s, "p1.saturation")
	if len(as) != 1 || as[0].State != state.Failed || as[0].Reason != state.ReasonHarnessError {
		t.Fatalf("attempts %v", attemptStates(as))
	}
	evs, err := s.Events(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var detail string
	for _, e := range evs {
		if e.Run == "p1.saturation" && e.To == string(state.Failed) {
			detail = e.Message
		}
	}
	if !strings.Contains(detail, "ran out of space (ENOSPC)") || !strings.Contains(detail, "its failure client-failed (client exit code ") {
		t.Fatalf("failed attempt's detail: %q", detail)
	}
	cp, _ := s.Campaign()
	if cp.State != state.CampaignStopped || cp.StopReason != state.StopForRun(state.ReasonHarnessError) ||
		!strings.Contains(cp.StopDetail, "no space left on device") {
		t.Fatalf("campaign %s (%s: %s)", cp.State, cp.StopReason, cp.StopDetail)
	}
	s.Close()
	c.assertNoProcesses()
}
