package runner_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"warden/internal/testcampaign"
	"warden/pkg/state"
)

// The power check end to end, on the seed's timeline scaled to seconds:
// the stand-in server's Layer-1 steps vary as a saturated short-prompt
// pattern's do (--layer1-vary), 200 a second; loadgen runs a burn-in (a
// 3 s warm-up, measured by validate power) and one saturation run (three
// 2 s clean segments, two 2+8 profile windows, 2 s recoveries) judged by
// layer2 and recovery. Under the literal rules the burn-in's own data
// show the campaign cannot be expected to complete, and it stops before
// the matrix with the power check's reason and the amendment's name;
// under the calibrated rules (what the amendment adopts) it completes;
// and a window made unrepresentative on purpose (its steps all prefill)
// fails the calibrated rule on both attempts.

// powerProtocol writes the power-check protocol (testcampaign.Power)
// and its manifest in dir.
func powerProtocol(t *testing.T, dir, rule, serverExtra string) string {
	t.Helper()
	manifest := filepath.Join(dir, "manifest.jsonl")
	out, err := exec.Command(loadgenBin, "materialize", "--id", "p1", "--input-uniform", "4:16", "--output-fixed", "4", "--arrival", "steady",
		"--num-requests", "60000", "--workload-seed", "20260712", "--out", manifest).CombinedOutput()
	if err != nil {
		t.Fatalf("materialize: %v\n%s", err, out)
	}
	y := testcampaign.Power(testcampaign.PowerBins{Standin: standinBin, Controller: controllerBin, Loadgen: loadgenBin, Manifest: manifest},
		freePorts(t, 1)[0], rule, serverExtra)
	path := filepath.Join(dir, "protocol.yaml")
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestPowerCheckOnVaryingSteps(t *testing.T) {
	t.Run("literal rules stop before the matrix", func(t *testing.T) {
		t.Parallel()
		tmp := t.TempDir()
		c := newCampaignOf(t, tmp, powerProtocol(t, tmp, "literal", ""))
		c.run()
		cp := c.wantStopped(state.StopPowerCheck)
		for _, s := range []string{"before the matrix, the campaign's expected completion probability under its gates is",
			"gate layer2 (representativeness, literal rule)", "measured on burnin", "under the calibrated rule at quantile 0.99 gate layer2's runs would pass with",
			"the dated amendment that would fix it: A-TEST (the calibrated rules): protocol-calibrated.yaml"} {
			if !strings.Contains(cp.StopDetail, s) {
				t.Errorf("the stop's detail lacks %q:\n%s", s, cp.StopDetail)
			}
		}
		if p := cp.StopFigures["completion_probability"]; !(p < 0.5) || cp.StopFigures["layer2.judged_runs"] != 1 {
			t.Fatalf("figures %v", cp.StopFigures)
		}
		// the burn-in measured, and no matrix run started
		v := c.gate("burnin", 1, "validator:power")
		if v.Verdict != "pass" || !(v.Figures["power.representativeness.unit_pass_fraction"] < 0.5) || v.Figures["power.representativeness.samples"] < 100 {
			t.Fatalf("burn-in's measurement %+v", v)
		}
		if as := c.attempts("p1.saturation"); len(as) != 0 {
			t.Fatalf("a matrix run started: %+v", as)
		}
		t.Logf("stopped: %s", cp.StopDetail)
		c.wantClean()
	})
	t.Run("calibrated rules complete", func(t *testing.T) {
		t.Parallel()
		tmp := t.TempDir()
		c := newCampaignOf(t, tmp, powerProtocol(t, tmp, "calibrated", ""))
		c.run()
		c.wantComplete()
		if v := c.gate("", 0, "power-check"); v.Verdict != "pass" || v.Figures["completion_probability"] < 0.5 {
			t.Fatalf("the power check's record %+v", v)
		}
		as := c.attempts("p1.saturation")
		v := c.gate("p1.saturation", as[len(as)-1].N, "validator:layer2")
		if v.Verdict != "pass" || v.Figures["smd.calibrated.window_pass_fraction"] < 0.99 || !(v.Figures["smd.self.window_pass_fraction"] < 0.5) {
			t.Fatalf("layer2 under the calibrated rule: %s %q %v", v.Verdict, v.Detail, v.Figures)
		}
		c.wantClean()
	})
	t.Run("an unrepresentative window fails the calibrated rule", func(t *testing.T) {
		t.Parallel()
		tmp := t.TempDir()
		c := newCampaignOf(t, tmp, powerProtocol(t, tmp, "calibrated", `, --layer2-break, unrepresentative`))
		c.run()
		c.wantStopped(state.StopForRun(state.ReasonProfileArtifact))
		as := c.attempts("p1.saturation")
		if len(as) != 2 {
			t.Fatalf("attempts %+v", as)
		}
		for _, a := range as {
			v := c.gate("p1.saturation", a.N, "validator:layer2")
			if v.Verdict != "fail" || !strings.Contains(v.Detail, "not representative of the adjacent clean segment under the calibrated rule") {
				t.Fatalf("attempt %d: layer2 %s %q", a.N, v.Verdict, v.Detail)
			}
		}
		c.wantClean()
	})
}
