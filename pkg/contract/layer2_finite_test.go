package contract

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// withEvents is tr's trace with edit applied to its events.
func withEvents(t *testing.T, tr trace, edit func(ev []map[string]any) []map[string]any) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(tr.bytes()))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var ev []map[string]any
	for _, e := range doc["traceEvents"].([]any) {
		ev = append(ev, e.(map[string]any))
	}
	doc["traceEvents"] = edit(ev)
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return gzipBytes(js)
}

// TestLayer2KernelsInTheirWindow: a kernel of 31 years passed the check
// (classifiable 0.9999999999992759: it was every share). A kernel must lie
// within its window's ProfilerSteps and, launched in a step, within that
// step; a span that ends before it starts is no span; durations that sum
// past float64's range cannot be judged: an error, with its verdict line
// (the CLI crashed on "json: unsupported value: NaN" and printed none).
func TestLayer2KernelsInTheirWindow(t *testing.T) {
	kernel := func(ts, dur float64, corr int) map[string]any {
		return map[string]any{"ph": "X", "cat": "kernel", "name": "void flash_fwd_kernel<...>", "ts": ts, "dur": dur, "pid": 0, "tid": 7, "args": map[string]any{"correlation": corr}}
	}
	launch := func(ts float64, corr int) map[string]any {
		return map[string]any{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts, "dur": 5.0, "pid": 1, "tid": 1, "args": map[string]any{"correlation": corr}}
	}
	cases := []struct {
		name, verdict, detail string
		edit                  func([]map[string]any) []map[string]any
	}{
		{"a 31-year kernel", "fail", "lies outside the profile window", func(ev []map[string]any) []map[string]any {
			return append(ev, kernel(100_200, 31*365.25*86400e6, 900))
		}},
		{"a kernel before the window", "fail", "lies outside the profile window", func(ev []map[string]any) []map[string]any {
			return append(ev, kernel(10, 1, 900))
		}},
		// launched in the third step (120000..129000 µs), run in the first
		{"a kernel before its step", "fail", "starts before ProfilerStep#4 (1120000..1129000 µs), whose CUDA call launched it", func(ev []map[string]any) []map[string]any {
			return append(ev, launch(120_500, 900), kernel(100_100, 10, 900))
		}},
		// the window is 100000..179000 µs: 79000 µs
		{"a kernel far past the window", "fail", "lies outside the profile window", func(ev []map[string]any) []map[string]any {
			return append(ev, kernel(178_000, 80_001, 900))
		}},
		// a GPU running behind: launched in the first step, run in the
		// second, and the last step's work ending just past the window
		{"a kernel behind its step", "pass", "", func(ev []map[string]any) []map[string]any {
			return append(ev, launch(100_500, 900), kernel(110_100, 10, 900), kernel(178_900, 8000, 901))
		}},
		{"a negative duration", "fail", "a span ends before it starts", func(ev []map[string]any) []map[string]any {
			return append(ev, kernel(100_200, -50, 900))
		}},
		// each duration finite, the window as wide as float64 allows: the
		// kernels' sum is +Inf
		{"durations that sum to infinity", "error", "GPU activity durations sum to a number past float64's range", func(ev []map[string]any) []map[string]any {
			for _, e := range ev {
				if e["cat"] == "user_annotation" && e["name"] == "ProfilerStep#9" {
					e["dur"] = math.MaxFloat64 / 2
				}
			}
			return append(ev, kernel(170_200, math.MaxFloat64/4, 901), kernel(170_300, math.MaxFloat64/4, 902),
				kernel(170_400, math.MaxFloat64/4, 903), kernel(170_500, math.MaxFloat64/4, 904), kernel(170_600, math.MaxFloat64/4, 905))
		}},
		{"the same window as it is", "pass", "", func(ev []map[string]any) []map[string]any { return ev }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "w1.pt.trace.json.gz"), goodW(0, 0).bytes(), 0o644)
			os.WriteFile(filepath.Join(dir, "w2.pt.trace.json.gz"), withEvents(t, goodW(0, 1), func(ev []map[string]any) []map[string]any {
				// the second window's steps start 1e6 µs later: the cases
				// are written for the first window's times
				return shift(tc.edit(shift(ev, -1_000_000)), 1_000_000)
			}), 0o644)
			o := DefaultLayer2()
			o.Layer1, o.Phases = writeL1For(t, t.TempDir(), 2)
			r := Layer2Dir(dir, o)
			if r.Verdict != tc.verdict || !strings.Contains(r.Detail, tc.detail) {
				t.Fatalf("got %s %q, want %s containing %q", r.Verdict, r.Detail, tc.verdict, tc.detail)
			}
			var line bytes.Buffer
			if err := WriteVerdict(&line, "layer2", true, r); err != nil || !strings.Contains(line.String(), `"verdict":"`+tc.verdict+`"`) {
				t.Fatalf("verdict line %q, %v", line.String(), err)
			}
		})
	}
}

// shift moves every event of ev by d µs.
func shift(ev []map[string]any, d float64) []map[string]any {
	for _, e := range ev {
		if ts, ok := e["ts"].(float64); ok {
			e["ts"] = ts + d
		}
	}
	return ev
}

// TestWriteVerdictNonFiniteFigures: a figure JSON cannot hold never
// costs the verdict line; it is left out and named, and a pass with one
// becomes an error.
func TestWriteVerdictNonFiniteFigures(t *testing.T) {
	var out bytes.Buffer
	r := Result{Verdict: "pass", Detail: "ok", Figures: map[string]float64{"a": 1, "b": math.NaN(), "c": math.Inf(1)}}
	if err := WriteVerdict(&out, "x", true, r); err != nil {
		t.Fatal(err)
	}
	var got Result
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%q: %v", out.String(), err)
	}
	if got.Verdict != "error" || got.Figures["a"] != 1 || len(got.Figures) != 1 || !strings.Contains(got.Detail, "b is NaN, c is +Inf") {
		t.Fatalf("%+v", got)
	}
	if r.Figures["b"] == 0 || len(r.Figures) != 3 {
		t.Fatal("the caller's figures were changed")
	}
}
