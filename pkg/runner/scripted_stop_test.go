package runner_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warden/pkg/provenance"
	"warden/pkg/state"
)

// The stop rules the loop enforces (docs/stop-conditions.md): the
// protocol's thresholds, judged as units end; and what the loop checks of
// the world before every wave (the recorded inputs' hashes, the disk).
// The budget's stops are in scripted_budget_test.go, a run's own failure
// in scripted_retry_test.go, the power check in scripted_power_test.go.

var (
	drainQuarantined = step{State: state.Quarantined, Reason: state.ReasonDrainQuarantine}
	qualityFailed    = step{State: state.Quarantined, Reason: state.ReasonQualityFailed}
)

// TestQuarantinedFractionStopsScripted: the first wave's two runs are
// drain-quarantined; when the first of them ends, 1 of the 4 measured
// runs is past the 20% threshold: the campaign stops, the run still in
// flight finishes (quarantined, not interrupted), and the next wave is
// never launched.
func TestQuarantinedFractionStopsScripted(t *testing.T) {
	t.Parallel()
	p2 := drainQuarantined
	p2.AfterEnd = "p1.saturation" // in flight when p1 ends
	c := newLoopCampaign(t, "matrix.yaml", map[string][]step{"p1.saturation": {drainQuarantined}, "p2.saturation": {p2}})
	c.run()
	cp := c.stoppedAt(state.StopQuarantinedFraction, "measured runs quarantined")
	if cp.StopFigures["quarantined"] < 1 || cp.StopFigures["measured"] != 4 || cp.StopFigures["quarantined_fraction_gt"] != 0.2 {
		t.Errorf("stop figures %v", cp.StopFigures)
	}
	quarantined := state.Attempt{State: state.Quarantined, Reason: state.ReasonDrainQuarantine}
	c.wantAttempts("p1.saturation", quarantined)
	c.wantAttempts("p2.saturation", quarantined)
	c.wantCalls("p1.saturation/a1", "p2.saturation/a1")
	c.wantLedgerSettled()
	c.wantClean()
}

// TestQualityFailedNotCountedScripted: the loop tells the thresholds why
// each quarantined run is quarantined: quality-failed runs (seed 000's
// taxonomy) are kept and go on, and do not count toward the seed's
// drain-quarantine threshold, however many there are.
func TestQualityFailedNotCountedScripted(t *testing.T) {
	t.Parallel()
	c := newLoopCampaign(t, "matrix.yaml", map[string][]step{"p1.saturation": {qualityFailed}, "p2.saturation": {qualityFailed}, "p3.saturation": {qualityFailed}})
	c.run()
	c.wantComplete()
	for _, run := range []string{"p1.saturation", "p2.saturation", "p3.saturation"} {
		c.wantAttempts(run, state.Attempt{State: state.Quarantined, Reason: state.ReasonQualityFailed})
	}
	c.wantLedgerSettled()
	c.wantClean()
}

// TestFailedFractionAfterResume: a run that failed for review waits for
// an amendment at the resume, and counts as failed: when the first unit
// of the resumed campaign ends, 1 of 4 measured runs failed, past the 5%
// threshold, and the campaign stops; the other unit in flight finishes.
func TestFailedFractionAfterResume(t *testing.T) {
	t.Parallel()
	after := func(run string) step { return step{AfterEnd: run} }
	c := newLoopCampaign(t, "matrix.yaml", map[string][]step{
		"p1.saturation": {{State: state.Failed, Reason: state.ReasonValidatorFailed}},
		"p2.saturation": {after("p1.saturation")},
		"p4.saturation": {after("p3.saturation")},
	})
	c.run()
	c.stoppedAt(state.StopForRun(state.ReasonValidatorFailed), "p1.saturation")
	c.wantCalls("p1.saturation/a1", "p2.saturation/a1")

	c.resume()
	cp := c.stoppedAt(state.StopFailedFraction, "1 of 4 measured runs failed")
	if cp.StopFigures["failed"] != 1 || cp.StopFigures["failed_fraction"] != 0.25 {
		t.Errorf("stop figures %v", cp.StopFigures)
	}
	// p1 was not run again; the resumed campaign ran the two next
	c.wantCalls("p1.saturation/a1", "p2.saturation/a1", "p3.saturation/a1", "p4.saturation/a1")
	c.wantAttempts("p4.saturation", ok)
	c.wantLedgerSettled()
	c.wantClean()
}

// TestInputChangedBeforeAWave (stop condition 1): before every wave the
// loop re-hashes the recorded inputs. A manifest rewritten while the first
// wave runs stops the campaign before the second, naming the file and
// both hashes; the run in flight finishes, nothing of the second wave
// starts.
func TestInputChangedBeforeAWave(t *testing.T) {
	t.Parallel()
	c := newLoopCampaign(t, "matrix.yaml", nil)
	manifest := filepath.Join(t.TempDir(), "P01.jsonl")
	if err := os.WriteFile(manifest, []byte(`{"id":"r0"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	entries, err := provenance.Record(c.dir, []provenance.Entry{{Path: c.protocol, Role: "protocol"}, {Path: manifest, Role: "manifest"}}, provenance.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rewrite := func() {
		if err := os.WriteFile(manifest, []byte(`{"id":"r1"}`+"\n"), 0o644); err != nil {
			t.Error(err)
		}
	}
	c.x.steps["p1.saturation"] = []step{{Do: rewrite}}
	c.x.steps["p2.saturation"] = []step{{AfterEnd: "p1.saturation"}}
	c.run()
	now, err := provenance.HashFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	c.stoppedAt(state.StopInputChanged, manifest+" changed: recorded sha256 "+entries[1].SHA256+", now "+now)
	c.wantCalls("p1.saturation/a1", "p2.saturation/a1")
	c.wantAttempts("p2.saturation", ok)
	c.wantLedgerSettled()
	c.wantClean()
}

// TestProtocolRemovedIsNotAnInputChange: the protocol file is recorded
// with the inputs, but the campaign runs from its plan, so the check
// before a wave leaves it out (resume checks it): the file removed while
// the first wave runs stops nothing, the second wave launches and the
// campaign completes.
func TestProtocolRemovedIsNotAnInputChange(t *testing.T) {
	t.Parallel()
	c := newLoopCampaign(t, "matrix.yaml", nil)
	remove := func() {
		if err := os.Remove(c.protocol); err != nil {
			t.Error(err)
		}
	}
	c.x.steps["p1.saturation"] = []step{{Do: remove}}
	c.x.steps["p2.saturation"] = []step{{AfterEnd: "p1.saturation"}}
	c.run()
	c.wantComplete()
	c.wantCalls("p1.saturation/a1", "p2.saturation/a1", "p3.saturation/a1", "p4.saturation/a1")
	c.wantLedgerSettled()
	c.wantClean()
}

// TestDiskStopsBeforeAWave (stop condition 9): before every wave the
// loop applies the protocol's disk limits and records the disk gate's
// verdict: too little free space stops the campaign before anything
// starts; artifacts grown past their limit during the first wave stop it
// before the second.
func TestDiskStopsBeforeAWave(t *testing.T) {
	t.Parallel()
	t.Run("free space", func(t *testing.T) {
		t.Parallel()
		c := newLoopCampaign(t, "matrix.yaml", nil, "stop: {", "stop: {min_free_gb: 1000000000, ")
		c.run()
		cp := c.stoppedAt(state.StopDisk)
		if cp.StopFigures["min_free_gb"] != 1e9 {
			t.Errorf("stop figures %v", cp.StopFigures)
		}
		if v := c.gate("", 0, "disk"); v.Verdict != state.VerdictFail {
			t.Errorf("disk gate %+v", v)
		}
		c.wantCalls()
		c.wantClean()
	})
	t.Run("artifacts", func(t *testing.T) {
		t.Parallel()
		// the limit (10 kB) holds the provenance copies, which the gate
		// counts too, but not the first wave's 64 KiB
		big := step{Files: map[string]string{"client/out.bin": strings.Repeat("x", 64<<10)}}
		c := newLoopCampaign(t, "matrix.yaml", map[string][]step{"p1.saturation": {big}, "p2.saturation": {{AfterEnd: "p1.saturation"}}},
			"stop: {", "stop: {max_artifacts_gb: 0.00001, ")
		c.run()
		c.stoppedAt(state.StopDisk)
		if v := c.gate("", 0, "disk"); v.Verdict != state.VerdictFail {
			t.Errorf("disk gate %+v", v)
		}
		c.wantCalls("p1.saturation/a1", "p2.saturation/a1")
		c.wantLedgerSettled()
		c.wantClean()
	})
}

// TestOperatorStopScripted: Stop, or the end of Run's context, while
// both units measure ends them interrupted (charged), records the
// operator's stop, launches nothing more, and Run returns; a new Runner
// resumes: the interrupted runs run again first (not retries: the
// protocol allows none), then the rest, and the campaign completes with
// the interrupted attempts kept.
func TestOperatorStopScripted(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"Stop", "context"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			hold := step{Hold: true}
			c := newLoopCampaign(t, "matrix.yaml", map[string][]step{"p1.saturation": {hold}, "p2.saturation": {hold}},
				"retries: {infrastructure: 1}", "retries: {infrastructure: 0}")
			r := c.start(c.rn)
			for _, ev := range []string{"start p1.saturation", "start p2.saturation"} {
				select {
				case <-c.x.happened(ev):
				case <-r.finished:
					t.Fatalf("Run returned (%v) before %s", r.err, ev)
				case <-time.After(runWait):
					t.Fatalf("no %s within %v", ev, runWait)
				}
			}
			if how == "Stop" {
				r.rn.Stop()
			} else {
				r.cancel()
			}
			r.wait(t)
			detail := "stopped by an operator"
			if how == "context" {
				detail = "the runner's context ended"
			}
			c.stoppedAt(state.StopOperator, detail)
			interrupted := state.Attempt{State: state.Interrupted, Reason: state.ReasonInterrupted}
			c.wantAttempts("p1.saturation", interrupted)
			c.wantAttempts("p2.saturation", interrupted)
			c.wantCalls("p1.saturation/a1", "p2.saturation/a1")
			if l := c.wantLedgerSettled(); l.byAttempt["p1.saturation/a1"] <= 0 || l.byAttempt["p2.saturation/a1"] <= 0 {
				t.Errorf("interrupted attempts not charged: %v", l.byAttempt)
			}
			c.wantClean()

			c.resume()
			c.wantComplete()
			c.wantAttempts("p1.saturation", interrupted, ok)
			c.wantAttempts("p2.saturation", interrupted, ok)
			calls := c.x.asked()
			if len(calls) != 6 || calls[2].Run != "p1.saturation" && calls[2].Run != "p2.saturation" {
				t.Errorf("after the resume the interrupted runs did not run first: %+v", calls)
			}
			c.wantLedgerSettled()
			c.wantClean()
		})
	}
}
