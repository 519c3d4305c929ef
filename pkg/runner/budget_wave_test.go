package runner_test

import (
	"fmt"
	"strings"
	"testing"

	"warden/pkg/state"
)

// TestSmallCapRunsTheRunsBeforeTheRefusedWave (issue 39, friction 2):
// with a cap that fits the first unit of the first wave and not the
// second, the campaign runs the first unit's run, as the plan's first
// refused wave says, and stops budget naming the refused wave and the
// run before it; it used to refuse the whole wave and run none.
func TestSmallCapRunsTheRunsBeforeTheRefusedWave(t *testing.T) {
	t.Parallel()
	probe := newCampaign(t, protocol{patterns: 2})
	r := probe.plan.Runs[0]
	capH := (1.5 * r.BoundS * float64(r.GPUs)) / 3600
	c := newCampaign(t, protocol{patterns: 2, capGPUHours: fmt.Sprintf("%.6f", capH)})
	fr := c.plan.Totals.FirstRefused
	if fr == nil || fr.Run != "p2.saturation" || fr.RunsBefore != 1 {
		t.Fatalf("the plan's first refused wave: %+v, want p2.saturation after 1 run", fr)
	}
	c.run()
	cp := c.wantStopped(state.StopBudget)
	c.wantAttempts("p1.saturation", ok)
	c.wantAttempts("p2.saturation")
	if !strings.HasPrefix(cp.StopDetail, "the wave launching p2.saturation (after 1 runs) is refused: budget refused:") || cp.StopFigures["runs_before"] != 1 {
		t.Fatalf("stop: %s %v", cp.StopDetail, cp.StopFigures)
	}
	c.wantLedgerSettled()
	c.wantClean()
}
