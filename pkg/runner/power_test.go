package runner_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warden/internal/testutil/testcampaign"
	"warden/pkg/state"
)

// The power check's calibrated rule on real data, on the seed's timeline
// scaled to seconds: the stand-in server's Layer-1 steps vary as a
// saturated short-prompt pattern's do (--layer1-vary), 200 a second;
// loadgen runs a burn-in (a 3 s warm-up, measured by validate power) and
// one saturation run (three 2 s clean segments, two 2+8 profile windows,
// 2 s recoveries) judged by layer2 and recovery under the calibrated rules
// (what the seed's draft A-P3-8 adopts, which cites this test): a window
// made unrepresentative on purpose (its steps all prefill) fails the
// calibrated rule on both attempts. The literal rules' stop and the
// calibrated rules' completion on these data are cmd/controller's
// TestPowerCheckStopAmendResume; the loop's part, TestPowerCheckScripted.

// powerManifest is the power-check campaign's manifest, materialized in
// TestMain (os/exec must not wait beside the tests' reaper).
var powerManifest string

// powerProtocol writes the power-check protocol (testcampaign.Power) in
// dir.
func powerProtocol(t *testing.T, dir, rule, serverExtra string) string {
	t.Helper()
	y := testcampaign.Power(testcampaign.PowerBins{Standin: standinBin, Controller: controllerBin, Loadgen: loadgenBin, Manifest: powerManifest},
		freePorts(t, 1)[0], rule, serverExtra)
	path := filepath.Join(dir, "protocol.yaml")
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestPowerCheckOnVaryingSteps(t *testing.T) {
	t.Parallel()
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
