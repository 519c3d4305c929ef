package validate

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
		s := map[string]any{"schema": "warden.loadgen.segment/1", "name": name, "kind": "clean", "index": i, "seconds": c.segS, "failed": failed, "succeeded": 10}
		segs = append(segs, s)
		b, _ := json.Marshal(s)
		segLines = append(append(segLines, b...), '\n')
		reqFiles = append(reqFiles, "requests/"+name+".jsonl")
		var lines []byte
		for k := range 10 {
			planned := t0 + int64(k)*1e6
			sent := planned + 1000
			if i == 2 && k == 3 {
				sent = planned + int64(c.lagS*1e9)
			}
			out := 64
			if c.mismatch && i == 3 && k == 0 {
				out = 63
			}
			r := map[string]any{"schema": "warden.loadgen.request/1", "id": fmt.Sprint(k), "segment": name, "planned_mono_ns": planned, "sent_mono_ns": sent,
				"requested_output_tokens": 64, "output_tokens": out, "http_status": 200, "class": "success"}
			if c.text && i == 1 && k == 0 {
				r["generated_text"] = "x"
			}
			b, _ := json.Marshal(r)
			lines = append(append(lines, b...), '\n')
		}
		os.WriteFile(filepath.Join(dir, reqFiles[len(reqFiles)-1]), lines, 0o644)
	}
	os.WriteFile(filepath.Join(dir, "segments.jsonl"), segLines, 0o644)
	res := map[string]any{
		"schema": "warden.loadgen.result/1", "complete": true, "load_point": "saturation",
		"load":     map[string]any{"closed_loop": !c.moderate, "lambda_rps": c.lambda, "saturation_result_sha256": c.satSHA},
		"timeline": map[string]any{"clean_segment_s": 80.0, "num_clean_segments": 3},
		"segments": segs,
		"clean":    map[string]any{"seconds": c.segS * float64(c.segments), "failed": c.failed, "completed_rps": c.completed, "offered_rps": c.offered},
		"lag":      map[string]any{"threshold_s": 1.0},
		"totals":   map[string]any{"output_mismatches": 0},
		"files":    map[string]any{"segments": "segments.jsonl", "requests": reqFiles},
	}
	if c.moderate {
		res["load_point"] = "moderate"
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
		})
	}
	if r := ClientDir(t.TempDir(), DefaultClient()); r.Verdict != "error" {
		t.Fatalf("no result.json: %+v", r)
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
