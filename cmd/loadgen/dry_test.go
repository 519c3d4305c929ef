package main

// The seed's dry test (client contract item 6): CPU-only, real processes,
// bin/loadgen against the stand-in server on loopback. It proves fixed
// segment durations, saturation concurrency, exact burst timing, no
// manifest wrap, exact output-token requests and that no prompt or
// generated text reaches any output. Assertions read the recorded
// timestamps, with tolerances meant for a loaded two-core machine.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"warden/internal/testutil/testbin"
	"warden/internal/testutil/testgroup"
	"warden/pkg/loadgen"
	"warden/pkg/phasefile"
)

var loadgenBin, standinBin string

func TestMain(m *testing.M) {
	os.Exit(testbin.Run("loadgen-test-", []string{".", "../standin"}, func(dir string) int {
		loadgenBin = filepath.Join(dir, "loadgen")
		standinBin = filepath.Join(dir, "standin")
		return m.Run()
	}))
}

// tolerance for wall-clock assertions on seconds-scale intervals.
const tolerance = 250 * time.Millisecond

// startStandin starts a stand-in server on a free loopback port, with
// extra flags (misbehaviour switches), and stops it (SIGTERM, then its
// group) at the test's end.
func startStandin(t *testing.T, tokenMS string, extra ...string) string {
	t.Helper()
	dir := t.TempDir()
	portFile := filepath.Join(dir, "port")
	cmd := exec.Command(standinBin, append([]string{"server", "--port", "0", "--port-file", portFile, "--load-s", "0",
		"--token-ms", tokenMS, "--model", "m", "--shutdown-timeout", "1"}, extra...)...)
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	testgroup.Start(t, cmd, 10*time.Second)
	var url string
	waitFor(t, "the stand-in to listen and be healthy", func() bool {
		if url == "" {
			b, err := os.ReadFile(portFile)
			if err != nil || len(bytes.TrimSpace(b)) == 0 {
				return false
			}
			url = "http://127.0.0.1:" + strings.TrimSpace(string(b))
		}
		resp, err := http.Get(url + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return url
}

// waitFor polls cond every 20 ms for up to 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// loadgenRun runs bin/loadgen with args and returns its exit code and
// combined output.
func loadgenRun(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(loadgenBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String()
	}
	t.Fatalf("loadgen %v: %v", args, err)
	return -1, ""
}

func materialize(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out := filepath.Join(dir, "manifest.jsonl")
	if code, o := loadgenRun(t, nil, append([]string{"materialize", "--out", out}, args...)...); code != 0 {
		t.Fatalf("materialize: exit %d\n%s", code, o)
	}
	return out
}

// steadyManifest materializes n steady requests of 8 input and 4 output
// tokens, with the manifest id id, into dir.
func steadyManifest(t *testing.T, dir, id, n string) string {
	t.Helper()
	return materialize(t, dir, "--id", id, "--input-fixed", "8", "--output-fixed", "4",
		"--arrival", "steady", "--num-requests", n, "--workload-seed", "1")
}

// runClosedLoop runs the saturation closed loop of concurrency requests
// over manifest against url into resDir, with the timeline's flags; it
// returns loadgen's exit code and output.
func runClosedLoop(t *testing.T, manifest, url, concurrency, resDir string, timeline []string) (int, string) {
	t.Helper()
	return loadgenRun(t, nil, append([]string{"run", "--manifest", manifest, "--base-url", url, "--model", "m",
		"--load-point", "saturation", "--request-rate", "inf", "--max-concurrency", concurrency, "--ignore-eos",
		"--result-dir", resDir}, timeline...)...)
}

// The short timeline of the dry runs: 0.5 s warm-up, three 0.5 s clean
// segments, two profile windows with 0.3 s recovery.
var timeline = []string{"--warmup-seconds", "0.5", "--clean-segment-seconds", "0.5", "--num-clean-segments", "3",
	"--profile-after-clean", "--num-profile-windows", "2", "--profile-warmup-iterations", "2", "--profile-active-iterations", "8",
	"--profile-hold-seconds", "0.1", "--profile-window-budget-seconds", "1", "--recovery-seconds", "0.3",
	"--drain-timeout-seconds", "10", "--workload-seed", "20260712"}

func readResult(t *testing.T, dir string) loadgen.Result {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r loadgen.Result
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	if r.Schema != loadgen.ResultSchema {
		t.Fatalf("result schema %q", r.Schema)
	}
	return r
}

// readRecords reads every requests/*.jsonl file of a result directory.
func readRecords(t *testing.T, dir string, res loadgen.Result) []loadgen.Record {
	t.Helper()
	var recs []loadgen.Record
	for _, f := range res.Files.Requests {
		for _, r := range readJSONL[loadgen.Record](t, filepath.Join(dir, f)) {
			if r.Schema != loadgen.RecordSchema {
				t.Fatalf("%s: record schema %q", f, r.Schema)
			}
			want := strings.TrimSuffix(filepath.Base(f), ".jsonl")
			if r.Segment != want {
				t.Fatalf("%s holds a record of segment %q", f, r.Segment)
			}
			recs = append(recs, r)
		}
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Row < recs[j].Row })
	return recs
}

func readPhases(t *testing.T, path string) []loadgen.PhaseLine {
	t.Helper()
	lines, err := phasefile.ReadFile(path)
	if err != nil || len(lines) == 0 {
		t.Fatalf("%s: %d phase lines, %v", path, len(lines), err)
	}
	return lines
}

func phaseNames(lines []loadgen.PhaseLine) string {
	var s []string
	for _, l := range lines {
		n := l.Phase
		if l.Index > 0 {
			n += strconv.Itoa(l.Index)
		}
		s = append(s, n)
	}
	return strings.Join(s, " ")
}

func near(got, want, tol time.Duration) bool { return got >= want-tol && got <= want+tol }

// checkTimeline asserts the recorded timeline: phases in order, fixed
// clean segments, contiguous segments, profile calls timestamped inside
// their windows, the drain after admission.
func checkTimeline(t *testing.T, res loadgen.Result, phases []loadgen.PhaseLine) {
	t.Helper()
	if got, want := phaseNames(phases), "warmup clean1 clean2 clean3 profile1 recovery1 profile2 recovery2 drain drained done"; got != want {
		t.Fatalf("phases %q, want %q", got, want)
	}
	if *phases[len(phases)-1].Successes != res.Clean.Completed {
		t.Fatalf("done reports %d successes, result %d", *phases[len(phases)-1].Successes, res.Clean.Completed)
	}
	for i := 1; i < len(phases); i++ {
		if phases[i].MonoNS < phases[i-1].MonoNS {
			t.Fatalf("phase %d goes back in time", i)
		}
	}
	// drained is stamped once the drain is over, before the results
	if drained := phases[len(phases)-2]; drained.MonoNS < res.Drain.EndMonoNS {
		t.Fatalf("drained line at %d, before the drain's end %d", drained.MonoNS, res.Drain.EndMonoNS)
	}
	// Clean segments: nominally exactly 0.5 s each, contiguous; the phase
	// lines within the tolerance of the nominal boundaries.
	half := 500 * time.Millisecond
	if res.Clean.Seconds != 1.5 {
		t.Fatalf("clean seconds %v, want exactly 1.5", res.Clean.Seconds)
	}
	var names []string
	for i, s := range res.Segments {
		names = append(names, s.Name)
		if i > 0 && s.StartMonoNS != res.Segments[i-1].EndMonoNS {
			t.Fatalf("segment %s starts at %d, the previous ended at %d", s.Name, s.StartMonoNS, res.Segments[i-1].EndMonoNS)
		}
		if s.Kind == loadgen.PhaseClean && time.Duration(s.EndMonoNS-s.StartMonoNS) != half {
			t.Fatalf("segment %s lasts %v, want exactly %v", s.Name, time.Duration(s.EndMonoNS-s.StartMonoNS), half)
		}
	}
	if got := strings.Join(names, " "); got != "warmup clean-1 clean-2 clean-3 profile-1 recovery-1 profile-2 recovery-2 drain" {
		t.Fatalf("segments %q", got)
	}
	t0 := res.Clock.T0MonoNS
	if !near(time.Duration(phases[0].MonoNS-t0), 0, tolerance) {
		t.Fatalf("warm-up phase line %v after t0", time.Duration(phases[0].MonoNS-t0))
	}
	for k := 1; k <= 3; k++ {
		want := 500*time.Millisecond + time.Duration(k-1)*half
		if got := time.Duration(phases[k].MonoNS - t0); !near(got, want, tolerance) {
			t.Fatalf("clean %d began %v after t0, want %v ± %v", k, got, want, tolerance)
		}
	}
	if got := time.Duration(res.Clean.EndMonoNS - res.Clean.StartMonoNS); got != 3*half {
		t.Fatalf("clean interval %v", got)
	}
	// Profile windows: both calls answered 200, in order, inside their
	// window; recovery 0.3 s from the stop call's return.
	if len(res.ProfileWindows) != 2 {
		t.Fatalf("%d profile windows", len(res.ProfileWindows))
	}
	for i, w := range res.ProfileWindows {
		seg := res.Segments[4+2*i]
		rec := res.Segments[5+2*i]
		if w.StartStatus != 200 || w.StopStatus != 200 {
			t.Fatalf("window %d: statuses %d, %d", w.Index, w.StartStatus, w.StopStatus)
		}
		if !(seg.StartMonoNS <= w.StartCallMonoNS && w.StartCallMonoNS <= w.StartReturnMonoNS &&
			w.StartReturnMonoNS+int64(100*time.Millisecond) <= w.StopCallMonoNS && w.StopCallMonoNS <= w.StopReturnMonoNS &&
			w.StopReturnMonoNS == seg.EndMonoNS) {
			t.Fatalf("window %d times out of order: %+v in segment %+v", w.Index, w, seg)
		}
		if time.Duration(rec.EndMonoNS-rec.StartMonoNS) != 300*time.Millisecond {
			t.Fatalf("recovery %d lasts %v", w.Index, time.Duration(rec.EndMonoNS-rec.StartMonoNS))
		}
	}
	if res.Drain.TimedOut || res.Drain.Unfinished != 0 || !res.Complete {
		t.Fatalf("drain %+v, complete %v", res.Drain, res.Complete)
	}
}

// checkRecords asserts what every run must hold: each manifest row used
// once, in order from the first (no wrap), exact output tokens, times in
// order, successes only.
func checkRecords(t *testing.T, res loadgen.Result, recs []loadgen.Record, rows int) {
	t.Helper()
	if len(recs) != res.Totals.Admitted || res.Manifest.Used != len(recs) || len(recs) > rows {
		t.Fatalf("%d records, %d admitted, %d used, %d rows", len(recs), res.Totals.Admitted, res.Manifest.Used, rows)
	}
	for i, r := range recs {
		if r.Row != i {
			t.Fatalf("record %d is row %d: rows must be used once each, from the first", i, r.Row)
		}
		if r.Class != loadgen.Success {
			t.Fatalf("request %s: class %s (%s)", r.ID, r.Class, r.Reason)
		}
		if r.OutputTokens != r.RequestedOutputTokens || r.PromptTokens != r.ExpectedInputTokens {
			t.Fatalf("request %s: %d/%d output and %d/%d input tokens", r.ID, r.OutputTokens, r.RequestedOutputTokens, r.PromptTokens, r.ExpectedInputTokens)
		}
		if !(r.PlannedNS <= r.SentNS && r.SentNS < r.FirstTokenNS && r.FirstTokenNS <= r.EndNS) {
			t.Fatalf("request %s: times out of order: %+v", r.ID, r)
		}
	}
	if res.Totals.OutputMismatches != 0 || res.Totals.ByClass[loadgen.Success] != len(recs) {
		t.Fatalf("totals %+v", res.Totals)
	}
}

// maxOutstanding is the largest number of requests in flight at once,
// from their sent and end times.
func maxOutstanding(recs []loadgen.Record) int {
	type ev struct {
		t int64
		d int
	}
	var evs []ev
	for _, r := range recs {
		evs = append(evs, ev{r.SentNS, 1}, ev{r.EndNS, -1})
	}
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].t != evs[j].t {
			return evs[i].t < evs[j].t
		}
		return evs[i].d < evs[j].d
	})
	n, most := 0, 0
	for _, e := range evs {
		n += e.d
		most = max(most, n)
	}
	return most
}

// TestDrySaturationThenModerateBurst runs the seed's two load points on a
// burst:8 manifest: a closed-loop saturation of 8 outstanding requests,
// then a moderate run at 0.6 × T_sat with exact eight-request bursts.
func TestDrySaturationThenModerateBurst(t *testing.T) {
	url := startStandin(t, "2")
	dir := t.TempDir()
	manifest := materialize(t, dir, "--id", "P11", "--kind", "synthetic", "--input-uniform", "16:64", "--output-fixed", "12",
		"--prefix", "none", "--arrival", "burst:8", "--num-requests", "6000", "--workload-seed", "20260712")
	common := []string{"run", "--manifest", manifest, "--base-url", url, "--model", "m", "--ignore-eos", "--temperature", "0"}

	// Saturation: a closed loop of at most 8 outstanding.
	satDir := filepath.Join(dir, "saturation")
	satPhases := filepath.Join(dir, "saturation-phases.jsonl")
	args := append(append(append([]string{}, common...), "--load-point", "saturation", "--request-rate", "inf",
		"--max-concurrency", "8", "--result-dir", satDir), timeline...)
	if code, out := loadgenRun(t, []string{"WARDEN_PHASE_FILE=" + satPhases}, args...); code != 0 {
		t.Fatalf("saturation: exit %d\n%s", code, out)
	}
	sat := readResult(t, satDir)
	satRecs := readRecords(t, satDir, sat)
	checkTimeline(t, sat, readPhases(t, satPhases))
	checkRecords(t, sat, satRecs, 6000)
	if !sat.Load.ClosedLoop || sat.Load.MaxConcurrency != 8 {
		t.Fatalf("load %+v", sat.Load)
	}
	if got := maxOutstanding(satRecs); got != 8 {
		t.Fatalf("at most %d requests outstanding, want the full concurrency of 8", got)
	}
	if sat.Clean.Completed == 0 || sat.Clean.CompletedRPS != float64(sat.Clean.Completed)/1.5 {
		t.Fatalf("clean %+v", sat.Clean)
	}

	// Moderate: a hand-given rate is refused before anything is sent.
	modDir := filepath.Join(dir, "moderate")
	if code, out := loadgenRun(t, nil, append(append([]string{}, common...), "--load-point", "moderate",
		"--saturation-result", filepath.Join(satDir, "result.json"), "--rate-fraction", "0.6", "--request-rate", "10",
		"--result-dir", modDir)...); code != 2 || !strings.Contains(out, "refused") {
		t.Fatalf("a hand-given rate: exit %d, want 2\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(modDir, "result.json")); err == nil {
		t.Fatal("a refused run wrote a result")
	}
	modPhases := filepath.Join(dir, "moderate-phases.jsonl")
	args = append(append(append([]string{}, common...), "--load-point", "moderate",
		"--saturation-result", filepath.Join(satDir, "result.json"), "--rate-fraction", "0.6",
		"--max-concurrency", "256", "--result-dir", modDir, "--phase-file", modPhases), timeline...)
	if code, out := loadgenRun(t, nil, args...); code != 0 {
		t.Fatalf("moderate: exit %d\n%s", code, out)
	}
	mod := readResult(t, modDir)
	modRecs := readRecords(t, modDir, mod)
	checkTimeline(t, mod, readPhases(t, modPhases))
	checkRecords(t, mod, modRecs, 6000)
	lambda := 0.6 * sat.Clean.CompletedRPS
	if mod.Load.ClosedLoop || mod.Load.Arrival != "burst:8" || math.Abs(mod.Load.LambdaRPS-lambda) > 1e-9*lambda {
		t.Fatalf("moderate load %+v, want burst:8 at λ = %v", mod.Load, lambda)
	}
	// Exact bursts: request i is planned at floor(i/8) × 8/λ after t0,
	// to the nanosecond's rounding; eight share each instant.
	t0 := mod.Clock.T0MonoNS
	for i, r := range modRecs {
		want := int64(math.Round(float64(i/8*8) / lambda * 1e9))
		if d := r.PlannedNS - t0 - want; d < -1 || d > 1 {
			t.Fatalf("request %d planned %d ns after t0, want %d", i, r.PlannedNS-t0, want)
		}
		if i%8 != 0 && r.PlannedNS != modRecs[i-1].PlannedNS {
			t.Fatalf("request %d is not planned with its burst", i)
		}
		// Sent close to planned: generous, for a loaded machine (the
		// benchmark, not this test, measures precision).
		if lag := time.Duration(r.SentNS - r.PlannedNS); lag > time.Second {
			t.Fatalf("request %d sent %v after its planned time", i, lag)
		}
	}
	// Admission is counted by send time over the clean interval.
	if mod.Clean.OfferedOverLambda < 0.8 || mod.Clean.OfferedOverLambda > 1.2 || mod.Lag.Sustained {
		t.Fatalf("offered %v of λ, lag %+v", mod.Clean.OfferedOverLambda, mod.Lag)
	}
	checkNoText(t, []string{satDir, modDir, satPhases, modPhases}, nil)
}

// checkNoText fails if any file under paths holds a forbidden JSON key,
// the stand-in's generated text, or one of the given substrings.
func checkNoText(t *testing.T, paths []string, secrets []string) {
	t.Helper()
	forbidden := append([]string{`"prompt":`, `"prompt_token_ids":`, `"messages":`, `"content":`, `"text":`, `"generated_text":`, " tok0", "tok1"}, secrets...)
	n := 0
	for _, p := range paths {
		err := filepath.Walk(p, func(path string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			n++
			for _, f := range forbidden {
				if bytes.Contains(data, []byte(f)) {
					t.Errorf("%s holds %q", path, f)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n == 0 {
		t.Fatal("no output files to check")
	}
}

// TestDryTextPromptsRedacted drives chat with text prompts that carry a
// marker, with a drain that outlasts admission: no output holds the
// marker or any generated text, and requests still outstanding when
// admission stops complete in the drain instead of being cancelled.
func TestDryTextPromptsRedacted(t *testing.T) {
	url := startStandin(t, "20")
	dir := t.TempDir()
	const secret = "SECRET-PROMPT-4b1d"
	manifest := filepath.Join(dir, "text.jsonl")
	var buf bytes.Buffer
	for i := 0; i < 400; i++ {
		fmt.Fprintf(&buf, `{"id":"T-%03d","prompt":"one two %s three","input_tokens":4,"output_tokens":10,"arrival":"steady"}`+"\n", i, secret)
	}
	if err := os.WriteFile(manifest, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	resDir := filepath.Join(dir, "client")
	phases := filepath.Join(dir, "phases.jsonl")
	code, out := loadgenRun(t, nil, "run", "--manifest", manifest, "--base-url", url, "--model", "m", "--endpoint", "chat",
		"--load-point", "closed", "--request-rate", "inf", "--max-concurrency", "4", "--ignore-eos",
		"--warmup-seconds", "0.2", "--clean-segment-seconds", "0.5", "--num-clean-segments", "1",
		"--drain-timeout-seconds", "10", "--result-dir", resDir, "--phase-file", phases)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	res := readResult(t, resDir)
	recs := readRecords(t, resDir, res)
	// Each request takes about 200 ms: admission stops with requests
	// outstanding, and they end in the drain, successfully.
	drained := 0
	for _, r := range recs {
		if r.Class != loadgen.Success || r.OutputTokens != 10 {
			t.Fatalf("request %s: %s, %d tokens", r.ID, r.Class, r.OutputTokens)
		}
		if r.Segment == "drain" {
			drained++
		}
	}
	// Outstanding when admission stopped: each ends in the drain (a
	// request may also end between the nominal end of admission and the
	// client reaching it, and count in the drain too).
	if drained == 0 || res.Drain.OutstandingAtStart == 0 || res.Drain.OutstandingAtStart > drained || res.Drain.TimedOut {
		t.Fatalf("%d requests ended in the drain, drain %+v", drained, res.Drain)
	}
	if got := phaseNames(readPhases(t, phases)); got != "warmup clean1 drain drained done" {
		t.Fatalf("phases %q", got)
	}
	if !strings.Contains(out, "load_point=closed") {
		t.Fatalf("no summary line in %q", out)
	}
	checkNoText(t, []string{resDir, phases}, []string{secret})
	if strings.Contains(out, secret) || strings.Contains(out, "tok1") {
		t.Fatal("the client's output holds prompt or generated text")
	}
}

// TestDryNoWrap: a closed loop that outruns its manifest stops admitting
// at its last row, never wraps, and says so; an open loop that would
// need more rows is refused before it starts.
func TestDryNoWrap(t *testing.T) {
	url := startStandin(t, "1")
	dir := t.TempDir()
	manifest := steadyManifest(t, dir, "W", "50")
	resDir := filepath.Join(dir, "closed")
	code, out := runClosedLoop(t, manifest, url, "4", resDir, timeline)
	if code != 3 || !strings.Contains(out, "ran out") {
		t.Fatalf("exit %d, want 3 (manifest exhausted)\n%s", code, out)
	}
	res := readResult(t, resDir)
	recs := readRecords(t, resDir, res)
	if res.Complete || !res.Manifest.Exhausted || res.Manifest.Used != 50 || len(recs) != 50 {
		t.Fatalf("complete %v, manifest %+v, %d records", res.Complete, res.Manifest, len(recs))
	}
	checkRecords(t, res, recs, 50)

	// 50 rows at 10 requests/s over 2.5 s of warm-up and clean time
	// plus windows: refused, nothing written.
	openDir := filepath.Join(dir, "open")
	code, out = loadgenRun(t, nil, append([]string{"run", "--manifest", manifest, "--base-url", url, "--model", "m",
		"--load-point", "open", "--request-rate", "30", "--ignore-eos", "--result-dir", openDir}, timeline...)...)
	if code != 2 || !strings.Contains(out, "fewer requests") {
		t.Fatalf("exit %d, want 2 (refused)\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(openDir, "result.json")); err == nil {
		t.Fatal("a refused run wrote a result")
	}
	// A finished result directory is never overwritten.
	code, out = loadgenRun(t, nil, append([]string{"run", "--manifest", manifest, "--base-url", url, "--model", "m",
		"--load-point", "saturation", "--request-rate", "inf", "--result-dir", resDir}, timeline...)...)
	if code != 2 || !strings.Contains(out, "already holds") {
		t.Fatalf("rerun into a result directory: exit %d\n%s", code, out)
	}
}
