package runner_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"warden/pkg/state"
)

// Co-location judging (coloc.go, A-P3-1) through the scripted executor:
// each block runs its backgrounds beside its target, the gate's verdict
// comes from the measured runs' results, and a failed check falls back to
// the next regime. testdata/coloc.yaml: target p1 on s0, background p2
// on s1, regimes pair-a then pair-b, a 3% throughput tolerance.

const (
	soloTarget = "coloc.solo.p1.saturation"
	targetA    = "coloc.pair-a.p1.saturation"
	targetB    = "coloc.pair-b.p1.saturation"
	bgA        = "coloc.pair-a.bg.p2"
	bgB        = "coloc.pair-b.bg.p2"
	gateA      = "colocation/pair-a"
	gateB      = "colocation/pair-b"
)

// throughput is a target's result at rps requests/s, with profile
// windows profile windows in its phase file.
func throughput(rps float64, windows int) step {
	phases := `{"phase":"warmup"}` + "\n" + strings.Repeat(`{"phase":"profile"}`+"\n", windows) + `{"phase":"done"}` + "\n"
	return step{Files: map[string]string{"client/result.json": fmt.Sprintf(`{"throughput_rps": %v}`, rps), "phases.jsonl": phases}}
}

// campaignGate is the last verdict of a campaign-level gate.
func (c *loopCampaign) campaignGate(gate string) state.GateVerdict {
	c.t.Helper()
	vs, err := c.store.GateVerdicts("")
	if err != nil {
		c.t.Fatal(err)
	}
	var last state.GateVerdict
	for _, v := range vs {
		if v.Gate == gate {
			last = v
		}
	}
	return last
}

// gateVerdicts are the verdicts of a campaign-level gate, in order.
func (c *loopCampaign) gateVerdicts(gate string) []string {
	c.t.Helper()
	vs, err := c.store.GateVerdicts("")
	if err != nil {
		c.t.Fatal(err)
	}
	var out []string
	for _, v := range vs {
		if v.Gate == gate {
			out = append(out, v.Verdict)
		}
	}
	return out
}

// TestColocationFallsBackScripted: the solo block runs first, alone. In
// each regime's block the background serves before its target starts
// and is told to end only after the target ended, both in one allocation
// that is given back. A co-located throughput half the solo one fails
// pair-a's gate, with the figures it compared; within 1% passes pair-b's;
// the matrix then runs under pair-b.
func TestColocationFallsBackScripted(t *testing.T) {
	t.Parallel()
	c := newLoopCampaign(t, "coloc.yaml", map[string][]step{soloTarget: {throughput(100, 0)}, targetA: {throughput(50, 0)}, targetB: {throughput(99, 0)}})
	c.run()
	cp := c.wantComplete()
	if cp.Regime != "pair-b" {
		t.Errorf("regime %q, want pair-b", cp.Regime)
	}
	a := c.campaignGate(gateA)
	if a.Verdict != state.VerdictFail || a.Run != targetA || a.Figures["t_solo"] != 100 || a.Figures["t_coloc"] != 50 || a.Figures["ratio"] != 0.5 ||
		!strings.Contains(a.Detail, "throughput ratio 0.5000") {
		t.Errorf("gate %s: %+v", gateA, a)
	}
	if b := c.campaignGate(gateB); b.Verdict != state.VerdictPass || b.Figures["ratio"] != 0.99 {
		t.Errorf("gate %s: %+v", gateB, b)
	}
	evs := c.x.seq()
	at := func(ev string) int {
		t.Helper()
		i := eventIndex(evs, ev)
		if i < 0 {
			t.Fatalf("no %q among %q", ev, evs)
		}
		return i
	}
	if !(at("end "+soloTarget) < at("start "+bgA)) {
		t.Errorf("the solo block did not end before pair-a's started: %q", evs)
	}
	for _, b := range []struct{ bg, target string }{{bgA, targetA}, {bgB, targetB}} {
		if !(at("measuring "+b.bg) < at("start "+b.target) && at("end "+b.target) < at("until "+b.bg)) {
			t.Errorf("%s did not serve through %s: %q", b.bg, b.target, evs)
		}
	}
	allocs := 0
	for _, ev := range evs {
		if strings.HasPrefix(ev, "alloc ") {
			allocs++
			if !strings.Contains(ev, "s0") || !strings.Contains(ev, "s1") {
				t.Errorf("%q: a block's allocation holds the slots of its target and backgrounds", ev)
			}
		}
	}
	if releases := strings.Count(strings.Join(evs, "\n"), "release "); allocs != 2 || releases != 2 {
		t.Errorf("%d allocations and %d releases, want one each per regime's block: %q", allocs, releases, evs)
	}
	for _, cl := range c.x.asked() {
		switch cl.Run {
		case bgA, targetA:
			if cl.Regime != "pair-a" {
				t.Errorf("%s ran under %q", cl.Run, cl.Regime)
			}
		case "p1.saturation", "p2.saturation":
			if cl.Regime != "pair-b" {
				t.Errorf("matrix run %s ran under %q, want pair-b", cl.Run, cl.Regime)
			}
		}
	}
	c.wantCalls(soloTarget+"/a1", bgA+"/a1", targetA+"/a1", bgB+"/a1", targetB+"/a1", "p1.saturation/a1", "p2.saturation/a1")
	c.wantLedgerSettled()
	c.wantClean()
}

// TestColocationAllRegimesFailScripted: with every regime's gate failed,
// no regime is authorized: the campaign stops for review before any
// matrix run.
func TestColocationAllRegimesFailScripted(t *testing.T) {
	t.Parallel()
	c := newLoopCampaign(t, "coloc.yaml", map[string][]step{soloTarget: {throughput(100, 0)}, targetA: {throughput(50, 0)}, targetB: {throughput(80, 0)}})
	c.run()
	c.stoppedAt(state.StopNoRegime, "no regime is authorized")
	for _, g := range []string{gateA, gateB} {
		if v := c.campaignGate(g); v.Verdict != state.VerdictFail {
			t.Errorf("gate %s: %+v", g, v)
		}
	}
	c.wantCalls(soloTarget+"/a1", bgA+"/a1", targetA+"/a1", bgB+"/a1", targetB+"/a1")
	c.wantLedgerSettled()
	c.wantClean()
}

// TestColocationBackgroundEndsEarlyScripted (A-P3-1: the backgrounds
// stay active through the target's whole timeline): a background that
// ends while its target runs fails the check, not the campaign, with
// that reason; the background's attempt stays failed; the next regime is
// tried.
func TestColocationBackgroundEndsEarlyScripted(t *testing.T) {
	t.Parallel()
	c := newLoopCampaign(t, "coloc.yaml", map[string][]step{
		soloTarget: {throughput(100, 0)},
		bgA:        {{Early: true, AfterStart: targetA}},
		targetA:    {throughput(100, 0)},
		targetB:    {throughput(100, 0)},
	})
	c.run()
	// the failed background is not done: its block was judged as it ran
	if cp := c.record(); cp.State != state.CampaignComplete || cp.Regime != "pair-b" {
		t.Errorf("campaign %s (%s) regime %q; want complete under pair-b", cp.State, cp.StopDetail, cp.Regime)
	}
	if a := c.campaignGate(gateA); a.Verdict != state.VerdictFail || a.Figures["backgrounds_ended_early"] != 1 ||
		!strings.Contains(a.Detail, bgA+" ended before the target's last profile window") {
		t.Errorf("gate %s: %+v", gateA, a)
	}
	c.wantAttempts(bgA, failed(state.ReasonClientFailed))
	c.wantAttempts(targetA, ok)
	c.wantLedgerSettled()
	c.wantClean()
}

// TestColocationProfileWindowsScripted (A-P3-1: the check samples
// exactly one 2+8 window per target): a check that requires one fails
// every regime whose targets had none, naming the count, and the
// campaign stops with no regime; with one window each, it passes.
func TestColocationProfileWindowsScripted(t *testing.T) {
	t.Parallel()
	oneWindow := []string{"        figure_tolerance: 0.03\n", "        figure_tolerance: 0.03\n        profile_windows: 1\n"}
	t.Run("none", func(t *testing.T) {
		t.Parallel()
		c := newLoopCampaign(t, "coloc.yaml", map[string][]step{soloTarget: {throughput(100, 0)}, targetA: {throughput(100, 0)}, targetB: {throughput(100, 0)}}, oneWindow...)
		c.run()
		c.stoppedAt(state.StopNoRegime)
		for _, g := range []string{gateA, gateB} {
			if v := c.campaignGate(g); v.Verdict != state.VerdictFail || v.Figures["profile_windows"] != 0 || !strings.Contains(v.Detail, "had 0 profile windows; the check samples exactly 1") {
				t.Errorf("gate %s: %+v", g, v)
			}
		}
		c.wantClean()
	})
	t.Run("one", func(t *testing.T) {
		t.Parallel()
		c := newLoopCampaign(t, "coloc.yaml", map[string][]step{soloTarget: {throughput(100, 1)}, targetA: {throughput(100, 1)}}, oneWindow...)
		c.run()
		// pair-b's block is conditional on pair-a's failure: never run
		if cp := c.record(); cp.State != state.CampaignComplete || cp.Regime != "pair-a" {
			t.Errorf("campaign %s (%s) regime %q; want complete under pair-a", cp.State, cp.StopDetail, cp.Regime)
		}
		if v := c.campaignGate(gateA); v.Verdict != state.VerdictPass {
			t.Errorf("gate %s: %+v", gateA, v)
		}
		c.wantCalls(soloTarget+"/a1", bgA+"/a1", targetA+"/a1", "p1.saturation/a1", "p2.saturation/a1")
		c.wantClean()
	})
}

// TestColocationResultFIFOScripted: a target that leaves a FIFO where
// its result should be cannot wedge the loop: the read refuses it, the
// gate's verdict is an error, judged once more with nothing run again,
// and the second error stops the campaign for review naming the error and
// the regime not tried.
func TestColocationResultFIFOScripted(t *testing.T) {
	t.Parallel()
	c := newLoopCampaign(t, "coloc.yaml", map[string][]step{soloTarget: {throughput(100, 0)}, targetA: {{FIFOs: []string{"client/result.json"}}}})
	c.run()
	c.stoppedAt(state.StopGateError, "a FIFO", "regimes not tried: pair-b")
	if got := c.gateVerdicts(gateA); len(got) != 2 || got[0] != state.VerdictError || got[1] != state.VerdictError {
		t.Errorf("gate %s verdicts %v, want two errors (judged once more)", gateA, got)
	}
	c.wantCalls(soloTarget+"/a1", bgA+"/a1", targetA+"/a1")
	c.wantLedgerSettled()
	c.wantClean()
}

// TestColocationAllocationFails: a block whose allocation the executor
// cannot make (on Slurm: no node with the slots' GPUs) fails its first
// run as a lost step, not retried (the block is judged as it ran), and
// the campaign stops; nothing of the block ran.
func TestColocationAllocationFails(t *testing.T) {
	t.Parallel()
	c := newLoopCampaign(t, "coloc.yaml", map[string][]step{soloTarget: {throughput(100, 0)}})
	c.x.allocErr = errors.New("no node holds the slots")
	c.run()
	c.stoppedAt(state.StopForRun(state.ReasonStepLost), "allocation for the co-location block: no node holds the slots")
	c.wantCalls(soloTarget + "/a1")
	c.wantLedgerSettled()
	c.wantClean()
}

// TestColocationValidatorDecides: the gate's validator (the runner's own
// child, given both result directories) fails a block whose throughput
// passes, its detail kept; its own false-failure figures (f3.self.*) are
// kept beside the verdict; where it passes, so does the gate.
func TestColocationValidatorDecides(t *testing.T) {
	t.Parallel()
	validator := `        figure_tolerance: 0.03
        validator:
          shell: |
            case "$NEED_TARGET_DIR" in
              *pair-a*) echo '{"verdict": "fail", "detail": "operator shares moved", "figures": {"f3.self.false_failure_rate": 0.01}}' ;;
              *) echo '{"verdict": "pass", "figures": {"f3.self.false_failure_rate": 0.02}}' ;;
            esac
`
	c := newLoopCampaign(t, "coloc.yaml", map[string][]step{soloTarget: {throughput(100, 0)}, targetA: {throughput(100, 0)}, targetB: {throughput(100, 0)}},
		"        figure_tolerance: 0.03\n", validator)
	c.run()
	if cp := c.wantComplete(); cp.Regime != "pair-b" {
		t.Errorf("regime %q, want pair-b", cp.Regime)
	}
	if a := c.campaignGate(gateA); a.Verdict != state.VerdictFail || a.Detail != "validator: operator shares moved" || a.Figures["f3.self.false_failure_rate"] != 0.01 || a.Figures["ratio"] != 1 {
		t.Errorf("gate %s: %+v", gateA, a)
	}
	if b := c.campaignGate(gateB); b.Verdict != state.VerdictPass || b.Figures["f3.self.false_failure_rate"] != 0.02 {
		t.Errorf("gate %s: %+v", gateB, b)
	}
	c.wantClean()
}
