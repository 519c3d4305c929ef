package runner_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"warden/pkg/state"
)

// The capacity search's next point (pkg/schedule decides it from the
// judged points; the loop judges each done point, records the judgement
// and launches the point at the rate decided) through the scripted
// executor. testdata/capacity.yaml: rates 4..36 to a resolution of 8 (3
// bisection points), then 0.5, 0.8, 0.95 of the rate found and the
// overload point at 1.2; the SLO is a success fraction of 0.99.

// capacityGate is the gate a point's judgement is recorded as, a name
// stored in campaigns.
const capacityGate = "capacity-slo"

// servesUpTo is the step of a capacity point against a server whose
// capacity is rps: every request succeeds up to it, a tenth fail past it.
func servesUpTo(c *loopCampaign, rps float64) func(call) step {
	return func(cl call) step {
		success := 100
		if cl.Rate > rps {
			success = 90
		}
		return step{Files: map[string]string{c.planRun(cl.Run).ResultFile: fmt.Sprintf(`{"totals": {"admitted": 100, "by_class": {"success": %d}}}`, success)}}
	}
}

// rates are the rates the executor was asked to run each run at.
func (c *loopCampaign) rates() map[string]float64 {
	out := map[string]float64{}
	for _, cl := range c.x.asked() {
		out[cl.Run] = cl.Rate
	}
	return out
}

// TestCapacitySearchScripted: against a capacity of 24 requests/s the
// bisection runs at 4, 20 (the middle of 4..36) and 28, finds 20, and
// the follow-ups run at 10, 16, 19 and the overload point at 24; each
// point runs once its rate is decided, at that rate, and its judgement is
// recorded with the rate.
func TestCapacitySearchScripted(t *testing.T) {
	t.Parallel()
	c := newLoopCampaign(t, "capacity.yaml", nil)
	c.x.fn = servesUpTo(c, 24)
	c.run()
	c.wantComplete()
	want := map[string]float64{"s.open.b1": 4, "s.open.b2": 20, "s.open.b3": 28, "s.open.x050": 10, "s.open.x080": 16, "s.open.x095": 19, "s.open.x120": 24}
	got := c.rates()
	for run, rate := range want {
		if got[run] != rate {
			t.Errorf("%s ran at %v requests/s, want %v (all: %v)", run, got[run], rate, got)
		}
		v := c.gate(run, 1, capacityGate)
		verdict := state.VerdictPass
		if rate > 24 {
			verdict = state.VerdictFail
		}
		if v.Verdict != verdict || v.Figures["rate_rps"] != rate {
			t.Errorf("%s: %s verdict %+v; want %s at %v", run, capacityGate, v, verdict, rate)
		}
	}
	if len(c.x.asked()) != len(want) {
		t.Errorf("the executor ran %d points, want %d: %+v", len(c.x.asked()), len(want), c.x.asked())
	}
	c.wantLedgerSettled()
	c.wantClean()
}

// TestCapacitySearchResumes: a search stopped while its third point runs
// resumes at the same point and rate, decided from the judgements
// recorded before the stop: the results they were judged on are changed
// meanwhile, and the resumed search goes on as before.
func TestCapacitySearchResumes(t *testing.T) {
	t.Parallel()
	c := newLoopCampaign(t, "capacity.yaml", map[string][]step{"s.open.b3": {{Hold: true}}})
	c.x.fn = servesUpTo(c, 24)
	r := c.start(c.rn)
	select {
	case <-c.x.happened("start s.open.b3"):
	case <-r.finished:
		t.Fatalf("Run returned (%v) before the third point", r.err)
	case <-time.After(runWait):
		t.Fatalf("no third point within %v", runWait)
	}
	r.rn.Stop()
	r.wait(t)
	c.stoppedAt(state.StopOperator)
	for _, run := range []string{"s.open.b1", "s.open.b2"} {
		path := filepath.Join(c.attempts(run)[0].Dir, c.planRun(run).ResultFile)
		if err := os.WriteFile(path, []byte(`{"totals": {"admitted": 100, "by_class": {"success": 1}}}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c.resume()
	c.wantComplete()
	c.wantAttempts("s.open.b3", state.Attempt{State: state.Interrupted, Reason: state.ReasonInterrupted}, ok)
	if b3 := c.x.callsOf("s.open.b3"); len(b3) != 2 || b3[0].Rate != 28 || b3[1].Rate != 28 {
		t.Errorf("the third point ran at %+v; want 28 requests/s both times", b3)
	}
	if got := c.rates(); got["s.open.x050"] != 10 || got["s.open.x120"] != 24 {
		t.Errorf("follow-ups at %v; want the rate found before the stop, 20", got)
	}
	c.wantClean()
}

// TestCapacitySearchEnds: a first point that fails the SLO ends the
// search below its range (nothing more runs: its later points are
// recorded not run, and the campaign completes); a
// first point whose result cannot be read cannot be judged: the campaign
// stops for review naming the search and the point.
func TestCapacitySearchEnds(t *testing.T) {
	t.Parallel()
	t.Run("below range", func(t *testing.T) {
		t.Parallel()
		c := newLoopCampaign(t, "capacity.yaml", nil)
		c.x.fn = servesUpTo(c, 1)
		c.run()
		if cp := c.record(); cp.State != state.CampaignComplete {
			t.Fatalf("campaign %s (%s: %s), want complete", cp.State, cp.StopReason, cp.StopDetail)
		}
		c.wantCalls("s.open.b1/a1")
		if v := c.gate("s.open.b1", 1, capacityGate); v.Verdict != state.VerdictFail || v.Figures["rate_rps"] != 4 {
			t.Errorf("b1: %+v", v)
		}
		// the points the search will never reach are recorded not run
		runs, err := c.store.Runs()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range runs {
			if r.ID != "s.open.b1" && (r.State() != state.RunNotRun || r.NotRunReason == "") {
				t.Errorf("%s is %s (not-run reason %q); want not run, with its reason", r.ID, r.State(), r.NotRunReason)
			}
		}
		c.wantClean()
	})
	t.Run("unjudged", func(t *testing.T) {
		t.Parallel()
		c := newLoopCampaign(t, "capacity.yaml", nil) // no result file written
		c.run()
		c.stoppedAt(state.StopGateError, "capacity search search/s could not judge point s.open.b1: read the client result")
		c.wantCalls("s.open.b1/a1")
		c.wantClean()
	})
}

// TestCapacitySearchNotMonotonic: a follow-up that fails at a rate below
// one that passed shows the search found no capacity: when that point
// ends the campaign stops for review (on_non_monotonic: stop), naming the
// search; a resume runs the search's remaining points.
func TestCapacitySearchNotMonotonic(t *testing.T) {
	t.Parallel()
	c := newLoopCampaign(t, "capacity.yaml", nil)
	monotonic := servesUpTo(c, 24)
	c.x.fn = func(cl call) step {
		if cl.Run == "s.open.x050" { // 10 requests/s, below the 20 that passed
			return servesUpTo(c, 1)(cl)
		}
		return monotonic(cl)
	}
	c.run()
	c.stoppedAt(state.StopCapacityNotMonotonic, "capacity search search/s")
	c.wantCalls("s.open.b1/a1", "s.open.b2/a1", "s.open.b3/a1", "s.open.x050/a1")
	c.resume()
	if cp := c.record(); cp.State != state.CampaignComplete {
		t.Fatalf("campaign %s (%s: %s), want complete", cp.State, cp.StopReason, cp.StopDetail)
	}
	c.wantCalls("s.open.b1/a1", "s.open.b2/a1", "s.open.b3/a1", "s.open.x050/a1", "s.open.x080/a1", "s.open.x095/a1", "s.open.x120/a1")
	c.wantClean()
}
