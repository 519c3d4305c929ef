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

// TestConfigRefusesWhatTheSeedForbids parses run flags in-process and
// checks the refusals (exit code 2) and the derived configuration.
func TestConfigRefusesWhatTheSeedForbids(t *testing.T) {
	dir := t.TempDir()
	manifest := filepath.Join(dir, "m.jsonl")
	if err := os.WriteFile(manifest, []byte(`{"id":"a","prompt_token_ids":[1],"input_tokens":1,"output_tokens":2,"arrival":"burst:8"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := loadgen.OpenManifest(manifest)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	sat := filepath.Join(dir, "sat.json")
	if err := os.WriteFile(sat, []byte(`{"schema":"`+loadgen.ResultSchema+`","complete":true,"load":{"closed_loop":true},"manifest":{"sha256":"`+m.SHA256+`"},"clean":{"completed_rps":50}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.json")
	if err := os.WriteFile(other, []byte(`{"schema":"`+loadgen.ResultSchema+`","complete":true,"load":{"closed_loop":true},"manifest":{"sha256":"beef"},"clean":{"completed_rps":50}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"--manifest", manifest, "--base-url", "http://127.0.0.1:1", "--model", "m", "--result-dir", dir}
	for _, tc := range []struct {
		name string
		args []string
		want string // "" for accepted
	}{
		{"saturation", []string{"--load-point", "saturation", "--request-rate", "inf"}, ""},
		{"saturation at a finite rate", []string{"--load-point", "saturation", "--request-rate", "10"}, "closed loop"},
		{"moderate", []string{"--load-point", "moderate", "--saturation-result", sat, "--rate-fraction", "0.6"}, ""},
		{"moderate with a hand-given rate", []string{"--load-point", "moderate", "--saturation-result", sat, "--rate-fraction", "0.6", "--request-rate", "5"}, "hand-given rate is refused"},
		{"moderate without a saturation result", []string{"--load-point", "moderate", "--request-rate", "5"}, "needs --saturation-result"},
		{"moderate of another manifest", []string{"--load-point", "moderate", "--saturation-result", other, "--rate-fraction", "0.6"}, "differs"},
		{"moderate with another arrival", []string{"--load-point", "moderate", "--saturation-result", sat, "--rate-fraction", "0.6", "--arrival", "poisson"}, "from the manifest"},
		{"open loop poisson", []string{"--load-point", "open", "--request-rate", "5", "--arrival", "poisson"}, ""},
		{"no rate", []string{"--load-point", "open"}, "--request-rate is required"},
		{"windows without profiling", []string{"--load-point", "saturation", "--request-rate", "inf", "--num-profile-windows", "2"}, "needs --profile-after-clean"},
		{"negative seconds", []string{"--load-point", "saturation", "--request-rate", "inf", "--warmup-seconds", "-1"}, "not negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := &cobra.Command{Use: "run"}
			var f runFlags
			bindRunFlags(cmd, &f)
			if err := cmd.ParseFlags(append(append([]string{}, base...), tc.args...)); err != nil {
				t.Fatal(err)
			}
			cfg, err := config(cmd, f, m)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q (config %+v)", err, tc.want, cfg)
			}
			var ee *cli.ExitError
			if !errors.As(err, &ee) || ee.Code != 2 {
				t.Fatalf("error %v is not a refusal (exit 2)", err)
			}
		})
	}
}
