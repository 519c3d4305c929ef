package runner_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"warden/pkg/launch"
	"warden/pkg/state"
)

// Resume of a stopped campaign through the scripted executor: what runs
// next (Claim, then Run of a new Runner on the same store).

// TestResumeKeepsTheRerunRuleScripted (seed 002: "A semantic
// workload/config failure requires a reviewed protocol amendment"): a
// run that failed its validator is not run again by a bare resume; the
// resumed campaign runs what else it can, then stops awaiting an
// amendment, naming the run, with no new attempt of it; an amendment
// that names the run lets the next resume run it again.
func TestResumeKeepsTheRerunRuleScripted(t *testing.T) {
	t.Parallel()
	c := newLoopCampaign(t, "matrix.yaml", map[string][]step{"p1.saturation": {{State: state.Failed, Reason: state.ReasonValidatorFailed}}}, oneAtATime...)
	c.run()
	c.stoppedAt(state.StopForRun(state.ReasonValidatorFailed))

	c.resume()
	c.stoppedAt(state.StopAwaitingAmendment, "p1.saturation (attempt 1, validator-failed)")
	c.wantCalls("p1.saturation/a1", "p2.saturation/a1", "p2.moderate/a1")

	err := c.store.Amend(state.Amendment{ID: "A1", Title: "the check was wrong", ProtocolSHA256: c.record().ProtocolSHA256,
		Runs: []string{"p1.saturation"}, RegisteredAt: time.Now()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.resume()
	c.wantComplete()
	a := c.wantAttempts("p1.saturation", failed(state.ReasonValidatorFailed), ok)
	if len(a[1].Amendments) != 1 || a[1].Amendments[0] != "A1" {
		t.Errorf("the new attempt ran under amendments %v, want A1", a[1].Amendments)
	}
	c.wantCalls("p1.saturation/a1", "p2.saturation/a1", "p2.moderate/a1", "p1.saturation/a2", "p1.moderate/a1")
	c.wantLedgerSettled()
	c.wantClean()
}

// TestResumeRerunsAnInfrastructureFailureScripted: an infrastructure
// failure keeps its exact rerun after review: with no retries left, the
// resume runs the run again first, on the slot its unit takes, and the
// campaign completes.
func TestResumeRerunsAnInfrastructureFailureScripted(t *testing.T) {
	t.Parallel()
	c := newLoopCampaign(t, "matrix.yaml", map[string][]step{"p1.saturation": {{State: state.Failed, Reason: state.ReasonServerNotReady}}},
		append(oneAtATime, "retries: {infrastructure: 1}", "retries: {infrastructure: 0}")...)
	c.run()
	c.stoppedAt(state.StopForRun(state.ReasonServerNotReady))
	c.wantCalls("p1.saturation/a1")

	c.resume()
	c.wantComplete()
	c.wantAttempts("p1.saturation", failed(state.ReasonServerNotReady), ok)
	if calls := c.x.asked(); len(calls) < 2 || calls[1].Run != "p1.saturation" || calls[1].N != 2 {
		t.Errorf("the resume did not run p1.saturation first: %+v", calls)
	}
	c.wantLedgerSettled()
	c.wantClean()
}

// TestPIDReuseNotSignalled: a dead controller's live attempt records a
// server whose pid now belongs to an unrelated process (the pid matches,
// the start time does not). Reconcile never signals it, marks the attempt
// interrupted and charges it; Run then runs the interrupted run again
// first, and the campaign completes.
func TestPIDReuseNotSignalled(t *testing.T) {
	t.Parallel()
	c := newLoopCampaign(t, "matrix.yaml", nil, "matrix: {pattern: [p1, p2, p3, p4]}", "matrix: {pattern: [p1]}")
	out := filepath.Join(t.TempDir(), "sleeper.out")
	sleeper, err := (&launch.Launcher{Reaper: testReaper}).Start(launch.Spec{Role: "unrelated", Argv: []string{"sleep", "60"}, StdoutPath: out, StderrPath: out})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		sleeper.Shutdown(ctx)
		<-sleeper.Done()
	})
	now, boot := c.controllerDied(30 * time.Second)
	run := "p1.saturation"
	if _, err := c.store.NewAttempt(run, filepath.Join(c.dir, "runs", run, "a1"), func(a *state.Attempt) { a.GPUIDs = []int{0} }); err != nil {
		t.Fatal(err)
	}
	for _, st := range []state.AttemptState{state.Reserved, state.Preflight, state.Starting, state.Ready, state.Measuring} {
		if _, err := c.store.Transition(run, 1, st, "", "test", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	// the pid is the sleeper's; the start time the old process's
	if _, err := c.store.UpdateAttempt(run, 1, func(a *state.Attempt) error {
		a.Procs = append(a.Procs, state.Proc{Role: "server", PID: sleeper.PID, PGID: sleeper.PID, StartTime: sleeper.StartTime + 1, BootID: boot, StartedAt: now.Add(-60 * time.Second)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	c.run()
	if alive, err := sleeper.Identity.Alive(nil); err != nil || !alive {
		t.Fatalf("the unrelated process %d whose pid was recorded was signalled (alive %v, %v)", sleeper.PID, alive, err)
	}
	c.wantComplete()
	as := c.wantAttempts(run, state.Attempt{State: state.Interrupted, Reason: state.ReasonInterrupted}, ok)
	for _, sg := range as[0].Signals {
		if sg.PID == sleeper.PID {
			t.Errorf("a signal was recorded to the reused pid %d: %+v", sleeper.PID, sg)
		}
	}
	if l := c.wantLedgerSettled(); l.byAttempt[run+"/a1"] < 60 {
		t.Errorf("the interrupted attempt was charged %v GPU-s, want at least the 60 s its server was recorded", l.byAttempt[run+"/a1"])
	}
	if calls := c.x.asked(); len(calls) != 1 || calls[0].N != 2 {
		t.Errorf("the executor ran %+v, want p1.saturation's attempt 2", calls)
	}
	c.wantClean()
}
