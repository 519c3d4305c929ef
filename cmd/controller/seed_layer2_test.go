package main

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"warden/internal/testutil/testcampaign"
	"warden/pkg/contract"
	"warden/pkg/state"
)

// Seed 002's Layer-2 gates end to end on the stand-in, whose traces carry
// the kernels a real H200 ran and whose Layer-1 steps are the traces'
// steps: the family shares, classifiability (stop condition 7), the join
// and representativeness (stop condition 5), and the co-location gate's
// F3 computed from the two targets' traces.

// seedL2Scenario: one TP1 saturation run, two profile windows, the layer2
// validator with the run's Layer-1 stream and phase file; brk breaks the
// first attempt only, or every attempt.
func seedL2Scenario(brk string, everyAttempt bool) scenario {
	sc := layer2Scenario(1, brk, everyAttempt)
	sc.validators = `  - {name: layer2, command: ["${CONTROLLER}", validate, layer2, --traces, "${ATTEMPT_DIR}/traces", --layer1, "${ATTEMPT_DIR}/opprof", --phases, "${PHASE_FILE}", --analysis-out, "${ATTEMPT_DIR}/analysis/kernels.json", -o, json]}
`
	return sc
}

func TestSeedLayer2(t *testing.T) {
	t.Parallel()
	rerun := []state.AttemptState{state.Failed, state.Complete}
	rerunWhy := []state.Reason{state.ReasonProfileArtifact, ""}
	twice := []state.AttemptState{state.Failed, state.Failed}
	twiceWhy := []state.Reason{state.ReasonProfileArtifact, state.ReasonProfileArtifact}
	cases := []validatorCase{
		{name: "real kernels pass and add up", sc: seedL2Scenario("", false), runs: []wantRun{{"p1.saturation", complete1, noReason1}}, campaign: state.CampaignComplete,
			check: func(t *testing.T, c *campaign, s *state.Store) {
				v := c.gateVerdict(s, "p1.saturation", "validator:layer2")
				if v.Verdict != "pass" || !strings.Contains(v.Detail, "mapping opfamily/v1 sha256:"+contract.DefaultMapping().SHA256) {
					t.Fatalf("layer2 gate %s %q", v.Verdict, v.Detail)
				}
				for _, w := range []string{"w0.r0.", "w1.r0."} {
					sum := 0.0
					for k, x := range v.Figures {
						if rest, ok := strings.CutPrefix(k, w+"share."); ok && !strings.HasPrefix(rest, "attention_") {
							sum += x
						}
					}
					if math.Abs(sum-1) > 1e-9 || v.Figures[w+"share.moe_gemm"] < 0.1 || v.Figures[w+"share.attention"] <= 0 || v.Figures[w+"other_opaque"] > 0.3 {
						t.Fatalf("%s shares sum to %v: %v", w, sum, v.Figures)
					}
				}
				// the analysis file: per window shares, the join, the SMD, the top unmatched
				as := c.attempts(s, "p1.saturation")
				b, err := os.ReadFile(filepath.Join(as[0].Dir, "analysis", "kernels.json"))
				if err != nil {
					t.Fatal(err)
				}
				var an contract.Analysis
				if err := json.Unmarshal(b, &an); err != nil || an.Schema != contract.AnalysisSchema || len(an.Windows) != 2 {
					t.Fatalf("analysis %v: %s", err, b[:min(len(b), 300)])
				}
				for _, w := range an.Windows {
					if len(w.JoinedSteps) != 8 || len(w.SMD) == 0 || len(w.Unmatched) == 0 || w.Shares["attention_decode"] <= 0 {
						t.Fatalf("window %d: %+v", w.Window, w)
					}
				}
				// where a person looks: ctlq show has a row per window
				out, err := exec.Command(ctlqBin, "show", "-d", c.dir, "p1.saturation").CombinedOutput()
				if err != nil || !strings.Contains(string(out), "attempt 1 Layer-2 windows (validator:layer2)") ||
					!regexp.MustCompile(`(?m)^  2 +0 +norm_elementwise \d+\.\d%, moe_gemm .* +\d+\.\d% +joined +0\.\d{3}$`).Match(out) {
					t.Fatalf("ctlq show (%v):\n%s", err, out)
				}
				// and the layer2 verdict's own false-failure rate on the run's clean data
				if !regexp.MustCompile(`(?m)^  attempt 1 validator:layer2: representativeness \(judged by the literal rule\): on \d+ blocks of the clean segment C the literal rule passes \d+\.\d% of representative windows; a representative run fails it \d+\.\d% of the time$`).Match(out) {
					t.Fatalf("ctlq show has no false-failure line:\n%s", out)
				}
				// and the report has the same rows
				html, err := exec.Command(ctlqBin, "report", "-d", c.dir, "-o", "-").Output()
				if err != nil || !regexp.MustCompile(`<td class="mono">p1.saturation</td><td class="num">1</td><td class="mono">validator:layer2</td><td class="num">2</td><td class="num">0</td><td>norm_elementwise \d+\.\d%, moe_gemm [^<]*</td><td class="num">\d+\.\d%</td><td>joined</td><td class="num">0\.\d{3}</td>`).Match(html) {
					t.Fatalf("ctlq report (%v) has no Layer-2 window row", err)
				}
				if !regexp.MustCompile(`<td class="mono">p1.saturation</td><td class="num">1</td><td class="mono">validator:layer2</td><td>representativeness</td><td>literal rule</td><td class="num">\d+</td><td class="num">\d+\.\d%</td><td class="num( bad)?">\d+\.\d%</td>`).Match(html) {
					t.Fatalf("ctlq report has no false-failure row")
				}
			}},
		// stop condition 7: no rerun cures a mapping that leaves most kernels unmatched
		{name: "renamed kernels stop the campaign", sc: seedL2Scenario("unmatched", true),
			runs: []wantRun{{"p1.saturation", []state.AttemptState{state.Failed}, []state.Reason{state.ReasonValidatorFailed}}}, campaign: state.CampaignStopped, stop: state.ReasonValidatorFailed,
			check: func(t *testing.T, c *campaign, s *state.Store) {
				if v := c.gateVerdict(s, "p1.saturation", "validator:layer2"); !strings.Contains(v.Detail, "not classifiable") || v.Figures["other_opaque_max"] <= 0.3 {
					t.Fatalf("layer2 gate %s %q", v.Verdict, v.Detail)
				}
			}},
		{name: "an ambiguous join is rerun once", sc: seedL2Scenario("join-ambiguous", false),
			runs: []wantRun{{"p1.saturation", rerun, rerunWhy}}, campaign: state.CampaignComplete,
			check: func(t *testing.T, c *campaign, s *state.Store) {
				vs, _ := s.GateVerdicts("p1.saturation")
				if len(vs) == 0 || !strings.Contains(firstGate(vs, "validator:layer2").Detail, "2 compatible Layer-1 records") {
					t.Fatalf("first layer2 verdict %+v", firstGate(vs, "validator:layer2"))
				}
			}},
		// stop condition 5: "profiler composition has abs(SMD)>0.25 twice"
		{name: "unrepresentative twice stops", sc: seedL2Scenario("unrepresentative", true),
			runs: []wantRun{{"p1.saturation", twice, twiceWhy}}, campaign: state.CampaignStopped, stop: state.ReasonProfileArtifact,
			check: func(t *testing.T, c *campaign, s *state.Store) {
				if v := c.gateVerdict(s, "p1.saturation", "validator:layer2"); !strings.Contains(v.Detail, "not representative") || !strings.Contains(v.Detail, "Layer-2-inconclusive") {
					t.Fatalf("layer2 gate %s %q", v.Verdict, v.Detail)
				}
			}},
	}
	runValidatorCases(t, cases)
}

func firstGate(vs []state.GateVerdict, gate string) state.GateVerdict {
	for _, v := range vs {
		if v.Gate == gate {
			return v
		}
	}
	return state.GateVerdict{}
}

// colocF3Protocol is colocProtocol with the gate's validator replaced by
// Warden's own F3 comparison from the targets' traces; the target of the
// first regime (pair-a) adds kernel time to its top family, raising that
// family's share by shift.
func colocF3Protocol(t *testing.T, shift string) string {
	t.Helper()
	p := colocProtocol(t, false, false)
	p = testcampaign.Edit(t, p, `    command: ["${STANDIN}", server, --port, "${PORT}", --load-s, "0.2", --shutdown-timeout, "1", --gpu-mem-mib, "512"]`,
		`    command: {shell: 's=""; case "$$WARDEN_RUN_ID" in *pair-a*) s="--layer2-shift norm_elementwise=`+shift+`";; esac; exec "${STANDIN}" server --port "${PORT}" --load-s 0.2 --shutdown-timeout 1 --gpu-mem-mib 512 --traces-dir "${ATTEMPT_DIR}/traces" --layer1-dir "${ATTEMPT_DIR}/opprof" $$s'}`)
	p = testcampaign.Edit(t, p, `    client: ["${STANDIN}", client, --warmup-s, "0.2", --measure-s, "0.5", --drain-s, "2", --concurrency, "2", --result-dir, "${ATTEMPT_DIR}/client"]`,
		`    client: ["${STANDIN}", client, --warmup-s, "0.2", --measure-s, "0.5", --drain-s, "2", --concurrency, "2", --result-dir, "${ATTEMPT_DIR}/client", --profile-windows, "1"]`)
	old := `        validator:
          shell: |
            case "$NEED_TARGET_DIR" in
              *pair-a*) echo '{"verdict": "pass", "detail": "operator shares moved"}' ;;
              *) echo '{"verdict": "pass"}' ;;
            esac
`
	p = testcampaign.Edit(t, p, old, `        validator: ["${CONTROLLER}", validate, colocation,
                    --solo-traces, "${NEED_SOLO_DIR}/traces", --solo-layer1, "${NEED_SOLO_DIR}/opprof", --solo-phases, "${NEED_SOLO_DIR}/phases.jsonl",
                    --coloc-traces, "${NEED_TARGET_DIR}/traces", --coloc-layer1, "${NEED_TARGET_DIR}/opprof", --coloc-phases, "${NEED_TARGET_DIR}/phases.jsonl", -o, json]
`)
	return testcampaign.Edit(t, p, `vars: {STANDIN: `, `vars: {CONTROLLER: "`+controllerBin+`", STANDIN: `)
}

func TestSeedColocationF3(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		shift, pairA string
		regime       string
	}{
		{"0.02", "pass", "pair-a"}, // two points: within the seed's three
		{"0.04", "fail", "pair-b"}, // four points: eight-way is withheld, the next regime is tried
	} {
		t.Run(tc.shift, func(t *testing.T) {
			t.Parallel()
			c := newCampaign(t)
			c.runForeground(colocF3Protocol(t, tc.shift))
			s := c.store()
			cp, _ := s.Campaign()
			verdicts := map[string]state.GateVerdict{}
			vs, _ := s.GateVerdicts("")
			for _, v := range vs {
				verdicts[v.Gate] = v
			}
			a := verdicts["colocation/pair-a"]
			if cp.State != state.CampaignComplete || cp.Regime != tc.regime || a.Verdict != tc.pairA {
				t.Fatalf("campaign %s (%s) regime %q; pair-a %s %q", cp.State, cp.StopDetail, cp.Regime, a.Verdict, a.Detail)
			}
			// the figures are Warden's, computed from the traces: the solo
			// window's three largest families and how far each moved
			d := a.Figures["diff_norm_elementwise"]
			want := map[string]float64{"0.02": 0.02, "0.04": 0.04}[tc.shift]
			_, moe := a.Figures["diff_moe_gemm"]
			if math.Abs(d-want) > 1e-9 || !moe {
				t.Fatalf("pair-a F3 figures %v (shift %v)", a.Figures, d)
			}
			c.assertNoProcesses()
		})
	}
}

// The Layer-2, co-location and prefix subcommands as an operator runs them
// on the real H200 traces: the verdict is the last line, exit 0 whatever
// it says, 2 for a usage error.
func TestSeedLayer2Commands(t *testing.T) {
	t.Parallel()
	real := filepath.Join("..", "..", "pkg", "contract", "testdata", "h200", "eager")
	l1, ph := filepath.Join(real, "layer1.jsonl"), filepath.Join(real, "phases.jsonl")
	dir := t.TempDir()
	badMap := filepath.Join(dir, "bad.yaml")
	os.WriteFile(badMap, []byte("name: x\nversion: 1\nrules: [{family: other, name: a}]\n"), 0o644)
	v2 := filepath.Join(dir, "v2.yaml")
	os.WriteFile(v2, []byte("name: opfamily\nversion: 2\nrules: [{family: everything, name: '.'}]\n"), 0o644)
	manifest := filepath.Join(dir, "m.jsonl")
	os.WriteFile(manifest, []byte(`{"id":"a","prompt_token_ids":[1,2,3]}`+"\n"+`{"id":"b","prompt_token_ids":[1,2,4]}`+"\n"), 0o644)
	analysis := filepath.Join(dir, "analysis", "kernels.json")
	// one window each: the real window 0 as the solo and the co-located target
	one := filepath.Join(dir, "one")
	os.MkdirAll(one, 0o755)
	w0, _ := filepath.Glob(filepath.Join(real, "rank0_w0.*.pt.trace.json.gz"))
	b, _ := os.ReadFile(w0[0])
	os.WriteFile(filepath.Join(one, filepath.Base(w0[0])), b, 0o644)
	c := &campaign{t: t}
	for _, tc := range []struct {
		args           []string
		verdict, class string
		detail         string
	}{
		{[]string{"validate", "layer2", "--traces", real, "--layer1", l1, "--phases", ph, "--analysis-out", analysis, "-o", "json"}, "pass", "", "mapping opfamily/v1 sha256:"},
		// an amendment's table: the same traces judged again, named by its own hash
		{[]string{"validate", "layer2", "--traces", real, "--layer1", l1, "--phases", ph, "--mapping", v2}, "pass", "", "mapping opfamily/v2 sha256:"},
		{[]string{"validate", "layer2", "--traces", real, "--layer1", l1, "--phases", ph, "--mapping", badMap}, "error", "profile-artifact", "is not a family a rule can give"},
		{[]string{"validate", "layer2", "--traces", real, "--phases", ph}, "error", "profile-artifact", "no Layer-1 stream"},
		{[]string{"validate", "layer2", "--traces", real, "--layer1", l1, "--phases", ph, "--max-other-opaque", "0.01"}, "fail", "", "not classifiable"},
		{[]string{"validate", "layer2", "--traces", real, "--layer1", l1, "--phases", ph, "--require-mode", "FULL"}, "fail", "", "required FULL mode segment"},
		// the check samples one window per target: two windows are not a co-location check's
		{[]string{"validate", "colocation", "--solo-traces", real, "--solo-layer1", l1, "--solo-phases", ph, "--coloc-traces", real, "--coloc-layer1", l1, "--coloc-phases", ph}, "error", "", "not accepted"},
		{[]string{"validate", "colocation", "--solo-traces", one, "--solo-layer1", l1, "--solo-phases", ph, "--coloc-traces", one, "--coloc-layer1", l1, "--coloc-phases", ph}, "pass", "", "F3: norm_elementwise 0."},
		{[]string{"validate", "prefix", "--manifest", manifest}, "pass", "", "no two requests"},
		{[]string{"validate", "prefix", "--manifest", manifest, "--max-common-prefix", "1"}, "fail", "", "share a prefix of more than 1 tokens"},
	} {
		out, code := c.controller(tc.args...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		var v map[string]any
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &v); err != nil || code != 0 || v["verdict"] != tc.verdict || (v["class"] != nil) != (tc.class != "") ||
			!strings.Contains(v["detail"].(string), tc.detail) {
			t.Fatalf("%v: exit %d, last line %v; want %s [%s] %q", tc.args, code, v, tc.verdict, tc.class, tc.detail)
		}
	}
	if b, err := os.ReadFile(analysis); err != nil || !strings.Contains(string(b), contract.AnalysisSchema) {
		t.Fatalf("analysis: %v", err)
	}
	for _, args := range [][]string{
		{"validate", "layer2", "--traces", real, "--require-mode", "SOMETIMES"},
		{"validate", "layer2", "--traces", real, "--join-tolerance-ms", "0"},
		{"validate", "layer2", "--traces", real, "--max-smd", "-1"},
		{"validate", "colocation", "--solo-traces", real},
		{"validate", "colocation", "--solo-traces", real, "--coloc-traces", real, "--share-tolerance", "0"},
		{"validate", "prefix"},
		{"validate", "prefix", "--manifest", manifest, "--max-hit-ratio", "0"},
	} {
		if out, code := c.controller(args...); code != 2 {
			t.Fatalf("%v: exit %d, want 2\n%s", args, code, out)
		}
	}
}
