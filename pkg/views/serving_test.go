package views

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"warden/pkg/api"
	"warden/pkg/dirlayout"
	"warden/pkg/state"
)

// servingAttempt is an ended attempt whose client wrote result (none when
// result is "").
func servingAttempt(t *testing.T, result string) state.Attempt {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, dirlayout.ClientDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if result != "" {
		if err := os.WriteFile(dirlayout.ClientResult(dir), []byte(result), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return state.Attempt{N: 2, State: state.Complete, Dir: dir}
}

// TestPrintServing: a loadgen result reads as vLLM's benchmark prints
// its own, row for row; an open loop adds the configured rate; TPOT of
// no requests (loadgen's n 0 and zeros) and an absent ITL read
// "missing", never 0, in the text and as null in JSON.
func TestPrintServing(t *testing.T) {
	t.Parallel()
	dist := func(n int, mean, p50, p99 float64) map[string]any {
		return map[string]any{"n": n, "mean": mean, "p50": p50, "p90": p50 + 1, "p95": p50 + 2, "p99": p99, "max": p99 + 1}
	}
	res := map[string]any{"schema": "warden.loadgen.result/1",
		"load": map[string]any{"closed_loop": true, "request_rate": "inf", "lambda_rps": 0, "max_concurrency": 8},
		"clean": map[string]any{"seconds": 0.6, "completed": 29, "failed": 1, "input_tokens": 701, "output_tokens": 116,
			"completed_rps": 29 / 0.6, "output_tokens_per_s": 116 / 0.6,
			"latency": map[string]any{"ttft_ms": dist(29, 5.33011, 5.308887, 5.600413), "tpot_ms": dist(0, 0, 0, 0),
				"e2e_ms": dist(29, 20.844105, 20.821332, 21.158594)}}}
	b, _ := json.Marshal(res)
	a := servingAttempt(t, string(b))
	s := ServingOf(api.RunDetail{Run: state.Run{ID: "c0.saturation", Result: 2}, Attempts: []state.Attempt{a}})
	if s == nil {
		t.Fatal("no serving summary of an ended attempt")
	}
	var out bytes.Buffer
	PrintServing(&out, *s)
	want := "\nserving benchmark result of attempt 2 (client/result.json, its clean interval):\n" +
		"============ Serving Benchmark Result ============\n" +
		"Successful requests:                     29\n" +
		"Failed requests:                         1\n" +
		"Maximum request concurrency:             8\n" +
		"Benchmark duration (s):                  0.60\n" +
		"Total input tokens:                      701\n" +
		"Total generated tokens:                  116\n" +
		"Request throughput (req/s):              48.33\n" +
		"Output token throughput (tok/s):         193.33\n" +
		"Total token throughput (tok/s):          1361.67\n" + // (701 + 116) / 0.6
		"---------------Time to First Token----------------\n" +
		"Mean TTFT (ms):                          5.33\n" +
		"Median TTFT (ms):                        5.31\n" +
		"P99 TTFT (ms):                           5.60\n" +
		"-----Time per Output Token (excl. 1st token)------\n" +
		"Mean TPOT (ms):                          missing\n" +
		"Median TPOT (ms):                        missing\n" +
		"P99 TPOT (ms):                           missing\n" +
		"---------------Inter-token Latency----------------\n" +
		"Mean ITL (ms):                           missing\n" +
		"Median ITL (ms):                         missing\n" +
		"P99 ITL (ms):                            missing\n" +
		"----------------End-to-end Latency----------------\n" +
		"Mean E2EL (ms):                          20.84\n" +
		"Median E2EL (ms):                        20.82\n" +
		"P99 E2EL (ms):                           21.16\n" +
		"==================================================\n" +
		"  missing: clean.latency.tpot_ms: of no requests (n 0)\n" +
		"  missing: clean.latency.itl_ms: absent\n"
	if out.String() != want {
		t.Fatalf("serving summary:\n%s\nwant\n%s", out.String(), want)
	}
	j, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	json.Unmarshal(j, &doc)
	for k, v := range map[string]any{"throughput_rps": 29 / 0.6, "total_tokens_per_s": 817 / 0.6, "ttft_p99_ms": 5.600413, "ttft_n": 29.0,
		"tpot_p50_ms": nil, "tpot_n": nil, "itl_mean_ms": nil, "e2e_p50_ms": 20.821332, "request_rate_rps": nil, "max_concurrency": 8.0} {
		if got, ok := doc[k]; !ok || got != v {
			t.Errorf("serving JSON %s = %v (present %t), want %v", k, got, ok, v)
		}
	}

	// an open loop says its rate, as vLLM does for a finite one
	res["load"] = map[string]any{"closed_loop": false, "request_rate": "12.5", "lambda_rps": 12.5, "max_concurrency": 256}
	b, _ = json.Marshal(res)
	out.Reset()
	PrintServing(&out, ReadServing(servingAttempt(t, string(b))))
	if !strings.Contains(out.String(), "Maximum request concurrency:             256\nRequest rate configured (RPS):           12.50\nBenchmark duration (s):") {
		t.Errorf("open loop:\n%s", out.String())
	}
}

// TestServingMissing: a result that is not there, not JSON, or not
// loadgen's gives no figure and says why; a running attempt has no
// summary yet.
func TestServingMissing(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ result, why string }{
		{"", "attempt 2 has no client/result.json"},
		{"{", "attempt 2's client/result.json is not JSON"},
		{`{"schema":1,"throughput_rps":12.5}`, "attempt 2's client/result.json is not loadgen's (schema 1, not warden.loadgen.result/1): it gives no latency"},
		{`{"schema":"warden.loadgen.result/1"}`, "attempt 2's client/result.json has no clean interval (clean)"},
		{`{"schema":"warden.loadgen.result/1","clean":{"seconds":"long"}}`, "attempt 2's client/result.json does not read as loadgen's result"},
		{"\x00\x00\x00", "damaged evidence"},
	} {
		s := ReadServing(servingAttempt(t, c.result))
		if !strings.HasPrefix(s.ResultMissing, c.why) || s.ThroughputRPS != nil || s.TTFTP99MS != nil || len(s.Latency.Missing) != 1 {
			t.Errorf("result %q: %+v, want missing %q", c.result, s, c.why)
		}
		var out bytes.Buffer
		PrintServing(&out, s)
		if want := "\nserving benchmark result of attempt 2 (client/result.json, its clean interval):\n  missing: " + s.ResultMissing + "\n"; out.String() != want {
			t.Errorf("text %q, want %q", out.String(), want)
		}
	}
	// a distribution without its count, or without some statistics
	s := ReadServing(servingAttempt(t, `{"schema":"warden.loadgen.result/1","clean":{"latency":{"ttft_ms":{"mean":1,"p99":2},"e2e_ms":{"n":3,"mean":1,"p50":1,"p99":2}}}}`))
	if want := []string{"clean.latency.ttft_ms: no n", "clean.latency.tpot_ms: absent", "clean.latency.itl_ms: absent", "clean.latency.e2e_ms: no p90, p95, max"}; !reflect.DeepEqual(s.Latency.Missing, want) ||
		s.TTFTP99MS != nil || s.E2EP99MS == nil || *s.E2EP99MS != 2 || s.E2EP90MS != nil || *s.E2EN != 3 {
		t.Errorf("partial distributions: %+v, want missing %q", s.Latency, want)
	}
	// a burn-in's clean interval of no time: its rates, 0 in the file, are missing
	s = ReadServing(servingAttempt(t, `{"schema":"warden.loadgen.result/1","clean":{"seconds":0,"completed":0,"completed_rps":0,"output_tokens_per_s":0,"input_tokens":0,"output_tokens":0}}`))
	var out bytes.Buffer
	PrintServing(&out, s)
	if s.ThroughputRPS != nil || s.OutputTokensPerS != nil || s.TotalTokensPerS != nil || !strings.Contains(out.String(), "Request throughput (req/s):              missing\n") ||
		!strings.Contains(out.String(), "  missing: a clean interval of 0 s has no throughput\n") {
		t.Errorf("a clean interval of 0 s: %+v\n%s", s, out.String())
	}
	a := servingAttempt(t, "")
	a.State = state.Measuring
	if s := ServingOf(api.RunDetail{Attempts: []state.Attempt{a}}); s != nil {
		t.Errorf("a measuring attempt has a summary: %+v", s)
	}
}

// TestLatencyKeys: every key LatencyKeys names is a figure of Latency,
// and Latency has no other.
func TestLatencyKeys(t *testing.T) {
	t.Parallel()
	var l Latency
	keys := LatencyKeys()
	if len(keys) != len(latencyFields) || len(keys) != 24 {
		t.Fatalf("%d keys, %d float fields", len(keys), len(latencyFields))
	}
	for _, k := range keys {
		if _, ok := l.Figure(k); !ok {
			t.Errorf("key %s is not a figure", k)
		}
	}
	if _, ok := l.Figure("ttft_p98_ms"); ok {
		t.Error("an unknown key is a figure")
	}
}
