package schedule

import (
	"slices"
	"strings"
	"testing"

	"warden/pkg/budget"
	"warden/pkg/gates"
	"warden/pkg/outcome"
	"warden/pkg/state"
	"warden/protocols"
)

// The scheduling decisions are table-tested on the seed's own plan
// (protocols/opprof-phase3.yaml with its co-location check run again,
// testdata/opprof-phase3-check-again.yaml: the check with its fallback,
// burn-ins, 24 cells of saturation then moderate, confirmations, one TP2
// cell on two GPUs) and on the demo's. No process is started.

func phase3(t *testing.T) *protocols.Plan {
	t.Helper()
	return planFile(t, "../../protocols/testdata/opprof-phase3-check-again.yaml")
}

// planFile plans the protocol at path, relative to this package.
func planFile(t *testing.T, path string) *protocols.Plan {
	t.Helper()
	p, err := protocols.PlanFile(path, protocols.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// world is a View under construction: every run pending, no verdict, an
// ample budget, the campaign running.
type world struct {
	View
	byID map[string]int
}

func newWorld(p *protocols.Plan) *world {
	w := &world{View: View{
		Plan: p, Running: true, Verdicts: map[string]string{}, Active: map[int]bool{}, Busy: map[string]bool{},
		Account: budget.Account{CapGPUSeconds: budget.Seconds(1000)},
	}, byID: map[string]int{}}
	for i, r := range p.Runs {
		w.Runs = append(w.Runs, state.Run{ID: r.ID, Order: i})
		w.byID[r.ID] = i
	}
	if pc := p.PowerCheck; pc != nil {
		// gates that pass every representative window: the power check
		// lets the matrix start (its own tests give other figures)
		for _, g := range pc.Gates {
			w.Measurements = append(w.Measurements, Measurement{Run: g.MeasuredBy[0], Attempt: 1, Measure: g.Measure, UnitPass: 1, Samples: 1000})
		}
	}
	return w
}

// done marks runs complete; a prefix ending in "*" marks every run whose
// id starts with it.
func (w *world) done(ids ...string) *world {
	for _, id := range ids {
		for i, r := range w.Runs {
			if r.ID == id || (strings.HasSuffix(id, "*") && strings.HasPrefix(r.ID, strings.TrimSuffix(id, "*"))) {
				w.Runs[i].Done, w.Runs[i].LastState, w.Runs[i].Attempts, w.Runs[i].Result = true, state.Complete, 1, 1
			}
		}
	}
	return w
}

func (w *world) set(id string, st state.AttemptState) *world {
	i := w.byID[id]
	w.Runs[i].LastState, w.Runs[i].Attempts = st, w.Runs[i].Attempts+1
	w.Runs[i].Done = st == state.Complete || st == state.Quarantined
	return w
}

func (w *world) verdict(gate, v string) *world { w.Verdicts[gate] = v; return w }

// coloc marks the co-location phase done with the eight-way gate's verdict.
func (w *world) coloc(eight string) *world {
	w.done("coloc.solo.*", "coloc.eight-way.*").verdict("colocation/eight-way", eight)
	if eight == gates.Fail {
		w.done("coloc.four-way.*").verdict("colocation/four-way", gates.Pass)
	}
	return w
}

func launched(d Decision) []string {
	var ids []string
	for _, l := range d.Launch {
		for _, r := range l.Runs {
			ids = append(ids, r.ID)
		}
		if len(l.Runs) == 0 && l.Gate != nil {
			ids = append(ids, "judge "+l.Gate.Name)
		}
	}
	return ids
}

func TestDecideOnTheSeedPlan(t *testing.T) {
	p := phase3(t)
	matrix := func(w *world) *world { return w.coloc(gates.Pass).done("burnin.*") }
	cases := []struct {
		name       string
		w          func() *world
		launch     []string // exactly these runs, in this order (nil: nothing)
		launchN    int      // or: this many runs (when launch is nil and launchN > 0)
		regime     string   // a regime change to this one
		stop       state.StopReason
		complete   bool
		errSubstr  string
		slotsOfRun map[string][]string
	}{
		{
			name:   "phase order: the co-location check comes first, solo target alone on its fixed slot",
			w:      func() *world { return newWorld(p) },
			launch: []string{"coloc.solo.P05.C00.saturation", "coloc.solo.P05.C00.moderate"},
		},
		{
			name: "co-location: the eight-way block after solo, backgrounds with their target",
			w:    func() *world { return newWorld(p).done("coloc.solo.*") },
			launch: []string{
				"coloc.eight-way.bg.P01.C00", "coloc.eight-way.bg.P02.C00", "coloc.eight-way.bg.P03.C00", "coloc.eight-way.bg.P04.C00",
				"coloc.eight-way.bg.P06.C00", "coloc.eight-way.bg.P07.C00", "coloc.eight-way.bg.P08.C00",
				"coloc.eight-way.P05.C00.saturation", "coloc.eight-way.P05.C00.moderate",
			},
		},
		{
			name: "co-location: one block at a time",
			w: func() *world {
				w := newWorld(p).done("coloc.solo.*")
				w.Active[2] = true
				return w
			},
		},
		{
			name:   "co-location: a block done but never judged is judged before anything else",
			w:      func() *world { return newWorld(p).done("coloc.solo.*", "coloc.eight-way.P05*") },
			launch: []string{"judge colocation/eight-way"},
		},
		{
			name: "conditional runs: the four-way fallback runs only after the eight-way gate failed",
			w: func() *world {
				return newWorld(p).done("coloc.solo.*", "coloc.eight-way.*").verdict("colocation/eight-way", gates.Fail)
			},
			launch: []string{
				"coloc.four-way.bg.P01.C00", "coloc.four-way.bg.P03.C00", "coloc.four-way.bg.P06.C00",
				"coloc.four-way.P05.C00.saturation", "coloc.four-way.P05.C00.moderate",
			},
		},
		{
			name:    "regimes: the eight-way gate passed, the fallback is skipped, burn-ins run eight-way",
			w:       func() *world { return newWorld(p).coloc(gates.Pass) },
			launch:  []string{"burnin.C00", "burnin.C10", "burnin.C01", "burnin.C11", "burnin.C00-TP2"},
			regime:  "eight-way",
			launchN: 5,
		},
		{
			name:   "regimes: fallback to four-way after the eight-way gate failed and the four-way passed",
			w:      func() *world { return newWorld(p).coloc(gates.Fail) },
			launch: []string{"burnin.C00", "burnin.C10", "burnin.C01", "burnin.C11"},
			regime: "four-way",
		},
		{
			name: "regimes: no regime left stops for review",
			w: func() *world {
				return newWorld(p).done("coloc.*").verdict("colocation/eight-way", gates.Fail).verdict("colocation/four-way", gates.Fail)
			},
			stop: state.StopNoRegime,
		},
		{
			name: "regimes: an erroring gate authorizes nothing and falls back to nothing: judged twice, it stops naming the error",
			w: func() *world {
				w := newWorld(p).done("coloc.*").verdict("colocation/eight-way", gates.Error)
				w.GateErrors = map[string]int{"colocation/eight-way": 2}
				return w
			},
			stop: state.StopGateError,
		},
		{
			name: "phase order: the matrix waits until every burn-in is done",
			w: func() *world {
				w := newWorld(p).coloc(gates.Pass).done("burnin.C00", "burnin.C10", "burnin.C01", "burnin.C11")
				w.Active[10] = true
				w.Busy["gpu0"], w.Busy["gpu1"] = true, true
				w.Regime = "eight-way"
				return w
			},
		},
		{
			name: "needs: saturation and moderate of a cell run as one unit, the eight first units fill eight slots",
			w:    func() *world { return matrix(newWorld(p)) },
			launch: []string{
				"P08.C00.saturation", "P08.C00.moderate", "P03.C10.saturation", "P03.C10.moderate",
				"P07.C00.saturation", "P07.C00.moderate", "P10.C01.saturation", "P10.C01.moderate",
				"P01.C10.saturation", "P01.C10.moderate", "P01.C01.saturation", "P01.C01.moderate",
				"P10.C10.saturation", "P10.C10.moderate", "P03.C01.saturation", "P03.C01.moderate",
			},
			regime: "eight-way",
		},
		{
			name: "needs: a cell whose saturation is done launches only its moderate",
			w: func() *world {
				w := matrix(newWorld(p)).done("P08.C00.saturation")
				w.Regime = "eight-way"
				for _, s := range []string{"gpu1", "gpu2", "gpu3", "gpu4", "gpu5", "gpu6", "gpu7"} {
					w.Busy[s] = true
				}
				for u := 12; u <= 18; u++ {
					w.Active[u] = true
				}
				return w
			},
			launch:     []string{"P08.C00.moderate"},
			slotsOfRun: map[string][]string{"P08.C00.moderate": {"gpu0"}},
		},
		{
			name: "busy slots: nothing launches when every slot is in use",
			w: func() *world {
				w := matrix(newWorld(p))
				w.Regime = "eight-way"
				for i := range 8 {
					w.Busy["gpu"+string(rune('0'+i))] = true
				}
				return w
			},
		},
		{
			name: "budget refusal: a wave that would pass the cap stops the campaign before it starts",
			w: func() *world {
				w := matrix(newWorld(p))
				w.Account = budget.Account{CapGPUSeconds: budget.Seconds(16), ConsumedGPUSeconds: budget.Seconds(15.9)}
				return w
			},
			stop:   state.StopBudget,
			regime: "eight-way",
		},
		{
			name: "stop threshold: more than 20% of measured runs quarantined",
			w: func() *world {
				w := matrix(newWorld(p))
				n := 0
				for _, r := range p.Runs {
					if r.Measured && n < 11 { // 11 of 52 > 20%
						w.set(r.ID, state.Quarantined)
						n++
					}
				}
				w.Ended = []UnitEnd{{Unit: 11}}
				return w
			},
			stop: state.StopQuarantinedFraction,
		},
		{
			name: "stop threshold: at 20% exactly the matrix goes on",
			w: func() *world {
				w := matrix(newWorld(p))
				n := 0
				for _, r := range p.Runs {
					if r.Measured && n < 10 { // 10 of 52 <= 20%
						w.set(r.ID, state.Quarantined)
						n++
					}
				}
				w.Ended = []UnitEnd{{Unit: 11}}
				w.Regime = "eight-way"
				return w
			},
			launchN: 16,
		},
		{
			name: "stop threshold: more than 5% of measured runs failed",
			w: func() *world {
				w := matrix(newWorld(p))
				for _, id := range []string{"P08.C00.saturation", "P03.C10.saturation", "P07.C00.saturation"} {
					w.set(id, state.Failed) // 3 of 52 > 5%
				}
				w.Ended = []UnitEnd{{Unit: 11}}
				return w
			},
			stop: state.StopFailedFraction,
		},
		{
			name: "outcome: a unit that ended with a failure the policy stops for stops the campaign with the run's reason",
			w: func() *world {
				w := matrix(newWorld(p))
				w.Ended = []UnitEnd{{Unit: 11, FailedRun: "P08.C00.saturation", Reason: state.ReasonOOM, Detail: "CUDA out of memory",
					Verdict: outcome.Next(state.Failed, state.ReasonOOM, 0, 1)}}
				return w
			},
			stop: state.StopForRun(state.ReasonOOM),
		},
		{
			name: "complete: every required run done and nothing active (the four-way fallback was never needed)",
			w: func() *world {
				return newWorld(p).done("coloc.solo.*", "coloc.eight-way.*", "burnin.*", "P*", "confirm*").verdict("colocation/eight-way", gates.Pass)
			},
			complete: true,
		},
		{
			name: "complete: not while a unit is still active",
			w: func() *world {
				w := newWorld(p).done("coloc.solo.*", "coloc.eight-way.*", "burnin.*", "P*", "confirm*").verdict("colocation/eight-way", gates.Pass)
				w.Active[70] = true
				return w
			},
		},
		{
			name: "a stopped campaign launches nothing",
			w: func() *world {
				w := newWorld(p)
				w.Running = false
				return w
			},
		},
		{
			name: "records that do not match the plan are an error",
			w: func() *world {
				w := newWorld(p)
				w.Runs = w.Runs[:10]
				return w
			},
			errSubstr: "the database has 10 runs, the plan 73",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.w().View)
			got := launched(d)
			switch {
			case tc.launch != nil && !slices.Equal(got, tc.launch):
				t.Errorf("launched %v\nwant %v", got, tc.launch)
			case tc.launch == nil && tc.launchN > 0 && len(got) != tc.launchN:
				t.Errorf("launched %d runs %v, want %d", len(got), got, tc.launchN)
			case tc.launch == nil && tc.launchN == 0 && len(got) != 0:
				t.Errorf("launched %v, want nothing", got)
			}
			if tc.stop == "" && d.Stop != nil {
				t.Errorf("stop %+v, want none", *d.Stop)
			}
			if tc.stop != "" && (d.Stop == nil || d.Stop.Reason != tc.stop) {
				t.Errorf("stop %+v, want %s", d.Stop, tc.stop)
			}
			if d.Complete != tc.complete {
				t.Errorf("complete %v, want %v", d.Complete, tc.complete)
			}
			if tc.regime != "" && (d.Regime == nil || d.Regime.Name != tc.regime) {
				t.Errorf("regime %+v, want %s", d.Regime, tc.regime)
			}
			if (d.Err != nil) != (tc.errSubstr != "") || (d.Err != nil && !strings.Contains(d.Err.Error(), tc.errSubstr)) {
				t.Errorf("err %v, want %q", d.Err, tc.errSubstr)
			}
			if len(d.Launch) > 0 {
				var n int
				for _, l := range d.Launch {
					n += len(l.Runs)
				}
				if len(d.Reserve) != n {
					t.Errorf("reserve %d items for %d runs", len(d.Reserve), n)
				}
			}
			for run, want := range tc.slotsOfRun {
				for _, l := range d.Launch {
					for _, r := range l.Runs {
						if r.ID == run && !slices.Equal(protocols.SlotNames(l.Slots), want) {
							t.Errorf("%s on slots %v, want %v", run, protocols.SlotNames(l.Slots), want)
						}
					}
				}
			}
		})
	}
}

// The TP2 burn-in takes two adjacent slots; slots never overlap within a
// wave.
func TestDecideSlotsDisjoint(t *testing.T) {
	p := phase3(t)
	d := Decide(newWorld(p).coloc(gates.Pass).View)
	seen := map[string]string{}
	for _, l := range d.Launch {
		gpus := 0
		for _, s := range l.Slots {
			if other, ok := seen[s.Name]; ok {
				t.Errorf("slot %s given to %s and %s", s.Name, other, l.Runs[0].ID)
			}
			seen[s.Name] = l.Runs[0].ID
			gpus += len(s.GPUs)
		}
		if gpus < l.Runs[0].GPUs {
			t.Errorf("%s needs %d GPUs, got slots %v", l.Runs[0].ID, l.Runs[0].GPUs, protocols.SlotNames(l.Slots))
		}
	}
	if l := d.Launch[len(d.Launch)-1]; l.Runs[0].ID != "burnin.C00-TP2" || len(l.Slots) != 2 {
		t.Errorf("the TP2 burn-in got %v", protocols.SlotNames(l.Slots))
	}
}

// A later unit never overtakes one waiting for slots: with one slot free,
// a TP2 unit that needs two blocks the TP1 units behind it.
func TestDecideInOrder(t *testing.T) {
	p := phase3(t)
	w := newWorld(p).coloc(gates.Pass).done("burnin.C00", "burnin.C10", "burnin.C01", "burnin.C11")
	w.Regime = "eight-way"
	for i := 1; i < 8; i++ {
		w.Busy["gpu"+string(rune('0'+i))] = true
	}
	if got := launched(Decide(w.View)); len(got) != 0 {
		t.Fatalf("launched %v; the TP2 burn-in needs two free slots", got)
	}
}

// A protocol that reserves at the bounds reserves each run's worst case,
// and a cap that the nominal reservation fits can refuse it.
func TestDecideReservesAtTheBounds(t *testing.T) {
	p := phase3(t)
	if p.Totals.Reserve != "bounds" {
		t.Fatalf("the plan reserves %q by default, want bounds", p.Totals.Reserve)
	}
	w := newWorld(p).coloc(gates.Pass)
	p.Totals.Reserve = "nominal"
	nominal := Decide(w.View)
	p.Totals.Reserve = "bounds"
	bounds := Decide(w.View)
	if len(nominal.Reserve) == 0 || len(bounds.Reserve) != len(nominal.Reserve) {
		t.Fatalf("reserve %d and %d items", len(nominal.Reserve), len(bounds.Reserve))
	}
	for i, it := range bounds.Reserve {
		r, _ := p.RunByID(it.Run)
		if it.ExpectedS != r.BoundS || nominal.Reserve[i].ExpectedS != r.ExpectedS || r.BoundS <= r.ExpectedS {
			t.Errorf("%s: reserves %v at the bounds (bound_s %v), %v nominally (expected_s %v)", it.Run, it.ExpectedS, r.BoundS, nominal.Reserve[i].ExpectedS, r.ExpectedS)
		}
	}
	// a cap the nominal wave fits and the worst case does not
	w.Account = budget.Account{CapGPUSeconds: budget.Cost(nominal.Reserve) + 1}
	if d := Decide(w.View); d.Stop == nil || d.Stop.Reason != state.StopBudget {
		t.Errorf("at the bounds, a cap of the nominal cost + 1 GPU-s: %+v, want a budget stop", d.Stop)
	}
	p.Totals.Reserve = "nominal"
	if d := Decide(w.View); d.Stop != nil {
		t.Errorf("nominally, a cap of the nominal cost + 1 GPU-s: stop %+v", d.Stop)
	}
}
