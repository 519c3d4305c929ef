package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"warden/internal/testutil/testcampaign"
	"warden/internal/testutil/testgroup"
	"warden/internal/testutil/testports"
	"warden/pkg/contract"
	"warden/pkg/loadgen"
	"warden/pkg/state"
)

// End-to-end tests of the behaviours the stand-in takes from the real
// servers (docs/servers.md): the load client's profile windows against a
// step-scheduled profiler, and the unpatched vLLM profiler stopping a
// campaign at its burn-in.

// writeTokenManifest writes n rows of two token ids and four output tokens.
func writeTokenManifest(t *testing.T, n int) string {
	t.Helper()
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"id":"r%d","prompt_token_ids":[11,12],"input_tokens":2,"output_tokens":4,"arrival":"steady"}`+"\n", i)
	}
	path := filepath.Join(t.TempDir(), "manifest.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startStandin starts a stand-in server on a free port, in its own process
// group, and returns its base URL; the test's end stops and waits for it.
func startStandin(t *testing.T, args ...string) string {
	t.Helper()
	port := testports.Free(t, 1)[0]
	cmd := exec.Command(standinBin, append([]string{"server", "--port", fmt.Sprint(port), "--load-s", "0", "--shutdown-timeout", "1"}, args...)...)
	logf, err := os.Create(filepath.Join(t.TempDir(), "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	testgroup.Start(t, cmd, 30*time.Second)
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitFor(t, "the stand-in's health", 20*time.Second, func() bool {
		resp, err := httpGet(url + "/health")
		return err == nil && resp == 200
	})
	return url
}

func httpGet(url string) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// runLoadgen runs one profile window of loadgen against url and returns
// its result.
func runLoadgen(t *testing.T, bin, manifest, url, resultDir string, extra ...string) loadgen.Result {
	t.Helper()
	args := append([]string{"run", "--manifest", manifest, "--base-url", url, "--model", "standin", "--load-point", "saturation",
		"--request-rate", "inf", "--max-concurrency", "2", "--ignore-eos", "--warmup-seconds", "0.2", "--num-clean-segments", "0",
		"--profile-after-clean", "--num-profile-windows", "1", "--recovery-seconds", "0.1", "--drain-timeout-seconds", "5",
		"--result-dir", resultDir}, extra...)
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("loadgen %v: %v\n%s", extra, err, out)
	}
	res := readLoadgenResult(t, resultDir)
	if len(res.ProfileWindows) != 1 {
		t.Fatalf("%d windows", len(res.ProfileWindows))
	}
	return res
}

// readLoadgenResult reads the result.json of loadgen's result directory.
func readLoadgenResult(t *testing.T, dir string) loadgen.Result {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res loadgen.Result
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	return res
}

// TestLoadgenWindowEndsWithTheServers: against a profiler whose steps
// take 0.4 s, loadgen's window waits for the server's 2+8 steps and its
// trace passes Layer-2; the legacy fixed 1 s hold truncates the same
// window; a budget shorter than the window fails, saying which and why.
func TestLoadgenWindowEndsWithTheServers(t *testing.T) {
	t.Parallel()
	bin := loadgenBin
	manifest := writeTokenManifest(t, 20000)
	type run struct {
		name   string
		traces string
		extra  []string
		res    loadgen.Result
		dir    string
	}
	runs := []*run{{name: "wait"}, {name: "hold"}, {name: "budget"}}
	var wg sync.WaitGroup
	for _, r := range runs {
		r.traces, r.dir = filepath.Join(t.TempDir(), "traces"), filepath.Join(t.TempDir(), "client")
		url := startStandin(t, "--token-ms", "20", "--traces-dir", r.traces, "--profiler-step-s", "0.4")
		switch r.name {
		case "wait":
			r.extra = []string{"--profile-traces-dir", r.traces, "--profile-window-budget-seconds", "24"}
		case "hold":
			r.extra = []string{"--profile-hold-seconds", "1"}
		case "budget":
			r.extra = []string{"--profile-traces-dir", r.traces, "--profile-window-budget-seconds", "2"}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.res = runLoadgen(t, bin, manifest, url, r.dir, r.extra...)
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	l2 := contract.DefaultLayer2()
	l2.Windows = 1

	w := runs[0].res.ProfileWindows[0]
	if w.Outcome != loadgen.WindowComplete || w.TracesFound != 1 || w.Traces[0].AfterStop {
		t.Fatalf("waiting window: %+v", w)
	}
	// This server writes no Layer-1 stream, so the join cannot be told
	// (an error, never a pass); everything of the trace itself holds.
	if r := contract.Layer2Dir(runs[0].traces, l2); r.Verdict != "error" || !strings.Contains(r.Detail, "no Layer-1 stream given") ||
		r.Figures["bad_windows"] != 0 || r.Figures["execute_min"] != 8 || r.Figures["windows"] != 1 {
		t.Fatalf("waiting window's trace: %+v", r)
	}
	t.Logf("waiting window: %.2f s from /start_profile returning to /stop_profile", w.WaitS)

	if w := runs[1].res.ProfileWindows[0]; w.Outcome != loadgen.WindowNotObserved {
		t.Fatalf("held window: %+v", w)
	}
	if r := contract.Layer2Dir(runs[1].traces, l2); r.Verdict != "fail" {
		t.Fatalf("a fixed 1 s hold over 0.4 s steps passed Layer-2: %+v", r)
	} else {
		t.Logf("held window, Layer-2: %s", r.Detail)
	}

	w = runs[2].res.ProfileWindows[0]
	if w.Outcome != loadgen.WindowIncomplete || !strings.Contains(w.Failure, "2 s budget") {
		t.Fatalf("over-budget window: %+v", w)
	}
	out, _ := exec.Command(controllerBin, "validate", "profile-windows", "--result-dir", runs[2].dir, "--windows", "1", "-o", "json").Output()
	var v contract.Result
	if err := json.Unmarshal([]byte(strings.TrimSpace(string(out))), &v); err != nil {
		t.Fatalf("verdict %q: %v", out, err)
	}
	if v.Verdict != "fail" || v.Class != "profile-artifact" || !strings.Contains(v.Detail, "window 1 did not complete within its 2 s budget") {
		t.Fatalf("verdict %+v", v)
	}
	t.Logf("over-budget verdict: %s", v.Detail)
}

// saturationOnP1 is the last load of the one-slot protocols below, a
// stand-in client at concurrency 1, and their one pattern, p1.
const saturationOnP1 = `  - name: saturation
    kind: saturation
    expected_s: 10
    client: ["${STANDIN}", client, --warmup-s, "0.2", --measure-s, "0.5", --drain-s, "2", --concurrency, "1", --result-dir, "${ATTEMPT_DIR}/client"]
axes:
  - name: pattern
    values: [{id: p1}]
`

// reusedProtocol is a campaign whose burn-in opens two short profile
// windows and checks them, before one primary run.
func reusedProtocol(t *testing.T, loadgenBin, manifest, serverArgs string) string {
	t.Helper()
	ports := freePorts(t, 1)
	vars := fmt.Sprintf("STANDIN: %q, CONTROLLER: %q, LOADGEN: %q, MANIFEST: %q", standinBin, controllerBin, loadgenBin, manifest)
	y := testcampaign.Head("reused-profiler", "1.0", vars, ports) + oneRegime + classAndCleanup + fmt.Sprintf(`servers:
  - name: standin
    kind: standin
    command: ["${STANDIN}", server, --port, "${PORT}", --load-s, "0.2", --shutdown-timeout, "1", --gpu-mem-mib, "1024",
              --token-ms, "5", --traces-dir, "${ATTEMPT_DIR}/traces", --profiler-step-s, "0.02" %s]
    ready_timeout_s: 10
    shutdown_grace_s: 2
    group_grace_s: 1
loads:
  - name: burnin
    kind: burn-in
    expected_s: 10
    client: ["${LOADGEN}", run, --manifest, "${MANIFEST}", --model, standin, --load-point, saturation,
             --request-rate, inf, --max-concurrency, "2", --ignore-eos, --warmup-seconds, "0.2", --num-clean-segments, "0",
             --profile-after-clean, --num-profile-windows, "2", --profile-traces-dir, "${ATTEMPT_DIR}/traces",
             --profile-window-budget-seconds, "1", --recovery-seconds, "0.1", --drain-timeout-seconds, "${DRAIN_WATCHDOG_S}",
             --result-dir, "${ATTEMPT_DIR}/client"]
`, serverArgs) + saturationOnP1 + `phases:
  - name: burn-in
    kind: burn-in
    matrix: {pattern: p1}
    loads: [burnin]
    id: burnin.${PATTERN}
  - name: matrix
    kind: primary
    matrix: {pattern: p1}
    loads: [saturation]
retries: {infrastructure: 1}
validators:
  - name: profiler
    loads: [burnin]
    command: ["${CONTROLLER}", validate, profile-windows, --result-dir, "${ATTEMPT_DIR}/client", --windows, "2", -o, json]
`
	return writeTemp(t, "reused.yaml", y)
}

// TestReusedProfilerStopsAtBurnIn: against vLLM's reused profiler the
// burn-in's second window writes no trace; the campaign stops at the
// burn-in, with no rerun and before any measured run, naming the cause.
// The same campaign on a server with a fresh schedule per window
// completes.
func TestReusedProfilerStopsAtBurnIn(t *testing.T) {
	t.Parallel()
	bin := loadgenBin
	manifest := writeTokenManifest(t, 5000)

	c := newCampaign(t)
	c.runForeground(reusedProtocol(t, bin, manifest, `, --profiler-reused`))
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignStopped || !strings.Contains(cp.StopDetail, contract.ReusedProfilerMessage) {
		t.Fatalf("campaign %s %s %s", cp.State, cp.StopReason, cp.StopDetail)
	}
	if as := c.attempts(s, "burnin.p1"); len(as) != 1 || as[0].Reason != state.ReasonValidatorFailed {
		t.Fatalf("burn-in attempts %+v", as)
	}
	if as := c.attempts(s, "p1.saturation"); len(as) != 0 {
		t.Fatalf("a measured run started after the failed burn-in: %+v", as)
	}
	t.Logf("stop: %s: %s", cp.StopReason, cp.StopDetail)
	c.assertNoProcesses()

	fresh := newCampaign(t)
	fresh.runForeground(reusedProtocol(t, bin, manifest, ""))
	fs := fresh.store()
	if cp, _ := fs.Campaign(); cp.State != state.CampaignComplete {
		t.Fatalf("fresh-schedule campaign %s %s %s", cp.State, cp.StopReason, cp.StopDetail)
	}
	if v := fresh.gateVerdict(fs, "burnin.p1", "validator:profiler"); v.Verdict != "pass" {
		t.Fatalf("fresh-schedule burn-in verdict %+v", v)
	}
	fresh.assertNoProcesses()
}

// sglangProtocol runs one stand-in run as an SGLang server, with one
// effective-config expectation read from its server info.
func sglangProtocol(t *testing.T, path, equals string) string {
	t.Helper()
	ports := freePorts(t, 1)
	y := testcampaign.Head("sglang-config", "1.0", fmt.Sprintf("STANDIN: %q", standinBin), ports) + oneRegime + classAndCleanup + fmt.Sprintf(`servers:
  - name: sglang
    kind: sglang
    command: ["${STANDIN}", server, --port, "${PORT}", --load-s, "0.2", --shutdown-timeout, "1", --gpu-mem-mib, "1024",
              --server-kind, sglang, --max-num-seqs, "48"]
    ready_timeout_s: 10
    shutdown_grace_s: 2
    group_grace_s: 1
    expect: [{name: max_running_requests, path: %q, equals: %s}]
loads:
`, path, equals) + saturationOnP1 + `phases:
  - name: matrix
    kind: primary
    matrix: {pattern: p1}
    loads: [saturation]
`
	return writeTemp(t, "sglang.yaml", y)
}

// TestSGLangEffectiveConfigNested: an SGLang server reports
// max_running_requests null unless given; the expectation on the nested
// effective value passes, the one on the top-level field stops the
// campaign as a config mismatch that says where the value is.
func TestSGLangEffectiveConfigNested(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	c.runForeground(sglangProtocol(t, "internal_states[0].effective_max_running_requests_per_dp", "48"))
	s := c.store()
	if cp, _ := s.Campaign(); cp.State != state.CampaignComplete {
		t.Fatalf("nested expectation: campaign %s %s %s", cp.State, cp.StopReason, cp.StopDetail)
	}
	c.assertNoProcesses()

	top := newCampaign(t)
	top.runForeground(sglangProtocol(t, "max_running_requests", "48"))
	ts := top.store()
	cp, _ := ts.Campaign()
	if cp.State != state.CampaignStopped || cp.StopReason != state.StopForRun(state.ReasonConfigMismatch) ||
		!strings.Contains(cp.StopDetail, "is null, want 48") || !strings.Contains(cp.StopDetail, "effective_max_running_requests_per_dp") {
		t.Fatalf("top-level expectation: campaign %s %s %s", cp.State, cp.StopReason, cp.StopDetail)
	}
	top.assertNoProcesses()
}

// TestLoadgenChatStreamsPerKind: loadgen reads each server kind's chat
// stream: vLLM's delta.reasoning, SGLang's delta.reasoning_content, and
// SGLang-Omni's usage on a finish chunk of its own; read as the wrong kind,
// the reasoning chunks are not counted as tokens.
func TestLoadgenChatStreamsPerKind(t *testing.T) {
	t.Parallel()
	bin := loadgenBin
	var b strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&b, `{"id":"c%d","prompt":"one two three","input_tokens":3,"output_tokens":4,"arrival":"steady"}`+"\n", i)
	}
	manifest := filepath.Join(t.TempDir(), "chat.jsonl")
	if err := os.WriteFile(manifest, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		server, client string
		chunks         int // token chunks per request
	}{
		{"vllm", "vllm", 4}, {"sglang", "sglang", 4}, {"sglang-omni", "sglang-omni", 4}, {"sglang", "vllm", 2},
	} {
		url := startStandin(t, "--server-kind", tc.server, "--reasoning-tokens", "2", "--token-ms", "5")
		dir := filepath.Join(t.TempDir(), "client")
		out, err := exec.Command(bin, "run", "--manifest", manifest, "--base-url", url, "--model", "standin", "--endpoint", "chat",
			"--server-kind", tc.client, "--load-point", "saturation", "--request-rate", "inf", "--max-concurrency", "2", "--ignore-eos",
			"--warmup-seconds", "0.2", "--clean-segment-seconds", "0.5", "--num-clean-segments", "1", "--drain-timeout-seconds", "5",
			"--result-dir", dir).CombinedOutput()
		if err != nil {
			t.Fatalf("%s read as %s: %v\n%s", tc.server, tc.client, err, out)
		}
		res := readLoadgenResult(t, dir)
		if !res.Complete || res.Clean.Completed == 0 || res.Clean.Failed != 0 || res.Totals.OutputMismatches != 0 || string(res.ServerKind) != tc.client {
			t.Fatalf("%s read as %s: complete %v, clean %+v, totals %+v", tc.server, tc.client, res.Complete, res.Clean, res.Totals)
		}
		recs, _ := os.ReadFile(filepath.Join(dir, "requests", "clean-1.jsonl"))
		for _, line := range strings.Split(strings.TrimSpace(string(recs)), "\n") {
			var r loadgen.Record
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatal(err)
			}
			if r.Class == loadgen.Success && (r.Chunks != tc.chunks || r.FirstChunkNS == 0 || r.FirstTokenNS < r.FirstChunkNS) {
				t.Fatalf("%s read as %s: record %+v, want %d token chunks", tc.server, tc.client, r, tc.chunks)
			}
		}
	}
}
