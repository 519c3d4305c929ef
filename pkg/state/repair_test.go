package state_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"warden/pkg/state"
)

// A state.json that a failing disk left NUL-filled (its size kept, its
// data lost) is not taken as current: RepairStateFiles rewrites it from
// the database, and one that matches is left alone.
func TestRepairRewritesNULFilledStateFile(t *testing.T) {
	s, _ := newCampaign(t, 1)
	dir := filepath.Join(t.TempDir(), "runs", "r000", "a1")
	if _, err := s.NewAttempt("r000", dir, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Transition("r000", 1, state.Reserved, "", "reserved", nil, nil); err != nil {
		t.Fatal(err)
	}
	if fixed, err := s.RepairStateFiles(100, 1<<20); err != nil || len(fixed) != 0 {
		t.Fatalf("a current state.json repaired: %+v %v", fixed, err)
	}
	path := filepath.Join(dir, state.StateFileName)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, make([]byte, fi.Size()), 0o644); err != nil {
		t.Fatal(err)
	}
	fixed, err := s.RepairStateFiles(100, 1<<20)
	if err != nil || len(fixed) != 1 || fixed[0].Run != "r000" || fixed[0].N != 1 || fixed[0].Err != nil {
		t.Fatalf("repairs %+v %v", fixed, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var sf state.StateFile
	if err := json.Unmarshal(b, &sf); err != nil || sf.Attempt.State != state.Reserved {
		t.Fatalf("rewritten state.json: %v, %+v", err, sf.Attempt.State)
	}
}
