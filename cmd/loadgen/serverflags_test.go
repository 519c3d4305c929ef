package main

import (
	"testing"

	"warden/pkg/loadgen"
)

// TestServerFlags: the profile-window and server-kind flags reach the
// configuration, and their bad values are refused (exit 2), some by the
// configuration check before the start.
func TestServerFlags(t *testing.T) {
	dir, manifest, m := oneRequestManifest(t, `{"id":"a","prompt_token_ids":[1],"input_tokens":1,"output_tokens":2,"arrival":"steady"}`)
	base := []string{"--manifest", manifest, "--base-url", "http://127.0.0.1:1", "--model", "m", "--result-dir", dir,
		"--load-point", "saturation", "--request-rate", "inf", "--profile-after-clean"}
	parse := func(args ...string) (loadgen.Config, error) {
		cfg, err := parseRun(t, m, base, args...)
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
		if _, err := parse(tc.args...); !refusedWith(err, tc.want) {
			t.Errorf("%v: %v, want a refusal saying %q", tc.args, err, tc.want)
		}
	}
}
