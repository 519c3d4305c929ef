package protocols

import (
	"bytes"
	"os"
	"slices"
	"testing"
)

// opprof-phase3.A-P3-8.yaml is the draft amendment A-P3-8: the shipped
// protocol with its representativeness rule calibrated (and a dated head
// saying so). WARDEN_WRITE_TESTDATA=1 writes it from the shipped
// protocol; this test checks it is that, and that it changes nothing but
// the layer2 validator's command of the runs it judges.
func TestDraftAmendmentAP38(t *testing.T) {
	shipped, err := os.ReadFile("opprof-phase3.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := draftAP38(t, shipped)
	const path = "opprof-phase3.A-P3-8.yaml"
	if os.Getenv("WARDEN_WRITE_TESTDATA") == "1" {
		os.WriteFile(path, want, 0o644)
	}
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%s is not the shipped protocol with A-P3-8 applied (err %v); WARDEN_WRITE_TESTDATA=1 rewrites it", path, err)
	}
	a, b := planFile(t, "opprof-phase3.yaml"), planFile(t, path)
	if len(a.Runs) != len(b.Runs) {
		t.Fatalf("%d runs, amended %d", len(a.Runs), len(b.Runs))
	}
	changed := 0
	for i := range a.Runs {
		ra, rb := a.Runs[i], b.Runs[i]
		for j := range ra.Validators {
			va, vb := ra.Validators[j], rb.Validators[j]
			if slices.Equal(va.Command.Argv, vb.Command.Argv) {
				continue
			}
			n := len(va.Command.Argv)
			want := append(append(slices.Clone(va.Command.Argv[:n-2]), "--representativeness", "calibrated", "--calibration-quantile", "0.99"), va.Command.Argv[n-2:]...)
			if va.Name != "layer2" || !slices.Equal(vb.Command.Argv, want) {
				t.Fatalf("run %s validator %s changed: %v -> %v", ra.ID, va.Name, va.Command.Argv, vb.Command.Argv)
			}
			changed++
		}
	}
	if changed != 48 {
		t.Fatalf("%d layer2 commands changed, want the 48 matrix runs'", changed)
	}
	for _, g := range b.PowerCheck.Gates {
		if g.Measure == MeasureProfileWindow {
			continue // a bound, not a rule
		}
		for _, j := range g.Judged {
			want := RuleLiteral
			if g.Measure == MeasureRepresentativeness {
				want = RuleCalibrated
			}
			if j.Rule != want || (want == RuleCalibrated && j.Quantile != 0.99) {
				t.Fatalf("gate %s judges %s by %s %v", g.Measure, j.Run, j.Rule, j.Quantile)
			}
		}
	}
}

// draftAP38 applies A-P3-8 to the shipped protocol's text.
func draftAP38(t *testing.T, shipped []byte) []byte {
	t.Helper()
	cmd := []byte(`              --analysis-out, "${ATTEMPT_DIR}/analysis/kernels.json", -o, json]` + "\n")
	if bytes.Count(shipped, cmd) != 1 {
		t.Fatalf("the shipped protocol's layer2 validator has changed: no line %q", cmd)
	}
	amended := bytes.Replace(shipped, cmd, []byte(`              --analysis-out, "${ATTEMPT_DIR}/analysis/kernels.json",
              --representativeness, calibrated, --calibration-quantile, "0.99", -o, json]   # A-P3-8
`), 1)
	return append([]byte(ap38Head), amended...)
}

const ap38Head = `# DRAFT AMENDMENT A-P3-8 (2026-12-03) — calibrated representativeness.
# Not applied to protocols/opprof-phase3.yaml. An operator adopts it, after
# review, with:
#   controller amend -d DIR -f protocols/opprof-phase3.A-P3-8.yaml --id A-P3-8 \
#     --reason "A-P3-8: calibrated representativeness" --yes
# and then controller resume -d DIR. It is this file's one change to the
# protocol below: the layer2 validator's rule (--representativeness
# calibrated --calibration-quantile 0.99). Nothing else changes: the pattern
# matrix, load points, profiler placement, metrics and every other gate,
# the recovery rule included, stay as frozen.
#
# Why. Seed 002's representativeness rule fails a window when |SMD| > 0.25
# on any feature, with 8 profiled steps against the adjacent clean segment.
# For a window drawn from the same process as the segment, SMD ~ N(0,
# VIF/8): an sd of at least 0.354 against a limit of 0.25, so a perfectly
# representative window passes one varying feature with probability at most
# 0.52, and less the more autocorrelated the steps are (0.24 at AR(1) 0.9).
# Warden measures this on every run's own clean segment C (controller
# validate layer2's smd.self.* figures: C's own 8-step blocks against the
# rest of C) and, before the matrix, on the burn-ins (validate power); the
# power check then stops the campaign, naming this amendment, when the
# matrix cannot be expected to complete (docs/validators.md,
# "Representativeness").
#
# The rule. A feature fails a window only when its |SMD| is over 0.25 AND
# over its threshold from C's own 8-step blocks: one common level at which
# the blocks pass every feature jointly with probability at least 0.99. The
# literal limit stays where the segment's noise is below it; the rule is
# never stricter than the literal one; a feature constant on C still needs
# exact equality; too few blocks for the quantile (under 100) is an error.
# A representative window then fails with probability at most 1%, a run of
# two windows with its one exact rerun about 0.04%, the 48 matrix runs about
# 2% of the time on noise alone (0.95 would give 41%: docs/validators.md).
# A window made unrepresentative on purpose (a stall during the window only)
# still fails it (pkg/runner TestPowerCheckOnVaryingSteps).
#
`

// opprof-phase3.A-P3-9.yaml is the draft amendment A-P3-9: A-P3-8 with the
// recovery rule calibrated too (quantile 0.995). WARDEN_WRITE_TESTDATA=1
// writes it from A-P3-8; this test checks it is that, and that it changes
// nothing of A-P3-8 but the recovery validator's command.
func TestDraftAmendmentAP39(t *testing.T) {
	shipped, err := os.ReadFile("opprof-phase3.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ap38 := draftAP38(t, shipped)
	cmd := []byte(`              --window-s, "10", --tolerance, "0.10", --recovery-s, "30", -o, json]` + "\n")
	if bytes.Count(ap38, cmd) != 1 {
		t.Fatalf("the recovery validator has changed: no line %q", cmd)
	}
	body := bytes.Replace(ap38, cmd, []byte(`              --window-s, "10", --tolerance, "0.10", --recovery-s, "30",
              --rule, calibrated, --calibration-quantile, "0.995", -o, json]   # A-P3-9
`), 1)
	want := append([]byte(ap39Head), body...)
	const path = "opprof-phase3.A-P3-9.yaml"
	if os.Getenv("WARDEN_WRITE_TESTDATA") == "1" {
		os.WriteFile(path, want, 0o644)
	}
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%s is not A-P3-8 with A-P3-9 applied (err %v); WARDEN_WRITE_TESTDATA=1 rewrites it", path, err)
	}
	a, b := planFile(t, "opprof-phase3.A-P3-8.yaml"), planFile(t, path)
	changed := 0
	for i := range a.Runs {
		for j, va := range a.Runs[i].Validators {
			vb := b.Runs[i].Validators[j]
			if slices.Equal(va.Command.Argv, vb.Command.Argv) {
				continue
			}
			if va.Name != "recovery" || !slices.Contains(vb.Command.Argv, "0.995") {
				t.Fatalf("run %s validator %s changed: %v", a.Runs[i].ID, va.Name, vb.Command.Argv)
			}
			changed++
		}
	}
	if changed != 48 {
		t.Fatalf("%d recovery commands changed, want the 48 matrix runs'", changed)
	}
	for _, g := range b.PowerCheck.Gates {
		if g.Measure == MeasureRecovery && (g.Judged[0].Rule != RuleCalibrated || g.Judged[0].Quantile != 0.995) {
			t.Fatalf("recovery judged %+v", g.Judged[0])
		}
	}
}

const ap39Head = `# DRAFT AMENDMENT A-P3-9 (2026-12-03) — calibrated recovery, with A-P3-8.
# Not applied. It is A-P3-8 (below, with its own head) and one change more:
# the recovery validator's rule (--rule calibrated --calibration-quantile
# 0.995). An operator adopts it after A-P3-8, when the power check still
# stops the campaign on the recovery gate:
#   controller amend -d DIR -f protocols/opprof-phase3.A-P3-9.yaml --id A-P3-9 \
#     --reason "A-P3-9: calibrated recovery" --yes
#
# Why. The seed's recovery rule judges each recovery by one sample of a
# 10-second rolling completion rate and waiting queue against clean segment
# C's medians, within 10%; a failure stops the campaign, with no rerun. Its
# own false-failure rate is measured on every run's clean segments
# (validate recovery's recovery.self.*) and on the burn-ins (validate
# power). On the H200 engine of protocols/gpu-power.yaml (2-second windows)
# the clean segments' own samples lay in the band 62.6%, 65.0% and 84.6% of
# the time: a representative run failed the literal rule 29-61% of the time
# (docs/gpu.md).
#
# The rule. Each series' band is the wider of the seed's 10% and the
# deviation within which the clean segments' own samples (every second,
# 213 for the seed's three 80 s segments) stay jointly with probability at
# least 0.995, one common level for both series; fewer than 200 samples is
# an error. A representative recovery then fails with probability at most
# 0.5%, a run of two (no rerun) about 1%, and a campaign of 48 such runs
# completes about 62% of the time (at 0.99, 38%): 0.995 is the largest
# quantile the seed's 213 samples can read.
#
`
