package api_test

import (
	"reflect"
	"testing"
	"time"

	"warden/pkg/api"
	"warden/pkg/state"
)

// TestReportControllerGaps: the report's intervals without a controller
// are the campaign's controller-dead events, from the dead controller's
// last heartbeat to the resume; an event whose interval is empty or
// reversed (until <= from) is dropped, and another event with the same
// figures is not a gap.
func TestReportControllerGaps(t *testing.T) {
	dir, s, t0 := runningCampaign(t, []state.Run{{ID: "a", ExpectedS: 100}})
	unix := func(d time.Duration) float64 { return float64(t0.Add(d).Unix()) }
	for _, e := range []state.Event{
		{Reason: state.EventControllerDead, Figures: map[string]float64{"dead_from_unix": unix(-30 * time.Second), "dead_until_unix": unix(-10 * time.Second), "controller_pid": 7}},
		{Reason: state.EventControllerDead, Figures: map[string]float64{"dead_from_unix": unix(-5 * time.Second), "dead_until_unix": unix(-5 * time.Second), "controller_pid": 8}},
		{Reason: state.EventControllerDead, Figures: map[string]float64{"dead_from_unix": unix(-2 * time.Second), "dead_until_unix": unix(-4 * time.Second), "controller_pid": 9}},
		{Reason: "note", Figures: map[string]float64{"dead_from_unix": unix(-60 * time.Second), "dead_until_unix": unix(-50 * time.Second)}},
	} {
		if _, err := s.AppendEvent(e); err != nil {
			t.Fatal(err)
		}
	}
	r, err := api.BuildReport(s, dir, api.Controller{}, t0)
	if err != nil {
		t.Fatal(err)
	}
	want := []api.ControllerGap{{From: t0.Add(-30 * time.Second), Until: t0.Add(-10 * time.Second), Seconds: 20, ControllerPID: 7}}
	if !reflect.DeepEqual(r.ControllerGaps, want) {
		t.Fatalf("controller gaps %+v; want %+v", r.ControllerGaps, want)
	}
}
