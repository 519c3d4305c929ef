package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"warden/pkg/phasefile"
)

// readPhases reads a phase file.
func readPhases(t *testing.T, path string) []phasefile.Line {
	t.Helper()
	lines, err := phasefile.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

func phaseNames(lines []phasefile.Line) []string {
	var names []string
	for _, l := range lines {
		names = append(names, l.Phase)
	}
	return names
}

// readResult reads result.json, checking that it holds exactly the
// documented keys (so no prompt or text can hide in it).
func readResult(t *testing.T, dir string) result {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]any
	if err := json.Unmarshal(data, &keys); err != nil {
		t.Fatal(err)
	}
	var got []string
	for k := range keys {
		got = append(got, k)
	}
	sort.Strings(got)
	want := []string{"completed", "ended_at", "failed", "measure_s", "output_tokens_per_s", "requests", "schema", "started_at", "throughput_rps"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("result.json keys %v, want %v", got, want)
	}
	var r result
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestClientAgainstServer(t *testing.T) {
	for _, stream := range []bool{false, true} {
		name := map[bool]string{false: "plain", true: "stream"}[stream]
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			s := h.healthyServer("--load-s", "0", "--token-ms", "1")
			dir := t.TempDir()
			phaseFile := filepath.Join(dir, "phases.jsonl")
			args := []string{"--url", s.url, "--warmup-s", "0.2", "--measure-s", "0.5", "--drain-s", "10",
				"--concurrency", "2", "--max-tokens", "4", "--result-dir", filepath.Join(dir, "out")}
			if stream {
				args = append(args, "--stream")
			}
			// The phase file comes from the environment, as the controller passes it.
			h.runClient([]string{"WARDEN_PHASE_FILE=" + phaseFile}, args...)

			r := readResult(t, filepath.Join(dir, "out"))
			if r.Schema != 1 || r.Completed <= 0 || r.Failed != 0 || r.Requests != r.Completed+r.Failed {
				t.Fatalf("result %+v: want completed > 0, no failures, requests = completed + failed", r)
			}
			if r.MeasureS < 0.5 || !r.EndedAt.After(r.StartedAt) {
				t.Fatalf("result %+v: want a measured interval of at least 0.5 s", r)
			}
			if want := float64(r.Completed) / r.MeasureS; r.ThroughputRPS != want {
				t.Errorf("throughput_rps %v, want completed/measure_s = %v", r.ThroughputRPS, want)
			}
			if want := float64(r.Completed*4) / r.MeasureS; r.OutputTokensPerS != want {
				t.Errorf("output_tokens_per_s %v, want 4 tokens per completed request = %v", r.OutputTokensPerS, want)
			}

			lines := readPhases(t, phaseFile)
			if got := phaseNames(lines); !reflect.DeepEqual(got, []string{"warmup", "clean", "drain", "drained", "done"}) {
				t.Fatalf("phases %v, want warmup, clean, drain, drained, done", got)
			}
			for i := 1; i < len(lines); i++ {
				prev, err1 := time.Parse(time.RFC3339Nano, lines[i-1].T)
				cur, err2 := time.Parse(time.RFC3339Nano, lines[i].T)
				if err1 != nil || err2 != nil {
					t.Fatalf("phase times %q, %q: %v %v", lines[i-1].T, lines[i].T, err1, err2)
				}
				if lines[i].MonoNS < lines[i-1].MonoNS || cur.Before(prev) {
					t.Fatalf("phase %d goes back in time: %+v then %+v", i, lines[i-1], lines[i])
				}
			}
			if clean := lines[2].MonoNS - lines[1].MonoNS; clean < int64(500*time.Millisecond) {
				t.Fatalf("clean phase lasted %d ns, want at least 0.5 s", clean)
			}
		})
	}
}

func TestClientFailExits2AfterWarmup(t *testing.T) {
	h := newHarness(t)
	s := h.healthyServer("--load-s", "0")
	dir := t.TempDir()
	phaseFile := filepath.Join(dir, "phases.jsonl")
	c := h.start(nil, "client", "--url", s.url, "--warmup-s", "0.1", "--measure-s", "1",
		"--result-dir", dir, "--phase-file", phaseFile, "--fail")
	if ws := c.wait(t); !ws.Exited() || ws.ExitStatus() != 2 {
		t.Fatalf("client ended with %v, want exit 2", ws)
	}
	if got := phaseNames(readPhases(t, phaseFile)); !reflect.DeepEqual(got, []string{"warmup"}) {
		t.Fatalf("phases %v, want warmup only", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "result.json")); !os.IsNotExist(err) {
		t.Fatalf("result.json after --fail: %v, want none", err)
	}
}

func TestClientAgainstDownServerCountsFailures(t *testing.T) {
	h := newHarness(t)
	// A port nothing listens on: connections are refused at once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	h.runClient(nil, "--url", url, "--warmup-s", "0", "--measure-s", "0.3", "--drain-s", "1", "--result-dir", dir)
	r := readResult(t, dir)
	if r.Completed != 0 || r.Failed == 0 || r.Requests != r.Failed || r.ThroughputRPS != 0 {
		t.Fatalf("result %+v: want only failures", r)
	}
}

func TestClientMaxRequests(t *testing.T) {
	h := newHarness(t)
	s := h.healthyServer("--load-s", "0", "--token-ms", "0")
	dir := t.TempDir()
	h.runClient(nil, "--url", s.url, "--warmup-s", "0", "--measure-s", "0.5",
		"--concurrency", "3", "--max-requests", "5", "--result-dir", dir)
	if r := readResult(t, dir); r.Requests > 5 {
		t.Fatalf("result %+v: more than --max-requests 5", r)
	}
}

func TestClientDrainExtra(t *testing.T) {
	h := newHarness(t)
	s := h.healthyServer("--load-s", "0")
	dir := t.TempDir()
	phaseFile := filepath.Join(dir, "phases.jsonl")
	h.runClient(nil, "--url", s.url, "--warmup-s", "0", "--measure-s", "0.2",
		"--drain-extra-s", "0.5", "--phase-file", phaseFile)
	lines := readPhases(t, phaseFile)
	if got := phaseNames(lines); !reflect.DeepEqual(got, []string{"warmup", "clean", "drain", "drained", "done"}) {
		t.Fatalf("phases %v", got)
	}
	if d := lines[3].MonoNS - lines[2].MonoNS; d < int64(500*time.Millisecond) {
		t.Fatalf("drain lasted %v, want at least the extra 0.5 s", time.Duration(d))
	}
}

// --result-delay-s comes between the drained line and the done line;
// --no-drained-line writes none.
func TestClientResultDelay(t *testing.T) {
	h := newHarness(t)
	s := h.healthyServer("--load-s", "0")
	for _, tc := range []struct {
		flags []string
		want  []string
	}{
		{nil, []string{"warmup", "clean", "drain", "drained", "done"}},
		{[]string{"--no-drained-line"}, []string{"warmup", "clean", "drain", "done"}},
	} {
		phaseFile := filepath.Join(t.TempDir(), "phases.jsonl")
		h.runClient(nil, append([]string{"--url", s.url, "--warmup-s", "0", "--measure-s", "0.2",
			"--result-delay-s", "0.5", "--phase-file", phaseFile}, tc.flags...)...)
		lines := readPhases(t, phaseFile)
		if got := phaseNames(lines); !reflect.DeepEqual(got, tc.want) {
			t.Fatalf("%v: phases %v, want %v", tc.flags, got, tc.want)
		}
		if d := lines[len(lines)-1].MonoNS - lines[len(lines)-2].MonoNS; d < int64(500*time.Millisecond) {
			t.Fatalf("%v: %s to done %v, want at least the 0.5 s result delay", tc.flags, tc.want[len(tc.want)-2], time.Duration(d))
		}
	}
	// a drain cut at --drain-s (requests abandoned) has no drained line
	stalled := h.healthyServer("--load-s", "0", "--stall-after-s", "0", "--stall-s", "30")
	phaseFile := filepath.Join(t.TempDir(), "phases.jsonl")
	h.runClient(nil, "--url", stalled.url, "--warmup-s", "0", "--measure-s", "0.2", "--drain-s", "0.2", "--phase-file", phaseFile)
	if got := phaseNames(readPhases(t, phaseFile)); !reflect.DeepEqual(got, []string{"warmup", "clean", "drain", "done"}) {
		t.Fatalf("an abandoning drain's phases %v, want no drained line", got)
	}
}

func TestClientHangStaysInDrain(t *testing.T) {
	h := newHarness(t)
	s := h.healthyServer("--load-s", "0")
	dir := t.TempDir()
	phaseFile := filepath.Join(dir, "phases.jsonl")
	c := h.start(nil, "client", "--url", s.url, "--warmup-s", "0", "--measure-s", "0.2",
		"--phase-file", phaseFile, "--result-dir", dir, "--hang")
	waitFor(t, "the drain phase", func() bool {
		data, _ := os.ReadFile(phaseFile)
		return strings.Contains(string(data), `"drain"`)
	})
	waitFor(t, "the client to say it hangs", func() bool {
		return strings.Contains(c.output(t, c.stderr), "hanging in drain")
	})
	if err := syscall.Kill(c.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if ws := c.wait(t); ws.ExitStatus() != 1 {
		t.Fatalf("hanging client ended with %v on SIGTERM, want exit 1", ws)
	}
	if got := phaseNames(readPhases(t, phaseFile)); !reflect.DeepEqual(got, []string{"warmup", "clean", "drain"}) {
		t.Fatalf("phases %v, want no done", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "result.json")); !os.IsNotExist(err) {
		t.Fatalf("result.json from a hanging client: %v, want none", err)
	}
}
