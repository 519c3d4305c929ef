package schedule

import (
	"slices"
	"strings"
	"testing"

	"warden/pkg/outcome"
	"warden/pkg/state"
)

// TestHeldRunsDoNotLaunch (issue 39, friction 1): a run held for the
// cause it shares with a failed run is not launched, nor is its unit; the
// runs of another server go on; when nothing else can run the campaign
// stops awaiting-amendment, the detail naming the held runs and the
// cause.
func TestHeldRunsDoNotLaunch(t *testing.T) {
	p := planFile(t, "../../protocols/demo.yaml")
	w := newWorld(p).done("burnin.*").set("short.small.saturation", state.Failed)
	w.Awaiting = []outcome.Awaiting{{Run: "short.small.saturation", Attempt: 1, Reason: state.ReasonServerExit}}
	var matrix []string
	for _, r := range p.Runs {
		if r.Phase == "matrix" && r.ID != "short.small.saturation" && !strings.HasSuffix(r.ID, "moderate") {
			matrix = append(matrix, r.ID)
		}
	}
	// one held: the others launch, that one's unit does not
	w.Held = []outcome.Held{{Run: matrix[0], Cause: "short.small.saturation", Attempt: 1, Reason: state.ReasonServerExit, Server: "standin"}}
	d := Decide(w.View)
	got := launched(d)
	if d.Stop != nil || len(got) == 0 || slices.Contains(got, matrix[0]) || slices.Contains(got, "short.small.saturation") {
		t.Fatalf("with %s held: launched %v, stop %+v", matrix[0], got, d.Stop)
	}
	// every one held: nothing launches, and the stop names them
	w.Held = nil
	for _, id := range matrix {
		w.Held = append(w.Held, outcome.Held{Run: id, Cause: "short.small.saturation", Attempt: 1, Reason: state.ReasonServerExit, Server: "standin"})
	}
	d = Decide(w.View)
	if len(d.Launch) != 0 || d.Stop == nil || d.Stop.Reason != state.StopAwaitingAmendment ||
		!strings.Contains(d.Stop.Detail, "short.small.saturation (attempt 1, server-exit)") ||
		!strings.Contains(d.Stop.Detail, "held, not tried: "+strings.Join(matrix, ", ")+" share the cause of short.small.saturation attempt 1 (server-exit, server standin)") ||
		!strings.Contains(d.Stop.Detail, "--retry-shared-cause") {
		t.Fatalf("all held: launched %v, stop %+v", launched(d), d.Stop)
	}
}
