package main

import (
	"path/filepath"
	"syscall"
	"testing"

	"warden/pkg/contract"
)

// --layer1-queue-after-profile: the stream stays valid schema-v1, and
// from the first /stop_profile on its waiting queue is the asked depth.
func TestLayer1QueueAfterProfile(t *testing.T) {
	h := newHarness(t)
	l1 := filepath.Join(t.TempDir(), "opprof")
	s := h.healthyServer("--load-s", "0", "--layer1-dir", l1, "--flush-interval-s", "0.05", "--steps-per-s", "200",
		"--layer1-queue-after-profile", "50")
	stream := filepath.Join(l1, "layer1.jsonl")
	// records of the clean part first, then a profile window
	waitFor(t, "records before the profile window", func() bool {
		recs, err := contract.ReadLayer1Records(stream)
		return err == nil && len(recs) > 0
	})
	s.profileWindow(t)
	waitFor(t, "a record after the profile window", func() bool {
		recs, err := contract.ReadLayer1Records(stream)
		return err == nil && len(recs) > 0 && recs[len(recs)-1].NumWaitingReqs == 50
	})
	if err := syscall.Kill(s.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if ws := s.wait(t); !ws.Exited() || ws.ExitStatus() != 0 {
		t.Fatalf("server ended with %v", ws)
	}
	if r := contract.Layer1Files(stream, "", "", contract.DefaultLayer1); r.Verdict != "pass" {
		t.Fatalf("layer1: %+v", r)
	}
	recs, err := contract.ReadLayer1Records(stream)
	if err != nil {
		t.Fatal(err)
	}
	// the depth changes once, from 1 to 50, and the submit times rise
	changes := 0
	for i, r := range recs {
		if r.NumWaitingReqs != 1 && r.NumWaitingReqs != 50 {
			t.Fatalf("record %d: num_waiting_reqs %d", i, r.NumWaitingReqs)
		}
		if i > 0 && r.NumWaitingReqs != recs[i-1].NumWaitingReqs {
			changes++
		}
		if i > 0 && r.SubmitMonoNS <= recs[i-1].SubmitMonoNS {
			t.Fatalf("record %d submitted at %d, not after %d", i, r.SubmitMonoNS, recs[i-1].SubmitMonoNS)
		}
	}
	if recs[0].NumWaitingReqs != 1 || changes != 1 {
		t.Fatalf("first depth %d, %d changes", recs[0].NumWaitingReqs, changes)
	}
}
