package dirlayout

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"warden/pkg/state"
	"warden/protocols"
)

func TestPaths(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{AttemptDir("/c", "m.sat", 3), "/c/runs/m.sat/a3"},
		{AttemptRel("m.sat", 12), "m.sat/a12"},
		{State("/c"), "/c/state.db"},
		{Plan("/c"), "/c/plan.json"},
		{Socket("/c"), "/c/ctl.sock"},
		{Lock("/c"), "/c/controller.lock"},
		{Log("/c"), "/c/controller.log"},
		{Settings("/c"), "/c/controller.json"},
		{Runs("/c"), "/c/runs"},
		{GPUSamples("/c/runs/r/a1"), "/c/runs/r/a1/gpu-samples.jsonl"},
		{Sanity("/c/runs/r/a1"), "/c/runs/r/a1/sanity.json"},
		{ClientResult("/c/runs/r/a1"), "/c/runs/r/a1/client/result.json"},
		{Stderr("/c/runs/r/a1", "server"), "/c/runs/r/a1/server.err"},
		{Stdout("/c/runs/r/a1", "client"), "/c/runs/r/a1/client.out"},
	} {
		if c.got != c.want {
			t.Errorf("got %s, want %s", c.got, c.want)
		}
	}
}

func TestReadPlan(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadPlan(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ReadPlan of a directory without plan.json = %v, want not exist", err)
	}
	want := protocols.Plan{Runs: []protocols.Run{{ID: "m.sat", Measured: true, ExpectedS: 30}}, PrivacyMinLeakBytes: 64}
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, PlanFile), b, 0o444); err != nil {
		t.Fatal(err)
	}
	got, err := ReadPlan(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Runs) != 1 || got.Runs[0].ID != "m.sat" || !got.Runs[0].Measured || got.PrivacyMinLeakBytes != 64 {
		t.Fatalf("ReadPlan = %+v, want %+v", got, want)
	}
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, PlanFile), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if p, err := ReadPlan(bad); err == nil {
		t.Fatalf("ReadPlan of a damaged plan = %+v, want an error", p)
	}
}

func TestOpenStore(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenStoreReadOnly(dir, time.Second); err == nil {
		t.Fatal("OpenStoreReadOnly of a directory without state.db succeeded")
	}
	s, err := OpenStore(dir, state.Options{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	c := state.Campaign{ID: "t-1", Dir: dir, CreatedAt: time.Now(), State: state.CampaignRunning, BudgetCapGPUHours: 1}
	if err := s.CreateCampaign(c, []state.Run{{ID: "r", GPUs: 1, ExpectedS: 1}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := os.Stat(filepath.Join(dir, StateFile)); err != nil {
		t.Fatalf("the store is not at DIR/%s: %v", StateFile, err)
	}
	ro, err := OpenStoreReadOnly(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	got, err := ro.Campaign()
	if err != nil || got.ID != "t-1" {
		t.Fatalf("read back campaign %+v, %v", got, err)
	}
}
