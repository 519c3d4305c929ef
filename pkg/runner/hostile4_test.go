package runner_test

import (
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"warden/pkg/endlog"
	"warden/pkg/schedule"
	"warden/pkg/state"
)

// An attempt left live in the records by a controller that ended its
// processes but could not record the end (a full disk) is charged at
// resume up to when that controller proved them gone (its end log), not
// up to the resume; one with no such record is still charged up to the
// resume that found it gone (never under-count).
func TestResumeChargesToProvenEnd(t *testing.T) {
	c := newCampaign(t, protocol{patterns: 2})
	now, boot := c.controllerDied(50 * time.Second)
	started := now.Add(-60 * time.Second)
	for _, run := range []string{"p1.saturation", "p2.saturation"} {
		if _, err := c.store.NewAttempt(run, filepath.Join(c.dir, "runs", run, "a1"), func(a *state.Attempt) { a.GPUIDs = []int{0} }); err != nil {
			t.Fatal(err)
		}
		for _, st := range []state.AttemptState{state.Reserved, state.Preflight, state.Starting} {
			if _, err := c.store.Transition(run, 1, st, "", "test", nil, nil); err != nil {
				t.Fatal(err)
			}
		}
		// a server that is no process now
		if _, err := c.store.UpdateAttempt(run, 1, func(a *state.Attempt) error {
			a.Procs = append(a.Procs, state.Proc{Role: "server", PID: 1 << 22, StartTime: 1, BootID: boot, PGID: 1 << 22, StartedAt: started})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	gone := now.Add(-30 * time.Second)
	el, err := endlog.Open(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	err = el.Record("p1.saturation", 1, gone)
	el.Close()
	if err != nil {
		t.Fatal(err)
	}
	rn := c.newRunner()
	if err := rn.Reconcile(t.Context()); err != nil {
		t.Fatal(err)
	}
	l := c.ledger()
	if got := l.byAttempt["p1.saturation/a1"]; math.Abs(got-30) > 1e-6 {
		t.Errorf("p1 charged %.6f GPU-s for a server started 60 s ago and proven gone 30 s ago; want 30", got)
	}
	a := c.attempts("p1.saturation")[0]
	if a.State != state.Interrupted || a.Figures["proven_gone_unix"] != a.Figures["charged_until_unix"] || a.Figures["proven_gone_unix"] <= 0 {
		t.Errorf("p1: %s, figures %v", a.State, a.Figures)
	}
	if got := l.byAttempt["p2.saturation/a1"]; got < 60 {
		t.Errorf("p2 (no end record) charged %.3f GPU-s; want at least 60, up to this resume", got)
	}
	if a := c.attempts("p2.saturation")[0]; a.Figures["proven_gone_unix"] != 0 {
		t.Errorf("p2: figures %v; want no proven end", a.Figures)
	}
}

// A write the campaign directory's device failed (EIO) is the storage's:
// it is counted for the attempts that end failed meanwhile (so they are
// classed as the harness's, naming the I/O error), and the stop it causes
// is recorded, naming the directory and the cause, wherever the database
// still commits.
func TestIOErrorIsCountedAndRecorded(t *testing.T) {
	c := newCampaign(t, protocol{patterns: 1})
	rn := c.newRunner()
	rn.StopIfStorageFault(fmt.Errorf("fsync %s: %w", filepath.Join(c.dir, "runs", "p1.saturation", "a1", "client.out"), syscall.EIO))
	n, last := rn.DiskFullCount()
	if n != 1 || !strings.Contains(last, "I/O error, EIO") || !strings.Contains(last, "client.out") {
		t.Fatalf("count %d, last %q", n, last)
	}
	cp, err := c.store.Campaign()
	if err != nil {
		t.Fatal(err)
	}
	if cp.State != state.CampaignStopped || cp.StopReason != state.StopHarnessError ||
		!strings.Contains(cp.StopDetail, c.dir) || !strings.Contains(cp.StopDetail, "I/O error, EIO") {
		t.Fatalf("campaign %s (%s: %s)", cp.State, cp.StopReason, cp.StopDetail)
	}
}

// TestHeldStopStartsNothing: a stop whose write the database refused (the
// campaign directory's disk full) is in force although unrecorded. The
// loop read the campaign as running, launched the next wave, and a new
// attempt of the run whose end could not be recorded failed "run has a
// live attempt", a stop that hid the storage's. Nothing starts while a
// stop is held; it is written as soon as the database takes it.
func TestHeldStopStartsNothing(t *testing.T) {
	c := newCampaign(t, protocol{patterns: 1})
	rn := c.newRunner()
	held := schedule.Stop{Reason: state.StopHarnessError, Detail: "the campaign directory " + c.dir + " ran out of space (ENOSPC): commit: no space left on device; free space, then resume"}
	rn.HoldStop(held)
	if cp := c.campaign(); cp.State != state.CampaignRunning {
		t.Fatalf("campaign %s before Run: the held stop was written", cp.State)
	}
	c.start(rn).wait(t)
	cp := c.campaign()
	if cp.State != state.CampaignStopped || cp.StopReason != held.Reason || cp.StopDetail != held.Detail {
		t.Fatalf("campaign %s (%s: %s); want stopped with the held stop", cp.State, cp.StopReason, cp.StopDetail)
	}
	if as := c.attempts("p1.saturation"); len(as) != 0 {
		t.Fatalf("attempts %+v started while a stop was held; want none", as)
	}
}

// TestEnvironmentWriteFailsTheAttempt: environment.json is written beside
// the transition to starting; when the write fails (here a directory
// stands at its name, so the rename cannot replace it) the attempt fails
// harness-error naming the file, by the legal path from starting, before
// any process is started, and the campaign stops for review.
func TestEnvironmentWriteFailsTheAttempt(t *testing.T) {
	c := newCampaign(t, protocol{patterns: 1})
	blocker := filepath.Join(c.dir, "runs", "p1.saturation", "a1", "environment.json", "x")
	if err := os.MkdirAll(blocker, 0o755); err != nil {
		t.Fatal(err)
	}
	c.run()
	a := c.wantStoppedBy(state.ReasonHarnessError)
	if len(a.Procs) != 0 {
		t.Errorf("processes recorded %+v; want none started", a.Procs)
	}
	events, err := c.store.Events(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var path []string
	last := ""
	for _, e := range events {
		if e.Run == "p1.saturation" && e.Attempt == 1 {
			path, last = append(path, e.To), e.Message
		}
	}
	if want := "planned reserved preflight starting stopping cleanup failed"; strings.Join(path, " ") != want {
		t.Errorf("states %q; want %q", strings.Join(path, " "), want)
	}
	if !strings.Contains(last, "environment.json") {
		t.Errorf("attempt failed %q; want the environment.json write named", last)
	}
}

// TestStorageFaultStopsOrEndsTheWork: a write to the campaign directory
// that fails while p1 and p2 run. Read-only (EROFS) and an I/O error
// (EIO) end the work: p2, which would run on, is interrupted, nothing more
// is launched and Run returns the directory's "cannot be written" error.
// No space (ENOSPC, EDQUOT) stops the campaign for review: p2 finishes and
// Run returns no error. Another error is not the storage's: the campaign
// completes.
func TestStorageFaultStopsOrEndsTheWork(t *testing.T) {
	t.Parallel()
	afterP1 := step{AfterEnd: "p1.saturation"}
	for _, tc := range []struct {
		err   syscall.Errno
		ends  bool   // the work is ended and Run fails
		cause string // in the stop's detail; "": no stop
	}{
		{syscall.EROFS, true, "read-only file system, EROFS"},
		{syscall.EIO, true, "I/O error, EIO"},
		{syscall.ENOSPC, false, "ran out of space"},
		{syscall.EDQUOT, false, "ran out of space"},
		{syscall.EACCES, false, ""},
	} {
		t.Run(tc.err.Error(), func(t *testing.T) {
			t.Parallel()
			c := newLoopCampaign(t, "matrix.yaml", nil)
			fault := &fs.PathError{Op: "write", Path: filepath.Join(c.dir, "runs", "p1.saturation", "a1", "client.out"), Err: tc.err}
			c.x.steps["p1.saturation"] = []step{{Do: func() { c.rn.StopIfStorageFault(fault) }}}
			c.x.steps["p2.saturation"] = []step{afterP1}
			if tc.ends {
				c.x.steps["p2.saturation"] = []step{{Hold: true}}
			}
			err := c.start(c.rn).end(t)
			if got := err != nil && strings.Contains(err.Error(), "the campaign directory "+c.dir+" cannot be written"); got != tc.ends {
				t.Fatalf("Run returned %v; want the directory's error: %v", err, tc.ends)
			}
			want := int64(1)
			if tc.cause == "" {
				want = 0
			}
			if n, _ := c.rn.DiskFullCount(); n != want {
				t.Errorf("storage faults counted %d, want %d", n, want)
			}
			if tc.cause == "" {
				c.wantComplete()
				c.wantCalls("p1.saturation/a1", "p2.saturation/a1", "p3.saturation/a1", "p4.saturation/a1")
				return
			}
			c.stoppedAt(state.StopHarnessError, c.dir, tc.cause)
			p2 := ok
			if tc.ends {
				p2 = state.Attempt{State: state.Interrupted, Reason: state.ReasonInterrupted}
			}
			c.wantAttempts("p2.saturation", p2)
			c.wantCalls("p1.saturation/a1", "p2.saturation/a1")
			c.wantLedgerSettled()
			c.wantClean()
		})
	}
}
