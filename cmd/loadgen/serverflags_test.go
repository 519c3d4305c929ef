package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"warden/internal/cli"
	"warden/pkg/loadgen"
)

// TestServerFlags: the profile-window and server-kind flags reach the
// configuration, and their bad values are refused (exit 2), some by the
// configuration check before the start.
func TestServerFlags(t *testing.T) {
	dir := t.TempDir()
	manifest := filepath.Join(dir, "m.jsonl")
	if err := os.WriteFile(manifest, []byte(`{"id":"a","prompt_token_ids":[1],"input_tokens":1,"output_tokens":2,"arrival":"steady"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := loadgen.OpenManifest(manifest)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	base := []string{"--manifest", manifest, "--base-url", "http://127.0.0.1:1", "--model", "m", "--result-dir", dir,
		"--load-point", "saturation", "--request-rate", "inf", "--profile-after-clean"}
	parse := func(args ...string) (loadgen.Config, error) {
		cmd := &cobra.Command{Use: "run"}
		var f runFlags
		bindRunFlags(cmd, &f)
		if err := cmd.ParseFlags(append(append([]string{}, base...), args...)); err != nil {
			t.Fatal(err)
		}
		cfg, err := config(cmd, f, m)
		if err == nil {
			if _, cerr := cfg.Check(m); cerr != nil {
				err = refused("%v", cerr)
			}
		}
		return cfg, err
	}
	cfg, err := parse("--profile-traces-dir", "/t", "--profile-ranks", "2", "--server-kind", "sglang")
	if err != nil || cfg.ProfileWait.TracesDir != "/t" || cfg.ProfileWait.Ranks != 2 || cfg.ServerKind != loadgen.ServerSGLang ||
		cfg.ProfileWait.TracePattern != loadgen.DefaultTracePattern {
		t.Fatalf("config %+v, %v", cfg, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--server-kind", "tgi"}, "--server-kind"},
		{[]string{"--profile-traces-dir", "/t", "--profile-ranks", "0"}, "--profile-ranks"},
		{[]string{"--profile-traces-dir", "/t", "--profile-window-budget-seconds", "0"}, "positive window budget"},
		{[]string{"--profile-traces-dir", "/t", "--profile-trace-pattern", "[x"}, "trace pattern"},
	} {
		_, err := parse(tc.args...)
		var ee *cli.ExitError
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &ee) || ee.Code != 2 {
			t.Errorf("%v: %v, want a refusal saying %q", tc.args, err, tc.want)
		}
	}
}
