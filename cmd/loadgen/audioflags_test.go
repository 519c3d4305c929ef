package main

import (
	"slices"
	"testing"

	"warden/pkg/loadgen"
)

// TestAudioFlags: --modalities and --min-audio-samples reach the
// configuration; modalities on completions and a minimum below one
// sample are refused (exit 2).
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
	if cfg, err := parse("--endpoint", "chat"); err != nil || cfg.Modalities != nil || cfg.MinAudioSamples != loadgen.DefaultMinAudioSamples {
		t.Fatalf("defaults %v %d, %v", cfg.Modalities, cfg.MinAudioSamples, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--modalities", "audio"}, "--modalities"},
		{[]string{"--endpoint", "chat", "--min-audio-samples", "0"}, "--min-audio-samples"},
	} {
		if _, err := parse(tc.args...); !refusedWith(err, tc.want) {
			t.Errorf("%v: %v, want a refusal saying %q", tc.args, err, tc.want)
		}
	}
}
