package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"warden/pkg/contract"
)

// stepProfiler is a profiler whose engine steps are sent by hand.
func stepProfiler(t *testing.T, sched profilerSchedule) (*profiler, chan time.Time, string) {
	dir := t.TempDir()
	sched.stepS = 1 // scheduled; the test's channel is the clock
	p := &profiler{cfg: layer2Config{dir: dir, tp: 1, sched: sched}}
	ticks := make(chan time.Time)
	p.ticks = func() (<-chan time.Time, func()) { return ticks, func() {} }
	return p, ticks, dir
}

// traceSteps returns the ProfilerStep numbers of every trace in dir, one
// list per file, in name order.
func traceSteps(t *testing.T, dir string) [][]int {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(dir, "*.pt.trace.json.gz"))
	slices.Sort(paths)
	var out [][]int
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		ts, err := contract.ReadTrace(f, contract.DefaultLayer2().ExecuteAnnotate)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if !strings.HasPrefix(filepath.Base(p), "dp0_pp0_tp0_dcp0_ep0_rank0.") {
			t.Fatalf("trace name %s is not vLLM's", filepath.Base(p))
		}
		out = append(out, ts.Steps)
	}
	return out
}

// step sends n engine steps and waits until the stepper has counted them.
func step(t *testing.T, p *profiler, ticks chan time.Time, n int) {
	t.Helper()
	p.mu.Lock()
	want := p.steps + n
	p.mu.Unlock()
	for range n {
		ticks <- time.Now()
	}
	waitFor(t, "the steps counted", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.steps == want
	})
}

// TestProfilerStepSchedule: the trace is written after the last active
// step without a stop; an earlier stop truncates it to the steps begun
// (ProfilerStep#2..#k after k steps); a stop in the warm-up writes none;
// a reused profiler writes nothing after its first window.
func TestProfilerStepSchedule(t *testing.T) {
	t.Run("full", func(t *testing.T) {
		p, ticks, dir := stepProfiler(t, profilerSchedule{warmup: 2, active: 8})
		p.begin()
		step(t, p, ticks, 10)
		waitFor(t, "the trace after the last active step", func() bool { return len(traceSteps(t, dir)) == 1 })
		if got := traceSteps(t, dir)[0]; !slices.Equal(got, []int{2, 3, 4, 5, 6, 7, 8, 9}) {
			t.Fatalf("steps %v", got)
		}
		if err := p.stop(); err != nil || len(traceSteps(t, dir)) != 1 {
			t.Fatalf("stop after the window: %v, %d traces", err, len(traceSteps(t, dir)))
		}
	})
	t.Run("truncated", func(t *testing.T) {
		p, ticks, dir := stepProfiler(t, profilerSchedule{warmup: 2, active: 8})
		p.begin()
		step(t, p, ticks, 5)
		if err := p.stop(); err != nil {
			t.Fatal(err)
		}
		if got := traceSteps(t, dir); len(got) != 1 || !slices.Equal(got[0], []int{2, 3, 4, 5}) {
			t.Fatalf("steps %v, want [2 3 4 5] as vLLM writes a 5-step window", got)
		}
	})
	t.Run("a stop during the save", func(t *testing.T) {
		// --profiler-save-s: the save after the last active step takes its
		// time; a stop then returns once the whole window is written
		p, ticks, dir := stepProfiler(t, profilerSchedule{warmup: 2, active: 8, saveS: 0.3})
		p.begin()
		step(t, p, ticks, 10)
		if err := p.stop(); err != nil {
			t.Fatal(err)
		}
		if got := traceSteps(t, dir); len(got) != 1 || !slices.Equal(got[0], []int{2, 3, 4, 5, 6, 7, 8, 9}) {
			t.Fatalf("traces when the stop returned: %v, want the whole window", got)
		}
	})
	t.Run("warm-up", func(t *testing.T) {
		p, ticks, dir := stepProfiler(t, profilerSchedule{warmup: 2, active: 8})
		p.begin()
		step(t, p, ticks, 1)
		if err := p.stop(); err != nil || len(traceSteps(t, dir)) != 0 {
			t.Fatalf("stop in the warm-up: %v, %d traces", err, len(traceSteps(t, dir)))
		}
	})
	t.Run("reused", func(t *testing.T) {
		p, ticks, dir := stepProfiler(t, profilerSchedule{warmup: 2, active: 8, reused: true})
		p.begin()
		step(t, p, ticks, 10)
		waitFor(t, "the first window's trace", func() bool { return len(traceSteps(t, dir)) == 1 })
		_ = p.stop()
		p.begin()
		step(t, p, ticks, 10)
		if err := p.stop(); err != nil {
			t.Fatal(err)
		}
		if n := len(traceSteps(t, dir)); n != 1 {
			t.Fatalf("%d traces, want the first window's alone", n)
		}
	})
}

// TestServerKindServerInfo: SGLang's shape reports max_running_requests
// null unless given, and the effective value in internal_states; vLLM's
// kind serves no /get_server_info.
func TestServerKindServerInfo(t *testing.T) {
	h := newHarness(t)
	get := func(url string) (int, map[string]any) {
		resp, err := httpClient.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var doc map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&doc)
		return resp.StatusCode, doc
	}
	sg := h.startServer(nil, "--load-s", "0", "--server-kind", "sglang", "--max-num-seqs", "48")
	given := h.startServer(nil, "--load-s", "0", "--server-kind", "sglang", "--max-running-requests", "64")
	vl := h.startServer(nil, "--load-s", "0")
	for _, s := range []*testServer{sg, given, vl} {
		s.waitHealthy(t)
	}
	for _, path := range []string{"/server_info", "/get_server_info"} {
		st, doc := get(sg.url + path)
		eff := doc["internal_states"].([]any)[0].(map[string]any)["effective_max_running_requests_per_dp"]
		if v, ok := doc["max_running_requests"]; st != 200 || !ok || v != nil || eff != 48.0 {
			t.Fatalf("%s: %d %v", path, st, doc)
		}
	}
	if _, doc := get(given.url + "/server_info"); doc["max_running_requests"] != 64.0 ||
		doc["internal_states"].([]any)[0].(map[string]any)["effective_max_running_requests_per_dp"] != 64.0 {
		t.Fatalf("given: %v", doc)
	}
	if st, _ := get(vl.url + "/get_server_info"); st != http.StatusNotFound {
		t.Fatalf("vLLM kind /get_server_info: %d", st)
	}
	if _, doc := get(vl.url + "/server_info?config_format=json"); doc["vllm_config"] == nil {
		t.Fatalf("vLLM kind /server_info: %v", doc)
	}
}

// chatChunks streams one chat completion and returns its chunks.
func chatChunks(t *testing.T, url string, includeUsage bool) []map[string]any {
	t.Helper()
	body := `{"messages":[{"role":"user","content":"a b"}],"max_tokens":4,"stream":true`
	if includeUsage {
		body += `,"stream_options":{"include_usage":true}`
	}
	resp, err := httpClient.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body+"}"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := readEvents[map[string]any](t, resp.Body)
	return out
}

func deltaKeys(c map[string]any) []string {
	ch, _ := c["choices"].([]any)
	if len(ch) == 0 {
		return nil
	}
	d, _ := ch[0].(map[string]any)["delta"].(map[string]any)
	var ks []string
	for k := range d {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// TestServerKindChatStream: reasoning text in vLLM's "reasoning" and
// SGLang's "reasoning_content"; SGLang-Omni's usage on the finish chunk,
// stream_options ignored.
func TestServerKindChatStream(t *testing.T) {
	h := newHarness(t)
	vl := h.startServer(nil, "--load-s", "0", "--reasoning-tokens", "2")
	sg := h.startServer(nil, "--load-s", "0", "--reasoning-tokens", "2", "--server-kind", "sglang")
	om := h.startServer(nil, "--load-s", "0", "--server-kind", "sglang-omni")
	for _, s := range []*testServer{vl, sg, om} {
		s.waitHealthy(t)
	}
	for _, tc := range []struct {
		s    *testServer
		want string
	}{{vl, "reasoning"}, {sg, "reasoning_content"}} {
		cs := chatChunks(t, tc.s.url, true)
		// role chunk, 2 reasoning, 2 content, usage chunk
		if len(cs) != 6 || !slices.Equal(deltaKeys(cs[1]), []string{tc.want}) || !slices.Equal(deltaKeys(cs[3]), []string{"content"}) ||
			cs[5]["usage"] == nil || cs[4]["usage"] != nil {
			t.Fatalf("%s: %v", tc.want, cs)
		}
	}
	for _, inc := range []bool{true, false} {
		cs := chatChunks(t, om.url, inc)
		last := cs[len(cs)-1]
		if len(cs) != 6 || last["usage"] == nil || last["choices"].([]any)[0].(map[string]any)["finish_reason"] != "length" ||
			len(deltaKeys(last)) != 0 || cs[4]["choices"].([]any)[0].(map[string]any)["finish_reason"] != nil {
			t.Fatalf("sglang-omni include_usage=%v: %v", inc, cs)
		}
	}
}

// TestServerIdleTimeout: a kept-alive connection left idle is closed by
// the server after --idle-timeout-s, as uvicorn closes it after 5 s.
func TestServerIdleTimeout(t *testing.T) {
	h := newHarness(t)
	s := h.healthyServer("--load-s", "0", "--idle-timeout-s", "0.3")
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The server's idle time starts once it has written its answer, which
	// is after the request is sent: timed from before the request, the
	// idle time seen here can only be longer than the server's.
	idleFrom := time.Now()
	if _, err := io.WriteString(conn, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_ = conn.SetReadDeadline(time.Now().Add(deadline))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("read on the idle connection: %v, want EOF (closed by the server)", err)
	}
	if idle := time.Since(idleFrom); idle < 300*time.Millisecond {
		t.Fatalf("closed after %v idle, before the 0.3 s timeout", idle)
	}
}
