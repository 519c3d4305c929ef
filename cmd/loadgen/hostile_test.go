package main

// Hostile servers: the stand-in's misbehaviour switches (cmd/standin
// misbehave.go) against bin/loadgen, and the client validator on what it
// wrote. None of these runs may pass.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"warden/pkg/contract"
	"warden/pkg/loadgen"
)

// shortTimeline: 0.2 s warm-up, three 0.2 s clean segments, no profile
// windows; the drain bound is the caller's.
func shortTimeline(drainS string) []string {
	return []string{"--warmup-seconds", "0.2", "--clean-segment-seconds", "0.2", "--num-clean-segments", "3",
		"--drain-timeout-seconds", drainS}
}

// validateClient runs the client validator on a result directory of
// segments clean segments of segS seconds, and returns its verdict as the
// last JSON line of its output says it.
func validateClient(t *testing.T, dir string, segments int, segS float64) contract.Result {
	t.Helper()
	o := contract.DefaultClient()
	o.Segments, o.SegmentSeconds = segments, segS
	var buf bytes.Buffer
	if err := contract.WriteVerdict(&buf, "client", false, contract.ClientDir(dir, o)); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var r contract.Result
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		t.Fatalf("validator's last line %q: %v", lines[len(lines)-1], err)
	}
	return r
}

// textManifest writes n text-prompt rows of three words and 4 output tokens.
func textManifest(t *testing.T, dir string, n int) string {
	t.Helper()
	var buf bytes.Buffer
	for i := 0; i < n; i++ {
		fmt.Fprintf(&buf, `{"id":"T-%04d","prompt":"one two three","input_tokens":3,"output_tokens":4,"arrival":"steady"}`+"\n", i)
	}
	p := filepath.Join(dir, "text.jsonl")
	if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestHostileEndlessStreams: a server that answers /health and then
// streams a token every 10 ms forever. Every admitted request is still
// outstanding at the drain bound: abandoned, exit 4, an incomplete result
// with no clean completion, and the validator fails it.
func TestHostileEndlessStreams(t *testing.T) {
	url := startStandin(t, "10", "--endless-streams")
	dir := t.TempDir()
	manifest := steadyManifest(t, dir, "E", "100")
	resDir := filepath.Join(dir, "client")
	code, out := runClosedLoop(t, manifest, url, "4", resDir, shortTimeline("0.3"))
	if code != 4 || !strings.Contains(out, "drain bound reached") {
		t.Fatalf("exit %d, want 4 (drain bound reached)\n%s", code, out)
	}
	res := readResult(t, resDir)
	recs := readRecords(t, resDir, res)
	if res.Complete || !res.Drain.TimedOut || res.Drain.Abandoned != 4 || res.Drain.Unfinished != 4 || len(recs) != 4 || res.Clean.Completed != 0 {
		t.Fatalf("complete %v, drain %+v, %d records, clean completed %d", res.Complete, res.Drain, len(recs), res.Clean.Completed)
	}
	for _, r := range recs {
		if r.Class != loadgen.DeadlineExceeded || r.Segment != "drain" || r.EndNS != 0 {
			t.Fatalf("request %s: class %s in %s, end %d", r.ID, r.Class, r.Segment, r.EndNS)
		}
	}
	v := validateClient(t, resDir, 3, 0.2)
	for _, want := range []string{"no completion in the clean interval", "4 request(s) abandoned", "did not complete"} {
		if v.Verdict != "fail" || !strings.Contains(v.Detail, want) {
			t.Fatalf("validator %s %q, want fail with %q", v.Verdict, v.Detail, want)
		}
	}
}

// TestHostileStreamBreaks: streams that end with [DONE] but cannot be a
// correct completion. Each request is invalid-output for its reason; the
// timeline still runs to its end (exit 0), and the validator fails the
// run. A text prompt whose count differs is only counted.
func TestHostileStreamBreaks(t *testing.T) {
	for _, tc := range []struct {
		brk, prompts, reason string
	}{
		{"no-tokens", "ids", "no token chunk in the stream, usage reports 4 output tokens"},
		{"not-json", "ids", "not a JSON object"},
		{"extra-chunk", "ids", "5 token chunks, usage reports 4 output tokens"},
		{"prompt-count", "ids", "9 prompt tokens, the manifest's token ids are 8"},
		{"negative", "text", "negative token count in usage (-1 prompt, 4 output)"},
		{"prompt-count", "text", ""},
	} {
		t.Run(tc.brk+"-"+tc.prompts, func(t *testing.T) {
			url := startStandin(t, "1", "--stream-break", tc.brk)
			dir := t.TempDir()
			manifest := textManifest(t, dir, 3000)
			if tc.prompts == "ids" {
				manifest = steadyManifest(t, dir, "B", "3000")
			}
			resDir := filepath.Join(dir, "client")
			code, out := runClosedLoop(t, manifest, url, "2", resDir, shortTimeline("10"))
			if code != 0 {
				t.Fatalf("exit %d\n%s", code, out)
			}
			res := readResult(t, resDir)
			recs := readRecords(t, resDir, res)
			if len(recs) == 0 || !res.Complete {
				t.Fatalf("%d records, complete %v", len(recs), res.Complete)
			}
			v := validateClient(t, resDir, 3, 0.2)
			if tc.reason == "" {
				// The server's tokenizer counts a text prompt: recorded.
				if res.Totals.InputMismatches != len(recs) || res.Totals.ByClass[loadgen.Success] != len(recs) || v.Verdict != "pass" {
					t.Fatalf("totals %+v, validator %s %q", res.Totals, v.Verdict, v.Detail)
				}
				return
			}
			for _, r := range recs {
				if r.Class != loadgen.InvalidOutput || !strings.Contains(r.Reason, tc.reason) || r.HTTPStatus != 200 {
					t.Fatalf("request %s: %s %q, want invalid-output %q", r.ID, r.Class, r.Reason, tc.reason)
				}
			}
			if res.Totals.ByClass[loadgen.InvalidOutput] != len(recs) || res.Clean.Completed != 0 {
				t.Fatalf("totals %+v, clean completed %d", res.Totals, res.Clean.Completed)
			}
			want := fmt.Sprintf("%d request(s) anywhere in the run were invalid output", len(recs))
			if v.Verdict != "fail" || !strings.Contains(v.Detail, want) || !strings.Contains(v.Detail, "no completion in the clean interval") {
				t.Fatalf("validator %s %q, want fail with %q", v.Verdict, v.Detail, want)
			}
		})
	}
}

// TestDrainAbandonsStalledRequests: the server stalls every request begun
// after the second clean segment started, past the drain bound. The
// stalled requests are abandoned (deadline-exceeded, drain.abandoned),
// loadgen exits 4 with its results written, and the validator fails the
// run although its clean interval holds completions.
func TestDrainAbandonsStalledRequests(t *testing.T) {
	dir := t.TempDir()
	stall := filepath.Join(dir, "stall")
	url := startStandin(t, "1", "--endless-after-file", stall)
	manifest := steadyManifest(t, dir, "S", "20000")
	resDir := filepath.Join(dir, "client")
	phases := filepath.Join(dir, "phases.jsonl")
	cmd := exec.Command(loadgenBin, "run", "--manifest", manifest, "--base-url", url, "--model", "m",
		"--load-point", "saturation", "--request-rate", "inf", "--max-concurrency", "4", "--ignore-eos",
		"--warmup-seconds", "0.2", "--clean-segment-seconds", "0.3", "--num-clean-segments", "2",
		"--drain-timeout-seconds", "0.5", "--result-dir", resDir, "--phase-file", phases)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	// Reaps loadgen; ends when it exits.
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	waitFor(t, "the second clean segment", func() bool {
		data, _ := os.ReadFile(phases)
		return bytes.Count(data, []byte(`"phase":"clean"`)) >= 2
	})
	if err := os.WriteFile(stall, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	<-exited
	if ee, ok := waitErr.(*exec.ExitError); !ok || ee.ExitCode() != 4 {
		t.Fatalf("loadgen: %v, want exit 4\n%s", waitErr, out.String())
	}
	res := readResult(t, resDir)
	recs := readRecords(t, resDir, res)
	abandoned := 0
	for _, r := range recs {
		if r.Class == loadgen.DeadlineExceeded {
			abandoned++
			if r.Segment != "drain" || r.EndNS != 0 {
				t.Fatalf("abandoned request %s in %s, end %d", r.ID, r.Segment, r.EndNS)
			}
		} else if r.Class != loadgen.Success {
			t.Fatalf("request %s: %s (%s)", r.ID, r.Class, r.Reason)
		}
	}
	if res.Complete || !res.Drain.TimedOut || abandoned == 0 || res.Drain.Abandoned != abandoned || res.Drain.Unfinished != abandoned ||
		res.Totals.ByClass[loadgen.DeadlineExceeded] != abandoned || res.Clean.Completed == 0 {
		t.Fatalf("complete %v, drain %+v, %d abandoned records, clean completed %d", res.Complete, res.Drain, abandoned, res.Clean.Completed)
	}
	data, _ := os.ReadFile(phases)
	if bytes.Contains(data, []byte(`"done"`)) {
		t.Fatalf("an abandoning run wrote a done phase: %s", data)
	}
	v := validateClient(t, resDir, 2, 0.3)
	want := fmt.Sprintf("%d request(s) abandoned at the drain bound: a run that abandoned any request is never complete", abandoned)
	if v.Verdict != "fail" || !strings.Contains(v.Detail, want) || strings.Contains(v.Detail, "no completion") {
		t.Fatalf("validator %s %q, want fail with %q", v.Verdict, v.Detail, want)
	}
}

// TestProfileCallsFail: /start_profile answers 500 and /stop_profile 503.
// Both are recorded for both windows, the timeline goes on, and the
// validator fails the run with class profile-artifact, the failure the
// seed allows one exact rerun for.
func TestProfileCallsFail(t *testing.T) {
	url := startStandin(t, "1", "--start-profile-status", "500", "--stop-profile-status", "503")
	dir := t.TempDir()
	manifest := steadyManifest(t, dir, "F", "20000")
	resDir := filepath.Join(dir, "client")
	code, out := runClosedLoop(t, manifest, url, "2", resDir, timeline)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	res := readResult(t, resDir)
	if len(res.ProfileWindows) != 2 || !res.Complete {
		t.Fatalf("windows %+v, complete %v", res.ProfileWindows, res.Complete)
	}
	for _, w := range res.ProfileWindows {
		if w.StartStatus != 500 || w.StopStatus != 503 || w.StartError == "" || w.StopError == "" {
			t.Fatalf("window %+v", w)
		}
	}
	v := validateClient(t, resDir, 3, 0.5)
	if v.Verdict != "fail" || v.Class != "profile-artifact" || v.Figures["profile_call_failures"] != 4 ||
		!strings.Contains(v.Detail, "profile window 1: /start_profile answered 500") || !strings.Contains(v.Detail, "profile window 2: /stop_profile answered 503") {
		t.Fatalf("validator %+v", v)
	}
}
