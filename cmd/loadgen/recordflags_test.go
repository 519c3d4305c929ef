package main

import (
	"testing"
	"time"

	"warden/pkg/loadgen"
)

// TestRecordFlags: --seed-records defaults on with --modalities and off
// without; the run id and attempt come from the controller's environment
// unless given; a run without a run id, a bad mode, attempt or deadline
// is refused (exit 2).
func TestRecordFlags(t *testing.T) {
	dir, manifest, m := oneRequestManifest(t, `{"id":"a","prompt":"hi","input_tokens":1,"output_tokens":2,"arrival":"steady"}`)
	parse := func(args ...string) (loadgen.Config, error) {
		return parseRun(t, m, []string{"--manifest", manifest, "--base-url", "http://127.0.0.1:1", "--model", "m", "--result-dir", dir,
			"--load-point", "omni", "--request-rate", "inf", "--endpoint", "chat"}, args...)
	}
	t.Setenv("WARDEN_RUN_ID", "run-9")
	t.Setenv("WARDEN_ATTEMPT", "2")
	cfg, err := parse("--modalities", "text,audio", "--request-deadline-s", "1.5")
	if err != nil || !cfg.SeedRecords || cfg.RunID != "run-9" || cfg.RunAttempt != 2 || cfg.RequestDeadline != 1500*time.Millisecond {
		t.Fatalf("omni defaults: records %v, run %q attempt %d, deadline %v, %v", cfg.SeedRecords, cfg.RunID, cfg.RunAttempt, cfg.RequestDeadline, err)
	}
	if cfg, err := parse(); err != nil || cfg.SeedRecords || cfg.RequestDeadline != 0 {
		t.Fatalf("text defaults: records %v, deadline %v, %v", cfg.SeedRecords, cfg.RequestDeadline, err)
	}
	if cfg, err := parse("--seed-records", "on", "--run-id", "x", "--run-attempt", "5"); err != nil || !cfg.SeedRecords || cfg.RunID != "x" || cfg.RunAttempt != 5 {
		t.Fatalf("on: %+v, %v", cfg, err)
	}
	if cfg, err := parse("--modalities", "text,audio", "--seed-records", "off"); err != nil || cfg.SeedRecords {
		t.Fatalf("off: %v, %v", cfg.SeedRecords, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--modalities", "audio", "--run-id", ""}, "--seed-records needs a run id"},
		{[]string{"--seed-records", "yes"}, "--seed-records"},
		{[]string{"--run-attempt", "-1"}, "--run-attempt"},
		{[]string{"--request-deadline-s", "-1"}, "--request-deadline-s"},
	} {
		if _, err := parse(tc.args...); !refusedWith(err, tc.want) {
			t.Errorf("%v: %v, want a refusal saying %q", tc.args, err, tc.want)
		}
	}
}
