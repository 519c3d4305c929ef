package runner_test

import (
	"strings"
	"testing"

	"warden/pkg/state"
)

// The power check's stop through the scripted executor: the loop reads
// the burn-in's measurement from its recorded verdict, asks the check
// before the matrix's first launch, and stops before the spend or records
// the pass. pkg/schedule holds the check's arithmetic; the real
// validators' figures on real data are cmd/controller's
// TestPowerCheckStopAmendResume. testdata/power.yaml: a burn-in measured
// by validate power, one matrix run of two windows judged by layer2 and
// recovery under ${RULE}, a threshold of 0.5.

// measured is the burn-in's step: its power validator measured a
// window's literal pass fraction of 0.3 and a recovery's of 0.99.
var measured = step{Gates: []state.GateVerdict{{Gate: "validator:power", Verdict: state.VerdictPass, Figures: map[string]float64{
	"power.representativeness.unit_pass_fraction": 0.3, "power.representativeness.samples": 200,
	"power.recovery.unit_pass_fraction": 0.99, "power.recovery.samples": 200,
}}}}

// TestPowerCheckScripted: under the literal rules the burn-in's figures
// say a two-window run passes layer2 with 0.3^2 (one rerun: 0.17): the
// campaign stops before the matrix, the detail naming the gate, where it
// was measured and the amendment that would fix it, and no matrix run
// starts. Under the calibrated rules the check passes, is recorded as a
// gate verdict with its figures, and the matrix runs. A burn-in that
// measured nothing leaves the check unable to tell: it stops (fail
// closed).
func TestPowerCheckScripted(t *testing.T) {
	t.Parallel()
	t.Run("literal rules stop before the matrix", func(t *testing.T) {
		t.Parallel()
		c := newLoopCampaign(t, "power.yaml", map[string][]step{"burnin": {measured}})
		c.run()
		cp := c.stoppedAt(state.StopPowerCheck, "before the matrix, the campaign's expected completion probability under its gates is",
			"gate layer2 (representativeness, literal rule)", "measured on burnin", "the dated amendment that would fix it: A-TEST (the calibrated rules)")
		if p := cp.StopFigures["completion_probability"]; !(p > 0.16 && p < 0.17) || cp.StopFigures["layer2.judged_runs"] != 1 {
			t.Errorf("stop figures %v", cp.StopFigures)
		}
		c.wantCalls("burnin/a1")
		c.wantLedgerSettled()
		c.wantClean()
	})
	t.Run("calibrated rules pass", func(t *testing.T) {
		t.Parallel()
		c := newLoopCampaign(t, "power.yaml", map[string][]step{"burnin": {measured}}, "RULE: literal", "RULE: calibrated")
		c.run()
		c.wantComplete()
		v := c.campaignGate("power-check")
		if v.Verdict != state.VerdictPass || !(v.Figures["completion_probability"] >= 0.5) || !strings.Contains(v.Detail, "calibrated") {
			t.Errorf("the power check's record %+v", v)
		}
		c.wantCalls("burnin/a1", "p1.saturation/a1")
		c.wantClean()
	})
	t.Run("nothing measured", func(t *testing.T) {
		t.Parallel()
		c := newLoopCampaign(t, "power.yaml", nil)
		c.run()
		c.stoppedAt(state.StopPowerCheck, "no run measured the representativeness gate's false-failure rate yet")
		c.wantCalls("burnin/a1")
		c.wantClean()
	})
}
