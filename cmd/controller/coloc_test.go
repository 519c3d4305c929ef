package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warden/internal/testcampaign"
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

func TestColocationFallsBack(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	c.runForeground(colocProtocol(t, true, false))
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignComplete || cp.Regime != "pair-b" {
		t.Fatalf("campaign %s (%s) regime %q", cp.State, cp.StopDetail, cp.Regime)
	}
	verdicts := map[string]string{}
	vs, _ := s.GateVerdicts("")
	for _, v := range vs {
		verdicts[v.Gate] = v.Verdict
	}
	if verdicts["colocation/pair-a"] != "fail" || verdicts["colocation/pair-b"] != "pass" {
		t.Fatalf("gate verdicts %v", verdicts)
	}
	// the background served from before the target started until after it ended
	for _, regime := range []string{"pair-a", "pair-b"} {
		bg := c.attempts(s, "coloc."+regime+".bg.p2")
		tg := c.attempts(s, "coloc."+regime+".p1.saturation")
		if len(bg) != 1 || bg[0].State != state.Complete || len(tg) != 1 || tg[0].State != state.Complete {
			t.Fatalf("%s: background %+v target %+v", regime, bg, tg)
		}
		bgMeasuring, bgStopping := eventTime(t, s, bg[0], state.Measuring), eventTime(t, s, bg[0], state.Stopping)
		tgStart, tgDone := eventTime(t, s, tg[0], state.Starting), eventTime(t, s, tg[0], state.Complete)
		if !(bgMeasuring < tgStart && tgDone < bgStopping) {
			t.Fatalf("%s: background measuring at event %d, stopping at %d; target starting at %d, complete at %d", regime, bgMeasuring, bgStopping, tgStart, tgDone)
		}
	}
	// the matrix ran after the check
	for _, run := range []string{"p1.saturation", "p2.saturation"} {
		if as := c.attempts(s, run); len(as) != 1 || as[0].State != state.Complete || as[0].Slot == "" {
			t.Fatalf("%s: %+v", run, as)
		}
	}
	c.assertNoProcesses()
}

func TestColocationAllRegimesFail(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	c.runForeground(colocProtocol(t, false, true))
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignStopped || cp.StopReason != "no-regime" {
		t.Fatalf("campaign %s %s %s", cp.State, cp.StopReason, cp.StopDetail)
	}
	runs, _ := s.Runs()
	for _, r := range runs {
		if r.Phase == "matrix" && r.Attempts != 0 {
			t.Fatalf("matrix run %s launched without an authorized regime", r.ID)
		}
	}
	c.assertNoProcesses()
}

// eventTime is the sequence number of the attempt's transition to a state.
func eventTime(t *testing.T, s *state.Store, a state.Attempt, to state.AttemptState) uint64 {
	t.Helper()
	for _, seq := range a.EventSeqs {
		evs, err := s.Events(seq-1, 1)
		if err != nil || len(evs) != 1 {
			t.Fatalf("event %d: %v", seq, err)
		}
		if evs[0].To == string(to) {
			return seq
		}
	}
	t.Fatalf("%s a%d never reached %s", a.RunID, a.N, to)
	return 0
}

// A-P3-1: the backgrounds stay active through the target's whole
// timeline. A background that ends before its target is done fails the
// check with that reason (the next regime is tried), not the campaign.
func TestColocationBackgroundEndsEarly(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := editProtocol(t, colocProtocol(t, false, false),
		`    client: ["${STANDIN}", client, --warmup-s, "0", --measure-s, "120", --drain-s, "1", --concurrency, "1"]`,
		`    client: {shell: 'm=120; case "$$WARDEN_RUN_ID" in *pair-a*) m=0.05;; esac; exec "${STANDIN}" client --warmup-s 0 --measure-s $$m --drain-s 0 --concurrency 1'}`)
	c.runForeground(proto)
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignComplete || cp.Regime != "pair-b" {
		t.Fatalf("campaign %s (%s: %s) regime %q; want complete under pair-b", cp.State, cp.StopReason, cp.StopDetail, cp.Regime)
	}
	vs, _ := s.GateVerdicts("")
	var a state.GateVerdict
	for _, v := range vs {
		if v.Gate == "colocation/pair-a" {
			a = v
		}
	}
	if a.Verdict != "fail" || !strings.Contains(a.Detail, "coloc.pair-a.bg.p2 ended before the target's last profile window") {
		t.Fatalf("gate pair-a: %+v", a)
	}
	if bg := c.attempts(s, "coloc.pair-a.bg.p2"); len(bg) != 1 || bg[0].State != state.Failed || bg[0].Reason != state.ReasonClientFailed {
		t.Errorf("the early background's attempt: %+v", bg)
	}
	c.assertNoProcesses()
}

// A-P3-1 samples exactly one profile window per target: a check that
// requires one fails a target that had none, for each regime, and the
// campaign stops for review with no regime left.
func TestColocationProfileWindows(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := editProtocol(t, colocProtocol(t, false, false), "        figure_tolerance: 0.03\n", "        figure_tolerance: 0.03\n        profile_windows: 1\n")
	c.runForeground(proto)
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignStopped || cp.StopReason != state.StopNoRegime {
		t.Fatalf("campaign %s (%s: %s)", cp.State, cp.StopReason, cp.StopDetail)
	}
	all, _ := s.GateVerdicts("")
	var vs []state.GateVerdict
	for _, v := range all {
		if strings.HasPrefix(v.Gate, "colocation/") {
			vs = append(vs, v)
		}
	}
	for _, v := range vs {
		if v.Verdict != "fail" || !strings.Contains(v.Detail, "had 0 profile windows; the check samples exactly 1") {
			t.Errorf("gate %s: %s %q", v.Gate, v.Verdict, v.Detail)
		}
	}
	if len(vs) != 2 {
		t.Errorf("%d co-location verdicts, want one per regime", len(vs))
	}
	c.assertNoProcesses()
}

// A client that leaves a FIFO where its result should be cannot wedge the
// controller: the co-location read refuses it (not a regular file) instead
// of blocking in open(2); the gate that cannot judge is judged once more,
// then the campaign stops for review naming the error and the regime not
// tried, and the controller exits.
func TestColocationResultFIFO(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := editProtocol(t, colocProtocol(t, false, false),
		`    client: ["${STANDIN}", client, --warmup-s, "0.2", --measure-s, "0.5", --drain-s, "2", --concurrency, "2", --result-dir, "${ATTEMPT_DIR}/client"]`,
		`    client: {shell: '"${STANDIN}" client --warmup-s 0.2 --measure-s 0.5 --drain-s 2 --concurrency 2 --result-dir "${ATTEMPT_DIR}/client" || exit; case "$$WARDEN_RUN_ID" in *pair-a*) rm -f "${ATTEMPT_DIR}/client/result.json"; mkfifo "${ATTEMPT_DIR}/client/result.json";; esac'}`)
	c.runForeground(proto)
	s := c.store()
	cp, _ := s.Campaign()
	all, _ := s.GateVerdicts("")
	if cp.State != state.CampaignStopped || cp.StopReason != state.StopGateError ||
		!strings.Contains(cp.StopDetail, "a FIFO") || !strings.Contains(cp.StopDetail, "regimes not tried: pair-b") {
		for _, v := range all {
			if strings.HasPrefix(v.Gate, "colocation/") {
				t.Logf("%s: %s %s", v.Gate, v.Verdict, v.Detail)
			}
		}
		t.Fatalf("campaign %s (%s: %s)", cp.State, cp.StopReason, cp.StopDetail)
	}
	errs := 0
	for _, v := range all {
		if v.Gate == "colocation/pair-a" && v.Verdict == "error" {
			errs++
		}
	}
	if errs != 2 {
		t.Errorf("pair-a judged %d times with an error, want 2 (once more after the first)", errs)
	}
	c.assertNoProcesses()
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
	proto := editProtocol(t, colocProtocol(t, false, false), "    kind: colocation\n", "    kind: colocation\n    prior: {verdict: "+verdict+"}\n",
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
