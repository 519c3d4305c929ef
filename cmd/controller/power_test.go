package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"warden/internal/testcampaign"
	"warden/pkg/state"
)

// The power check as an operator meets it (testcampaign.Power: varying
// stand-in steps, a burn-in measured by validate power, one saturation run
// judged by layer2 and recovery): under the literal rules the campaign
// stops before the matrix with the power check's reason and the
// amendment's name; the amendment adopting the calibrated rules is
// recorded with controller amend, and the resumed campaign completes.
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
}
