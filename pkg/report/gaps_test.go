package report

import (
	"strings"
	"testing"
	"time"

	"warden/pkg/api"
)

func TestDeadBands(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	gap := api.ControllerGap{From: t0.Add(10 * time.Second), Until: t0.Add(27 * time.Second), Seconds: 17, ControllerPID: 4242}
	var b strings.Builder
	deadBands(&b, []api.ControllerGap{gap}, t0, t0.Add(100*time.Second), 60, 1000, 10, 200)
	svg := b.String()
	// 10 s of 100 s on a 1,000-wide plot starting at x 60: x 160, 170 wide
	if !strings.Contains(svg, `class="dead"`) || !strings.Contains(svg, `x="160.0"`) || !strings.Contains(svg, `width="170.0"`) {
		t.Fatalf("band: %s", svg)
	}
	if !strings.Contains(svg, "no controller for 17.0 s: controller pid 4242 died after its heartbeat at 12:00:10; resumed at 12:00:27") {
		t.Fatalf("band title: %s", svg)
	}
	// a gap outside the chart's span draws nothing; one cut by it is clamped
	b.Reset()
	deadBands(&b, []api.ControllerGap{{From: t0.Add(-20 * time.Second), Until: t0.Add(-5 * time.Second)}}, t0, t0.Add(time.Minute), 60, 1000, 10, 200)
	if b.Len() != 0 {
		t.Fatalf("a gap before the span drew %s", b.String())
	}
	if !inGap([]api.ControllerGap{gap}, t0.Add(9*time.Second), t0.Add(11*time.Second)) || inGap([]api.ControllerGap{gap}, t0.Add(28*time.Second), t0.Add(29*time.Second)) {
		t.Fatal("inGap: a line across the gap must break, one after it not")
	}
	if n := gapNotes([]api.ControllerGap{gap}); len(n) != 1 || !strings.Contains(n[0], "not drawn across it") {
		t.Fatalf("notes %q", n)
	}
}
