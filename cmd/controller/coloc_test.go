package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warden/internal/testutil/testcampaign"
	"warden/pkg/state"
)

// colocProtocol is a co-location check on two fake GPUs: target p1 on s0,
// a background p2 on s1, two gated regimes in fallback order. The gate's
// validator fails the first regime when failFirst, and every regime when
// failAll; throughput alone always passes (tolerance 0.99).
func colocProtocol(t *testing.T, failFirst, failAll bool) string {
	t.Helper()
	ports := freePorts(t, 2)
	verdictA, verdictB := "pass", "pass"
	if failFirst || failAll {
		verdictA = "fail"
	}
	if failAll {
		verdictB = "fail"
	}
	y := testcampaign.Head("coloc", "1.0", fmt.Sprintf("STANDIN: %q", standinBin), ports) + `regimes:
  - {name: pair-a, concurrency: 2, gated: true}
  - {name: pair-b, concurrency: 2, gated: true}
` + classAndCleanup + fmt.Sprintf(`servers:
  - name: standin
    kind: standin
    command: ["${STANDIN}", server, --port, "${PORT}", --load-s, "0.2", --shutdown-timeout, "1", --gpu-mem-mib, "512"]
    shutdown_grace_s: 2
    group_grace_s: 1
loads:
  - name: saturation
    kind: saturation
    expected_s: 10
    client: ["${STANDIN}", client, --warmup-s, "0.2", --measure-s, "0.5", --drain-s, "2", --concurrency, "2", --result-dir, "${ATTEMPT_DIR}/client"]
  - name: background
    kind: background
    expected_s: 5
    client: ["${STANDIN}", client, --warmup-s, "0", --measure-s, "120", --drain-s, "1", --concurrency, "1"]
axes:
  - name: pattern
    values: [{id: p1}, {id: p2}]
phases:
  - name: colocation
    kind: colocation
    colocation:
      target: {pattern: p1}
      slot: s0
      loads: [saturation]
      background_load: background
      checks:
        - {regime: pair-a, backgrounds: [{cell: {pattern: p2}, slot: s1}]}
        - {regime: pair-b, backgrounds: [{cell: {pattern: p2}, slot: s1}]}
      gate:
        throughput_file: client/result.json
        throughput_field: throughput_rps
        throughput_tolerance: 0.99
        figure_tolerance: 0.03
        validator:
          shell: |
            case "$NEED_TARGET_DIR" in
              *pair-a*) echo '{"verdict": "%s", "detail": "operator shares moved"}' ;;
              *) echo '{"verdict": "%s"}' ;;
            esac
  - name: matrix
    kind: primary
    matrix: {pattern: [p1, p2]}
    loads: [saturation]
`, verdictA, verdictB)
	return writeTemp(t, "coloc.yaml", y)
}

// A co-location check that ran before the campaign (seed 002's E-a): the
// phase's prior verdict authorizes pair-b (pair-a failed); start records
// both gates' verdicts from the file, no co-location run executes, the
// matrix runs under pair-b; and a resume refuses the verdict file once it
// changed, naming it.
func TestColocationPriorVerdict(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	dir := t.TempDir()
	evidence := filepath.Join(dir, "gate-pair-b.json")
	os.WriteFile(evidence, []byte(`{"verdict": "pass"}`+"\n"), 0o644)
	sum := sha256.Sum256([]byte(`{"verdict": "pass"}` + "\n"))
	verdict := filepath.Join(dir, "colocation-verdict.json")
	os.WriteFile(verdict, []byte(fmt.Sprintf(`{"schema": "warden.colocation-verdict/1", "check": "E-a", "gpu_hours": 0.001,
  "gates": [{"gate": "colocation/pair-a", "verdict": "fail", "detail": "operator shares moved"}, {"gate": "colocation/pair-b", "verdict": "pass"}],
  "evidence": [{"path": "gate-pair-b.json", "sha256": %q}]}`, hex.EncodeToString(sum[:]))), 0o644)
	// the matrix's clients fail: the campaign stops for review, to be resumed
	proto := testcampaign.Edit(t, colocProtocol(t, false, false), "    kind: colocation\n", "    kind: colocation\n    prior: {verdict: "+verdict+"}\n",
		"budget: {cap_gpu_hours: 1.0}", "budget: {cap_gpu_hours: 1.0, consumed_gpu_hours: 0.001}",
		`--concurrency, "2", --result-dir,`, `--concurrency, "2", --fail, --result-dir,`)
	c.runForeground(proto)
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignStopped || cp.StopReason != state.StopForRun(state.ReasonClientFailed) || cp.Regime != "pair-b" || cp.PriorGPUHours != 0.001 {
		t.Fatalf("campaign %s (%s) regime %q prior %v", cp.State, cp.StopDetail, cp.Regime, cp.PriorGPUHours)
	}
	vs, _ := s.GateVerdicts("")
	got := map[string]string{}
	for _, v := range vs {
		got[v.Gate] = v.Verdict
		if strings.HasPrefix(v.Gate, "colocation/") && !strings.Contains(v.Detail, "prior verdict of E-a ("+verdict+", sha256 ") {
			t.Fatalf("gate %s detail %q", v.Gate, v.Detail)
		}
	}
	if got["colocation/pair-a"] != "fail" || got["colocation/pair-b"] != "pass" {
		t.Fatalf("gate verdicts %v", got)
	}
	runs, _ := s.Runs()
	for _, r := range runs {
		if strings.HasPrefix(r.ID, "coloc.") {
			t.Fatalf("a co-location run %s was planned", r.ID)
		}
	}
	s.Close()
	// the verdict file is a recorded input: changed, resume refuses it
	os.WriteFile(verdict, []byte(`{"schema": "warden.colocation-verdict/1"}`), 0o644)
	out, code := c.controller("--resume", "-d", c.dir, "--foreground")
	if code == 0 || !strings.Contains(out, verdict) || !strings.Contains(out, "register an amendment") {
		t.Fatalf("resume with the verdict changed: exit %d\n%s", code, tail(out, 2000))
	}
}
