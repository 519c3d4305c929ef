package protocols

import "testing"

// The A/B protocol says what the methodology asks: systems alternate in a
// seeded order, every configuration has three process-level repeats, an
// A/A pair comes first, and cold start is a phase of its own.
func TestOmniAB(t *testing.T) {
	p, err := PlanFile("omni-ab.yaml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	repeats := map[string]int{}
	prev := map[string]string{}
	for _, r := range p.Runs {
		switch r.Phase {
		case "aa":
			if r.Cell != "vllm-omni/c8" {
				t.Fatalf("A/A run %s on %s", r.ID, r.Cell)
			}
		case "cold-start", "closed-loop", "open-loop":
			if last, ok := prev[r.Phase]; ok && last == r.Axes["system"] {
				t.Fatalf("%s: two %s runs in a row at %s", r.Phase, last, r.ID)
			}
			prev[r.Phase] = r.Axes["system"]
			repeats[r.Phase+"/"+r.Cell]++
		}
		if r.GPUs != 2 {
			t.Fatalf("%s uses %d GPUs, want the same 2 for both systems", r.ID, r.GPUs)
		}
	}
	if p.Totals.ByKind["aa"] != 2 || p.Totals.ByKind["cold-start"] != 6 || p.Totals.ByKind["closed-loop"] != 36 || p.Totals.ByKind["open-loop"] != 30 {
		t.Fatalf("by kind %v", p.Totals.ByKind)
	}
	for cfg, n := range repeats {
		if n != 3 {
			t.Fatalf("%s has %d repeats, want 3", cfg, n)
		}
	}
	// the seeded order is not simply the listed one
	listed := true
	for _, r := range p.Runs {
		if r.Phase == "closed-loop" {
			listed = r.Cell == "vllm-omni/c1" && r.Repeat == 1
			break
		}
	}
	if listed {
		t.Fatal("closed-loop order starts with the first listed cell; the shuffle did nothing")
	}
}

// The same comparison on two Slurm nodes: the same runs, each an exclusive
// step, two at a time, so the expected wall time is about half the
// single-host one and the GPU-hours the same.
func TestOmniABOnSlurm(t *testing.T) {
	one, err := PlanFile("omni-ab.yaml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	two, err := PlanFile("omni-ab-slurm.yaml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s := two.Executor.Slurm; two.Executor.Kind != "slurm" || s == nil || !s.Exclusive || s.Nodes != 2 {
		t.Fatalf("executor %+v", two.Executor)
	}
	if len(one.Runs) != len(two.Runs) {
		t.Fatalf("%d runs on Slurm, %d on one host", len(two.Runs), len(one.Runs))
	}
	ratio := two.Totals.ExpectedWallS / one.Totals.ExpectedWallS
	if ratio < 0.45 || ratio > 0.7 {
		t.Errorf("wall time on two nodes %.0f s, on one host %.0f s (ratio %.2f): want about half", two.Totals.ExpectedWallS, one.Totals.ExpectedWallS, ratio)
	}
	if d := two.Totals.GPUHoursEstimate - one.Totals.GPUHoursEstimate; d > 1e-9 || d < -1e-9 {
		t.Errorf("GPU-hours %.3f on Slurm, %.3f on one host", two.Totals.GPUHoursEstimate, one.Totals.GPUHoursEstimate)
	}
}

// The plan's Slurm requests: every omni-ab-slurm run asks for one node's
// two GPUs and 32 CPUs; the phase-3 protocol's co-location blocks ask for
// one allocation each.
func TestSlurmRequests(t *testing.T) {
	p, err := PlanFile("omni-ab-slurm.yaml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	reqs := p.SlurmRequests
	if len(reqs) != 1 || reqs[0] != (SlurmRequest{GPUs: 2, CPUs: 32, Runs: len(p.Runs)}) {
		t.Errorf("omni-ab-slurm requests %+v, want one shape for its %d runs", reqs, len(p.Runs))
	}
	p3, err := PlanFile("opprof-phase3.yaml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	allocs, runs := 0, 0
	for _, r := range p3.slurmRequests() {
		if r.Allocation {
			allocs += r.Runs
		} else {
			runs += r.Runs
		}
	}
	blocks := map[int]bool{}
	for _, r := range p3.Runs {
		if r.Kind == "background" {
			blocks[r.Unit] = true
		}
	}
	if runs != len(p3.Runs) || allocs != len(blocks) || allocs == 0 {
		t.Errorf("phase 3: %d step requests for %d runs, %d allocations for %d co-location blocks with backgrounds", runs, len(p3.Runs), allocs, len(blocks))
	}
}
