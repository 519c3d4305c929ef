package schedule

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"warden/pkg/budget"
	"warden/pkg/state"
	"warden/protocols"
)

// TestWaveFitsUnitByUnit (issue 39, friction 2): a wave is checked
// against the cap unit by unit, in plan order, as the plan's estimate
// walks its launches: the units that fit launch, and the first that does
// not is refused, the campaign stopping (budget) once they started,
// naming the refused wave and the runs before it. A cap that fits none
// stops at once. A campaign with a small cap so runs the runs before its
// first refused wave instead of none.
func TestWaveFitsUnitByUnit(t *testing.T) {
	p := planFile(t, "../../protocols/demo.yaml")
	w := newWorld(p)
	first := Decide(w.View)
	if len(first.Launch) != 2 {
		t.Fatalf("the demo's first wave: %v", launched(first))
	}
	one := budget.Cost(reserveItems(p, first.Launch[0]))
	two := budget.Cost(reserveItems(p, first.Launch[1]))

	w.Account = budget.Account{CapGPUSeconds: one + two/2}
	d := Decide(w.View)
	if got := launched(d); len(got) != 1 || got[0] != first.Launch[0].Runs[0].ID || d.Stop != nil || d.Refused == nil {
		t.Fatalf("cap for one unit: launched %v, stop %+v, refused %+v", got, d.Stop, d.Refused)
	}
	if budget.Cost(d.Reserve) != one {
		t.Errorf("reserved %v GPU-s, want the first unit's %v", budget.Cost(d.Reserve), one)
	}
	want := "the wave launching " + first.Launch[1].Runs[0].ID + " (after 1 runs) is refused: budget refused:"
	if r := d.Refused; r.Reason != state.StopBudget || !strings.HasPrefix(r.Detail, want) || r.Figures["runs_before"] != 1 {
		t.Errorf("refused %+v, want %q...", r, want)
	}

	w.Account = budget.Account{CapGPUSeconds: one / 2}
	d = Decide(w.View)
	if len(d.Launch) != 0 || d.Stop == nil || d.Stop.Reason != state.StopBudget ||
		!strings.HasPrefix(d.Stop.Detail, "the wave launching "+first.Launch[0].Runs[0].ID+" (after 0 runs) is refused") {
		t.Fatalf("cap for no unit: launched %v, stop %+v", launched(d), d.Stop)
	}

	w.Account = budget.Account{CapGPUSeconds: one + two}
	if d = Decide(w.View); len(d.Launch) != 2 || d.Refused != nil || d.Stop != nil {
		t.Fatalf("cap for both: launched %v, refused %+v", launched(d), d.Refused)
	}
}

// TestRefusedWaveIsThePlans: the wave Decide refuses at the start, and
// the runs before it, are those the plan names as its first refused wave
// (controller plan and start print it).
func TestRefusedWaveIsThePlans(t *testing.T) {
	b, err := os.ReadFile("../../protocols/demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := planFile(t, "../../protocols/demo.yaml")
	first := Decide(newWorld(p).View)
	capH := budget.Hours(budget.Cost(reserveItems(p, first.Launch[0]))+budget.Cost(reserveItems(p, first.Launch[1]))/2) + p.Totals.BudgetConsumedGPUHours
	small, err := protocols.PlanBytes("demo.yaml", []byte(strings.Replace(string(b), "cap_gpu_hours: 0.5", fmt.Sprintf("cap_gpu_hours: %.6f", capH), 1)), protocols.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := small.Totals.FirstRefused
	if r == nil {
		t.Fatalf("the plan refuses no wave under a cap of %.6f", capH)
	}
	w := newWorld(small)
	w.Account = budget.Account{CapGPUSeconds: budget.Seconds(small.Totals.BudgetCapGPUHours), ConsumedGPUSeconds: budget.Seconds(small.Totals.BudgetConsumedGPUHours)}
	d := Decide(w.View)
	if d.Refused == nil || len(launched(d)) != r.RunsBefore || !strings.HasPrefix(d.Refused.Detail, fmt.Sprintf("the wave launching %s (after %d runs)", r.Run, r.RunsBefore)) {
		t.Fatalf("plan: first refused %s after %d runs; decide: launched %v, refused %+v", r.Run, r.RunsBefore, launched(d), d.Refused)
	}
}
