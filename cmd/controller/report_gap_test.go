package main

import (
	"strings"
	"testing"

	"warden/pkg/state"
)

// TestReportMarksDeadController: a controller killed mid-campaign and a
// resume: the resume records the dead interval (a campaign event from
// the last heartbeat to the resume), and ctlq report shades it in its
// charts and says so in its notes.
func TestReportMarksDeadController(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := writeProtocol(t, scenario{patterns: 3, measureS: "1.5"})
	c.startDetached(proto, "auto")
	c.waitMeasuring()
	c.killController()
	if out, code := c.controller("resume", "-d", c.dir, "--foreground"); code != 0 {
		t.Fatalf("resume exited %d:\n%s", code, tail(out, 3000))
	}
	s := c.store()
	evs, err := s.Events(0, 0)
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	var dead *state.Event
	for i, e := range evs {
		if e.Run == "" && e.Reason == state.EventControllerDead {
			dead = &evs[i]
		}
	}
	if dead == nil || !(dead.Figures["dead_until_unix"] > dead.Figures["dead_from_unix"]) || dead.Figures["controller_pid"] <= 0 {
		t.Fatalf("no controller-dead event with its interval: %+v", dead)
	}
	b := c.reportPage()
	if n := strings.Count(b, `<g class="dead">`); n < 2 {
		t.Fatalf("the report shades the dead interval in %d chart(s), want the timeline and the budget at least", n)
	}
	if !strings.Contains(b, "no controller for ") {
		t.Fatal("the report's notes do not name the interval without a controller")
	}
	c.assertNoProcesses()
}
