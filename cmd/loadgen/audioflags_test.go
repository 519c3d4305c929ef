package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"warden/pkg/loadgen"
)

// TestAudioFlags: --modalities, --min-audio-samples, the declared audio
// format and --check-served-model reach the configuration; modalities on
// completions, a minimum below one sample and a format that is not one
// are refused (exit 2).
func TestAudioFlags(t *testing.T) {
	dir, manifest, m := oneRequestManifest(t, `{"id":"a","prompt":"hi","input_tokens":1,"output_tokens":2,"arrival":"steady"}`)
	parse := func(args ...string) (loadgen.Config, error) {
		return parseRun(t, m, []string{"--manifest", manifest, "--base-url", "http://127.0.0.1:1", "--model", "m", "--result-dir", dir,
			"--load-point", "saturation", "--request-rate", "inf", "--run-id", "r"}, args...)
	}
	cfg, err := parse("--endpoint", "chat", "--modalities", "text,audio", "--min-audio-samples", "240")
	if err != nil || !slices.Equal(cfg.Modalities, []string{"text", "audio"}) || cfg.MinAudioSamples != 240 {
		t.Fatalf("config %v %d, %v", cfg.Modalities, cfg.MinAudioSamples, err)
	}
	if cfg, err := parse("--endpoint", "chat"); err != nil || cfg.Modalities != nil || cfg.MinAudioSamples != loadgen.DefaultMinAudioSamples ||
		cfg.AudioFormat != loadgen.DefaultAudioFormat || cfg.CheckServedModel {
		t.Fatalf("defaults %v %d %+v %v, %v", cfg.Modalities, cfg.MinAudioSamples, cfg.AudioFormat, cfg.CheckServedModel, err)
	}
	cfg, err = parse("--endpoint", "chat", "--modalities", "audio", "--audio-sample-rate", "44100", "--audio-channels", "2", "--audio-bits-per-sample", "24", "--check-served-model")
	if err != nil || cfg.AudioFormat != (loadgen.AudioFormat{SampleRate: 44100, Channels: 2, BitsPerSample: 24}) || !cfg.CheckServedModel {
		t.Fatalf("declared format %+v, check %v, %v", cfg.AudioFormat, cfg.CheckServedModel, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--modalities", "audio"}, "--modalities"},
		{[]string{"--endpoint", "chat", "--min-audio-samples", "0"}, "--min-audio-samples"},
		{[]string{"--endpoint", "chat", "--audio-sample-rate", "0"}, "--audio-sample-rate"},
		{[]string{"--endpoint", "chat", "--audio-bits-per-sample", "12"}, "--audio-bits-per-sample"},
	} {
		if _, err := parse(tc.args...); !refusedWith(err, tc.want) {
			t.Errorf("%v: %v, want a refusal saying %q", tc.args, err, tc.want)
		}
	}
}

// TestCheckServedModelExits2: against SGLang-Omni serving its own name,
// loadgen --check-served-model with the model path refuses the run with
// exit 2, saying what the server serves, and writes no result; with the
// served name it runs.
func TestCheckServedModelExits2(t *testing.T) {
	url := startStandin(t, "1", "--server-kind", "sglang-omni", "--model", "qwen3-omni")
	dir := t.TempDir()
	m := textManifest(t, dir, 400)
	args := func(model, res string) []string {
		return append([]string{"run", "--manifest", m, "--base-url", url, "--model", model, "--check-served-model", "--endpoint", "chat",
			"--server-kind", "sglang-omni", "--load-point", "check", "--request-rate", "10", "--result-dir", res}, shortTimeline("5")...)
	}
	refused := filepath.Join(dir, "refused")
	code, out := loadgenRun(t, nil, args("/models/Qwen3-Omni", refused)...)
	if code != 2 || !strings.Contains(out, `/v1/models lists ["qwen3-omni"]`) {
		t.Fatalf("the model path: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(refused, "result.json")); err == nil {
		t.Fatal("a refused run wrote result.json")
	}
	if code, out := loadgenRun(t, nil, args("qwen3-omni", filepath.Join(dir, "served"))...); code != 0 {
		t.Fatalf("the served name: exit %d\n%s", code, out)
	}
}
