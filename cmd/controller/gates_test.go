package main

import (
	"strings"
	"testing"

	"warden/internal/testutil/testcampaign"
	"warden/pkg/gpu/fakegpu"
	"warden/pkg/state"
)

// sleeper starts a process the test owns, to hold fake GPU memory as if it
// were someone else's; it is killed and waited for at cleanup.
func sleeper(t *testing.T) (int, uint64) {
	t.Helper()
	cmd := unrelated(t)
	st, err := fakegpu.StartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid, st
}

func TestBudgetRefusedBeforeWave(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	// the first wave reserves 2 runs x 10 s x 1 GPU = 20 GPU-s; the cap is 18 GPU-s
	// start refuses the protocol (its estimate passes the cap) unless told otherwise
	proto := writeProtocol(t, scenario{patterns: 2, capGPUHours: "0.005"})
	if out, code := c.controller("start", "-f", proto, "-d", c.dir, "--gpu-backend", "fake", "--foreground"); code != exitOverBudget || !strings.Contains(out, "over budget") {
		t.Fatalf("start over budget: exit %d, want %d:\n%s", code, exitOverBudget, out)
	}
	if out, code := c.controller("start", "-f", proto, "-d", c.dir, "--gpu-backend", "fake", "--foreground", "--allow-over-budget"); code != 0 {
		t.Fatalf("start --allow-over-budget: exit %d:\n%s", code, tail(out, 3000))
	}
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignStopped || cp.StopReason != "budget" || cp.StopFigures["wave_gpu_hours"] <= 0 || cp.StopFigures["cap_gpu_hours"] != 0.005 {
		t.Fatalf("campaign %s %s %v", cp.State, cp.StopReason, cp.StopFigures)
	}
	runs, _ := s.Runs()
	for _, r := range runs {
		if r.Attempts != 0 {
			t.Fatalf("run %s launched after the budget refusal", r.ID)
		}
	}
	if cp.ReservedGPUSeconds != 0 {
		t.Fatalf("reserved %v after a refused wave", cp.ReservedGPUSeconds)
	}
}

func TestDiskLimitStops(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	// no file system here has a petabyte free
	proto := testcampaign.Edit(t, writeProtocol(t, scenario{patterns: 2}), "stop: {", "stop: {min_free_gb: 1000000, ")
	c.runForeground(proto)
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignStopped || cp.StopReason != "disk" || cp.StopFigures["min_free_gb"] != 1e6 || !strings.Contains(cp.StopDetail, "GB free") {
		t.Fatalf("campaign %s %s %v %s", cp.State, cp.StopReason, cp.StopFigures, cp.StopDetail)
	}
	runs, _ := s.Runs()
	for _, r := range runs {
		if r.Attempts != 0 {
			t.Fatalf("run %s launched despite the disk limit", r.ID)
		}
	}
}
