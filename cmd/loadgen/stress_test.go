package main

// The stress loads end to end: bin/loadgen against the stand-in on
// loopback with a slow consumer, a pause, bursts, and cancellation after
// the first chunk, whose release the stand-in's /metrics shows (or,
// switched, never does).

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"warden/pkg/loadgen"
)

// stressRun runs bin/loadgen at 10 requests/s, steady unless extra says
// otherwise, and returns the result and every record.
func stressRun(t *testing.T, url string, args []string, extra ...string) (loadgen.Result, []loadgen.Record) {
	res, recs, _, _ := stressRunOut(t, url, args, extra...)
	return res, recs
}

// stressRunOut is stressRun, with loadgen's output and the result
// directory.
func stressRunOut(t *testing.T, url string, args []string, extra ...string) (loadgen.Result, []loadgen.Record, string, string) {
	t.Helper()
	dir := t.TempDir()
	resDir := filepath.Join(dir, "client")
	all := append(append([]string{"run", "--base-url", url, "--model", "m", "--load-point", "stress", "--request-rate", "10",
		"--max-concurrency", "8", "--ignore-eos", "--workload-seed", "7", "--result-dir", resDir}, args...), shortTimeline("10")...)
	code, out := loadgenRun(t, nil, append(all, extra...)...)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	res := readResult(t, resDir)
	return res, readRecords(t, resDir, res), out, resDir
}

// TestStressSlowConsumer: reading audio at real time and text at 50
// token chunks a second, every request lasts at least its audio's
// duration after its first audio chunk and its token chunks / 50 after
// its first token, and the client says how long it held back.
func TestStressSlowConsumer(t *testing.T) {
	url := startStandin(t, "1", "--server-kind", "vllm-omni")
	dir := t.TempDir()
	res, recs := stressRun(t, url, []string{"--manifest", textManifest(t, dir, 400), "--endpoint", "chat", "--modalities", "text,audio",
		"--server-kind", "vllm-omni", "--seed-records", "off", "--consume-rtf", "1", "--consume-tokens-per-s", "50"})
	if res.Stress == nil || res.Stress.ConsumeRTF != 1 || res.Stress.Held.N != len(recs) || res.Stress.Release != nil {
		t.Fatalf("stress block %+v", res.Stress)
	}
	for _, r := range recs {
		if r.Class != loadgen.Success || r.Audio == nil || len(r.Audio.Chunks) == 0 || r.Stress == nil {
			t.Fatalf("record %+v", r)
		}
		audio := time.Duration(r.Audio.DurationS * float64(time.Second))
		text := time.Duration(r.Chunks) * time.Second / 50
		if got := time.Duration(r.EndNS - r.Audio.Chunks[0].AtNS); got < audio {
			t.Fatalf("request %s ended %v after its first audio chunk, its audio lasts %v", r.ID, got, audio)
		}
		if got := time.Duration(r.EndNS - r.FirstTokenNS); got < text {
			t.Fatalf("request %s ended %v after its first token, %d chunks at 50/s take %v", r.ID, got, r.Chunks, text)
		}
		if r.Stress.HeldNS <= 0 || r.Stress.Paused || r.Stress.CancelSelected {
			t.Fatalf("request %s stress %+v", r.ID, r.Stress)
		}
	}
}

// TestStressPauseInBursts: bursts of 4 (--arrival burst:4 on an open
// loop) whose streams the client stops reading for 0.3 s from the first
// chunk 0.01 s after the send: every request is paused at least that
// long, between two chunks of its stream, and still succeeds.
func TestStressPauseInBursts(t *testing.T) {
	url := startStandin(t, "5")
	dir := t.TempDir()
	m := materialize(t, dir, "--id", "P", "--input-fixed", "4", "--output-fixed", "8", "--num-requests", "200")
	res, recs := stressRun(t, url, []string{"--manifest", m, "--arrival", "burst:4", "--pause-after-s", "0.01", "--pause-s", "0.3"})
	if res.Load.Arrival != "burst:4" || res.Stress == nil || res.Stress.Paused != len(recs) || res.Stress.PausedFailed != 0 {
		t.Fatalf("load %+v, stress %+v", res.Load, res.Stress)
	}
	slices.SortFunc(recs, func(a, b loadgen.Record) int { return a.Row - b.Row })
	for i, r := range recs {
		if i%4 != 0 && r.PlannedNS != recs[i-1].PlannedNS {
			t.Fatalf("request %d planned apart from its burst", i)
		}
		s := r.Stress
		if r.Class != loadgen.Success || s == nil || !s.Paused {
			t.Fatalf("record %+v", r)
		}
		if s.PauseEndNS-s.PauseStartNS < int64(300*time.Millisecond) || s.PauseStartNS < r.FirstTokenNS || s.PauseEndNS > r.EndNS {
			t.Fatalf("request %s paused %v, from %d to %d; first token %d, end %d", r.ID,
				time.Duration(s.PauseEndNS-s.PauseStartNS), s.PauseStartNS, s.PauseEndNS, r.FirstTokenNS, r.EndNS)
		}
	}
}

// cancelRun runs a cancellation stress of half the requests, 40 tokens
// of 10 ms each, with a release bound of boundS, against a stand-in
// with extra flags.
func cancelRun(t *testing.T, boundS string, standin ...string) (loadgen.Result, []loadgen.Record) {
	t.Helper()
	url := startStandin(t, "10", standin...)
	m := materialize(t, t.TempDir(), "--id", "C", "--input-fixed", "4", "--output-fixed", "40", "--num-requests", "200")
	res, recs, out, dir := stressRunOut(t, url, []string{"--manifest", m, "--cancel-after-first-chunk", "0.5", "--cancel-release-bound-s", boundS,
		"--seed-records", "on", "--run-id", "cancel"})
	if want := "release=" + res.Stress.Release.Verdict + " findings=" + strings.Join(res.Stress.Findings, ","); !strings.Contains(out, want) {
		t.Fatalf("output lacks %q:\n%s", want, out)
	}
	cancelled := 0
	for _, r := range recs {
		selected := loadgen.CancelSelected(7, r.Row, 0.5)
		if r.Stress == nil || r.Stress.CancelSelected != selected {
			t.Fatalf("row %d (selected %v): stress %+v", r.Row, selected, r.Stress)
		}
		if selected != (r.Class == loadgen.ClientCancelled) || selected != (r.Stress.CancelledNS >= r.FirstTokenNS && r.FirstTokenNS > 0) {
			t.Fatalf("row %d (selected %v): %s, %s, stress %+v", r.Row, selected, r.Class, r.Reason, r.Stress)
		}
		if selected {
			cancelled++
		} else if r.Class != loadgen.Success {
			t.Fatalf("row %d: %s %s", r.Row, r.Class, r.Reason)
		}
	}
	s := res.Stress
	if cancelled == 0 || cancelled == len(recs) || s.CancelSelected != cancelled || s.Cancelled != cancelled ||
		res.Totals.ByClass[loadgen.ClientCancelled] != cancelled {
		t.Fatalf("%d of %d cancelled; stress %+v, totals %+v", cancelled, len(recs), s, res.Totals)
	}
	if res.Clean.Latency.E2E.N != res.Clean.Completed || res.Clean.Latency.TTFT.N != res.Clean.Completed {
		t.Fatalf("clean latency counts %d, %d of %d successes", res.Clean.Latency.E2E.N, res.Clean.Latency.TTFT.N, res.Clean.Completed)
	}
	checkCancelEvents(t, dir, res, recs)
	return res, recs
}

// checkCancelEvents: events.jsonl holds a cancelled event, at the
// record's instant, for each cancelled request and for no other.
func checkCancelEvents(t *testing.T, dir string, res loadgen.Result, recs []loadgen.Record) {
	t.Helper()
	if err := loadgen.VerifySeedRecords(dir, res.SeedRecords); err != nil {
		t.Fatal(err)
	}
	at := map[string]int64{}
	for _, e := range readJSONL[loadgen.SeedEvent](t, filepath.Join(dir, res.SeedRecords.EventsFile)) {
		if e.Event == loadgen.EventCancelled {
			at[e.RequestID] = e.MonoNS
		}
	}
	n := 0
	for _, r := range recs {
		if got, ok := at[r.ID]; ok != (r.Stress.CancelledNS != 0) || ok && got != r.Stress.CancelledNS {
			t.Fatalf("request %s: cancelled event %v at %d, record %d", r.ID, ok, got, r.Stress.CancelledNS)
		} else if ok {
			n++
		}
	}
	if n != res.Stress.Cancelled {
		t.Fatalf("%d cancelled events, %d cancelled", n, res.Stress.Cancelled)
	}
}

// TestStressCancelReleased: the cancelled requests are exactly the
// seed's set, client-cancelled, outside the latency summaries, and the
// stand-in's running gauge reads 0 after the drain (the bound is long:
// the check returns at the first 0).
func TestStressCancelReleased(t *testing.T) {
	res, _ := cancelRun(t, "30")
	c := res.Stress.Release
	if c == nil || c.Verdict != loadgen.ReleaseReleased || !c.Released || c.Running == nil || *c.Running != 0 ||
		c.Metric != "vllm:num_requests_running" || len(res.Stress.Findings) != 0 {
		t.Fatalf("release %+v, findings %v", c, res.Stress.Findings)
	}
}

// TestStressCancelUnreleased: a server that keeps the cancelled
// requests running: the gauge stays at them past the bound, a finding.
func TestStressCancelUnreleased(t *testing.T) {
	res, _ := cancelRun(t, "0.5", "--keep-cancelled-running")
	c := res.Stress.Release
	if c == nil || c.Verdict != loadgen.ReleaseUnreleased || c.Released || c.Running == nil ||
		*c.Running < float64(res.Stress.Cancelled) || c.WaitedS < c.BoundS ||
		!slices.Equal(res.Stress.Findings, []string{loadgen.FindingCancelUnreleased}) {
		t.Fatalf("release %+v (%s cancelled), findings %v", c, strconv.Itoa(res.Stress.Cancelled), res.Stress.Findings)
	}
}

// TestStressFlagsRefused: stress options out of range are refused before
// the start (exit 2).
func TestStressFlagsRefused(t *testing.T) {
	dir := t.TempDir()
	m := textManifest(t, dir, 10)
	for _, bad := range [][]string{{"--cancel-after-first-chunk", "1.5"}, {"--pause-after-s", "1"}, {"--consume-rtf", "-1"},
		{"--pause-s", "-0.5"}} {
		args := append([]string{"run", "--manifest", m, "--base-url", "http://127.0.0.1:1", "--model", "m", "--load-point", "x",
			"--request-rate", "1", "--result-dir", filepath.Join(dir, "r")}, bad...)
		if code, out := loadgenRun(t, nil, args...); code != 2 {
			t.Fatalf("%v: exit %d\n%s", bad, code, out)
		}
	}
}

// TestStressPauseDroppedStream: the server drops every stream after its
// fourth event while the client pauses from its first chunk: every
// request is paused and fails, transport-error, its reason saying the
// stream failed after the pause.
func TestStressPauseDroppedStream(t *testing.T) {
	url := startStandin(t, "5", "--drop-stream-after-events", "4")
	m := materialize(t, t.TempDir(), "--id", "D", "--input-fixed", "4", "--output-fixed", "40", "--num-requests", "200")
	res, recs, _, dir := stressRunOut(t, url, []string{"--manifest", m, "--pause-s", "0.2", "--seed-records", "on", "--run-id", "pause"})
	if err := loadgen.VerifySeedRecords(dir, res.SeedRecords); err != nil {
		t.Fatal(err)
	}
	pauses := 0
	for _, e := range readJSONL[loadgen.SeedEvent](t, filepath.Join(dir, res.SeedRecords.EventsFile)) {
		if e.Event == loadgen.EventPauseStart || e.Event == loadgen.EventPauseEnd {
			pauses++
		}
	}
	if pauses != 2*len(recs) {
		t.Fatalf("%d pause events for %d paused requests", pauses, len(recs))
	}
	if res.Stress.Paused != len(recs) || res.Stress.PausedFailed != len(recs) || res.Clean.Completed != 0 {
		t.Fatalf("stress %+v, clean %+v", res.Stress, res.Clean)
	}
	for _, r := range recs {
		if r.Class != loadgen.TransportError || !strings.HasSuffix(r.Reason, "; after the client's pause") || !r.Stress.Paused ||
			r.Stress.PauseEndNS-r.Stress.PauseStartNS < int64(200*time.Millisecond) {
			t.Fatalf("record %+v, stress %+v", r, r.Stress)
		}
	}
}
