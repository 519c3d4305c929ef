package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"warden/internal/cli"
	"warden/pkg/loadgen"
)

// TestAudioFlags: --modalities and --min-audio-samples reach the
// configuration; modalities on completions and a minimum below one
// sample are refused (exit 2).
func TestAudioFlags(t *testing.T) {
	dir := t.TempDir()
	manifest := filepath.Join(dir, "m.jsonl")
	if err := os.WriteFile(manifest, []byte(`{"id":"a","prompt":"hi","input_tokens":1,"output_tokens":2,"arrival":"steady"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := loadgen.OpenManifest(manifest)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	parse := func(args ...string) (loadgen.Config, error) {
		cmd := &cobra.Command{Use: "run"}
		var f runFlags
		bindRunFlags(cmd, &f)
		base := []string{"--manifest", manifest, "--base-url", "http://127.0.0.1:1", "--model", "m", "--result-dir", dir,
			"--load-point", "saturation", "--request-rate", "inf", "--run-id", "r"}
		if err := cmd.ParseFlags(append(base, args...)); err != nil {
			t.Fatal(err)
		}
		return config(cmd, f, m)
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
		_, err := parse(tc.args...)
		var ee *cli.ExitError
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &ee) || ee.Code != 2 {
			t.Errorf("%v: %v, want a refusal saying %q", tc.args, err, tc.want)
		}
	}
}
