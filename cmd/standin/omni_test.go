package main

// The Omni servers as their source behaves (docs/servers.md), end to end:
// loadgen against the stand-in with each switch that shows a behaviour
// Warden must meet: SGLang-Omni's served-name check, vLLM-Omni's empty
// audio delta, SGLang-Omni's own routes and gauges, a gauge that lags
// its requests, a stream without usage, a port that moves when busy, and
// an error event in a stream.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"warden/pkg/contract"
	"warden/pkg/gates"
	"warden/pkg/loadgen"
)

// omniManifest is a chat manifest of n rows of "say something" (two
// words, the stand-in's count), of out output tokens.
func omniManifest(t *testing.T, n, out int) *loadgen.Manifest {
	t.Helper()
	var lines []string
	for i := 0; i < n; i++ {
		lines = append(lines, fmt.Sprintf(`{"id":"r%d","prompt":"say something","input_tokens":2,"output_tokens":%d,"arrival":"steady"}`, i, out))
	}
	path := filepath.Join(t.TempDir(), "m.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := loadgen.OpenManifest(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// omniRun runs loadgen against s (chat, a closed loop of 2 for 0.5 s)
// with cfg's other fields as edit sets them, and returns the result, the
// records and the error (none for a manifest used up).
func omniRun(t *testing.T, s *testServer, kind string, edit func(*loadgen.Config)) (*loadgen.Result, []loadgen.Record, error) {
	t.Helper()
	sk, err := loadgen.ParseServerKind(kind)
	if err != nil {
		t.Fatal(err)
	}
	cfg := loadgen.Config{BaseURL: s.url, Model: "standin", Endpoint: loadgen.Chat, ServerKind: sk, LoadPoint: "omni",
		MaxConcurrency: 2, CleanSegment: 500 * time.Millisecond, NumClean: 1, DrainTimeout: 5 * time.Second,
		ResultDir: filepath.Join(t.TempDir(), "client")}
	if edit != nil {
		edit(&cfg)
	}
	res, err := loadgen.Run(context.Background(), cfg, omniManifest(t, 4000, 3))
	if errors.Is(err, loadgen.ErrManifestExhausted) {
		err = nil // requests refused at once may use every row in the half second
	}
	if res == nil {
		return nil, nil, err
	}
	var recs []loadgen.Record
	for _, f := range res.Files.Requests {
		b, rerr := os.ReadFile(filepath.Join(cfg.ResultDir, f))
		if rerr != nil {
			t.Fatal(rerr)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if l == "" {
				continue
			}
			var r loadgen.Record
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatal(err)
			}
			recs = append(recs, r)
		}
	}
	if len(recs) == 0 {
		t.Fatal("no request records")
	}
	return res, recs, err
}

// classes counts records by class.
func classes(recs []loadgen.Record) map[loadgen.Class]int {
	out := map[loadgen.Class]int{}
	for _, r := range recs {
		out[r.Class]++
	}
	return out
}

// TestServedModelCheck: SGLang-Omni serves the name it is given
// (--model-name, else its pipeline's) and answers 404 model_not_found to
// any other, such as the model path omni-ab sent: every request is then
// harness-error, and loadgen --check-served-model refuses the run before
// sending, naming what /v1/models lists. The served name succeeds; a
// server before the check (2489a10e, --served-model-check=false) takes
// any name.
func TestServedModelCheck(t *testing.T) {
	h := newHarness(t)
	s := h.healthyServer("--load-s", "0", "--server-kind", "sglang-omni", "--model", "qwen3-omni")
	resp, err := httpClient.Post(s.url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"/models/Qwen3-Omni","messages":[{"role":"user","content":"a"}],"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e struct {
		Error struct{ Type, Param, Code string } `json:"error"`
	}
	if resp.StatusCode != 404 || json.Unmarshal(body, &e) != nil || e.Error.Code != "model_not_found" || e.Error.Param != "model" || e.Error.Type != "invalid_request_error" {
		t.Fatalf("another model: %d %s", resp.StatusCode, body)
	}
	_, recs, err := omniRun(t, s, "sglang-omni", func(c *loadgen.Config) { c.Model = "/models/Qwen3-Omni" })
	if err != nil || classes(recs)[loadgen.HarnessError] != len(recs) || recs[0].HTTPStatus != 404 {
		t.Fatalf("the model path: %v, classes %v, status %d", err, classes(recs), recs[0].HTTPStatus)
	}
	_, _, err = omniRun(t, s, "sglang-omni", func(c *loadgen.Config) { c.Model, c.CheckServedModel = "/models/Qwen3-Omni", true })
	if !errors.Is(err, loadgen.ErrModelNotServed) || !strings.Contains(err.Error(), `["qwen3-omni"]`) {
		t.Fatalf("checked, the model path: %v", err)
	}
	res, recs, err := omniRun(t, s, "sglang-omni", func(c *loadgen.Config) { c.Model, c.CheckServedModel = "qwen3-omni", true })
	if err != nil || classes(recs)[loadgen.Success] != len(recs) || !slices.Equal(res.ServedModels, []string{"qwen3-omni"}) {
		t.Fatalf("the served name: %v, classes %v, served %v", err, classes(recs), res.ServedModels)
	}
	old := h.healthyServer("--load-s", "0", "--server-kind", "sglang-omni", "--model", "qwen3-omni", "--served-model-check=false")
	if _, recs, err := omniRun(t, old, "sglang-omni", func(c *loadgen.Config) { c.Model = "/models/Qwen3-Omni" }); err != nil || classes(recs)[loadgen.Success] != len(recs) {
		t.Fatalf("no check: %v, classes %v", err, classes(recs))
	}
}

// TestEmptyAudioDelta: vLLM-Omni's empty audio delta (modality audio,
// content "") between the audio chunks is an empty chunk: every request
// succeeds, its first audio is the first chunk with samples, and the
// waveform check passes.
func TestEmptyAudioDelta(t *testing.T) {
	h := newHarness(t)
	for _, kind := range []string{"vllm-omni", "sglang-omni"} {
		s := h.healthyServer("--load-s", "0", "--server-kind", kind, "--audio-empty-delta", "--audio-fault-chunk", "2")
		dir := filepath.Join(t.TempDir(), "client")
		_, recs, err := omniRun(t, s, kind, func(c *loadgen.Config) { c.Modalities, c.ResultDir = []string{"text", "audio"}, dir })
		if err != nil || classes(recs)[loadgen.Success] != len(recs) {
			t.Fatalf("%s: %v, classes %v (%s)", kind, err, classes(recs), recs[0].Reason)
		}
		for _, r := range recs {
			c := r.Audio.Chunks
			if len(c) != 5 || !c[2].Empty || c[2].Samples != 0 || c[1].Empty || r.Audio.FirstAudioNS != c[0].AtNS {
				t.Fatalf("%s: request %s chunks %+v", kind, r.ID, c)
			}
		}
		if v := contract.WaveformDir(dir); v.Verdict != gates.Pass {
			t.Fatalf("%s: waveform %s: %s", kind, v.Verdict, v.Detail)
		}
	}
}

// TestSGLangOmniRoutes: SGLang-Omni serves neither /server_info nor
// /get_server_info, and /metrics only with its metrics enabled, in its
// sglang_omni_* families; the cancellation check reads its tracked
// requests there (released), and where it serves no /metrics says it
// cannot tell (unknown), never released.
func TestSGLangOmniRoutes(t *testing.T) {
	h := newHarness(t)
	plain := h.healthyServer("--load-s", "0", "--server-kind", "sglang-omni", "--token-ms", "10")
	metered := h.healthyServer("--load-s", "0", "--server-kind", "sglang-omni", "--token-ms", "10", "--enable-metrics")
	for _, path := range []string{"/server_info", "/get_server_info", "/server_info?config_format=json"} {
		if st := plain.get(t, path); st != 404 {
			t.Fatalf("%s: %d, want 404", path, st)
		}
	}
	if st := plain.get(t, "/metrics"); st != 404 {
		t.Fatalf("/metrics without metrics: %d", st)
	}
	resp, err := httpClient.Get(metered.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(text), `sglang_omni_pipeline_tracked_requests{model_name="standin"} 0.0`) || strings.Contains(string(text), "sglang:") {
		t.Fatalf("/metrics:\n%s", text)
	}
	for _, tc := range []struct {
		s       *testServer
		verdict string
		metric  string
	}{{metered, loadgen.ReleaseReleased, "sglang_omni_pipeline_tracked_requests"}, {plain, loadgen.ReleaseUnknown, ""}} {
		res, _, err := omniRun(t, tc.s, "sglang-omni", func(c *loadgen.Config) { c.Stress = loadgen.Stress{CancelAfterFirstChunk: 0.5} })
		if err != nil || res.Stress == nil || res.Stress.Release.Verdict != tc.verdict || res.Stress.Release.Metric != tc.metric || res.Stress.Cancelled == 0 {
			t.Fatalf("err %v, stress %+v", err, res.Stress)
		}
	}
}

// get answers the status of GET path.
func (s *testServer) get(t *testing.T, path string) int {
	t.Helper()
	resp, err := httpClient.Get(s.url + path)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestLaggingGauge: every request is cancelled after its first token, so
// the last step counted one still running. vLLM's gauge is refreshed only
// by a step: loadgen's one-token probe makes one and the gauge reads 0
// (released, the probe recorded). SGLang's gauge keeps the last step's
// value for its idle window (8 s here, 30 s in SGLang before #31517),
// past the old 5 s bound: released within the bound of its lag.
func TestLaggingGauge(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		kind, lag string
		probed    bool
	}{{"vllm", "step", true}, {"sglang", "idle-window", false}} {
		s := h.healthyServer("--load-s", "0", "--server-kind", tc.kind, "--token-ms", "10", "--running-gauge-lag", tc.lag, "--running-gauge-idle-s", "8")
		res, recs, err := omniRun(t, s, tc.kind, func(c *loadgen.Config) { c.Stress = loadgen.Stress{CancelAfterFirstChunk: 1} })
		if err != nil || classes(recs)[loadgen.ClientCancelled] != len(recs) {
			t.Fatalf("%s: %v, classes %v", tc.kind, err, classes(recs))
		}
		rc := res.Stress.Release
		if rc.Verdict != loadgen.ReleaseReleased || (rc.Probe != nil) != tc.probed || tc.probed && rc.Probe.Class != loadgen.Success ||
			!tc.probed && (rc.WaitedS < 5 || rc.GaugeLagS != 33 || rc.BoundS != 38) {
			t.Fatalf("%s: release %+v (probe %+v)", tc.kind, rc, rc.Probe)
		}
	}
}

// TestNoUsage: an SGLang-Omni pipeline whose decode result has no usage
// sends none: read as sglang-omni every request succeeds with the token
// chunks the client counted as its output, marked as the client's count;
// a vLLM stream without the usage it was asked for is invalid-output.
func TestNoUsage(t *testing.T) {
	h := newHarness(t)
	om := h.healthyServer("--load-s", "0", "--server-kind", "sglang-omni", "--no-usage")
	res, recs, err := omniRun(t, om, "sglang-omni", nil)
	if err != nil || classes(recs)[loadgen.Success] != len(recs) || res.Totals.ClientCounted != len(recs) {
		t.Fatalf("sglang-omni: %v, classes %v, client counted %d", err, classes(recs), res.Totals.ClientCounted)
	}
	for _, r := range recs {
		if r.UsageSource != loadgen.UsageClient || r.OutputTokens != r.Chunks || r.OutputTokens != 3 || r.PromptTokens != 0 {
			t.Fatalf("record %+v", r)
		}
	}
	vl := h.healthyServer("--load-s", "0", "--no-usage")
	if _, recs, err := omniRun(t, vl, "vllm", nil); err != nil || classes(recs)[loadgen.InvalidOutput] != len(recs) || recs[0].Reason != "no usage in the stream" {
		t.Fatalf("vllm: %v, classes %v (%s)", err, classes(recs), recs[0].Reason)
	}
}

// TestPortFallback: SGLang-Omni's launcher serves on another port when
// its port is busy, saying so only in its log; with
// SGLANG_OMNI_STRICT_PORT=1 the busy port is an error and the server
// exits. Without the switch a busy port fails the listen, as vLLM's does.
func TestPortFallback(t *testing.T) {
	h := newHarness(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port := strconv.Itoa(busy.Addr().(*net.TCPAddr).Port)
	moved := h.startServer(nil, "--port", port, "--port-fallback", "--load-s", "0")
	if strings.HasSuffix(moved.url, ":"+port) || !strings.Contains(moved.output(t, moved.stderr), "port already in use") {
		t.Fatalf("fallback: serving %s, busy port %s:\n%s", moved.url, port, moved.output(t, moved.stderr))
	}
	moved.waitHealthy(t)
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"SGLANG_OMNI_STRICT_PORT=1"}, []string{"--port-fallback"}, "SGLANG_OMNI_STRICT_PORT=1 forbids falling back"},
		{nil, nil, "address already in use"},
	} {
		p := h.start(tc.env, append([]string{"server", "--port", port, "--load-s", "0"}, tc.args...)...)
		if ws := p.wait(t); ws.ExitStatus() == 0 || !strings.Contains(p.output(t, p.stderr), tc.want) {
			t.Fatalf("%v %v: exit %v:\n%s", tc.env, tc.args, ws, p.output(t, p.stderr))
		}
	}
}

// TestMidstreamErrorStatus: an error event after the first token of a
// 200 stream, vLLM's shape with the status as its code, is classed by
// that status: a 400 (a prompt over the context) harness-error, as the
// same 400 answered before the stream is; a 500 worker-lost.
func TestMidstreamErrorStatus(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		status string
		want   loadgen.Class
	}{{"400", loadgen.HarnessError}, {"500", loadgen.WorkerLost}} {
		s := h.healthyServer("--load-s", "0", "--midstream-error-status", tc.status)
		_, recs, err := omniRun(t, s, "vllm", nil)
		if err != nil || classes(recs)[tc.want] != len(recs) {
			t.Fatalf("%s: %v, classes %v", tc.status, err, classes(recs))
		}
		if r := recs[0]; r.HTTPStatus != 200 || r.Reason != "error event in the stream: status "+tc.status || r.FirstTokenNS == 0 {
			t.Fatalf("%s: record %+v", tc.status, r)
		}
	}
}
