package runner_test

import (
	"fmt"
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

// powerProtocol writes the protocol: rule is the rule of layer2 and
// recovery, serverExtra extra stand-in flags (YAML flow items).
func powerProtocol(t *testing.T, dir, rule, serverExtra string) string {
	t.Helper()
	manifest := filepath.Join(dir, "manifest.jsonl")
	out, err := exec.Command(loadgenBin, "materialize", "--id", "p1", "--input-uniform", "4:16", "--output-fixed", "4", "--arrival", "steady",
		"--num-requests", "60000", "--workload-seed", "20260712", "--out", manifest).CombinedOutput()
	if err != nil {
		t.Fatalf("materialize: %v\n%s", err, out)
	}
	vars := fmt.Sprintf("STANDIN: %q, WARDEN: %q, LOADGEN: %q, MANIFEST: %q, RULE: %s", standinBin, controllerBin, loadgenBin, manifest, rule)
	client := func(extra string) string {
		return `["${LOADGEN}", run, --manifest, "${MANIFEST}", --base-url, "http://127.0.0.1:${PORT}", --model, standin,
             --load-point, saturation, --request-rate, inf, --max-concurrency, "8", --ignore-eos, --temperature, "0",
             --drain-timeout-seconds, "10", --workload-seed, "20260712", --result-dir, "${ATTEMPT_DIR}/client", ` + extra + `]`
	}
	y := testcampaign.Head("power-test", "1.0", vars, freePorts(t, 1)) + `regimes:
  - {name: solo, concurrency: 1}
classes:
  - {name: c, drain_allowance_s: 10, watchdog_s: 30}
cleanup: {timeout_s: 10}
servers:
  - name: standin
    kind: standin
    command: ["${STANDIN}", server, --port, "${PORT}", --load-s, "0.1", --shutdown-timeout, "1", --gpu-mem-mib, "512", --token-ms, "1",
              --effective-config, "enable_chunked_prefill=True", --layer1-dir, "${ATTEMPT_DIR}/opprof", --steps-per-s, "200",
              --layer1-vary, "7", --traces-dir, "${ATTEMPT_DIR}/traces", --profiler-step-s, "0.005"` + serverExtra + `]
    ready_timeout_s: 10
    shutdown_grace_s: 2
    group_grace_s: 1
    expect: [{name: chunked, pattern: 'enable_chunked_prefill=True'}]
loads:
  - name: burnin
    kind: burn-in
    measured: false
    expected_s: 10
    client: ` + client(`--warmup-seconds, "3", --num-clean-segments, "0"`) + `
  - name: saturation
    kind: saturation
    expected_s: 20
    client: ` + client(`--warmup-seconds, "1", --clean-segment-seconds, "2", --num-clean-segments, "3",
             --profile-after-clean, --num-profile-windows, "2", --profile-warmup-iterations, "2", --profile-active-iterations, "8",
             --profile-traces-dir, "${ATTEMPT_DIR}/traces", --profile-ranks, "1", --profile-window-budget-seconds, "5", --recovery-seconds, "2"`) + `
axes:
  - name: pattern
    values: [{id: p1}]
phases:
  - {name: burn-in, kind: burn-in, matrix: {pattern: p1}, loads: [burnin], id: burnin}
  - {name: matrix, kind: primary, matrix: {pattern: [p1]}, loads: [saturation]}
retries: {infrastructure: 1}
validators:
  - name: power
    loads: [burnin]
    command: ["${WARDEN}", validate, power, --result-dir, "${ATTEMPT_DIR}/client", --layer1-dir, "${ATTEMPT_DIR}/opprof",
              --reference-tail-s, "2", --window-s, "0.5", --step-s, "0.02", -o, json]
  - name: layer2
    loads: [saturation]
    command: ["${WARDEN}", validate, layer2, --traces, "${ATTEMPT_DIR}/traces", --layer1, "${ATTEMPT_DIR}/opprof", --phases, "${PHASE_FILE}",
              --windows, "2", --representativeness, "${RULE}", -o, json]
  - name: recovery
    loads: [saturation]
    command: ["${WARDEN}", validate, recovery, --result-dir, "${ATTEMPT_DIR}/client", --layer1-dir, "${ATTEMPT_DIR}/opprof",
              --window-s, "0.5", --step-s, "0.02", --recovery-s, "2", --rule, "${RULE}", -o, json]
power_check:
  min_completion_probability: 0.5
  amendment: "A-TEST (the calibrated rules): protocol-calibrated.yaml"
  gates:
    - {measure: representativeness, judged_by: layer2}
    - {measure: recovery, judged_by: recovery}
`
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
