package amend

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"warden/internal/testutil/testcampaign"
	"warden/internal/testutil/testreaper"
	"warden/pkg/dirlayout"
	"warden/pkg/launch"
	"warden/pkg/state"
	"warden/protocols"
)

// testReaper is the one reaper of the test process: it owns every child's
// exit status, so nothing else may wait for children once it runs (see
// launch.Reaper).
var testReaper *launch.Reaper

func TestMain(m *testing.M) {
	os.Exit(testreaper.Run(m, &testReaper))
}

// miniCampaign is a campaign of protocol (planCampaign) whose
// SaveSettings records the protocol hash it is given in *saved (nil: it
// has none).
func miniCampaign(t *testing.T, protocol string, saved *string) Campaign {
	t.Helper()
	c := planCampaign(t, protocol)
	if saved != nil {
		c.SaveSettings = func(_, sha string) error { *saved = sha; return nil }
	}
	return c
}

// ended gives run an attempt under c's runs/ that ended to, with reason
// and figures, and returns it.
func ended(t *testing.T, c Campaign, run string, to state.AttemptState, reason state.Reason, figures map[string]float64) state.Attempt {
	t.Helper()
	a, err := c.Store.NewAttempt(run, dirlayout.AttemptDir(c.Dir, run, 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []state.AttemptState{state.Reserved, state.Preflight, state.Starting, state.Ready, state.Measuring, state.Stopping, state.Cleanup, state.Validating} {
		if _, err := c.Store.Transition(run, a.N, st, "", "", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	a, err = c.Store.Transition(run, a.N, to, reason, "", nil, func(a *state.Attempt) error { a.Figures = figures; return nil })
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// attempt1 is attempt 1 of run.
func attempt1(t *testing.T, s *state.Store, run string) state.Attempt {
	t.Helper()
	as, err := s.Attempts(run)
	if err != nil || len(as) != 1 {
		t.Fatalf("attempts of %s: %+v, %v", run, as, err)
	}
	return as[0]
}

// TestAmendRefusesChangingDoneRuns: an amendment that changes a run that
// already has a result (a complete or quarantined attempt) is refused,
// naming the runs, and records nothing, unless it re-adjudicates them; a
// run with only a failed attempt has no result and may be changed.
func TestAmendRefusesChangingDoneRuns(t *testing.T) {
	longer := testcampaign.Mini(t, "drain_allowance_s: 10", "drain_allowance_s: 15")
	for _, tt := range []struct {
		name         string
		ended        state.AttemptState // A.sat's attempt; "" for none
		reason       state.Reason
		readjudicate bool
		refused      bool
	}{
		{name: "no run has a result"},
		{name: "A.sat failed", ended: state.Failed, reason: state.ReasonValidatorFailed},
		{name: "A.sat complete", ended: state.Complete, refused: true},
		{name: "A.sat quarantined", ended: state.Quarantined, reason: state.ReasonDrainQuarantine, refused: true},
		{name: "A.sat complete, re-adjudicated", ended: state.Complete, readjudicate: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var saved string
			c := miniCampaign(t, testcampaign.Mini(t), &saved)
			if tt.ended != "" {
				ended(t, c, "A.sat", tt.ended, tt.reason, nil)
			}
			planBefore, err := os.ReadFile(dirlayout.Plan(c.Dir))
			if err != nil {
				t.Fatal(err)
			}
			res, plan, err := Amend(c, Request{Protocol: longer, ID: "A-1", Reason: "a longer allowance", Readjudicate: tt.readjudicate, Yes: true})
			as, _ := c.Store.Amendments()
			planAfter, _ := os.ReadFile(dirlayout.Plan(c.Dir))
			if tt.refused {
				want := "amend A-1 would change runs that already have a result: [A.sat]; an amendment may change them only to re-adjudicate them: add --readjudicate, then run controller readjudicate -d " + c.Dir + " --amendment A-1"
				if err == nil || err.Error() != want {
					t.Fatalf("Amend: %v\nwant %s", err, want)
				}
				if res.Recorded || plan != nil || len(as) != 0 || saved != "" || string(planAfter) != string(planBefore) {
					t.Fatalf("a refused amendment was recorded: %+v, amendments %+v, settings %q, plan.json changed %v", res, as, saved, string(planAfter) != string(planBefore))
				}
				return
			}
			if err != nil {
				t.Fatalf("Amend: %v", err)
			}
			var done []string
			if tt.ended.Terminal() && tt.ended != state.Failed {
				done = []string{"A.sat"}
			}
			if !res.Recorded || plan == nil || len(res.Diff.Changed) != 4 || !reflect.DeepEqual(res.Diff.Done, done) {
				t.Fatalf("Amend = %+v, plan %v; want recorded, 4 runs changed, %v with a result", res, plan != nil, done)
			}
			if len(as) != 1 || as[0].ID != "A-1" || as[0].ProtocolSHA256 != plan.Protocol.SHA256 || saved != plan.Protocol.SHA256 {
				t.Fatalf("amendments %+v, settings %q; want A-1 of %s", as, saved, plan.Protocol.SHA256)
			}
		})
	}
}

// TestReadjudicateDrainUnderAmendedAllowance: a drain-quarantined attempt
// judged again under the amended class becomes complete when its drain is
// within the new allowance: the attempt's own verdict is kept beside the
// new one, the run counts as complete, and the re-adjudication is
// recorded first as an amendment citing the one it applies. A drain still
// over the allowance, or a second re-adjudication, changes nothing and
// records nothing.
func TestReadjudicateDrainUnderAmendedAllowance(t *testing.T) {
	plan, err := protocols.PlanFile(testcampaign.Mini(t, "drain_allowance_s: 10", "drain_allowance_s: 15"), protocols.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		drainS float64
		want   []Readjudicated
	}{
		{name: "within the amended allowance", drainS: 12, want: []Readjudicated{{Run: "A.sat", Attempt: 1,
			Old: "quarantined", OldReason: "drain-quarantine", New: "complete",
			Detail: "drain 12.000 s against the amended allowance 15 s (watchdog 20 s) of class std"}}},
		{name: "still over it", drainS: 17},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := miniCampaign(t, testcampaign.Mini(t), nil)
			ended(t, c, "A.sat", state.Quarantined, state.ReasonDrainQuarantine, map[string]float64{"drain_s": tt.drainS})
			// no launcher: no validator is run
			got, err := Readjudicate(c, plan, "A-1", nil, nil, t.TempDir())
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Readjudicate = %+v, %v; want %+v", got, err, tt.want)
			}
			a := attempt1(t, c.Store, "A.sat")
			r, _ := c.Store.Run("A.sat")
			as, _ := c.Store.Amendments()
			if a.State != state.Quarantined || a.Reason != state.ReasonDrainQuarantine {
				t.Fatalf("the recorded verdict changed: %s %s", a.State, a.Reason)
			}
			if tt.want == nil {
				if a.Readjudicated != nil || r.State() != state.RunQuarantined || len(as) != 0 {
					t.Fatalf("unchanged: readjudicated %+v, run %s, amendments %+v", a.Readjudicated, r.State(), as)
				}
				return
			}
			if rj := a.Readjudicated; rj == nil || rj.Amendment != "A-1" || rj.State != state.Complete || rj.Reason != "" || rj.Detail != tt.want[0].Detail {
				t.Fatalf("readjudicated %+v", a.Readjudicated)
			}
			if r.State() != state.RunComplete {
				t.Errorf("A.sat counts as %s, want complete", r.State())
			}
			if len(as) != 1 || as[0].ID != "A-1/readjudicate-1" || as[0].Kind != "readjudicate" || as[0].Cites != "A-1" || !reflect.DeepEqual(as[0].Runs, []string{"A.sat"}) {
				t.Fatalf("amendments %+v; want A-1/readjudicate-1 citing A-1 for A.sat", as)
			}
			gs, _ := c.Store.GateVerdicts("A.sat")
			if len(gs) != 1 || gs[0].Gate != "drain" || gs[0].Verdict != "pass" || gs[0].Attempt != 1 ||
				gs[0].Detail != "re-adjudicated under amendment A-1: "+tt.want[0].Detail || gs[0].Figures["allowance_s"] != 15 {
				t.Fatalf("gate verdicts %+v", gs)
			}
			if again, err := Readjudicate(c, plan, "A-1", nil, nil, t.TempDir()); err != nil || again != nil {
				t.Fatalf("a second Readjudicate = %+v, %v; want nothing", again, err)
			}
			if as, _ := c.Store.Amendments(); len(as) != 1 {
				t.Fatalf("a second re-adjudication recorded %+v", as)
			}
			if err := c.Store.Check(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestReadjudicateRerunsValidators: the validators of an attempt a
// validator failed are run again, as amended, over its recorded artifacts
// (their output under the output directory): one that passes makes the
// attempt complete, a quality-class failure makes it quarantined
// quality-failed, and one that still fails, or no launcher, changes
// nothing. The attempt's own verdict is kept beside the new one.
func TestReadjudicateRerunsValidators(t *testing.T) {
	for _, tt := range []struct {
		name     string
		shell    string // the amended validator
		noLaunch bool
		want     []Readjudicated
		run      state.RunState
	}{
		{name: "passes", shell: `test -f "${ATTEMPT_DIR}/client.out" && echo checked`, run: state.RunComplete, want: []Readjudicated{{Run: "A.sat", Attempt: 1,
			Old: "failed", OldReason: "validator-failed", New: "complete", Detail: "validator:check pass"}}},
		{name: "quality-class failure", shell: `echo '{"verdict": "fail", "class": "quality", "detail": "checked"}'; exit 1`, run: state.RunQuarantined,
			want: []Readjudicated{{Run: "A.sat", Attempt: 1, Old: "failed", OldReason: "validator-failed", New: "quarantined", NewReason: "quality-failed", Detail: "validator:check fail"}}},
		{name: "still fails", shell: `echo checked; exit 1`, run: state.RunFailed},
		{name: "no launcher", shell: `echo checked`, noLaunch: true, run: state.RunFailed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := protocols.PlanFile(testcampaign.Mini(t, "phases:", "validators:\n  - name: check\n    command:\n      shell: |-\n        "+tt.shell+"\nphases:"), protocols.Options{})
			if err != nil {
				t.Fatal(err)
			}
			c := miniCampaign(t, testcampaign.Mini(t), nil)
			adir := dirlayout.AttemptDir(c.Dir, "A.sat", 1)
			if err := os.MkdirAll(adir, 0o755); err != nil {
				t.Fatal(err)
			}
			for name, text := range map[string]string{"client.out": "served\n", "environment.json": `{"variables": {"ATTEMPT_DIR": "` + adir + `"}}`} {
				if err := os.WriteFile(filepath.Join(adir, name), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			ended(t, c, "A.sat", state.Failed, state.ReasonValidatorFailed, nil)
			l := &launch.Launcher{Reaper: testReaper}
			if tt.noLaunch {
				l = nil
			}
			out := t.TempDir()
			got, err := Readjudicate(c, plan, "V", nil, l, out)
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Readjudicate = %+v, %v; want %+v", got, err, tt.want)
			}
			a := attempt1(t, c.Store, "A.sat")
			if a.State != state.Failed || a.Reason != state.ReasonValidatorFailed {
				t.Fatalf("the recorded verdict changed: %s %s", a.State, a.Reason)
			}
			if r, _ := c.Store.Run("A.sat"); r.State() != tt.run {
				t.Errorf("A.sat counts as %s, want %s", r.State(), tt.run)
			}
			// the validator's output, under out, not in the attempt's directory
			b, err := os.ReadFile(dirlayout.Stdout(filepath.Join(out, dirlayout.AttemptRel("A.sat", 1)), "validator-check"))
			if tt.noLaunch {
				if err == nil {
					t.Fatalf("a validator ran without a launcher: %q", b)
				}
				return
			}
			if err != nil || !strings.Contains(string(b), "checked") {
				t.Fatalf("the validator's output: %q, %v", b, err)
			}
			if _, err := os.Stat(filepath.Join(adir, "validator-check.out")); err == nil {
				t.Errorf("the validator's output was written into the attempt's directory")
			}
			if as, _ := c.Store.Amendments(); tt.want == nil {
				if a.Readjudicated != nil || len(as) != 0 {
					t.Fatalf("unchanged: readjudicated %+v, amendments %+v", a.Readjudicated, as)
				}
				return
			}
			if rj := a.Readjudicated; rj == nil || rj.Amendment != "V" || string(rj.State) != tt.want[0].New || string(rj.Reason) != tt.want[0].NewReason {
				t.Fatalf("readjudicated %+v", a.Readjudicated)
			}
			if err := c.Store.Check(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
