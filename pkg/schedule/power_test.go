package schedule

import (
	"math"
	"strings"
	"testing"

	"warden/pkg/gates"
	"warden/pkg/state"
	"warden/protocols"
)

// The power check on the seed's plan (protocols/opprof-phase3.yaml): its
// 48 matrix runs and 4 co-location targets are judged by layer2
// (representativeness, two windows, one exact rerun) and recovery (two
// recoveries, no rerun); the burn-ins and co-location runs measure.
func TestPowerCheckOnTheSeedPlan(t *testing.T) {
	p := phase3(t)
	pc := p.PowerCheck
	if pc == nil || pc.Before != "matrix" || len(pc.Gates) != 3 || pc.Gates[0].Retries != 1 || pc.Gates[1].Retries != 0 ||
		len(pc.Gates[0].Judged) != 54 || len(pc.Gates[0].MeasuredBy) != 11 || pc.Gates[2].Measure != "profile_window" || pc.Gates[2].Headroom != 1.25 ||
		pc.Gates[2].Judged[10].BudgetS != 24 {
		t.Fatalf("the plan's power check: %+v", pc)
	}
	// the co-location targets sample one window each, the matrix runs two
	for _, j := range pc.Gates[0].Judged {
		if want := map[bool]int{true: 1, false: 2}[strings.HasPrefix(j.Run, "coloc.")]; j.Units != want || j.Rule != protocols.RuleLiteral {
			t.Fatalf("judged %+v", j)
		}
	}
	// the burn-ins done, the matrix next
	atMatrix := func(ms ...Measurement) *world {
		w := newWorld(p).coloc(gates.Pass).done("burnin.*")
		w.Measurements = ms
		return w
	}
	burn := func(measure string, unit float64) Measurement {
		return Measurement{Run: "burnin.C00", Attempt: 1, Measure: measure, UnitPass: unit, Samples: 600}
	}
	window := func(ready float64) Measurement {
		return Measurement{Run: "burnin.C00", Attempt: 1, Measure: "profile_window", ReadyS: ready, Samples: 1}
	}
	// the eight-way gate passed: the four-way fallback's targets will not
	// run, and are not judged
	judged := 0
	for _, j := range pc.Gates[0].Judged {
		if !strings.HasPrefix(j.Run, "coloc.") {
			judged++
		}
	}
	// a window passes the literal SMD rule half the time: a run with its
	// rerun 1-(1-0.25)^2 = 0.4375; recovery always passes
	d := Decide(atMatrix(burn("representativeness", 0.5), burn("recovery", 1), window(15)).View)
	want := math.Pow(1-math.Pow(0.75, 2), float64(judged))
	if d.Stop == nil || d.Stop.Reason != state.StopPowerCheck || len(launched(d)) != 0 {
		t.Fatalf("literal rule, window pass 0.5: %+v launched %v", d.Stop, launched(d))
	}
	if f := d.Stop.Figures; math.Abs(f["completion_probability"]-want)/want > 1e-9 || f["layer2.judged_runs"] != float64(judged) ||
		f["layer2.run_pass_probability"] != 0.4375 || f["recovery.completion_probability"] != 1 || f["min_completion_probability"] != 0.5 {
		t.Fatalf("figures %v, want completion %v", f, want)
	}
	for _, s := range []string{"gate layer2 (representativeness, literal rule): a representative run passes with probability 0.438 (1 exact rerun(s) counted)",
		"measured on burnin.C00: the literal rule passes 50.0% of units over 600 samples",
		"under the calibrated rule at quantile 0.99 gate layer2's runs would pass with 0.98",
		"the dated amendment that would fix it: A-P3-8 (draft, dated 2026-12-03): protocols/opprof-phase3.A-P3-8.yaml"} {
		if !strings.Contains(d.Stop.Detail, s) {
			t.Errorf("the stop's detail lacks %q:\n%s", s, d.Stop.Detail)
		}
	}

	// every window passes: the matrix starts, and the decision carries the
	// judgement to record
	d = Decide(atMatrix(burn("representativeness", 1), burn("recovery", 1), window(15)).View)
	if d.Stop != nil || len(launched(d)) != 16 || d.Power == nil || d.Power.Completion != 1 ||
		!strings.Contains(d.Power.Detail(""), "the slowest measured window's traces were complete 15.0 s after /start_profile (burnin.C00); with headroom 1.25 a window needs 18.8 s, inside the judged runs' 24 s budget") {
		t.Fatalf("gates that always pass: stop %+v, launched %v, power %+v", d.Stop, launched(d), d.Power)
	}
	// a trace that takes 27 s to save: with headroom, 33.75 s, past the
	// seed's 24 s window budget: every window late
	d = Decide(atMatrix(burn("representativeness", 1), burn("recovery", 1), window(27)).View)
	if d.Stop == nil || d.Stop.Reason != state.StopPowerCheck || d.Stop.Figures["profile-windows.completion_probability"] != 0 ||
		!strings.Contains(d.Stop.Detail, "a window needs 33.8 s, over the judged runs' 24 s budget: every window would be late, so its 48 judged run(s) pass with 0.000; a budget of 33.8 s adds 9.8 s a window, outside a cost estimate of 24 s a window") {
		t.Fatalf("a 27 s save: %+v", d.Stop)
	}

	// a gate no run measured: the check cannot tell, and fails closed at
	// the matrix
	d = Decide(atMatrix(burn("representativeness", 1), window(15)).View)
	if d.Stop == nil || d.Stop.Reason != state.StopPowerCheck || !strings.Contains(d.Stop.Detail, "cannot tell: no run measured the recovery gate's false-failure rate yet") ||
		strings.Contains(d.Stop.Detail, "amendment") {
		t.Fatalf("recovery unmeasured: %+v", d.Stop)
	}

	// once a matrix run started, the check is not made again
	w := atMatrix(burn("representativeness", 0.5), burn("recovery", 1), window(15)).set("P08.C00.saturation", state.Failed)
	if d := Decide(w.View); d.Stop != nil || len(launched(d)) == 0 {
		t.Fatalf("after the matrix started: stop %+v, launched %v", d.Stop, launched(d))
	}

	// before the matrix, at a co-location launch, it is made once every
	// gate was measured (here by the solo target's first attempt, which
	// failed and would be rerun); not while one is unmeasured
	solo := func(ms ...Measurement) *world {
		w := newWorld(p).set("coloc.solo.P05.C00.saturation", state.Failed)
		w.Measurements = ms
		return w
	}
	m := func(measure string, unit float64) Measurement {
		return Measurement{Run: "coloc.solo.P05.C00.saturation", Attempt: 1, Measure: measure, UnitPass: unit, Samples: 2000}
	}
	pw := Measurement{Run: "coloc.solo.P05.C00.saturation", Attempt: 1, Measure: "profile_window", ReadyS: 12, Samples: 1}
	if d := Decide(solo(m("representativeness", 0.3), m("recovery", 0.9), pw).View); d.Stop == nil || d.Stop.Reason != state.StopPowerCheck {
		t.Fatalf("co-location, both measured: %+v", d.Stop)
	}
	if d := Decide(solo(m("representativeness", 0.3)).View); d.Stop != nil || len(launched(d)) == 0 {
		t.Fatalf("co-location, recovery unmeasured: stop %+v, launched %v", d.Stop, launched(d))
	}
}

// The rule in force is the judging validator's: under the calibrated
// rule at q a unit passes with q, whatever the literal rule measured; the
// measurements of a run's own cell, else of its server configuration,
// speak for it.
func TestPowerRulesAndBasis(t *testing.T) {
	p := phase3(t)
	pc := *p.PowerCheck
	pc.Gates = append([]protocols.PowerGateInfo(nil), pc.Gates...)
	cal := pc.Gates[0]
	cal.Judged = nil
	for _, j := range pc.Gates[0].Judged {
		j.Rule, j.Quantile = protocols.RuleCalibrated, 0.99
		cal.Judged = append(cal.Judged, j)
	}
	pc.Gates = []protocols.PowerGateInfo{cal}
	ms := []Measurement{{Run: "burnin.C00", Attempt: 1, Measure: "representativeness", UnitPass: 0.05, Samples: 600}}
	res := Power(p, &pc, ms, func(string) bool { return true })
	// six co-location targets of one window, 48 runs of two; one rerun each
	want := math.Pow(1-math.Pow(1-0.99, 2), 6) * math.Pow(1-math.Pow(1-0.99*0.99, 2), 48)
	if !res.Passed() || math.Abs(res.Completion-want)/want > 1e-9 || !math.IsNaN(res.Gates[0].Calibrated) {
		t.Fatalf("calibrated rule: %+v, want completion %v", res, want)
	}

	// the basis: P01.C00's own cell, else the runs of its server command
	// (its configuration: the C00 burn-in and P01.C00), else every
	// measurement
	runs := map[string]protocols.Run{}
	for _, r := range p.Runs {
		runs[r.ID] = r
	}
	ms = []Measurement{
		{Run: "burnin.C00", Measure: "representativeness", UnitPass: 0.2},
		{Run: "burnin.C10", Measure: "representativeness", UnitPass: 0.4},
		{Run: "P01.C00.saturation", Measure: "representativeness", UnitPass: 0.9},
	}
	for _, tc := range []struct {
		run  string
		want float64
	}{{"P01.C00.moderate", 0.9}, {"P03.C00.saturation", (0.2 + 0.9) / 2}, {"P03.C10.saturation", 0.4}, {"P03.C01.saturation", (0.2 + 0.4 + 0.9) / 3}} {
		if got := meanPass(basisFor(runs, runs[tc.run], ms)); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: basis pass %v, want %v", tc.run, got, tc.want)
		}
	}
}
