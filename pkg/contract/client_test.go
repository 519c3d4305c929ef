package contract

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// clientRun writes a loadgen-shaped result directory.
type clientRun struct {
	segments  int
	segS      float64
	failed    int
	mismatch  bool
	lagS      float64
	text      bool
	moderate  bool
	lambda    float64
	offered   float64
	satSHA    string
	completed float64
	// What the clean interval completed (default 30), and breaks of the
	// rules on the rest of the run.
	cleanCompleted *int
	warmupClass    string // a warm-up record of this class
	abandoned      int    // drain.abandoned
	timedOut       bool
	noDrain        bool     // no drain block
	noAbandoned    bool     // a drain block without abandoned
	windows        [][2]int // profile windows' start and stop statuses
	windowsGiven   *int     // timeline.profile_windows (default len(windows))
	earlyWindow    bool     // the first window starts inside the clean interval
	recoveryS      float64  // the recovery segments' length (timeline: 30)
	exhausted      bool
	repeatRow      bool
	stalled        int // this clean segment (1-based) ended no request: a stall
}

func (c clientRun) write(t *testing.T, dir string) {
	t.Helper()
	os.MkdirAll(filepath.Join(dir, "requests"), 0o755)
	var segs []map[string]any
	var reqFiles []string
	var segLines []byte
	var t0 int64 = 1_000_000_000
	for i := 1; i <= c.segments; i++ {
		name := fmt.Sprintf("clean-%d", i)
		failed := 0
		if i == 1 {
			failed = c.failed
		}
		ended := 10
		if i == c.stalled {
			ended = 0
		}
		s := map[string]any{"schema": "warden.loadgen.segment/1", "name": name, "kind": "clean", "index": i, "seconds": c.segS, "failed": failed, "succeeded": ended,
			"completed_rps": float64(ended) / c.segS}
		segs = append(segs, s)
		b, _ := json.Marshal(s)
		segLines = append(append(segLines, b...), '\n')
		reqFiles = append(reqFiles, "requests/"+name+".jsonl")
		var lines []byte
		for k := range ended {
			planned := t0 + int64(k)*1e6
			sent := planned + 1000
			if i == 2 && k == 3 {
				sent = planned + int64(c.lagS*1e9)
			}
			out := 64
			if c.mismatch && i == 3 && k == 0 {
				out = 63
			}
			row := (i-1)*10 + k
			if c.repeatRow && i == 3 && k == 9 {
				row = 0
			}
			r := map[string]any{"schema": "warden.loadgen.request/1", "id": fmt.Sprint(row), "row": row, "segment": name, "planned_mono_ns": planned, "sent_mono_ns": sent,
				"requested_output_tokens": 64, "output_tokens": out, "http_status": 200, "class": "success"}
			if c.text && i == 1 && k == 0 {
				r["generated_text"] = "x"
			}
			b, _ := json.Marshal(r)
			lines = append(append(lines, b...), '\n')
		}
		os.WriteFile(filepath.Join(dir, reqFiles[len(reqFiles)-1]), lines, 0o644)
	}
	if c.warmupClass != "" {
		segs = append([]map[string]any{{"schema": "warden.loadgen.segment/1", "name": "warmup", "kind": "warmup", "seconds": 60.0}}, segs...)
		reqFiles = append(reqFiles, "requests/warmup.jsonl")
		b, _ := json.Marshal(map[string]any{"schema": "warden.loadgen.request/1", "id": "w", "row": 1000, "segment": "warmup",
			"requested_output_tokens": 64, "output_tokens": 64, "http_status": 200, "class": c.warmupClass})
		os.WriteFile(filepath.Join(dir, "requests/warmup.jsonl"), append(b, '\n'), 0o644)
	}
	var windows []map[string]any
	cleanEnd := int64(500e9)
	for w, st := range c.windows {
		start := cleanEnd + int64(w+1)*1e9
		if c.earlyWindow && w == 0 {
			start = cleanEnd - 1
		}
		windows = append(windows, map[string]any{"index": w + 1, "start_call_mono_ns": start, "start_status": st[0], "stop_status": st[1]})
		segs = append(segs, map[string]any{"name": fmt.Sprintf("recovery-%d", w+1), "kind": "recovery", "seconds": 30 + c.recoveryS})
	}
	given := len(c.windows)
	if c.windowsGiven != nil {
		given = *c.windowsGiven
	}
	completed := 30
	if c.cleanCompleted != nil {
		completed = *c.cleanCompleted
	}
	os.WriteFile(filepath.Join(dir, "segments.jsonl"), segLines, 0o644)
	res := map[string]any{
		"schema": "warden.loadgen.result/1", "complete": true, "load_point": "saturation",
		"load":            map[string]any{"closed_loop": !c.moderate, "lambda_rps": c.lambda, "saturation_result_sha256": c.satSHA},
		"manifest":        map[string]any{"rows": 2000, "used": 31, "exhausted": c.exhausted},
		"timeline":        map[string]any{"clean_segment_s": 80.0, "num_clean_segments": 3, "profile_windows": given, "recovery_s": 30.0},
		"segments":        segs,
		"profile_windows": windows,
		"clean": map[string]any{"seconds": c.segS * float64(c.segments), "end_mono_ns": cleanEnd, "failed": c.failed, "completed": completed,
			"completed_rps": c.completed, "offered_rps": c.offered},
		"lag":    map[string]any{"threshold_s": 1.0},
		"totals": map[string]any{"output_mismatches": 0},
		"files":  map[string]any{"segments": "segments.jsonl", "requests": reqFiles},
	}
	if c.moderate {
		res["load_point"] = "moderate"
	}
	switch {
	case c.noDrain:
	case c.noAbandoned:
		res["drain"] = map[string]any{"timed_out": c.timedOut}
	default:
		res["drain"] = map[string]any{"timed_out": c.timedOut, "abandoned": c.abandoned}
	}
	b, _ := json.MarshalIndent(res, "", " ")
	os.WriteFile(filepath.Join(dir, "result.json"), b, 0o644)
}

func TestClient(t *testing.T) {
	satDir := t.TempDir()
	clientRun{segments: 3, segS: 80, completed: 10}.write(t, satDir)
	satPath := filepath.Join(satDir, "result.json")
	satRaw, _ := os.ReadFile(satPath)
	sum := sha256.Sum256(satRaw)
	sha := hex.EncodeToString(sum[:])
	ok := clientRun{segments: 3, segS: 80, completed: 10}
	mod := clientRun{segments: 3, segS: 80, moderate: true, lambda: 6, offered: 6.2, satSHA: sha}
	cases := []struct {
		name    string
		run     clientRun
		sat     string
		verdict string
		detail  string
	}{
		{name: "saturation", run: ok, verdict: "pass"},
		{name: "moderate within 5%", run: mod, sat: satPath, verdict: "pass"},
		{name: "two segments", run: clientRun{segments: 2, segS: 80}, verdict: "fail", detail: "2 clean segments, want 3"},
		{name: "short segment", run: clientRun{segments: 3, segS: 79}, verdict: "fail", detail: "lasted 79.000 s"},
		{name: "failures", run: clientRun{segments: 3, segS: 80, failed: 1}, verdict: "fail", detail: "1 clean-segment request(s) failed"},
		{name: "tokens", run: clientRun{segments: 3, segS: 80, mismatch: true}, verdict: "fail", detail: "other than the requested output tokens"},
		{name: "lag", run: clientRun{segments: 3, segS: 80, lagS: 1.5}, verdict: "fail", detail: "generator lag over 1 s"},
		{name: "text", run: clientRun{segments: 3, segS: 80, text: true}, verdict: "fail", detail: "generated-text"},
		{name: "rate missed", run: clientRun{segments: 3, segS: 80, moderate: true, lambda: 6, offered: 5.6, satSHA: sha}, sat: satPath, verdict: "fail", detail: "off λ"},
		{name: "lambda not 0.60 T_sat", run: clientRun{segments: 3, segS: 80, moderate: true, lambda: 7, offered: 6, satSHA: sha}, sat: satPath, verdict: "fail", detail: "client λ"},
		{name: "other saturation result", run: clientRun{segments: 3, segS: 80, moderate: true, lambda: 6, offered: 6, satSHA: "00"}, sat: satPath, verdict: "fail", detail: "another saturation result"},
		{name: "moderate without saturation", run: mod, verdict: "error", detail: "needs the saturation result"},
	}
	zero, one := 0, 1
	two200 := [][2]int{{200, 200}, {200, 200}}
	cases = append(cases, []struct {
		name    string
		run     clientRun
		sat     string
		verdict string
		detail  string
	}{
		{name: "two profile windows", run: clientRun{segments: 3, segS: 80, windows: two200}, verdict: "pass"},
		{name: "no clean completion", run: clientRun{segments: 3, segS: 80, cleanCompleted: &zero}, verdict: "fail", detail: "no completion in the clean interval"},
		{name: "invalid output in the warm-up", run: clientRun{segments: 3, segS: 80, warmupClass: "invalid-output"}, verdict: "fail", detail: "1 request(s) anywhere in the run were invalid output"},
		{name: "abandoned in the warm-up records", run: clientRun{segments: 3, segS: 80, warmupClass: "deadline-exceeded"}, verdict: "fail", detail: "1 request(s) abandoned"},
		{name: "abandoned", run: clientRun{segments: 3, segS: 80, abandoned: 2}, verdict: "fail", detail: "a run that abandoned any request is never complete"},
		{name: "drain timed out", run: clientRun{segments: 3, segS: 80, timedOut: true}, verdict: "fail", detail: "drain.timed_out"},
		{name: "no drain block", run: clientRun{segments: 3, segS: 80, noDrain: true}, verdict: "error", detail: "no drain block"},
		{name: "no drain.abandoned", run: clientRun{segments: 3, segS: 80, noAbandoned: true}, verdict: "error", detail: "no drain.abandoned"},
		{name: "start_profile 500", run: clientRun{segments: 3, segS: 80, windows: [][2]int{{200, 200}, {500, 200}}}, verdict: "fail", detail: "profile window 2: /start_profile answered 500"},
		{name: "stop_profile 503", run: clientRun{segments: 3, segS: 80, windows: [][2]int{{200, 503}, {200, 200}}}, verdict: "fail", detail: "/stop_profile answered 503"},
		{name: "a window fewer", run: clientRun{segments: 3, segS: 80, windows: two200[:1], windowsGiven: &[]int{2}[0]}, verdict: "fail", detail: "1 profile window(s) recorded, the client was given 2"},
		{name: "window inside the clean interval", run: clientRun{segments: 3, segS: 80, windows: two200, earlyWindow: true}, verdict: "fail", detail: "began before the end of the clean interval"},
		{name: "recovery extended", run: clientRun{segments: 3, segS: 80, windows: two200[:1], recoveryS: 1}, verdict: "fail", detail: "recovery recovery-1 lasted 31.000 s"},
		{name: "manifest exhausted", run: clientRun{segments: 3, segS: 80, exhausted: true}, verdict: "fail", detail: "manifest ran out"},
		{name: "a row twice", run: clientRun{segments: 3, segS: 80, repeatRow: true}, verdict: "fail", detail: "1 request(s) repeat a manifest row"},
		{name: "one clean completion", run: clientRun{segments: 3, segS: 80, cleanCompleted: &one}, verdict: "pass"},
		// the union holds completions, one segment of three none
		{name: "one stalled clean segment", run: clientRun{segments: 3, segS: 80, stalled: 2}, verdict: "fail", detail: "clean segment clean-2 (2 of the clean segments) holds no completion"},
	}...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.run.write(t, dir)
			o := DefaultClient()
			o.SaturationResult = tc.sat
			r := ClientDir(dir, o)
			if r.Verdict != tc.verdict || !strings.Contains(r.Detail, tc.detail) {
				t.Fatalf("got %s %q, want %s containing %q; figures %v", r.Verdict, r.Detail, tc.verdict, tc.detail, r.Figures)
			}
			if tc.run.segments == 3 && tc.run.segS == 80 && tc.run.stalled == 0 && (r.Figures["clean1_completed"] != 10 || r.Figures["clean3_completed_rps"] != 0.125) {
				t.Fatalf("per-segment figures %v", r.Figures)
			}
			// Class profile-artifact exactly when the profile calls
			// are the only failure.
			profileOnly := strings.Contains(tc.name, "_profile")
			if (r.Class == "profile-artifact") != profileOnly {
				t.Fatalf("class %q for %s", r.Class, tc.name)
			}
		})
	}
	// Profile calls that failed along with another rule: the default class.
	dir := t.TempDir()
	clientRun{segments: 3, segS: 80, windows: [][2]int{{500, 503}, {200, 200}}, abandoned: 1}.write(t, dir)
	if r := ClientDir(dir, DefaultClient()); r.Verdict != "fail" || r.Class != "" || !strings.Contains(r.Detail, "/start_profile answered 500") {
		t.Fatalf("profile and drain failures: %+v", r)
	}
	if r := ClientDir(t.TempDir(), DefaultClient()); r.Verdict != "error" {
		t.Fatalf("no result.json: %+v", r)
	}
	other := t.TempDir()
	os.WriteFile(filepath.Join(other, "result.json"), []byte(`{"schema":"warden.standin.result/1","complete":true}`), 0o644)
	if r := ClientDir(other, DefaultClient()); r.Verdict != "error" || !strings.Contains(r.Detail, "schema") {
		t.Fatalf("another schema: %+v", r)
	}
}

func TestScanForbidden(t *testing.T) {
	for _, tc := range []struct {
		js   string
		want int
	}{
		{`{"prompt_tokens": 3, "text_len": 4}`, 0},
		{`{"a": {"prompt": "x"}, "b": [{"content": 1}, "prompt"]}`, 2},
		{`{"a": "prompt", "messages": []}`, 1},
	} {
		if n := scanForbidden([]byte(tc.js), DefaultClient().ForbiddenFields); n != tc.want {
			t.Errorf("%s: %d, want %d", tc.js, n, tc.want)
		}
	}
}

// testdata/loadgen holds the files of a real loadgen run (saturation,
// then moderate from it; 0.2 s segments against the stand-in), so that a
// change of loadgen's format shows here.
func TestClientReadsLoadgen(t *testing.T) {
	o := DefaultClient()
	o.SegmentSeconds = 0.2
	if r := ClientDir("testdata/loadgen/saturation", o); r.Verdict != "pass" || r.Figures["records"] == 0 {
		t.Fatalf("saturation: %+v", r)
	}
	o.SaturationResult = "testdata/loadgen/saturation/result.json"
	r := ClientDir("testdata/loadgen/moderate", o)
	if r.Verdict != "pass" || r.Figures["lambda_rps"] <= 0 || r.Figures["lambda_rps"] != r.Figures["expected_lambda_rps"] {
		t.Fatalf("moderate: %+v", r)
	}
	o.RateFraction = 0.5 // not the fraction the client used
	if r := ClientDir("testdata/loadgen/moderate", o); r.Verdict != "fail" || !strings.Contains(r.Detail, "client λ") {
		t.Fatalf("moderate at another fraction: %+v", r)
	}
	if _, r := Sanity([]string{"testdata/loadgen"}, "testdata", DefaultSanity()); r.Verdict != "pass" || r.Figures["families"] < 50 {
		t.Fatalf("sanity: %+v", r)
	}
}
