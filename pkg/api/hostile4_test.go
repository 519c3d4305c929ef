package api_test

import (
	"math"
	"testing"
	"time"

	"warden/pkg/api"
	"warden/pkg/endlog"
	"warden/pkg/state"
)

// A status read without a controller counts the GPU time in flight of an
// attempt whose processes the end log proves gone only up to that proof,
// as resume charges it; with a controller running, up to now.
func TestInFlightBoundedByProvenEnd(t *testing.T) {
	dir, s, t0 := runningCampaign(t, []state.Run{{ID: "a", ExpectedS: 100}, {ID: "b", Order: 1, ExpectedS: 100}})
	for _, run := range []string{"a", "b"} {
		if _, err := s.NewAttempt(run, "", func(at *state.Attempt) { at.GPUIDs = []int{0} }); err != nil {
			t.Fatal(err)
		}
		if _, err := s.UpdateAttempt(run, 1, func(at *state.Attempt) error {
			at.Procs = append(at.Procs, state.Proc{Role: "server", PID: 1 << 22, StartedAt: t0})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := endlog.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	err = l.Record("a", 1, t0.Add(30*time.Second))
	l.Close()
	if err != nil {
		t.Fatal(err)
	}
	now := t0.Add(100 * time.Second)
	for _, tc := range []struct {
		ctl  api.Controller
		want float64 // GPU-seconds in flight: a's, then b's
	}{
		{api.Controller{}, 30 + 100},
		{api.Controller{Alive: true}, 100 + 100},
	} {
		st, err := api.BuildStatus(s, dir, tc.ctl, now)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Budget.InFlightGPUHours * 3600; math.Abs(got-tc.want) > 1e-6 {
			t.Errorf("controller alive %v: %.6f GPU-s in flight, want %g", tc.ctl.Alive, got, tc.want)
		}
	}
}
