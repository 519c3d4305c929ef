package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"warden/pkg/gpu/fakegpu"
)

func TestServerHealthyAfterLoad(t *testing.T) {
	h := newHarness(t)
	const load = 500 * time.Millisecond
	begin := time.Now()
	s := h.healthyServer("--load-s", "0.5",
		"--effective-config", "effective config: max_num_batched_tokens=2048 enable_chunked_prefill=True",
		"--effective-config", "effective config: max_num_seqs=256")
	if took := time.Since(begin); took < load {
		t.Fatalf("healthy %v after start, before the %v load", took, load)
	}
	out := s.output(t, s.stdout)
	for _, want := range []string{
		"effective config: max_num_batched_tokens=2048 enable_chunked_prefill=True\n",
		"effective config: max_num_seqs=256\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
}

func TestServerAnswers503WhileLoading(t *testing.T) {
	h := newHarness(t)
	s := h.startServer(nil, "--load-s", "600")
	if got := s.healthStatus(); got != http.StatusServiceUnavailable {
		t.Fatalf("GET /health while loading = %d, want 503", got)
	}
	status, _ := postCompletion(t, s.url, `{"prompt":"hi","max_tokens":1}`)
	if status != http.StatusServiceUnavailable {
		t.Fatalf("POST /v1/completions while loading = %d, want 503", status)
	}
}

func TestServerNeverHealthy(t *testing.T) {
	h := newHarness(t)
	s := h.startServer(nil, "--load-s", "0", "--never-healthy")
	waitFor(t, "the engine to report ready", func() bool {
		return strings.Contains(s.output(t, s.stderr), "engine ready")
	})
	if got := s.healthStatus(); got != http.StatusServiceUnavailable {
		t.Fatalf("GET /health with --never-healthy after the engine is ready = %d, want 503", got)
	}
}

func postCompletion(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	resp, err := httpClient.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, data
}

func TestCompletions(t *testing.T) {
	h := newHarness(t)
	s := h.healthyServer("--load-s", "0", "--model", "m1")
	const secret = "PROMPT-MARKER-7f3a"

	t.Run("models", func(t *testing.T) {
		resp, err := httpClient.Get(s.url + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var list struct {
			Object string `json:"object"`
			Data   []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
			t.Fatal(err)
		}
		if list.Object != "list" || len(list.Data) != 1 || list.Data[0].ID != "m1" {
			t.Fatalf("/v1/models = %+v", list)
		}
	})

	t.Run("plain", func(t *testing.T) {
		status, body := postCompletion(t, s.url, `{"model":"m1","prompt":"a b `+secret+`","max_tokens":5}`)
		if status != http.StatusOK {
			t.Fatalf("status %d: %s", status, body)
		}
		var resp completionResponse
		if err := json.Unmarshal(body, &resp); err != nil {
			t.Fatal(err)
		}
		if resp.Object != "text_completion" || resp.Model != "m1" || len(resp.Choices) != 1 {
			t.Fatalf("response %s", body)
		}
		c := resp.Choices[0]
		if len(strings.Fields(c.Text)) != 5 || c.FinishReason == nil || *c.FinishReason != "length" {
			t.Fatalf("choice %+v: want 5 tokens, finish_reason length", c)
		}
		if resp.Usage == nil || *resp.Usage != (usage{PromptTokens: 3, CompletionTokens: 5, TotalTokens: 8}) {
			t.Fatalf("usage %+v, want 3 + 5 = 8", resp.Usage)
		}
	})

	t.Run("stream", func(t *testing.T) {
		resp := s.post(t, "/v1/completions", `{"prompt":"`+secret+`","max_tokens":4,"stream":true}`)
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
			t.Fatalf("status %d, content type %q", resp.StatusCode, ct)
		}
		chunks, done := readEvents[completionResponse](t, resp.Body)
		if !done {
			t.Fatal("stream ended without [DONE]")
		}
		if len(chunks) != 4 {
			t.Fatalf("%d chunks, want one per token (4)", len(chunks))
		}
		for i, c := range chunks {
			last := i == len(chunks)-1
			if len(c.Choices) != 1 || (c.Choices[0].FinishReason != nil) != last {
				t.Fatalf("chunk %d: %+v", i, c)
			}
		}
	})

	t.Run("stream usage", func(t *testing.T) {
		resp := s.post(t, "/v1/completions", `{"prompt":[11,12,13],"max_tokens":6,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`)
		chunks, done := readEvents[completionResponse](t, resp.Body)
		if !done || len(chunks) != 7 {
			t.Fatalf("%d chunks (done %v), want 6 tokens and a usage chunk", len(chunks), done)
		}
		last := chunks[6]
		if len(last.Choices) != 0 || last.Usage == nil || *last.Usage != (usage{PromptTokens: 3, CompletionTokens: 6, TotalTokens: 9}) {
			t.Fatalf("last chunk %+v, want no choices and usage 3 + 6", last)
		}
	})

	t.Run("chat stream", func(t *testing.T) {
		resp := s.post(t, "/v1/chat/completions", `{"model":"m1","messages":[{"role":"user","content":"a `+secret+`"}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`)
		chunks, done := readEvents[chatResponse](t, resp.Body)
		// a role chunk, three content chunks, a usage chunk
		if !done || len(chunks) != 5 {
			t.Fatalf("%d chunks (done %v), want 5", len(chunks), done)
		}
		for i := 1; i <= 3; i++ {
			if c := chunks[i]; c.Object != "chat.completion.chunk" || len(c.Choices) != 1 || c.Choices[0].Delta == nil || c.Choices[0].Delta.Content == "" {
				t.Fatalf("chunk %d: %+v", i, c)
			}
		}
		if u := chunks[4].Usage; u == nil || *u != (usage{PromptTokens: 2, CompletionTokens: 3, TotalTokens: 5}) {
			t.Fatalf("usage %+v, want 2 + 3", u)
		}
	})

	t.Run("profile", func(t *testing.T) {
		for _, path := range []string{"/start_profile", "/stop_profile"} {
			resp, err := httpClient.Post(s.url+path, "application/json", nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || len(body) != 0 {
				t.Fatalf("POST %s = %d %q, want 200 with an empty body", path, resp.StatusCode, body)
			}
		}
	})

	t.Run("errors", func(t *testing.T) {
		for body, want := range map[string]int{
			`{"model":"other","prompt":"x"}`: http.StatusNotFound,
			`{"prompt":"x","max_tokens":0}`:  http.StatusBadRequest,
			`{"prompt":{"x":1}}`:             http.StatusBadRequest,
			`not json`:                       http.StatusBadRequest,
		} {
			if status, _ := postCompletion(t, s.url, body); status != want {
				t.Errorf("POST %s = %d, want %d", body, status, want)
			}
		}
	})

	if err := syscall.Kill(s.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if ws := s.wait(t); ws.ExitStatus() != 0 {
		t.Fatalf("server exit status %v", ws)
	}
	for _, f := range []string{s.stdout, s.stderr} {
		if strings.Contains(s.output(t, f), secret) {
			t.Errorf("%s holds a prompt", f)
		}
	}
}

// readEvents reads the server-sent events of r, each a T, until "[DONE]"
// or the end, which done tells apart; a chunk that does not decode fails
// the test.
func readEvents[T any](t *testing.T, r io.Reader) (chunks []T, done bool) {
	t.Helper()
	var bad error
	done, _ = sseData(r, func(payload string) error {
		var c T
		if err := json.Unmarshal([]byte(payload), &c); err != nil {
			bad = fmt.Errorf("chunk %q: %v", payload, err)
			return bad
		}
		chunks = append(chunks, c)
		return nil
	})
	if bad != nil {
		t.Fatal(bad)
	}
	return chunks, done
}

// engineOf returns the one live claim on gpu and checks that it belongs to
// the server's engine: a child of the API parent in the parent's group.
func engineOf(t *testing.T, s *testServer, b *fakegpu.Backend, gpu int) fakegpu.Process {
	t.Helper()
	procs := gpuProcs(t, b, gpu)
	if len(procs) != 1 {
		t.Fatalf("GPU %d processes = %+v, want the engine alone", gpu, procs)
	}
	st, err := readStat(procs[0].PID)
	if err != nil {
		t.Fatal(err)
	}
	if parent := s.cmd.Process.Pid; st.ppid != parent || st.pgid != parent {
		t.Fatalf("claimer %d has parent %d and group %d, want the API parent %d for both", procs[0].PID, st.ppid, st.pgid, parent)
	}
	return procs[0]
}

// engineServer starts a server whose engine holds 10 MiB of one fake
// GPU, with the extra flags, and waits until it is healthy; it returns
// the server, the GPUs and the engine.
func engineServer(t *testing.T, args ...string) (*testServer, *fakegpu.Backend, fakegpu.Process) {
	t.Helper()
	h := newHarness(t)
	dir, b := fakeGPUs(t, 1)
	s := h.startServer([]string{fakegpu.EnvDir + "=" + dir}, append([]string{"--load-s", "0", "--gpu-mem-mib", "10"}, args...)...)
	s.waitHealthy(t)
	return s, b, engineOf(t, s, b, 0)
}

func TestSIGTERMToParentStopsParentAndEngine(t *testing.T) {
	h := newHarness(t)
	dir, b := fakeGPUs(t, 2)
	s := h.startServer([]string{fakegpu.EnvDir + "=" + dir, "CUDA_VISIBLE_DEVICES=1"},
		"--load-s", "0", "--gpu-mem-mib", "1000")
	s.waitHealthy(t)
	if used := usedMiB(t, b, 1); used != 1000 {
		t.Fatalf("GPU 1 used %d MiB when healthy, want 1000", used)
	}
	if used := usedMiB(t, b, 0); used != 0 {
		t.Fatalf("GPU 0 used %d MiB, want 0: it is not visible to the server", used)
	}
	engine := engineOf(t, s, b, 1)

	if err := syscall.Kill(s.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if ws := s.wait(t); !ws.Exited() || ws.ExitStatus() != 0 {
		t.Fatalf("server ended with %v, want exit 0", ws)
	}
	// The parent waits for its engine before exiting.
	if alive(engine) {
		t.Fatalf("engine %d still runs after the parent exited", engine.PID)
	}
	if used := usedMiB(t, b, 1); used != 0 {
		t.Fatalf("GPU 1 used %d MiB after shutdown, want 0", used)
	}
	if left := liveGroupMembers(t, s.cmd.Process.Pid); len(left) != 0 {
		t.Fatalf("group members left after shutdown: %v", left)
	}
}

func TestEngineExitsWhenParentDies(t *testing.T) {
	s, b, engine := engineServer(t)
	// SIGKILL to the parent alone: it cannot tell the engine anything.
	if err := syscall.Kill(s.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if ws := s.wait(t); !ws.Signaled() {
		t.Fatalf("server ended with %v, want killed", ws)
	}
	waitFor(t, "the orphaned engine to exit", func() bool { return !alive(engine) })
	if used := usedMiB(t, b, 0); used != 0 {
		t.Fatalf("GPU 0 used %d MiB after the engine exited, want 0", used)
	}
	if !strings.Contains(s.output(t, s.stderr), "parent said exit or died; exiting") {
		t.Fatal("the engine did not log that it noticed its parent's death")
	}
}

func TestSIGTERMDrainsInFlightRequests(t *testing.T) {
	h := newHarness(t)
	s := h.healthyServer("--load-s", "0", "--token-ms", "20", "--shutdown-timeout", "600")
	resp := s.post(t, "/v1/completions", `{"prompt":"x","max_tokens":30,"stream":true}`)
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first event %q, %v", line, err)
	}
	// The request is in flight.
	if err := syscall.Kill(s.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the server to stop accepting", func() bool {
		return strings.Contains(s.output(t, s.stderr), "stopped accepting connections")
	})
	if _, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://")); err == nil {
		t.Error("the server accepted a new connection while draining")
	}
	chunks, done := readEvents[completionResponse](t, br)
	if !done || len(chunks) != 29 {
		t.Fatalf("after SIGTERM the stream gave %d more chunks, done=%v; want the other 29 and [DONE]", len(chunks), done)
	}
	if ws := s.wait(t); ws.ExitStatus() != 0 {
		t.Fatalf("server ended with %v, want exit 0", ws)
	}
}

func TestShutdownTimeoutAbortsRequests(t *testing.T) {
	h := newHarness(t)
	// The request would take 10000 s; the drain allows 0.2 s.
	s := h.healthyServer("--load-s", "0", "--token-ms", "1000", "--shutdown-timeout", "0.2")
	resp := s.post(t, "/v1/completions", `{"prompt":"x","max_tokens":10000,"stream":true}`)
	if err := syscall.Kill(s.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if ws := s.wait(t); ws.ExitStatus() != 0 {
		t.Fatalf("server ended with %v, want exit 0", ws)
	}
	if _, done := readEvents[completionResponse](t, resp.Body); done {
		t.Fatal("an aborted stream ended with [DONE]")
	}
}

// ignoresSIGTERM reads the ignored-signal mask of pid.
func ignoresSIGTERM(t *testing.T, pid int) bool {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if mask, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			bits, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return bits&(1<<(uint(syscall.SIGTERM)-1)) != 0
		}
	}
	t.Fatalf("no SigIgn in /proc/%d/status", pid)
	return false
}

func TestIgnoreSIGTERM(t *testing.T) {
	s, _, engine := engineServer(t, "--ignore-sigterm")
	for _, pid := range []int{s.cmd.Process.Pid, engine.PID} {
		if !ignoresSIGTERM(t, pid) {
			t.Fatalf("process %d does not ignore SIGTERM", pid)
		}
	}
	// The kernel discards an ignored signal, so after this the server and
	// engine must still be there and serving.
	if err := syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if got := s.healthStatus(); got != http.StatusOK {
		t.Fatalf("health after SIGTERM = %d, want 200", got)
	}
	if s.exited() || !alive(engine) {
		t.Fatal("the server or its engine died of an ignored SIGTERM")
	}
	if err := syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if ws := s.wait(t); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("server ended with %v, want killed by SIGKILL", ws)
	}
}

func TestSetsidGrandchildHoldsMemoryOutsideTheGroup(t *testing.T) {
	h := newHarness(t)
	dir, b := fakeGPUs(t, 1)
	s := h.startServer([]string{fakegpu.EnvDir + "=" + dir, "CUDA_VISIBLE_DEVICES=0"},
		"--load-s", "0", "--gpu-mem-mib", "100", "--setsid-grandchild")
	s.waitHealthy(t)
	procs := gpuProcs(t, b, 0)
	if len(procs) != 2 {
		t.Fatalf("GPU 0 processes = %+v, want the engine and the grandchild", procs)
	}
	serverStat, err := readStat(s.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	var orphan *fakegpu.Process
	for i, p := range procs {
		st, err := readStat(p.PID)
		if err != nil {
			t.Fatal(err)
		}
		if st.pgid != s.cmd.Process.Pid {
			if st.sid == serverStat.sid || st.sid != st.pgid {
				t.Fatalf("claimer %d outside the group is in session %d (server's %d, its group %d); want a session of its own", p.PID, st.sid, serverStat.sid, st.pgid)
			}
			orphan = &procs[i]
		}
	}
	if orphan == nil {
		t.Fatalf("no claimer outside the server's group: %+v", procs)
	}

	if err := syscall.Kill(s.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if ws := s.wait(t); ws.ExitStatus() != 0 {
		t.Fatalf("server ended with %v, want exit 0", ws)
	}
	if used := usedMiB(t, b, 0); used != 100 {
		t.Fatalf("GPU 0 used %d MiB after shutdown, want the grandchild's 100", used)
	}
	if !alive(*orphan) {
		t.Fatal("the grandchild died with the server")
	}
	// The grandchild was reparented to this test process (a subreaper).
	if err := syscall.Kill(orphan.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(orphan.PID, &ws, 0, nil); err != nil {
		t.Fatalf("wait for the grandchild %d: %v", orphan.PID, err)
	}
	if used := usedMiB(t, b, 0); used != 0 {
		t.Fatalf("GPU 0 used %d MiB after the grandchild died, want 0", used)
	}
}

func TestCrashAfter(t *testing.T) {
	h := newHarness(t)
	dir, b := fakeGPUs(t, 1)
	s := h.startServer([]string{fakegpu.EnvDir + "=" + dir}, "--load-s", "0", "--gpu-mem-mib", "10", "--crash-after", "0.3")
	if ws := s.wait(t); !ws.Exited() || ws.ExitStatus() != 1 {
		t.Fatalf("server ended with %v, want exit 1", ws)
	}
	waitFor(t, "the engine's memory to be released", func() bool { return usedMiB(t, b, 0) == 0 })
}

func TestEngineSurvives(t *testing.T) {
	s, b, engine := engineServer(t, "--engine-survives")
	if err := syscall.Kill(s.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if ws := s.wait(t); ws.ExitStatus() != 0 {
		t.Fatalf("server ended with %v, want exit 0", ws)
	}
	waitFor(t, "the engine to see that its parent is gone", func() bool {
		return strings.Contains(s.output(t, s.stderr), "staying and holding GPU memory")
	})
	if !alive(engine) || usedMiB(t, b, 0) != 10 {
		t.Fatal("the engine did not survive its parent with its memory")
	}
	if members := liveGroupMembers(t, s.cmd.Process.Pid); len(members) != 1 || members[0] != engine.PID {
		t.Fatalf("group members %v, want the engine %d alone", members, engine.PID)
	}
}

func TestHoldPort(t *testing.T) {
	h := newHarness(t)
	s := h.healthyServer("--load-s", "0", "--hold-port")
	addr := strings.TrimPrefix(s.url, "http://")
	if err := syscall.Kill(s.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if ws := s.wait(t); ws.ExitStatus() != 0 {
		t.Fatalf("server ended with %v, want exit 0", ws)
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Fatalf("port %s is free after shutdown; want it held", addr)
	} else if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("listen on %s: %v, want EADDRINUSE", addr, err)
	}
	// Killing the group frees it.
	if err := syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	reapAdopted(t)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("port %s still held after the group was killed: %v", addr, err)
	}
	ln.Close()
}

func TestForkLeavesSleepersInTheGroup(t *testing.T) {
	h := newHarness(t)
	s := h.healthyServer("--load-s", "0", "--fork", "2")
	pgid := s.cmd.Process.Pid
	if members := liveGroupMembers(t, pgid); len(members) != 4 {
		t.Fatalf("group members %v, want parent, engine and 2 sleepers", members)
	}
	// SIGTERM to the API parent alone.
	if err := syscall.Kill(s.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if ws := s.wait(t); ws.ExitStatus() != 0 {
		t.Fatalf("server ended with %v, want exit 0", ws)
	}
	if members := liveGroupMembers(t, pgid); len(members) != 2 {
		t.Fatalf("group members after shutdown %v, want the 2 sleepers", members)
	}
}
