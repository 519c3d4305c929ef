package runner_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"warden/pkg/state"
)

// The budget the loop holds (A-P3-4): a wave's reservation recorded
// before any of it starts, a wave refused, the reservations released with
// the next wave's, and the GPU time in flight against the cap. The
// matrix protocol reserves each run's expected 10 GPU-s (nominal).

// commitGroups splits the ledger into the entries of each commit: one
// commit stamps its entries with one time, in consecutive sequence
// numbers.
func commitGroups(es []state.LedgerEntry) [][]state.LedgerEntry {
	var out [][]state.LedgerEntry
	for i, e := range es {
		if n := len(out); n > 0 && e.At.Equal(es[i-1].At) && e.Seq == es[i-1].Seq+1 {
			out[n-1] = append(out[n-1], e)
		} else {
			out = append(out, []state.LedgerEntry{e})
		}
	}
	return out
}

// kinds is a commit's entries as "kind run".
func kinds(es []state.LedgerEntry) string {
	var s []string
	for _, e := range es {
		s = append(s, e.Kind+" "+e.Run)
	}
	return strings.Join(s, ", ")
}

// TestWaveReservations: three cells on two slots make two waves. Each
// wave's runs are reserved in one commit before any of its attempts
// exists, each for its GPUs times its expected seconds; the first wave's
// released run goes in one commit with the second wave's reservation;
// every reservation is released by the end. The executor saw each run
// in the wave that reserved it.
func TestWaveReservations(t *testing.T) {
	t.Parallel()
	c := newLoopCampaign(t, "matrix.yaml", map[string][]step{"p2.saturation": {{AfterEnd: "p3.saturation"}}},
		"matrix: {pattern: [p1, p2, p3, p4]}", "matrix: {pattern: [p1, p2, p3]}")
	c.run()
	c.wantComplete()
	l := c.wantLedgerSettled()
	var groups []string
	for _, g := range commitGroups(l.entries) {
		groups = append(groups, kinds(g))
	}
	for _, want := range []string{"reserve p1.saturation, reserve p2.saturation", "release p1.saturation, reserve p3.saturation"} {
		found := false
		for _, g := range groups {
			found = found || g == want
		}
		if !found {
			t.Errorf("no commit of %q in the ledger: %q", want, groups)
		}
	}
	for _, e := range l.entries {
		if e.Kind == state.LedgerReserve && e.GPUSeconds != 10 {
			t.Errorf("%s reserved %v GPU-s, want 1 GPU x 10 s", e.Run, e.GPUSeconds)
		}
	}
	waves := map[string]int{"p1.saturation": 1, "p2.saturation": 1, "p3.saturation": 2}
	for _, cl := range c.x.asked() {
		if cl.Wave != waves[cl.Run] {
			t.Errorf("%s ran in wave %d, want %d", cl.Run, cl.Wave, waves[cl.Run])
		}
	}
	// each run's reservation precedes its attempt
	for _, e := range l.entries {
		if e.Kind != state.LedgerReserve {
			continue
		}
		if a := c.attempts(e.Run)[0]; a.CreatedAt.Before(e.At) {
			t.Errorf("%s a1 created at %v, before its reservation at %v", e.Run, a.CreatedAt, e.At)
		}
	}
	c.wantClean()
}

// TestWaveReservesTheBounds: by default a wave reserves each run's
// bounds, as plan computes them, not its expected seconds.
func TestWaveReservesTheBounds(t *testing.T) {
	t.Parallel()
	c := newLoopCampaign(t, "matrix.yaml", nil, "reserve: nominal", "reserve: bounds")
	c.run()
	c.wantComplete()
	for _, e := range c.wantLedgerSettled().entries {
		if r := c.planRun(e.Run); e.Kind == state.LedgerReserve && (r.BoundS <= r.ExpectedS || e.GPUSeconds != float64(r.GPUs)*r.BoundS) {
			t.Errorf("%s reserved %v GPU-s; want its bounds, %v GPU(s) x %v s", e.Run, e.GPUSeconds, r.GPUs, r.BoundS)
		}
	}
	c.wantClean()
}

// TestBudgetRefusedBeforeTheFirstWave: a cap below the first wave's
// first unit (a run of 10 GPU-s against 0.002 GPU-hours, 7.2 GPU-s)
// stops the campaign before any attempt exists; nothing is reserved. (A
// cap that fits the first unit and not the second runs the first: the
// wave is checked unit by unit, TestSmallCapRunsTheRunsBeforeTheRefusedWave.)
func TestBudgetRefusedBeforeTheFirstWave(t *testing.T) {
	t.Parallel()
	c := newLoopCampaign(t, "matrix.yaml", nil, "cap_gpu_hours: 1.0", "cap_gpu_hours: 0.002")
	c.run()
	cp := c.stoppedAt(state.StopBudget, "budget refused")
	if math.Abs(cp.StopFigures["wave_gpu_hours"]*3600-10) > 1e-9 || cp.StopFigures["runs_before"] != 0 {
		t.Errorf("stop figures %v; want the first unit's 10 GPU-s, no run before it", cp.StopFigures)
	}
	c.wantCalls()
	if l := c.wantLedgerSettled(); len(l.entries) != 0 {
		t.Errorf("ledger after a refused wave: %+v", l.entries)
	}
	c.wantClean()
}

// TestBudgetRefusesALaterWave: the first wave fits the cap of 36 GPU-s;
// its first run is charged 30, so the second wave (30 charged, the run in
// flight reserved or charged, 10 more) cannot fit: the campaign stops
// when it is decided, the run in flight finishes, and every reservation
// is released.
func TestBudgetRefusesALaterWave(t *testing.T) {
	t.Parallel()
	c := newLoopCampaign(t, "matrix.yaml", map[string][]step{
		"p1.saturation": {{GPUSeconds: 30}},
		"p2.saturation": {{GPUSeconds: 1, AfterEnd: "p1.saturation"}},
	}, "cap_gpu_hours: 1.0", "cap_gpu_hours: 0.01")
	c.run()
	cp := c.stoppedAt(state.StopBudget, "budget refused")
	if cp.ConsumedGPUSeconds != 31 {
		t.Errorf("consumed %v GPU-s, want the two charges, 31", cp.ConsumedGPUSeconds)
	}
	c.wantCalls("p1.saturation/a1", "p2.saturation/a1")
	c.wantAttempts("p2.saturation", ok)
	c.wantLedgerSettled()
	c.wantClean()
}

// TestBudgetExhaustedInFlight: the hard stop while runs are in flight.
// 18 GPU-s were consumed before the campaign; the one run's reservation
// fits the 36 GPU-s cap, and its server has held its GPU for 20 s: the
// charged time alone and the time in flight alone are within the cap,
// together they pass it. At the loop's next look at the budget the run
// is ended (interrupted, budget-exhausted), charged, the charge past the
// cap recorded as the overrun, and the campaign stops budget-exhausted.
// A resume runs it again only once the cap is raised: first the wave is
// refused; after an amendment raises the cap, the run completes.
func TestBudgetExhaustedInFlight(t *testing.T) {
	t.Parallel()
	c := newLoopCampaign(t, "matrix.yaml", map[string][]step{"p1.saturation": {{Hold: true, HeldS: 20}}},
		"matrix: {pattern: [p1, p2, p3, p4]}", "matrix: {pattern: [p1]}",
		"cap_gpu_hours: 1.0", "cap_gpu_hours: 0.01, consumed_gpu_hours: 0.005")
	c.run()
	cp := c.stoppedAt(state.StopBudgetExhausted, "pass the cap of 36.0 GPU-s")
	if f := cp.StopFigures; f["charged_gpu_s"] != 18 || f["in_flight_gpu_s"] < 20 || f["in_flight_gpu_s"] > 36 || f["cap_gpu_s"] != 36 {
		t.Errorf("stop figures %v", f)
	}
	a := c.wantAttempts("p1.saturation", state.Attempt{State: state.Interrupted, Reason: state.ReasonBudgetExhausted})[0]
	l := c.wantLedgerSettled()
	if got := l.byAttempt["p1.saturation/a1"]; got < 20 {
		t.Errorf("the ended run was charged %v GPU-s, want at least the 20 it held", got)
	}
	cp = c.record()
	var overrun float64
	for _, e := range l.entries {
		if e.Kind == state.LedgerOverrun {
			overrun += e.GPUSeconds
		}
	}
	if want := cp.ConsumedGPUSeconds - 36; math.Abs(overrun-want) > 1e-6 {
		t.Errorf("overrun recorded %v GPU-s, want consumed %v minus the cap", overrun, cp.ConsumedGPUSeconds)
	}
	c.wantClean()

	c.resume()
	c.stoppedAt(state.StopBudget, "budget refused")
	c.wantCalls("p1.saturation/a1")

	err := c.store.Amend(state.Amendment{ID: "A-CAP", Title: "raise the cap", ProtocolSHA256: cp.ProtocolSHA256, RegisteredAt: time.Now()},
		func(cp *state.Campaign) error { cp.BudgetCapGPUHours = 1; return nil })
	if err != nil {
		t.Fatal(err)
	}
	c.resume()
	c.wantComplete()
	c.wantAttempts("p1.saturation", a, ok)
	c.wantLedgerSettled()
	c.wantClean()
}
