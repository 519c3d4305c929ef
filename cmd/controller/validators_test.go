package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warden/pkg/state"
)

// End-to-end tests of the shipped validators: a protocol names
// `controller validate ...` as its validators, the stand-in writes the
// artifacts (or breaks them as asked), and the run and the campaign end as
// the outcome policy says: a broken Layer-2 window is a profile artifact
// and gets the seed's one exact rerun; every other validator failure stops
// the campaign for review with both attempts kept.

// wantRun is what a validator test expects of one run: each attempt's
// state and reason, in order.
type wantRun struct {
	run     string
	states  []state.AttemptState
	reasons []state.Reason
}

type validatorCase struct {
	name     string
	sc       scenario
	runs     []wantRun
	campaign state.CampaignState
	stop     state.Reason // the run reason the campaign stopped for
	check    func(t *testing.T, c *campaign, s *state.Store)
}

func runValidatorCases(t *testing.T, cases []validatorCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCampaign(t)
			c.runForeground(writeProtocol(t, tc.sc))
			s := c.store()
			for _, w := range tc.runs {
				as := c.attempts(s, w.run)
				if len(as) != len(w.states) {
					t.Fatalf("%s: %d attempts, want %d: %+v", w.run, len(as), len(w.states), attemptStates(as))
				}
				for i, a := range as {
					if a.State != w.states[i] || a.Reason != w.reasons[i] {
						vs, _ := s.GateVerdicts(w.run)
						t.Fatalf("%s attempt %d: %s %s, want %s %s; gates %+v", w.run, a.N, a.State, a.Reason, w.states[i], w.reasons[i], vs)
					}
				}
			}
			cp, _ := s.Campaign()
			if cp.State != tc.campaign {
				t.Fatalf("campaign %s (%s: %s), want %s", cp.State, cp.StopReason, cp.StopDetail, tc.campaign)
			}
			if tc.campaign == state.CampaignStopped && cp.StopReason != state.StopForRun(tc.stop) {
				t.Fatalf("campaign stopped for %s (%s), want %s", cp.StopReason, cp.StopDetail, tc.stop)
			}
			if tc.check != nil {
				tc.check(t, c, s)
			}
			c.assertNoProcesses()
		})
	}
}

var (
	complete1  = []state.AttemptState{state.Complete}
	noReason1  = []state.Reason{""}
	failed1    = []state.AttemptState{state.Failed}
	validator1 = []state.Reason{state.ReasonValidatorFailed}
)

const layer1Validator = `  - {name: layer1, command: ["${CONTROLLER}", validate, layer1, --dir, "${ATTEMPT_DIR}/opprof", -o, json]}
`

func layer1Scenario(brk string) scenario {
	args := `, --layer1-dir, "${ATTEMPT_DIR}/opprof", --flush-interval-s, "0.2"`
	if brk != "" {
		args += `, --layer1-break, "` + brk + `"`
	}
	// retries: 1 shows that a Layer-1 failure is not retried
	return scenario{serverArgs: args, validators: layer1Validator, retries: 1}
}

func TestValidatorLayer1(t *testing.T) {
	t.Parallel()
	cases := []validatorCase{
		{name: "clean close", sc: layer1Scenario(""), runs: []wantRun{{"p1.saturation", complete1, noReason1}}, campaign: state.CampaignComplete,
			check: func(t *testing.T, c *campaign, s *state.Store) {
				v := c.gateVerdict(s, "p1.saturation", "validator:layer1")
				if v.Verdict != "pass" || v.Figures["footer"] != 1 || v.Figures["records"] < 10 || v.Figures["final"] != 1 {
					t.Fatalf("layer1 gate %+v", v)
				}
				assertSignalsFile(t, c.attempts(s, "p1.saturation")[0])
			}},
		// no footer after a graceful stop (SIGTERM only), though the
		// sidecar is fresh: A-P3-5 wants the in-stream footer of a clean
		// run; the sidecar is authoritative only after a hard kill
		{name: "no footer after a graceful stop", sc: layer1Scenario("no-footer"), runs: []wantRun{{"p1.saturation", failed1, validator1}},
			campaign: state.CampaignStopped, stop: state.ReasonValidatorFailed,
			check: func(t *testing.T, c *campaign, s *state.Store) {
				v := c.gateVerdict(s, "p1.saturation", "validator:layer1")
				if v.Verdict != "fail" || v.Figures["footer"] != 0 || v.Figures["hard_kill"] != 0 || !strings.Contains(v.Detail, "no in-stream footer after a graceful stop") {
					t.Fatalf("layer1 gate %+v", v)
				}
			}},
		// a real hard kill: the server ignores SIGTERM and is killed with
		// its group, so no footer is written; the sidecar, flushed until
		// the kill, is authoritative and fresh (A-P3-5: graceful shutdown
		// is not an accounting dependency)
		{name: "hard kill", sc: func() scenario { s := layer1Scenario(""); s.serverArgs += `, --ignore-sigterm`; return s }(),
			runs: []wantRun{{"p1.saturation", complete1, noReason1}}, campaign: state.CampaignComplete,
			check: func(t *testing.T, c *campaign, s *state.Store) {
				// the age runs from the SIGKILL: the writer flushed until
				// the kill, never after it, so the age is positive
				v := c.gateVerdict(s, "p1.saturation", "validator:layer1")
				if v.Verdict != "pass" || v.Figures["footer"] != 0 || v.Figures["hard_kill"] != 1 || v.Figures["checkpoint_age_s"] <= 0 {
					t.Fatalf("layer1 gate %+v", v)
				}
			}},
	}
	for _, b := range []struct{ brk, extra, detail string }{
		{"drop", "", "dropped_records 2"},
		{"gap", "", "missing between"},
		{"partial", "", "partial JSON line"},
		{"no-sidecar", "", "sidecar missing"},
		// a stale checkpoint is judged after a hard kill: the server
		// ignores SIGTERM and is killed with its group
		{"stale", `, --ignore-sigterm`, "older than the server's SIGKILL"},
	} {
		sc := layer1Scenario(b.brk)
		sc.serverArgs += b.extra
		cases = append(cases, validatorCase{name: b.brk, sc: sc, runs: []wantRun{{"p1.saturation", failed1, validator1}},
			campaign: state.CampaignStopped, stop: state.ReasonValidatorFailed,
			check: func(t *testing.T, c *campaign, s *state.Store) {
				v := c.gateVerdict(s, "p1.saturation", "validator:layer1")
				if v.Verdict != "fail" || !strings.Contains(v.Detail, b.detail) {
					t.Fatalf("layer1 gate %+v, want a fail naming %q", v, b.detail)
				}
			}})
	}
	runValidatorCases(t, cases)
}

// assertSignalsFile checks that the attempt's signals.json holds the
// SIGTERM to the server's API parent.
func assertSignalsFile(t *testing.T, a state.Attempt) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(a.Dir, "signals.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sigs []state.Signal
	if err := json.Unmarshal(b, &sigs); err != nil {
		t.Fatal(err)
	}
	for _, s := range sigs {
		if s.Role == "server" && s.Target == "pid" && s.Signal == "SIGTERM" && !s.At.IsZero() {
			return
		}
	}
	t.Fatalf("signals.json has no SIGTERM to the server's API parent: %s", b)
}

// standinShell is the stand-in server as a shell command, so that a flag
// can depend on $WARDEN_ATTEMPT.
func standinShell(extra string) string {
	return `{shell: 'exec "${STANDIN}" server --port "${PORT}" --load-s 0.2 --shutdown-timeout 1 --gpu-mem-mib 1024 --effective-config "effective config: enable_chunked_prefill=True" ` + extra + `'}`
}

func layer2Scenario(tp int, brk string, everyAttempt bool) scenario {
	b := `""`
	switch {
	case brk != "" && everyAttempt:
		b = brk
	case brk != "":
		b = `"$$(test "$$WARDEN_ATTEMPT" = 1 && echo ` + brk + `)"`
	}
	tps := map[int]string{1: "1", 2: "2"}[tp]
	return scenario{
		server:     standinShell(`--traces-dir "${ATTEMPT_DIR}/traces" --layer1-dir "${ATTEMPT_DIR}/opprof" --tp ` + tps + ` --layer2-break ` + b),
		clientArgs: `, --profile-windows, "2"`,
		validators: `  - {name: layer2, command: ["${CONTROLLER}", validate, layer2, --traces, "${ATTEMPT_DIR}/traces", --layer1, "${ATTEMPT_DIR}/opprof", --phases, "${PHASE_FILE}", --tp, "` + tps + `", -o, json]}
`,
		retries: 1,
	}
}

func TestValidatorLayer2(t *testing.T) {
	t.Parallel()
	rerun := []state.AttemptState{state.Failed, state.Complete}
	rerunWhy := []state.Reason{state.ReasonProfileArtifact, ""}
	cases := []validatorCase{
		{name: "TP1", sc: layer2Scenario(1, "", false), runs: []wantRun{{"p1.saturation", complete1, noReason1}}, campaign: state.CampaignComplete,
			check: func(t *testing.T, c *campaign, s *state.Store) {
				v := c.gateVerdict(s, "p1.saturation", "validator:layer2")
				if v.Verdict != "pass" || v.Figures["files"] != 2 || v.Figures["windows"] != 2 {
					t.Fatalf("layer2 gate %+v", v)
				}
			}},
		{name: "TP2", sc: layer2Scenario(2, "", false), runs: []wantRun{{"p1.saturation", complete1, noReason1}}, campaign: state.CampaignComplete,
			check: func(t *testing.T, c *campaign, s *state.Store) {
				if v := c.gateVerdict(s, "p1.saturation", "validator:layer2"); v.Verdict != "pass" || v.Figures["files"] != 4 || v.Figures["ranks"] != 2 {
					t.Fatalf("layer2 gate %+v", v)
				}
			}},
	}
	// broken on the first attempt only: the exact rerun passes (a rerun
	// that fails too stops the campaign: pkg/runner's TestLoopRetryExhausted)
	for _, brk := range []string{"missing", "corrupt", "steps", "no-kernels", "execute"} {
		tp := 1
		if brk == "missing" {
			tp = 2 // the second rank's trace is the one missing
		}
		cases = append(cases, validatorCase{name: brk + " once", sc: layer2Scenario(tp, brk, false),
			runs: []wantRun{{"p1.saturation", rerun, rerunWhy}}, campaign: state.CampaignComplete,
			check: func(t *testing.T, c *campaign, s *state.Store) {
				vs, _ := s.GateVerdicts("p1.saturation")
				var l2 []state.GateVerdict
				for _, v := range vs {
					if v.Gate == "validator:layer2" {
						l2 = append(l2, v)
					}
				}
				if len(l2) != 2 || l2[0].Verdict != "fail" || l2[1].Verdict != "pass" {
					t.Fatalf("layer2 verdicts %+v", l2)
				}
			}})
	}
	runValidatorCases(t, cases)
}

const clientValidators = `  - {name: client, loads: [saturation], command: ["${CONTROLLER}", validate, client, --result-dir, "${ATTEMPT_DIR}/client/loadgen", --segment-seconds, "0.2", -o, json]}
  - {name: client-moderate, loads: [moderate], command: ["${CONTROLLER}", validate, client, --result-dir, "${ATTEMPT_DIR}/client/loadgen", --segment-seconds, "0.2", --saturation-result, "${NEED_SATURATION_DIR}/client/loadgen/result.json", --rate-fraction, "0.60", -o, json]}
`

func clientScenario(satBreak, modBreak string) scenario {
	sc := scenario{measureS: "0.6", loadsModer: true, retries: 1, validators: clientValidators,
		clientArgs: `, --loadgen-dir, "${ATTEMPT_DIR}/client/loadgen"`,
		moderArgs:  `, --saturation-result, "${NEED_SATURATION_DIR}/client/loadgen/result.json"`}
	if satBreak != "" {
		// the saturation load's command: writeProtocol builds it from clientArgs
		sc.client = `["${STANDIN}", client, --warmup-s, "0.2", --measure-s, "0.6", --drain-s, "2", --concurrency, "2", --result-dir, "${ATTEMPT_DIR}/client", --loadgen-dir, "${ATTEMPT_DIR}/client/loadgen", --client-break, "` + satBreak + `"]`
	}
	if modBreak != "" {
		sc.moderArgs += `, --client-break, "` + modBreak + `"`
	}
	return sc
}

func TestValidatorClient(t *testing.T) {
	t.Parallel()
	cases := []validatorCase{
		{name: "saturation and moderate", sc: clientScenario("", ""),
			runs:     []wantRun{{"p1.saturation", complete1, noReason1}, {"p1.moderate", complete1, noReason1}},
			campaign: state.CampaignComplete,
			check: func(t *testing.T, c *campaign, s *state.Store) {
				v := c.gateVerdict(s, "p1.moderate", "validator:client-moderate")
				if v.Verdict != "pass" || v.Figures["offered_over_expected"] != 1 || v.Figures["clean_segments"] != 3 {
					t.Fatalf("client gate %+v", v)
				}
			}},
		// a missed moderate rate is semantic: no rerun, stop for review
		{name: "rate", sc: clientScenario("", "rate"),
			runs:     []wantRun{{"p1.saturation", complete1, noReason1}, {"p1.moderate", failed1, validator1}},
			campaign: state.CampaignStopped, stop: state.ReasonValidatorFailed,
			check: clientGateNames("p1.moderate", "client-moderate", "off λ")},
	}
	for _, b := range []struct{ brk, detail string }{
		{"failures", "clean-segment request(s) failed"},
		{"tokens", "other than the requested output tokens"},
		{"lag", "generator lag over 1 s"},
		{"text", "prompt or generated-text field"},
		{"segments", "2 clean segments, want 3"},
	} {
		cases = append(cases, validatorCase{name: b.brk, sc: clientScenario(b.brk, ""),
			runs:     []wantRun{{"p1.saturation", failed1, validator1}, {"p1.moderate", nil, nil}},
			campaign: state.CampaignStopped, stop: state.ReasonValidatorFailed,
			check: clientGateNames("p1.saturation", "client", b.detail)})
	}
	runValidatorCases(t, cases)
}

// clientGateNames checks that the run's client gate failed naming the rule.
func clientGateNames(run, name, detail string) func(t *testing.T, c *campaign, s *state.Store) {
	return func(t *testing.T, c *campaign, s *state.Store) {
		if v := c.gateVerdict(s, run, "validator:"+name); v.Verdict != "fail" || !strings.Contains(v.Detail, detail) {
			t.Fatalf("%s gate %+v, want a fail naming %q", name, v, detail)
		}
	}
}

func TestValidatorSanity(t *testing.T) {
	t.Parallel()
	validators := `  - {name: sanity, command: ["${CONTROLLER}", validate, sanity, --input, "${ATTEMPT_DIR}/client/loadgen", --input, "${ATTEMPT_DIR}/opprof", --constant, "*timeline.num_clean_segments=3", --constant, "*segments[].seconds=0.2", -o, json]}
`
	sc := func(brk string) scenario {
		s := scenario{measureS: "0.6", validators: validators, retries: 1,
			serverArgs: `, --layer1-dir, "${ATTEMPT_DIR}/opprof", --flush-interval-s, "0.2"`,
			clientArgs: `, --loadgen-dir, "${ATTEMPT_DIR}/client/loadgen"`}
		if brk != "" {
			s.clientArgs += `, --client-break, "` + brk + `"`
		}
		return s
	}
	readBlock := func(t *testing.T, c *campaign, s *state.Store) map[string]any {
		a := c.attempts(s, "p1.saturation")[0]
		b, err := os.ReadFile(filepath.Join(a.Dir, "sanity.json"))
		if err != nil {
			t.Fatal(err)
		}
		var blk map[string]any
		if err := json.Unmarshal(b, &blk); err != nil {
			t.Fatal(err)
		}
		return blk
	}
	runValidatorCases(t, []validatorCase{
		{name: "clean", sc: sc(""), runs: []wantRun{{"p1.saturation", complete1, noReason1}}, campaign: state.CampaignComplete,
			check: func(t *testing.T, c *campaign, s *state.Store) {
				blk := readBlock(t, c, s)
				if blk["verdict"] != "pass" || len(blk["families"].([]any)) < 20 {
					t.Fatalf("sanity block %v", blk["verdict"])
				}
				if !strings.Contains(string(mustJSON(blk["inputs"])), "opprof/layer1.jsonl") {
					t.Fatalf("inputs %v", blk["inputs"])
				}
			}},
		{name: "negative counter", sc: sc("negative"), runs: []wantRun{{"p1.saturation", failed1, validator1}},
			campaign: state.CampaignStopped, stop: state.ReasonValidatorFailed,
			check: func(t *testing.T, c *campaign, s *state.Store) {
				blk := readBlock(t, c, s)
				if !strings.Contains(string(mustJSON(blk["red_flags"])), "clean.input_tokens: negative counter") {
					t.Fatalf("red flags %v", blk["red_flags"])
				}
			}},
	})
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
