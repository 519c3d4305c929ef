package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"warden/internal/cli"
)

// runEvaluate runs the evaluate subcommand in process: its verdict line
// (nil when none) and its error.
func runEvaluate(t *testing.T, args ...string) (map[string]any, error) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"evaluate"}, args...))
	err := root.Execute()
	if out.Len() == 0 {
		return nil, err
	}
	var v map[string]any
	if jerr := json.Unmarshal(bytes.TrimSpace(out.Bytes()), &v); jerr != nil {
		t.Fatalf("output %q is not one verdict line: %v", out.String(), jerr)
	}
	return v, err
}

// TestEvaluateContract: the stand-in evaluator keeps the quality
// evaluator contract: pass within the bound, fail with class quality past
// it (either direction), error (no class) when there is nothing to score,
// exit 2 without a verdict on a usage error.
func TestEvaluateContract(t *testing.T) {
	write := func(body string) string {
		dir := t.TempDir()
		if body != "" {
			os.WriteFile(filepath.Join(dir, "result.json"), []byte(body), 0o644)
		}
		return dir
	}
	ok := write(`{"totals":{"by_class":{"success":3,"transport-error":1}}}`)
	for _, tc := range []struct {
		name    string
		args    []string
		verdict string
		class   any
	}{
		{"wer within", []string{"--result-dir", ok, "--metric", "wer", "--score", "0.04", "--max", "0.05"}, "pass", nil},
		{"wer above", []string{"--result-dir", ok, "--metric", "wer", "--score", "0.30", "--max", "0.05"}, "fail", "quality"},
		{"utmos below", []string{"--result-dir", ok, "--metric", "utmos", "--score", "2.9", "--min", "3.5"}, "fail", "quality"},
		{"utmos within", []string{"--result-dir", ok, "--metric", "utmos", "--score", "3.9", "--min", "3.5"}, "pass", nil},
		{"no result", []string{"--result-dir", write(""), "--metric", "wer", "--score", "0", "--max", "0.05"}, "error", nil},
		{"not json", []string{"--result-dir", write("{"), "--metric", "wer", "--score", "0", "--max", "0.05"}, "error", nil},
		{"no success", []string{"--result-dir", write(`{"totals":{"by_class":{"success":0}}}`), "--metric", "wer", "--score", "0", "--max", "0.05"}, "error", nil},
	} {
		v, err := runEvaluate(t, append(tc.args, "--seed", "7")...)
		if err != nil || v == nil || v["verdict"] != tc.verdict || v["class"] != tc.class {
			t.Fatalf("%s: verdict %v, error %v; want %s class %v", tc.name, v, err, tc.verdict, tc.class)
		}
		if tc.verdict != "error" {
			figs := v["figures"].(map[string]any)
			if figs["scored_requests"] != 3.0 || figs["seed"] != 7.0 || figs[tc.args[3]] == nil {
				t.Fatalf("%s: figures %v", tc.name, figs)
			}
		}
	}
	for _, args := range [][]string{
		{"--metric", "wer", "--score", "0", "--max", "1"},
		{"--result-dir", ok, "--metric", "wer", "--max", "1"},
		{"--result-dir", ok, "--metric", "wer", "--score", "0"},
		{"--result-dir", ok, "--metric", "wer", "--score", "0", "--max", "1", "--min", "0"},
	} {
		v, err := runEvaluate(t, args...)
		var ee *cli.ExitError
		if !errors.As(err, &ee) || ee.Code != 2 || v != nil {
			t.Fatalf("%v: error %v, output %v; want exit 2 and no verdict", args, err, v)
		}
	}
}

// TestEvaluateScoresKeptOutputs: with --outputs the stand-in evaluator
// scores the audio loadgen's quality pass kept: a tone is not silence, a
// silent reply is; a directory without kept audio cannot be scored; a
// given --score is refused.
func TestEvaluateScoresKeptOutputs(t *testing.T) {
	res := t.TempDir()
	os.WriteFile(filepath.Join(res, "result.json"), []byte(`{"totals":{"by_class":{"success":3}}}`), 0o644)
	kept := func(samples []int16) string {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "000000.stream.wav"), wavFile(samples, 24000, len(samples)), 0o600)
		os.WriteFile(filepath.Join(dir, "000000.full.wav"), wavFile(make([]int16, 10), 24000, 10), 0o600)
		return dir
	}
	tone, silence := kept(sine(0, 24000, 24000)), kept(make([]int16, 24000))
	v, err := runEvaluate(t, "--result-dir", res, "--outputs", tone, "--metric", "silence_ratio", "--max", "0.5")
	if err != nil || v["verdict"] != "pass" || v["figures"].(map[string]any)["silence_ratio"].(float64) > 0.05 || v["figures"].(map[string]any)["scored_requests"] != 1.0 {
		t.Fatalf("a tone: %v %v", v, err)
	}
	if v, _ := runEvaluate(t, "--result-dir", res, "--outputs", silence, "--metric", "silence_ratio", "--max", "0.5"); v["verdict"] != "fail" || v["class"] != "quality" {
		t.Fatalf("silence: %v", v)
	}
	if v, _ := runEvaluate(t, "--result-dir", res, "--outputs", tone, "--metric", "duration_s", "--min", "0.5"); v["verdict"] != "pass" || v["figures"].(map[string]any)["duration_s"] != 1.0 {
		t.Fatalf("duration: %v", v)
	}
	if v, _ := runEvaluate(t, "--result-dir", res, "--outputs", t.TempDir(), "--metric", "silence_ratio", "--max", "0.5"); v["verdict"] != "error" || v["class"] != nil {
		t.Fatalf("nothing kept: %v", v)
	}
	var ee *cli.ExitError
	if _, err := runEvaluate(t, "--result-dir", res, "--outputs", tone, "--metric", "silence_ratio", "--max", "0.5", "--score", "1"); !errors.As(err, &ee) || ee.Code != 2 {
		t.Fatalf("--score with --outputs: %v", err)
	}
}
