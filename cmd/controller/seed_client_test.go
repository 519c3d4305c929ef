package main

import (
	"fmt"
	"strings"
	"testing"

	"warden/pkg/state"
)

// loadgenProtocol is the end-to-end campaign of one measured run whose
// client is loadgen against the stand-in (with serverArgs), judged by the
// client validator: what seed 002 says a run's client must show before
// the run is complete.
func loadgenProtocol(t *testing.T, loadgenBin, manifest, serverArgs string) string {
	t.Helper()
	return writeProtocol(t, scenario{
		serverArgs: `, --token-ms, "5"` + serverArgs,
		drainS:     "1", watchdogS: "4", retries: 1,
		client: fmt.Sprintf(`[%q, run, --manifest, %q, --base-url, "http://127.0.0.1:${PORT}", --model, standin,
             --load-point, saturation, --request-rate, inf, --max-concurrency, "2", --ignore-eos,
             --warmup-seconds, "0.2", --clean-segment-seconds, "0.4", --num-clean-segments, "1",
             --profile-after-clean, --num-profile-windows, "1", --profile-hold-seconds, "0.05",
             --recovery-seconds, "0.1", --drain-timeout-seconds, "${DRAIN_ALLOWANCE_S}",
             --result-dir, "${ATTEMPT_DIR}/client"]`, loadgenBin, manifest),
		validators: `  - name: client
    command: ["${CONTROLLER}", validate, client, --result-dir, "${ATTEMPT_DIR}/client", --segments, "1", --segment-seconds, "0.4", -o, json]
`,
	})
}

// TestLoadgenClientOutcomes: nothing passes that the seed forbids. A
// well-behaved server gives a complete run; a server whose streams never
// end makes the client abandon its drain (never complete); streams
// without token chunks, or with chunks that are not JSON, fail the client
// validator; profile calls that do not answer 200 are a profile artifact:
// the one exact rerun, then a stop.
func TestLoadgenClientOutcomes(t *testing.T) {
	t.Parallel()
	bin := loadgenBin
	manifest := writeTokenManifest(t, 20000)
	for _, tc := range []struct {
		name, server string
		attempts     int
		state        state.AttemptState
		reason       state.Reason
		detail       string // in the last attempt's validator verdict or reason
	}{
		{"sound", "", 1, state.Complete, "", ""},
		{"endless-streams", `, --endless-streams`, 1, state.Failed, state.ReasonDrainAbandoned, ""},
		{"no-token-chunks", `, --stream-break, no-tokens`, 1, state.Failed, state.ReasonValidatorFailed, "invalid output"},
		{"not-json", `, --stream-break, not-json`, 1, state.Failed, state.ReasonValidatorFailed, "invalid output"},
		{"profile-500", `, --start-profile-status, "500"`, 2, state.Failed, state.ReasonProfileArtifact, "start_profile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCampaign(t)
			c.runForeground(loadgenProtocol(t, bin, manifest, tc.server))
			s := c.store()
			as := c.attempts(s, "p1.saturation")
			if len(as) != tc.attempts {
				t.Fatalf("%d attempts %v, want %d", len(as), attemptStates(as), tc.attempts)
			}
			for _, a := range as {
				if a.State != tc.state || a.Reason != tc.reason {
					t.Fatalf("attempts %v, want each %s %s", attemptStates(as), tc.state, tc.reason)
				}
			}
			cp, _ := s.Campaign()
			if tc.state == state.Complete {
				if cp.State != state.CampaignComplete {
					t.Fatalf("campaign %s: %s", cp.State, cp.StopDetail)
				}
				if v := c.gateVerdict(s, "p1.saturation", "validator:client"); v.Verdict != state.VerdictPass || v.Figures["clean_completed"] < 1 {
					t.Fatalf("client verdict %+v", v)
				}
			} else {
				if cp.State != state.CampaignStopped || cp.StopReason != state.StopForRun(tc.reason) {
					t.Fatalf("campaign %s (%s): %s", cp.State, cp.StopReason, cp.StopDetail)
				}
				if tc.detail != "" {
					if v := c.gateVerdict(s, "p1.saturation", "validator:client"); !strings.Contains(v.Detail, tc.detail) {
						t.Fatalf("client verdict %+v, want %q in its detail", v, tc.detail)
					}
				}
			}
			c.assertNoProcesses()
		})
	}
}
