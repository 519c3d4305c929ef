package runner_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"warden/pkg/amend"
	"warden/pkg/state"
	"warden/protocols"
)

// A running campaign amended or frozen (the daemon's amend and freeze
// requests: the store records the amendment, then Runner.Reload or
// Runner.Freeze). The socket that delivers them is cmd/controller's.

// TestReloadedAmendmentTakesTheNextAttempt: an amendment recorded and
// reloaded while p1 measures is in force at the next decision: p1 keeps
// the plan and the protocol hash it started under, with no amendment;
// p2, launched after, is given the amended plan and records its hash and
// the amendment.
func TestReloadedAmendmentTakesTheNextAttempt(t *testing.T) {
	t.Parallel()
	c := newLoopCampaign(t, "matrix.yaml", nil, "{name: two, concurrency: 2}", "{name: one, concurrency: 1}",
		"matrix: {pattern: [p1, p2, p3, p4]}", "matrix: {pattern: [p1, p2]}")
	b, err := os.ReadFile(c.protocol)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(filepath.Dir(c.protocol), "amended.yaml")
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), "drain_allowance_s: 5", "drain_allowance_s: 6", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	amended, err := protocols.PlanFile(path, protocols.Options{})
	if err != nil {
		t.Fatal(err)
	}
	old, sha := c.plan.Protocol.SHA256, amended.Protocol.SHA256
	if old == sha {
		t.Fatal("test bug: the amendment does not change the protocol")
	}
	c.x.steps["p1.saturation"] = []step{{Do: func() {
		err := c.store.Amend(state.Amendment{ID: "A-1", Title: "a longer allowance", Text: "a longer allowance", OldSHA256: old, ProtocolSHA256: sha},
			func(cp *state.Campaign) error {
				cp.ProtocolSHA256, cp.ProtocolPath = sha, path
				return nil
			})
		if err != nil {
			t.Error(err)
		}
		c.rn.Reload(amended)
	}}}
	c.run()
	c.wantComplete()
	for _, w := range []struct {
		run, sha   string
		amendments []string
	}{{"p1.saturation", old, nil}, {"p2.saturation", sha, []string{"A-1"}}} {
		a := c.wantAttempts(w.run, ok)[0]
		if a.ProtocolSHA256 != w.sha || !slices.Equal(a.Amendments, w.amendments) {
			t.Errorf("%s recorded protocol %s, amendments %v; want %s, %v", w.run, a.ProtocolSHA256, a.Amendments, w.sha, w.amendments)
		}
		if cl := c.x.callsOf(w.run); len(cl) != 1 || cl[0].PlanSHA != w.sha {
			t.Errorf("%s was given the plan of %+v; want %s", w.run, cl, w.sha)
		}
	}
	c.wantLedgerSettled()
	c.wantClean()
}

// TestFreezeEndsTheRunsInFlight: a freeze while both units measure ends
// them interrupted, then freezes the matrix with the freeze amendment:
// every run without a result is not-run under its id, nothing more is
// launched, the campaign is frozen and Run returns.
func TestFreezeEndsTheRunsInFlight(t *testing.T) {
	t.Parallel()
	hold := step{Hold: true}
	c := newLoopCampaign(t, "matrix.yaml", map[string][]step{"p1.saturation": {hold}, "p2.saturation": {hold}})
	r := c.start(c.rn)
	c.x.await(t, r, "start p1.saturation")
	c.x.await(t, r, "start p2.saturation")
	c.rn.Freeze(amend.FreezeAmendment("A-2", "frozen while running", os.Getuid(), c.record().ProtocolSHA256, time.Now()))
	r.wait(t)
	if cp := c.record(); cp.State != state.CampaignFrozen {
		t.Fatalf("campaign %s (%s: %s); want frozen", cp.State, cp.StopReason, cp.StopDetail)
	}
	interrupted := state.Attempt{State: state.Interrupted, Reason: state.ReasonInterrupted}
	c.wantAttempts("p1.saturation", interrupted)
	c.wantAttempts("p2.saturation", interrupted)
	c.wantCalls("p1.saturation/a1", "p2.saturation/a1")
	runs, err := c.store.Runs()
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range runs {
		if run.NotRun != "A-2" {
			t.Errorf("%s: not-run %q; want A-2", run.ID, run.NotRun)
		}
	}
	as, err := c.store.Amendments()
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 1 || as[0].ID != "A-2" || as[0].Kind != "freeze" || len(as[0].Runs) != len(runs) {
		t.Errorf("amendments %+v; want the freeze A-2 naming the %d runs", as, len(runs))
	}
	c.wantLedgerSettled()
	c.wantClean()
}
