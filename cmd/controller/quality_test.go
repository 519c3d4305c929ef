package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"warden/internal/testutil/testcampaign"
	"warden/pkg/state"
)

// qualityProtocol is a small omni-like A/B campaign on the stand-in: two
// systems (vllm-omni servers streaming audio), loadgen reading text and
// audio, two repeats each on two slots; every run is judged by the
// waveform validator and then by a stand-in quality evaluator whose score
// is the system's: system b scores below the quality bound.
func qualityProtocol(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	manifest := filepath.Join(dir, "manifest.jsonl")
	var b strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&b, `{"id":"r%d","prompt":"say something","input_tokens":2,"output_tokens":3,"arrival":"steady"}`+"\n", i)
	}
	data := filepath.Join(dir, "tts-correctness.jsonl")
	for path, body := range map[string]string{manifest: b.String(), data: `{"id":"t0","text":"reference"}` + "\n"} {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ports := freePorts(t, 2)
	server := func(name string) string {
		return fmt.Sprintf(`  - name: %s
    kind: vllm-omni
    command: ["${STANDIN}", server, --port, "${PORT}", --load-s, "0.2", --shutdown-timeout, "1", --gpu-mem-mib, "1024",
              --token-ms, "5", --server-kind, vllm-omni, --audio-chunks, "3"]
    ready_timeout_s: 10
    shutdown_grace_s: 2
    group_grace_s: 1
`, name)
	}
	y := fmt.Sprintf(`warden: 1
name: quality-ab
host: {gpus: 2, cpus: 2}
budget: {cap_gpu_hours: 1.0}
vars: {STANDIN: %q, CONTROLLER: %q, LOADGEN: %q, MANIFEST: %q, TTS_DATA: %q, EVAL_SEED: "7"}
provenance:
  - {path: %q, role: manifest}
  - {path: %q, role: data}
slots:
  - {name: s0, gpus: [0], cpus: "0", port: %d}
  - {name: s1, gpus: [1], cpus: "1", port: %d}
regimes:
  - {name: two, concurrency: 2}
`+classAndCleanup+`servers:
%s%sloads:
  - name: closed
    kind: closed-loop
    expected_s: 10
    client: ["${LOADGEN}", run, --manifest, "${MANIFEST}", --base-url, "http://127.0.0.1:${PORT}", --model, standin,
             --endpoint, chat, --server-kind, vllm-omni, --modalities, "text,audio", --load-point, closed,
             --request-rate, inf, --max-concurrency, "2", --ignore-eos, --warmup-seconds, "0.2",
             --clean-segment-seconds, "0.4", --num-clean-segments, "1", --drain-timeout-seconds, "${DRAIN_ALLOWANCE_S}",
             --result-dir, "${ATTEMPT_DIR}/client"]
axes:
  - name: system
    values: [{id: a, server: omni-a, vars: {UTMOS: "4.1"}}, {id: b, server: omni-b, vars: {UTMOS: "2.9"}}]
phases:
  - name: closed-loop
    kind: steady-state
    matrix: {system: [a, b]}
    loads: [closed]
    repeats: 2
    order: {by: alternate, axis: system, seed: 7}
validators:
  - name: waveform
    command: ["${CONTROLLER}", validate, waveform, --result-dir, "${ATTEMPT_DIR}/client", -o, json]
  - name: quality-tts
    command: ["${STANDIN}", evaluate, --result-dir, "${ATTEMPT_DIR}/client", --metric, utmos, --score, "${UTMOS}",
              --min, "3.5", --data, "${TTS_DATA}", --seed, "${EVAL_SEED}"]
`, standinBin, controllerBin, loadgenBin, manifest, data, manifest, data, ports[0], ports[1], server("omni-a"), server("omni-b"))
	return writeTemp(t, "quality.yaml", y)
}

// TestQualityGateBeforeRanking: seed 000 §4 and §14. System b's evaluator
// fails its quality gate: each of its runs is quality-failed (quarantined,
// kept with its latency figures), the campaign goes on to complete every
// run, and ctlq report's first table shows b's runs, its second (the
// performance ranking) holds system a's alone, ranked by p99 TTFA.
func TestQualityGateBeforeRanking(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	c.runForeground(qualityProtocol(t))
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignComplete {
		t.Fatalf("campaign %s (%s): %s", cp.State, cp.StopReason, cp.StopDetail)
	}
	for _, sys := range []string{"a", "b"} {
		for r := 1; r <= 2; r++ {
			run := fmt.Sprintf("%s.closed.r%d", sys, r)
			as := c.attempts(s, run)
			want := state.Attempt{State: state.Complete}
			if sys == "b" {
				want = state.Attempt{State: state.Quarantined, Reason: state.ReasonQualityFailed}
			}
			if len(as) != 1 || as[0].State != want.State || as[0].Reason != want.Reason {
				t.Fatalf("%s: attempts %v, want one %s %s", run, attemptStates(as), want.State, want.Reason)
			}
			if v := c.gateVerdict(s, run, "validator:waveform"); v.Verdict != state.VerdictPass || v.Figures["audio_requests"] < 1 {
				t.Fatalf("%s: waveform verdict %+v", run, v)
			}
			q := c.gateVerdict(s, run, "validator:quality-tts")
			if wantV := map[string]string{"a": "pass", "b": "fail"}[sys]; q.Verdict != wantV || q.Figures["seed"] != 7 || q.Figures["scored_requests"] < 1 {
				t.Fatalf("%s: quality verdict %+v, want %s with the seed and the scored requests", run, q, wantV)
			}
		}
	}
	s.Close()
	html, table := filepath.Join(t.TempDir(), "report.html"), filepath.Join(t.TempDir(), "table.json")
	if out, err := exec.Command(ctlqBin, "report", "-d", c.dir, "-o", html, "--table-json", table).CombinedOutput(); err != nil {
		t.Fatalf("ctlq report: %v\n%s", err, out)
	}
	var doc struct {
		Quality []struct {
			Run, System, State, Reason, Excluded string
			Validators                           []string
			Ranked                               bool
		} `json:"quality_gates"`
		Performance []struct {
			Run, System string
			RankedBy    string `json:"ranked_by"`
			Rank        int
			TTFA        *float64 `json:"ttfa_p99_ms"`
		} `json:"performance"`
		NotRanked []struct {
			Run, System, Excluded string
			TTFA                  *float64 `json:"ttfa_p99_ms"`
		} `json:"not_ranked"`
	}
	b, _ := os.ReadFile(table)
	if err := json.Unmarshal(b, &doc); err != nil || len(doc.Quality) != 4 || len(doc.Performance) != 2 {
		t.Fatalf("report tables: %v\n%s", err, b)
	}
	for _, q := range doc.Quality {
		failed := q.System == "omni-b"
		if q.Ranked == failed || failed != (q.Reason == "quality-failed" && q.Excluded == "quality-failed" && q.State == "quarantined") ||
			strings.Join(q.Validators, ", ") != map[bool]string{false: "waveform: pass, quality-tts: pass", true: "waveform: pass, quality-tts: fail"}[failed] {
			t.Fatalf("quality row %+v", q)
		}
	}
	for i, p := range doc.Performance {
		if p.System != "omni-a" || p.Rank != i+1 || p.RankedBy != "ttfa_p99_ms" || p.TTFA == nil || *p.TTFA <= 0 {
			t.Fatalf("performance row %+v", p)
		}
	}
	if len(doc.NotRanked) != 2 {
		t.Fatalf("not ranked %+v, want system b's two runs", doc.NotRanked)
	}
	for _, r := range doc.NotRanked { // seed 000 §4: its latency is still reported
		if r.System != "omni-b" || r.Excluded != "quality-failed" || r.TTFA == nil || *r.TTFA <= 0 {
			t.Fatalf("not-ranked row %+v", r)
		}
	}
	page, _ := os.ReadFile(html)
	tables := regexp.MustCompile(`(?s)<table id="([a-z-]+)">(.*?)</table>`).FindAllStringSubmatch(string(page), 2)
	if len(tables) != 2 || tables[0][1] != "quality-gates" || tables[1][1] != "performance-ranking" {
		t.Fatalf("the report's first two tables are not quality then performance")
	}
	if strings.Count(tables[0][2], `<tr data-run="b.closed.r`) != 2 || strings.Count(tables[1][2], "<tr data-run=") != 2 || strings.Contains(tables[1][2], `"b.closed.r`) {
		t.Fatalf("quality table:\n%s\nperformance table:\n%s", tables[0][2], tables[1][2])
	}
	c.assertNoProcesses()
}

// TestQualityPlanShowsValidators: controller plan of omni-ab.yaml (and
// its Slurm form) lists the waveform and quality validators per load.
func TestQualityPlanShowsValidators(t *testing.T) {
	t.Parallel()
	c := &campaign{t: t}
	for _, file := range []string{"omni-ab.yaml", "omni-ab-slurm.yaml"} {
		out, code := c.controller("plan", "-f", filepath.Join("..", "..", "protocols", file), "--check-inputs=false", "--wide")
		if code != 0 {
			t.Fatalf("plan %s: exit %d\n%s", file, code, out)
		}
		for _, load := range []string{"closed", "open", "cold"} {
			re := regexp.MustCompile(`(?m)^` + load + ` .*quality-asr, quality-tts$`)
			if !re.MatchString(out) {
				t.Fatalf("plan %s: load %s does not list the quality validators:\n%s", file, load, out)
			}
		}
		// every load has the clock and load check and the energy's sanity (§6, §9)
		if !regexp.MustCompile(`(?m)^closed .*waveform, clock-load, sanity, quality-asr`).MatchString(out) ||
			!regexp.MustCompile(`(?m)^cold .*clock-load, sanity, quality-asr`).MatchString(out) || regexp.MustCompile(`(?m)^cold .*waveform`).MatchString(out) {
			t.Fatalf("plan %s: the waveform validator is not on the loadgen loads alone:\n%s", file, out)
		}
	}
}

// TestQualityEvaluatorErrorStops: an evaluator that cannot tell (here:
// no client result where it looks) says error without the quality class:
// the run fails validator-failed and the campaign stops for review; it is
// never quarantined as if it had been judged.
func TestQualityEvaluatorErrorStops(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := testcampaign.Edit(t, qualityProtocol(t), `evaluate, --result-dir, "${ATTEMPT_DIR}/client"`, `evaluate, --result-dir, "${ATTEMPT_DIR}/absent"`)
	c.runForeground(proto)
	s := c.store()
	cp := c.stoppedFor(s, state.ReasonValidatorFailed)
	failed := c.attemptsIn(s, state.Failed)
	if len(failed) == 0 || len(c.attemptsIn(s, state.Quarantined)) != 0 {
		t.Fatalf("campaign %s (%s): failed attempts %v", cp.State, cp.StopReason, attemptStates(failed))
	}
	for _, a := range failed {
		if a.Reason != state.ReasonValidatorFailed {
			t.Fatalf("failed attempts %v, want each validator-failed", attemptStates(failed))
		}
		if v := c.gateVerdict(s, a.RunID, "validator:quality-tts"); v.Verdict != state.VerdictError || !strings.Contains(v.Detail, "no client result") {
			t.Fatalf("%s: quality verdict %+v", a.RunID, v)
		}
	}
	c.assertNoProcesses()
}

// TestQualityEvaluatorScoresKeptOutputs: seed 000 §4 end to end. loadgen's
// quality pass keeps the outputs of the manifest's first rows in a private
// directory outside the campaign; the evaluator (the stand-in's, scoring
// the kept audio's silence ratio) reads them there; the waveform validator
// compares each stream with its complete output; the privacy scans of the
// attempt and of the campaign stay green, and no kept text or audio is in
// the campaign directory.
func TestQualityEvaluatorScoresKeptOutputs(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	qout := filepath.Join(t.TempDir(), "private")
	if err := os.Mkdir(qout, 0o700); err != nil {
		t.Fatal(err)
	}
	proto := qualityProtocol(t)
	proto = testcampaign.Edit(t, proto, `EVAL_SEED: "7"}`, fmt.Sprintf(`EVAL_SEED: "7", QOUT: %q}`, qout))
	proto = testcampaign.Edit(t, proto, `--result-dir, "${ATTEMPT_DIR}/client"]
axes:`, `--result-dir, "${ATTEMPT_DIR}/client",
             --quality-rows, "2", --quality-dir, "${QOUT}/${RUN_ID}.a${ATTEMPT}"]
axes:`)
	proto = testcampaign.Edit(t, proto, `--metric, utmos, --score, "${UTMOS}",
              --min, "3.5"`, `--metric, silence_ratio, --outputs, "${QOUT}/${RUN_ID}.a${ATTEMPT}",
              --max, "0.5"`)
	c.runForeground(proto)
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignComplete {
		t.Fatalf("campaign %s (%s): %s", cp.State, cp.StopReason, cp.StopDetail)
	}
	for _, run := range []string{"a.closed.r1", "b.closed.r2"} {
		q := c.gateVerdict(s, run, "validator:quality-tts")
		if q.Verdict != state.VerdictPass || q.Figures["scored_requests"] != 2 || q.Figures["silence_ratio"] > 0.1 {
			t.Fatalf("%s: quality verdict %+v", run, q)
		}
		if w := c.gateVerdict(s, run, "validator:waveform"); w.Verdict != state.VerdictPass || w.Figures["compared_requests"] != 2 {
			t.Fatalf("%s: waveform verdict %+v", run, w)
		}
		for _, gate := range []string{"privacy", "privacy-campaign"} {
			if v := c.gateVerdict(s, run, gate); v.Verdict != state.VerdictPass {
				t.Fatalf("%s: %s %+v", run, gate, v)
			}
		}
		if fi, err := os.Stat(filepath.Join(qout, run+".a1", "000001.stream.wav")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: kept audio %v %v", run, fi, err)
		}
	}
	s.Close()
	filepath.WalkDir(c.dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".wav") || strings.HasSuffix(p, "000000.json")) {
			t.Errorf("kept output in the campaign directory: %s", p)
		}
		return nil
	})
	c.assertNoProcesses()
}
