package validator_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warden/internal/testreaper"
	"warden/pkg/launch"
	"warden/pkg/state"
	"warden/pkg/validator"
	"warden/protocols"
)

// testReaper is the one reaper of the test process: it owns every child's
// exit status, so nothing else may wait for children once it runs (see
// launch.Reaper).
var testReaper *launch.Reaper

func TestMain(m *testing.M) {
	os.Exit(testreaper.Run(m, &testReaper))
}

// A re-adjudication runs each validator under the same bounds as an
// attempt does: its timeout_s ends one that never ends (a failing verdict,
// killed by SIGTERM), and memory_mib is its RLIMIT_AS.
func TestRevalidateBoundsValidators(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "environment.json"), []byte(`{"variables":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	run := protocols.Run{ID: "p1.saturation", Validators: []protocols.ValidatorSpec{
		{Name: "hang", Command: protocols.CommandSpec{Shell: "exec sleep 1000"}, TimeoutS: 0.2},
		{Name: "mem", Command: protocols.CommandSpec{Shell: `test "$(ulimit -v)" = 65536`}, MemoryMiB: 64},
	}}
	vs, err := validator.Revalidate(&launch.Launcher{Reaper: testReaper}, run, state.Attempt{RunID: run.ID, N: 1, Dir: dir}, dir, filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 2 || vs[0].Passed() || !strings.Contains(vs[0].Detail, "killed by signal SIGTERM") || !vs[1].Passed() {
		t.Fatalf("verdicts %+v", vs)
	}
}
