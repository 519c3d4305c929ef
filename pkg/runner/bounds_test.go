package runner_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warden/pkg/api"
	"warden/pkg/budget"
	"warden/pkg/launch"
	"warden/pkg/state"
)

// Nothing runs unbounded: the budget is a hard stop while runs are in
// flight. (A client past its measuring deadline and a drain nobody can
// time are an attempt's rules: pkg/attempt's TestDrain.)

func interrupted(r state.Reason) state.Attempt {
	return state.Attempt{State: state.Interrupted, Reason: r}
}

// The budget is a hard stop while runs are in flight: two clients that
// never end pass a cap of 7.2 GPU-s; the status counts their GPU time as
// it accrues; the controller ends both gracefully, stops the campaign as
// budget-exhausted, and charges at most about one tick past the cap.
func TestBudgetHardStopInFlight(t *testing.T) {
	c := newCampaign(t, protocol{patterns: 2, expectedS: "1", capGPUHours: "0.002, reserve: nominal", // nominal: the waves start, and the cap ends them in flight
		client: `{shell: 'exec sleep 3600'}`, saturation: "    deadline_s: 600"})
	r := c.start(c.newRunner())
	c.waitAttempt(r, "an attempt measuring", func(a state.Attempt) bool { return a.State == state.Measuring })
	st, err := api.BuildStatus(c.store, c.dir, api.Controller{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st.Budget.InFlightGPUHours <= 0 || st.Budget.ChargedGPUHours != 0 || st.Budget.ConsumedGPUHours != st.Budget.InFlightGPUHours {
		t.Errorf("status while measuring: in flight %v, charged %v, consumed %v GPU-h; want GPU time in flight, nothing charged yet", st.Budget.InFlightGPUHours, st.Budget.ChargedGPUHours, st.Budget.ConsumedGPUHours)
	}
	r.wait(t)
	cp := c.wantStopped(state.StopBudgetExhausted)
	for _, run := range []string{"p1.saturation", "p2.saturation"} {
		c.wantAttempts(run, interrupted(state.ReasonBudgetExhausted))
	}
	capS := budget.Seconds(0.002)
	over := cp.ConsumedGPUSeconds - capS
	t.Logf("charged %.3f GPU-s against a cap of %.1f: overrun %.3f GPU-s", cp.ConsumedGPUSeconds, capS, over)
	// one tick (1 s) of two GPUs, plus the graceful end of the runs
	if over > 2*1.0+2 {
		t.Errorf("charged %.3f GPU-s, %.3f past the %.1f cap", cp.ConsumedGPUSeconds, over, capS)
	}
	l := c.ledger()
	var noted float64
	for _, e := range l.entries {
		if e.Kind == state.LedgerOverrun {
			noted += e.GPUSeconds
		}
	}
	if over > 0 && (noted < over-1e-6 || noted > over+1e-6) {
		t.Errorf("overrun on the ledger %.6f GPU-s, charged past the cap %.6f", noted, over)
	}
	c.wantLedgerSettled()
	c.wantClean()
}

// A left-over already gone at resume is charged until the resume that
// found it gone, not until the last heartbeat (never under-count), with
// both bounds recorded; a server that was never recorded is charged from
// the attempt's creation once the attempt passed preflight.
func TestResumeChargesUntilKnownGone(t *testing.T) {
	c := newCampaign(t, protocol{patterns: 2})
	now, boot := c.controllerDied(50 * time.Second)
	to := func(run string, states ...state.AttemptState) {
		if _, err := c.store.NewAttempt(run, filepath.Join(c.dir, "runs", run, "a1"), func(a *state.Attempt) { a.GPUIDs = []int{0} }); err != nil {
			t.Fatal(err)
		}
		for _, st := range states {
			if _, err := c.store.Transition(run, 1, st, "", "test", nil, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	// p1: a server recorded 60 s ago, gone now (a pid that is no process)
	to("p1.saturation", state.Reserved, state.Preflight, state.Starting)
	if _, err := c.store.UpdateAttempt("p1.saturation", 1, func(a *state.Attempt) error {
		a.Procs = append(a.Procs, state.Proc{Role: "server", PID: 1 << 22, StartTime: 1, BootID: boot, PGID: 1 << 22, StartedAt: now.Add(-60 * time.Second)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// p2: the controller died between the server's start and its record
	to("p2.saturation", state.Reserved, state.Preflight, state.Starting)

	rn := c.newRunner()
	if err := rn.Reconcile(t.Context()); err != nil {
		t.Fatal(err)
	}
	l := c.ledger()
	if got := l.byAttempt["p1.saturation/a1"]; got < 60 {
		t.Errorf("p1 charged %.3f GPU-s for a server started 60 s ago and found gone now; want at least 60", got)
	}
	a := c.attempts("p1.saturation")[0]
	if a.State != state.Interrupted || a.Figures["charged_until_unix"] < float64(now.Unix()) ||
		a.Figures["last_seen_alive_unix"] > a.Figures["charged_until_unix"] || a.Figures["last_seen_alive_unix"] <= 0 {
		t.Errorf("p1: %s, figures %v; want the bounds recorded", a.State, a.Figures)
	}
	if got := l.byAttempt["p2.saturation/a1"]; got <= 0 {
		t.Errorf("p2 (server never recorded, attempt past preflight) charged %.6f GPU-s; want its time since creation", got)
	}
}

// Resume never signals a process that does not carry this campaign's
// directory, even when the records name it with an identity that checks
// out (pid, start time, boot id): a live process the test started,
// recorded as a left-over server, lives on.
func TestReconcileSignalsOnlyThisCampaignsProcesses(t *testing.T) {
	c := newCampaign(t, protocol{})
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	id, err := launch.Lookup(cmd.Process.Pid, nil)
	if err != nil {
		t.Fatal(err)
	}
	boot, _ := launch.ReadBootID()
	if err := c.store.UpdateCampaign(func(cp *state.Campaign) error { cp.ControllerBootID = boot; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := c.store.NewAttempt("p1.saturation", filepath.Join(c.dir, "runs", "p1.saturation", "a1"), func(a *state.Attempt) { a.GPUIDs = []int{0} }); err != nil {
		t.Fatal(err)
	}
	for _, st := range []state.AttemptState{state.Reserved, state.Preflight, state.Starting} {
		if _, err := c.store.Transition("p1.saturation", 1, st, "", "test", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.store.UpdateAttempt("p1.saturation", 1, func(a *state.Attempt) error {
		a.Procs = append(a.Procs, state.Proc{Role: "server", PID: id.PID, StartTime: id.StartTime, BootID: id.BootID, PGID: id.PID, StartedAt: time.Now()})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.newRunner().Reconcile(t.Context()); err != nil {
		t.Fatal(err)
	}
	if alive, _ := id.Alive(nil); !alive {
		t.Fatal("resume signalled a process that is not this campaign's")
	}
	a := c.attempts("p1.saturation")[0]
	if a.State != state.Interrupted || len(a.Signals) != 0 {
		t.Errorf("attempt %s with signals %+v; want interrupted, nothing signalled", a.State, a.Signals)
	}
}

// A quality-gate validator marks a run quality-failed (seed 000): the run
// is kept, quarantined, and the campaign goes on; the quarantined-fraction
// threshold, which counts drain-quarantined runs as the seed's does, does
// not stop it.
func TestQualityFailedIsKeptNotAStop(t *testing.T) {
	c := newCampaign(t, protocol{patterns: 2, quarantined: "0.1", extra: `validators:
  - name: quality
    command: {shell: 'echo ''{"verdict": "fail", "class": "quality", "detail": "outputs failed the quality check"}'''}`})
	c.run()
	c.wantComplete()
	for _, run := range []string{"p1.saturation", "p2.saturation"} {
		c.wantAttempts(run, state.Attempt{State: state.Quarantined, Reason: state.ReasonQualityFailed})
	}
	c.wantClean()
}

// A clock and load check that fails (class infrastructure: a throttled GPU
// or a loaded host) fails the run clock-load: the seed's one exact rerun
// for an infrastructure failure, then the campaign stops with both
// attempts kept.
func TestClockLoadIsRerunOnce(t *testing.T) {
	c := newCampaign(t, protocol{retries: 1, extra: `validators:
  - name: clock-load
    command: {shell: 'echo ''{"verdict": "fail", "class": "infrastructure", "detail": "clock_reasons: GPU 0 hw_thermal_slowdown"}'''}`})
	c.run()
	c.wantStopped(state.StopForRun(state.ReasonClockLoad))
	c.wantAttempts("p1.saturation", failed(state.ReasonClockLoad), failed(state.ReasonClockLoad))
	c.wantClean()
}

// The artifact gate counts the provenance copies (public inputs kept in
// DIR/provenance) with the runs' directories: copies past the protocol's
// limit stop the campaign before its first wave, the figure apart.
func TestArtifactGateCountsProvenance(t *testing.T) {
	c := newCampaign(t, protocol{quarantined: "0.9, max_artifacts_gb: 0.002"})
	f, err := os.Create(filepath.Join(c.dir, "provenance", "files", strings.Repeat("a", 64)))
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(3e6) // a 3 MB manifest copy
	f.Close()
	c.run()
	cp := c.wantStopped(state.StopDisk)
	if !strings.Contains(cp.StopDetail, "hold 0.003 GB, more than the 0.002 GB limit") || cp.StopFigures["provenance_gb"] < 0.003 || cp.StopFigures["artifacts_gb"] < 0.003 {
		t.Fatalf("stop %q %v", cp.StopDetail, cp.StopFigures)
	}
	if len(c.attempts("p1.saturation")) != 0 {
		t.Fatal("a run started past the artifact limit")
	}
}
