package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"warden/internal/testutil/testcampaign"
	"warden/pkg/state"
)

// The power check as an operator meets it (testcampaign.Power: varying
// stand-in steps, a burn-in measured by validate power, one saturation run
// judged by layer2 and recovery): under the literal rules the real
// validators' figures on the burn-in's own data stop the campaign before
// the matrix with the power check's reason and the amendment's name; the
// amendment adopting the calibrated rules is recorded with controller
// amend, and the resumed campaign completes, layer2's calibrated rule
// passing the windows the literal one would fail. The loop's part (when it
// asks the check, what it records) is pkg/runner's TestPowerCheckScripted.
func TestPowerCheckStopAmendResume(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	dir := t.TempDir()
	manifest := filepath.Join(dir, "manifest.jsonl")
	if out, err := exec.Command(loadgenBin, "materialize", "--id", "p1", "--input-uniform", "4:16", "--output-fixed", "4", "--arrival", "steady",
		"--num-requests", "60000", "--workload-seed", "20260712", "--out", manifest).CombinedOutput(); err != nil {
		t.Fatalf("materialize: %v\n%s", err, out)
	}
	bins := testcampaign.PowerBins{Standin: standinBin, Controller: controllerBin, Loadgen: loadgenBin, Manifest: manifest}
	port := freePorts(t, 1)[0]
	literal := writeTemp(t, "power.yaml", testcampaign.Power(bins, port, "literal", ""))
	c.runForeground(literal)
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignStopped || cp.StopReason != state.StopPowerCheck || !strings.Contains(cp.StopDetail, "A-TEST (the calibrated rules)") {
		t.Fatalf("campaign %s %s: %s", cp.State, cp.StopReason, cp.StopDetail)
	}
	// the real validators' figures: the burn-in's own data measured by
	// validate power, the check's figures from them, before any matrix run
	for _, want := range []string{"gate layer2 (representativeness, literal rule)", "measured on burnin",
		"under the calibrated rule at quantile 0.99 gate layer2's runs would pass with"} {
		if !strings.Contains(cp.StopDetail, want) {
			t.Errorf("the stop's detail lacks %q:\n%s", want, cp.StopDetail)
		}
	}
	if p := cp.StopFigures["completion_probability"]; !(p < 0.5) || cp.StopFigures["layer2.judged_runs"] != 1 {
		t.Fatalf("stop figures %v", cp.StopFigures)
	}
	if v := c.gateVerdict(s, "burnin", "validator:power"); v.Verdict != "pass" || !(v.Figures["power.representativeness.unit_pass_fraction"] < 0.5) ||
		v.Figures["power.representativeness.samples"] < 100 {
		t.Fatalf("the burn-in's measurement %+v", v)
	}
	if as := c.attempts(s, "p1.saturation"); len(as) != 0 {
		t.Fatalf("a matrix run started: %+v", as)
	}
	s.Close()
	// ctlq status says why, and what would fix it
	if out, _ := exec.Command(ctlqBin, "status", "-d", c.dir).CombinedOutput(); !strings.Contains(string(out), "power-check") {
		t.Fatalf("ctlq status:\n%s", out)
	}
	calibrated := writeTemp(t, "power-calibrated.yaml", testcampaign.Power(bins, port, "calibrated", ""))
	if out, code := c.controller("amend", "-d", c.dir, "-f", calibrated, "--id", "A-TEST", "--reason", "the calibrated rules", "--yes"); code != 0 {
		t.Fatalf("amend: exit %d\n%s", code, tail(out, 3000))
	}
	if out, code := c.controller("--resume", "-d", c.dir, "--foreground"); code != 0 {
		t.Fatalf("resume: exit %d\n%s", code, tail(out, 3000))
	}
	s = c.store()
	cp, _ = s.Campaign()
	if cp.State != state.CampaignComplete {
		t.Fatalf("after the amendment: campaign %s %s: %s", cp.State, cp.StopReason, cp.StopDetail)
	}
	if v := c.gateVerdict(s, "", "power-check"); v.Verdict != "pass" || v.Figures["completion_probability"] < 0.5 {
		t.Fatalf("the power check's record after the amendment: %+v", v)
	}
	// the calibrated rule passes what the literal one would fail
	as := c.attempts(s, "p1.saturation")
	if v := c.gateVerdict(s, "p1.saturation", "validator:layer2"); len(as) == 0 || v.Attempt != as[len(as)-1].N || v.Verdict != "pass" ||
		v.Figures["smd.calibrated.window_pass_fraction"] < 0.99 || !(v.Figures["smd.self.window_pass_fraction"] < 0.5) {
		t.Fatalf("layer2 under the calibrated rule: %s %q %v", v.Verdict, v.Detail, v.Figures)
	}
}
