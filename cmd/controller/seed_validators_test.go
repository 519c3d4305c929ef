package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warden/internal/testutil/testcampaign"
	"warden/pkg/provenance"
	"warden/pkg/state"
)

// End-to-end tests of the warm-up and recovery validators: the stand-in
// writes a loadgen-format result on the seed's timeline (warm-up, three
// clean segments, profile windows each followed by a fixed recovery) and
// a Layer-1 stream on the same CLOCK_MONOTONIC clock; a protocol names
// `controller validate warmup|recovery`, and the run and the campaign end
// as the outcome policy says.

const warmupValidator = `  - {name: warmup, command: ["${CONTROLLER}", validate, warmup, --result-dir, "${ATTEMPT_DIR}/client/loadgen", --min-completions, "32", -o, json]}
`

func warmupScenario(completions string) scenario {
	return scenario{validators: warmupValidator, retries: 1,
		clientArgs: `, --loadgen-dir, "${ATTEMPT_DIR}/client/loadgen", --warmup-completions, "` + completions + `"`}
}

func TestValidatorWarmup(t *testing.T) {
	t.Parallel()
	runValidatorCases(t, []validatorCase{
		{name: "32 completions", sc: warmupScenario("32"), runs: []wantRun{{"p1.saturation", complete1, noReason1}}, campaign: state.CampaignComplete,
			check: func(t *testing.T, c *campaign, s *state.Store) {
				v := c.gateVerdict(s, "p1.saturation", "validator:warmup")
				if v.Verdict != "pass" || v.Figures["warmup_completions"] != 32 || v.Figures["count_pass"] != 1 {
					t.Fatalf("warmup gate %+v", v)
				}
			}},
		// "60 s warm-up (excluded; require >=32 completions)": a warm-up
		// without completions invalidates the run, a stop for review
		// (retries: 1 shows it is not retried)
		{name: "no completions", sc: warmupScenario("0"), runs: []wantRun{{"p1.saturation", failed1, validator1}},
			campaign: state.CampaignStopped, stop: state.ReasonValidatorFailed,
			check: func(t *testing.T, c *campaign, s *state.Store) {
				v := c.gateVerdict(s, "p1.saturation", "validator:warmup")
				if v.Verdict != "fail" || v.Figures["warmup_completions"] != 0 || !strings.Contains(v.Detail, "0 successful warm-up completions, fewer than 32") {
					t.Fatalf("warmup gate %+v", v)
				}
			}},
	})
}

// The recovery scenario: 0.2 s clean segments of 40 successes (one every
// 5 ms), two profile windows each followed by a 0.2 s recovery, the
// Layer-1 stream at 200 steps/s; a 0.1 s window holds 20 of each.
func recoveryScenario(queue string) scenario {
	server := `, --layer1-dir, "${ATTEMPT_DIR}/opprof", --flush-interval-s, "0.2", --steps-per-s, "200"`
	if queue != "" {
		server += `, --layer1-queue-after-profile, "` + queue + `"`
	}
	return scenario{measureS: "0.6", retries: 1, serverArgs: server,
		clientArgs: `, --loadgen-dir, "${ATTEMPT_DIR}/client/loadgen", --records-per-segment, "40", --profile-windows, "2", --recovery-s, "0.2"`,
		validators: `  - {name: recovery, command: ["${CONTROLLER}", validate, recovery, --result-dir, "${ATTEMPT_DIR}/client/loadgen", --layer1-dir, "${ATTEMPT_DIR}/opprof",
      --window-s, "0.1", --step-s, "0.01", --recovery-s, "0.2", -o, json]}
`}
}

func TestValidatorRecovery(t *testing.T) {
	t.Parallel()
	runValidatorCases(t, []validatorCase{
		{name: "recovered", sc: recoveryScenario(""), runs: []wantRun{{"p1.saturation", complete1, noReason1}}, campaign: state.CampaignComplete,
			check: func(t *testing.T, c *campaign, s *state.Store) {
				v := c.gateVerdict(s, "p1.saturation", "validator:recovery")
				if v.Verdict != "pass" || v.Figures["recoveries"] != 2 || v.Figures["clean_c_completion_rps"] != 200 || v.Figures["clean_c_waiting"] != 1 ||
					v.Figures["recovery2_completion_ratio"] != 1 || v.Figures["recovery2_waiting"] != 1 {
					t.Fatalf("recovery gate %+v", v)
				}
			}},
		// the waiting queue stays at 50 after the first profile window:
		// "Failure invalidates the run", a stop for review
		{name: "queue stays high", sc: recoveryScenario("50"), runs: []wantRun{{"p1.saturation", failed1, validator1}},
			campaign: state.CampaignStopped, stop: state.ReasonValidatorFailed,
			check: func(t *testing.T, c *campaign, s *state.Store) {
				v := c.gateVerdict(s, "p1.saturation", "validator:recovery")
				if v.Verdict != "fail" || v.Figures["recovery1_waiting"] != 50 || v.Figures["recovery1_pass"] != 0 || v.Figures["recovery1_completion_ratio"] != 1 ||
					!strings.Contains(v.Detail, "recovery recovery-1: waiting queue 50 at its end, not within 10% of clean segment C's median 1") {
					t.Fatalf("recovery gate %+v", v)
				}
			}},
	})
}

// TestWarmupReadjudicatedThroughTheORBranch replays A-P3-6 on a stand-in
// campaign: a P10-class run (here pattern p1) with 20 warm-up completions
// fails the ">=32 completions" gate and stops the campaign; the amendment
// gives P10-class runs the OR branch, and the re-adjudication runs the
// warm-up validator again on the retained client files and Layer-1 stream
// (no server, no GPU): the trailing-quartile test passes, the run is
// complete, the old verdict kept, and every figure of the branch is on
// record.
func TestWarmupReadjudicatedThroughTheORBranch(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	// a 1.2 s warm-up: bins [0.9,1.0), [1.0,1.1), [1.1,1.2) s of 40 steps
	sc := scenario{measureS: "0.2",
		serverArgs: `, --layer1-dir, "${ATTEMPT_DIR}/opprof", --flush-interval-s, "0.2", --steps-per-s, "400"`,
		clientArgs: `, --warmup-s, "1.2", --loadgen-dir, "${ATTEMPT_DIR}/client/loadgen", --warmup-completions, "20"`,
		validators: `  - {name: warmup, command: ["${CONTROLLER}", validate, warmup, --result-dir, "${ATTEMPT_DIR}/client/loadgen", --min-completions, "32",
      --layer1-dir, "${ATTEMPT_DIR}/opprof", -o, json]}
`}
	v0 := writeProtocol(t, sc)
	c.controller("start", "-f", v0, "-d", c.dir, "--gpu-backend", "fake", "--foreground")
	s := c.store()
	c.failedValidatorP1(s)
	if v := c.gateVerdict(s, "p1.saturation", "validator:warmup"); v.Verdict != "fail" || v.Figures["warmup_completions"] != 20 || v.Figures["stabilization"] != 0 {
		t.Fatalf("v0 warmup gate %+v", v)
	}
	if cp, _ := s.Campaign(); cp.State != state.CampaignStopped {
		t.Fatalf("v0 campaign %s", cp.State)
	}
	s.Close()
	v1 := testcampaign.Edit(t, v0, `--min-completions, "32",`, `--min-completions, "32", --pattern, "${PATTERN}", --stabilization-patterns, p1,`)
	if out, code := c.controller("amend", "-d", c.dir, "-f", v1, "--id", "A-P3-6", "--reason", "P10 warm-up stabilization gate", "--readjudicate", "--yes"); code != 0 {
		t.Fatalf("amend: exit %d\n%s", code, out)
	}
	s = c.readjudicateP1("A-P3-6", "warmup")
	if v := c.gateVerdict(s, "p1.saturation", "validator:warmup"); v.Verdict != "fail" {
		t.Errorf("the old verdict is gone: %+v", v)
	}
	// the re-run validator's verdict, with every figure of the branch (the
	// stand-in's steps cycle the real traces' three shapes, so the bins'
	// token rates differ by up to one step's shape: a drift below 0.08)
	b, err := os.ReadFile(filepath.Join(c.dir, provenance.SubDir, "amendments", "A-P3-6", "readjudicated", "p1.saturation", "a1", "validator-warmup.out"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var v struct {
		Verdict string             `json:"verdict"`
		Figures map[string]float64 `json:"figures"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &v); err != nil {
		t.Fatal(err)
	}
	f := v.Figures
	if v.Verdict != "pass" || f["warmup_completions"] != 20 || f["count_pass"] != 0 || f["stabilization"] != 1 || f["layer1_accounting"] != 1 ||
		f["bin1_steps"] != 40 || f["bin2_steps"] != 40 || f["bin3_steps"] != 40 || f["normalized_drift"] < 0 || f["normalized_drift"] > 0.10 || f["or_branch_pass"] != 1 {
		t.Fatalf("re-adjudicated warmup verdict %s %v", v.Verdict, f)
	}
	for _, k := range []string{"bin1_tokens_per_s", "bin2_tokens_per_s", "bin3_tokens_per_s", "mean_tokens_per_s", "slope_tokens_per_s2", "stabilization_pass"} {
		if _, ok := f[k]; !ok {
			t.Errorf("figure %s missing", k)
		}
	}
	c.assertNoProcesses()
}
