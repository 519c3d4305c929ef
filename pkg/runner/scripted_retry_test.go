package runner_test

import (
	"fmt"
	"slices"
	"testing"

	"warden/pkg/outcome"
	"warden/pkg/state"
)

// The loop's use of the outcome policy (pkg/outcome holds its rules):
// after each attempt, the next run of the unit, one exact rerun, or the
// end of the unit with a stop.

// oneAtATime makes the matrix protocol run one unit at a time, cells p1
// and p2 of saturation then moderate, with thresholds no test here meets.
var oneAtATime = []string{
	"{name: two, concurrency: 2}", "{name: one, concurrency: 1}",
	"matrix: {pattern: [p1, p2, p3, p4]}", "matrix: {pattern: [p1, p2]}",
	"loads: [saturation]", "loads: [saturation, moderate]",
	"stop: {quarantined_fraction_gt: 0.2, failed_fraction_gt: 0.05}", "stop: {quarantined_fraction_gt: 0.9}",
}

// TestLoopFollowsTheOutcomePolicy: for every reason an attempt can fail
// with, the loop does what the policy's rule says. A retried reason gets
// one exact rerun: the same slots, regime and wave (no new reservation),
// attempt 2, and the unit goes on to its moderate run; both attempts stay
// and are charged. A reason that stops stops the campaign with the run's
// reason naming the run; nothing is rerun, the unit's moderate run and
// the next unit never start. A quarantining reason leaves the run done
// (the moderate run follows) and the campaign goes on.
func TestLoopFollowsTheOutcomePolicy(t *testing.T) {
	t.Parallel()
	actions := map[outcome.Action]bool{}
	for _, r := range state.Reasons {
		rule := outcome.RuleFor(r)
		actions[rule.Action] = true
		if rule.Action == outcome.Restart {
			continue // an interrupted attempt: TestOperatorStopThenResumeScripted, TestBudgetExhaustedInFlight
		}
		t.Run(string(r), func(t *testing.T) {
			t.Parallel()
			end := state.Failed
			if rule.Action == outcome.Quarantine {
				end = state.Quarantined
			}
			c := newLoopCampaign(t, "matrix.yaml", map[string][]step{"p1.saturation": {{State: end, Reason: r, Detail: "scripted " + string(r)}}}, oneAtATime...)
			c.run()
			switch rule.Action {
			case outcome.Retry:
				c.wantComplete()
				as := c.wantAttempts("p1.saturation", failed(r), ok)
				if as[0].Dir == as[1].Dir {
					t.Errorf("both attempts in %s", as[0].Dir)
				}
				cs := c.x.callsOf("p1.saturation")
				if a, b := cs[0], cs[1]; b.N != 2 || !slices.Equal(a.Slots, b.Slots) || a.Regime != b.Regime || a.Wave != b.Wave {
					t.Errorf("the rerun %+v is not the exact rerun of %+v", b, a)
				}
				if mod := c.x.callsOf("p1.moderate"); len(mod) != 1 || !slices.Equal(mod[0].Slots, cs[0].Slots) || mod[0].Wave != cs[0].Wave {
					t.Errorf("the unit's moderate run after the rerun: %+v", mod)
				}
				l := c.wantLedgerSettled()
				for _, k := range []string{"p1.saturation/a1", "p1.saturation/a2"} {
					if l.byAttempt[k] <= 0 {
						t.Errorf("%s was not charged: %v", k, l.byAttempt)
					}
				}
				if n := reserves(l, "p1.saturation"); n != 1 {
					t.Errorf("p1.saturation reserved %d times; the rerun is in its wave's reservation", n)
				}
			case outcome.StopForReview:
				c.stoppedAt(state.StopForRun(r), "run p1.saturation failed: scripted "+string(r))
				c.wantAttempts("p1.saturation", failed(r))
				c.wantCalls("p1.saturation/a1")
				c.wantLedgerSettled()
			case outcome.Quarantine:
				c.wantComplete()
				c.wantAttempts("p1.saturation", state.Attempt{State: state.Quarantined, Reason: r})
				c.wantCalls("p1.saturation/a1", "p1.moderate/a1", "p2.saturation/a1", "p2.moderate/a1")
				c.wantLedgerSettled()
			default:
				t.Fatalf("no expectation for the action %q", rule.Action)
			}
			c.wantClean()
		})
	}
	for _, a := range []outcome.Action{outcome.Retry, outcome.StopForReview, outcome.Quarantine, outcome.Restart} {
		if !actions[a] {
			t.Errorf("no reason has the action %s: the test drives none", a)
		}
	}
}

// reserves counts run's reservations on the ledger.
func reserves(l ledger, run string) int {
	n := 0
	for _, e := range l.entries {
		if e.Kind == state.LedgerReserve && e.Run == run {
			n++
		}
	}
	return n
}

// TestLoopRetryExhausted: the protocol's retries bound the reruns of
// every reason the policy retries. With one, a failure of the rerun too
// stops the campaign with the run's reason, both attempts kept and no
// third; with none, the first failure stops it.
func TestLoopRetryExhausted(t *testing.T) {
	t.Parallel()
	for _, r := range state.Reasons {
		if outcome.RuleFor(r).Action != outcome.Retry {
			continue
		}
		for _, retries := range []int{1, 0} {
			t.Run(fmt.Sprintf("%s, retries %d", r, retries), func(t *testing.T) {
				t.Parallel()
				fail := step{State: state.Failed, Reason: r}
				c := newLoopCampaign(t, "matrix.yaml", map[string][]step{"p1.saturation": {fail, fail, fail}},
					append(oneAtATime, "retries: {infrastructure: 1}", fmt.Sprintf("retries: {infrastructure: %d}", retries))...)
				c.run()
				c.stoppedAt(state.StopForRun(r), "p1.saturation")
				want := []state.Attempt{failed(r)}
				if retries == 1 {
					want = append(want, failed(r))
				}
				c.wantAttempts("p1.saturation", want...)
				if n := len(c.x.asked()); n != len(want) {
					t.Errorf("the executor ran %d attempts, want %d: %+v", n, len(want), c.x.asked())
				}
				c.wantLedgerSettled()
				c.wantClean()
			})
		}
	}
}
