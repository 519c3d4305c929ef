package campaigndir

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"warden/pkg/dirlayout"
	"warden/pkg/lockfile"
	"warden/protocols"
)

// TestSecondStartNamesTheController (issue 39, friction 5): start on a
// campaign a controller runs says which controller (its pid) runs it, as
// resume does, not that its database is locked; on one no controller
// runs it says how to continue it.
func TestSecondStartNamesTheController(t *testing.T) {
	dir, proto := created(t)
	if _, err := Create(proto, dir, StartOptions{Backend: "fake", Cgroups: "off"}, time.Now()); err == nil ||
		!strings.Contains(err.Error(), "continue it with: controller resume -d "+dir) {
		t.Fatalf("second start, no controller: %v", err)
	}
	lock, err := lockfile.Acquire(dirlayout.Lock(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	_, err = Create(proto, dir, StartOptions{Backend: "fake", Cgroups: "off"}, time.Now())
	want := fmt.Sprintf("refused: controller pid %d already runs the campaign in %s; follow it with: ctlq status -d %s", os.Getpid(), dir, dir)
	if err == nil || err.Error() != want || strings.Contains(err.Error(), "locked") {
		t.Fatalf("second start while a controller runs it: %v\nwant %s", err, want)
	}
}

// TestOverBudgetNamesTheFirstRefusedWave (issue 39, friction 2): start's
// refusal of a plan over the cap, and the note it prints when
// --allow-over-budget lets it start, name the first wave the budget
// refuses and how many runs launch before it, whichever figure (the
// estimate, the worst case, a wave) is over.
func TestOverBudgetNamesTheFirstRefusedWave(t *testing.T) {
	b, err := os.ReadFile("../../protocols/testdata/mini.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		cap, want, allowed string
	}{
		{"1.0", "over budget: the wave launching B.sat (after 2 runs, at 0 s on the estimate's timeline) would be refused",
			"over the budget cap, started anyway (--allow-over-budget): the campaign runs the 2 runs launched before the wave launching B.sat, then stops (budget) at that wave"},
		{"0.001", "over budget: the estimate of 0.011 GPU-hours passes the 0.001 remaining of the cap 0.001 by 0.010; the first wave refused is the one launching A.sat (after 0 runs",
			"the campaign runs the 0 runs launched before the wave launching A.sat"},
	} {
		p, err := protocols.PlanBytes("mini.yaml", []byte(strings.Replace(string(b), "cap_gpu_hours: 1.0", "cap_gpu_hours: "+tt.cap, 1)), protocols.Options{})
		if err != nil {
			t.Fatal(err)
		}
		err = OverBudget(p)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("cap %s: %v\nwant %s", tt.cap, err, tt.want)
		}
		if ob := (&OverBudgetError{Err: err}); !errors.Is(ob, err) || !strings.Contains(ob.Error(), tt.want) || !strings.Contains(AllowedOverBudget(p), tt.allowed) {
			t.Errorf("cap %s: refusal %q, allowed %q", tt.cap, ob, AllowedOverBudget(p))
		}
	}
}
