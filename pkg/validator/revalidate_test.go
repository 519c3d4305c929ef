package validator_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warden/internal/testutil/testreaper"
	"warden/pkg/gates"
	"warden/pkg/launch"
	"warden/pkg/safefile"
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

// A re-adjudication over damaged evidence (a file that no longer matches
// the digest recorded when the attempt's processes ended, here NUL-filled
// after the fact) runs no validator: each verdict is error, naming the
// file, never a pass over what the attempt did not leave.
func TestRevalidateRefusesDamagedEvidence(t *testing.T) {
	dir := t.TempDir()
	env := filepath.Join(dir, "environment.json")
	if err := os.WriteFile(env, []byte(`{"variables":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "client"), 0o755); err != nil {
		t.Fatal(err)
	}
	result := filepath.Join(dir, "client", "result.json")
	if err := os.WriteFile(result, []byte(`{"throughput_rps": 3}`), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := safefile.Seal(result)
	if err != nil {
		t.Fatal(err)
	}
	a := state.Attempt{RunID: "p1.saturation", N: 1, Dir: dir, Evidence: []state.EvidenceFile{{Path: "client/result.json", Size: s.Size, SHA256: s.SHA256}}}
	if err := os.WriteFile(result, make([]byte, s.Size), 0o644); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "ran")
	run := protocols.Run{ID: a.RunID, Validators: []protocols.ValidatorSpec{
		{Name: "pass", Command: protocols.CommandSpec{Shell: "touch " + marker}, TimeoutS: 5},
	}}
	vs, err := validator.Revalidate(&launch.Launcher{Reaper: testReaper}, run, a, dir, filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 1 || vs[0].Verdict != gates.Error || !strings.Contains(vs[0].Detail, "damaged evidence") || !strings.Contains(vs[0].Detail, result) {
		t.Fatalf("verdicts %+v", vs)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the validator ran over damaged evidence")
	}
}
