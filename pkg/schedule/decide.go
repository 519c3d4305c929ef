package schedule

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"warden/pkg/budget"
	"warden/pkg/gates"
	"warden/pkg/outcome"
	"warden/pkg/state"
	"warden/protocols"
)

// Decisions apart from effects: Decide is a pure function of what the
// records and the loop know (a View) that says what to launch now and
// whether the campaign must stop, and why. The loop reads the View,
// calls Decide, and carries the Decision out (record the regime, the
// stop, the reservation; start the units).

// View is what a scheduling decision looks at.
type View struct {
	Plan *protocols.Plan
	// Running says the campaign is running (not stopped, not complete).
	Running bool
	// Runs are the recorded runs, in plan order (one per plan run).
	Runs []state.Run
	// Verdicts is the last verdict of each campaign-level gate, and
	// VerdictDetails its detail.
	Verdicts       map[string]string
	VerdictDetails map[string]string
	// QuarantineReasons is the reason of each quarantined run's result
	// (drain-quarantine, quality-failed); the quarantined-fraction
	// threshold counts the drain-quarantined only, as the seed's does.
	QuarantineReasons map[string]state.Reason
	// GateErrors counts the error verdicts of each campaign-level gate.
	GateErrors map[string]int
	// Active holds the units in flight; Busy the slots they hold.
	Active map[int]bool
	Busy   map[string]bool
	// Regime is the regime in force before this decision ("" for none).
	Regime string
	// Account is the budget as the ledger stands.
	Account budget.Account
	// Ended are the units that ended since the last decision.
	Ended []UnitEnd
	// Awaiting are the runs that wait for an amendment (outcome.AwaitingAmendment):
	// no attempt of theirs is started, nor of a unit that holds one.
	Awaiting []outcome.Awaiting
	// Held are the runs not tried yet that share the cause of a failed
	// run (outcome.SharedCause): held as the awaiting runs are, unless the
	// operator asked for them (the runner then leaves this empty).
	Held []outcome.Held
	// CapacityPoints are the verdicts of each capacity search's done
	// points (JudgePoint on their results), by search, in plan order.
	CapacityPoints map[string][]Point
	// Measurements are the recorded false-failure figures of the gates
	// that judge a sample (MeasurementsOf), for the power check.
	Measurements []Measurement
}

// waiting says whether run id waits for an amendment, or is held for
// the cause it shares with a failed run.
func (v View) waiting(id string) bool {
	return slices.ContainsFunc(v.Awaiting, func(w outcome.Awaiting) bool { return w.Run == id }) ||
		slices.ContainsFunc(v.Held, func(h outcome.Held) bool { return h.Run == id })
}

// UnitEnd is how a unit ended: the run that failed for good, if any, and
// the policy's verdict on it.
type UnitEnd struct {
	Unit      int
	FailedRun string
	Reason    state.Reason
	Detail    string
	Verdict   outcome.Verdict
}

// Stop is a decision to stop the campaign for review.
type Stop struct {
	Reason  state.StopReason
	Detail  string
	Figures map[string]float64
}

// Launch is a unit to start now on its slots.
type Launch struct {
	Unit   int
	Runs   []protocols.Run
	Slots  []protocols.SlotInfo
	Coloc  bool                // a co-location block: backgrounds beside a target
	Gate   *protocols.GateInfo // the gate a co-location block decides
	Regime string
}

// Decision is what Decide returns. At most one of Stop, Launch (with its
// Reserve, and Refused) and Complete is set.
type Decision struct {
	// Regime is the regime in force for a matrix phase, when it changed.
	Regime *protocols.RegimeInfo
	// Launch are the units to start now; Reserve their runs' conservative
	// cost, to be reserved before any of them starts.
	Launch  []Launch
	Reserve []budget.Item
	// Stop says the campaign must stop for review.
	Stop *Stop
	// Refused, beside Launch, is the stop of the unit after them that the
	// budget refuses (budget): the campaign stops once Launch started,
	// as the plan's first refused wave says it will.
	Refused *Stop
	// Complete says every run that must execute is done and nothing runs.
	Complete bool
	// Power is the power check's judgement when this decision launches
	// the first runs of the phase it guards and the check passed.
	Power *PowerResult
	// Err is a scheduling error (the records do not match the plan); the
	// campaign stops as a harness error.
	Err error
	// NotRun are runs that will never run, to be recorded so (beside any
	// of the above): the points of a capacity search that ended before
	// them.
	NotRun []NotRun
}

// Decide decides from v what to do now. It reads nothing but v.
func Decide(v View) Decision {
	if !v.Running {
		return Decision{}
	}
	d := decide(v)
	if d.Err == nil {
		d.NotRun = capacityNotRun(v)
	}
	return d
}

func decide(v View) Decision {
	// A failure the policy stops for: the first one ended.
	for _, e := range v.Ended {
		if e.FailedRun != "" && e.Verdict.Next == outcome.StopForReview {
			return Decision{Stop: &Stop{Reason: e.Verdict.Stop, Detail: fmt.Sprintf("run %s failed: %s", e.FailedRun, e.Detail)}}
		}
	}
	// The protocol's thresholds are judged as units end (a resume after
	// review launches again until the next unit ends).
	if len(v.Ended) > 0 {
		if s := thresholds(v); s != nil {
			return Decision{Stop: s}
		}
	}
	if len(v.Runs) != len(v.Plan.Runs) {
		return Decision{Err: fmt.Errorf("the database has %d runs, the plan %d", len(v.Runs), len(v.Plan.Runs))}
	}
	done := doneRuns(v.Runs)
	if err := checkCapacity(v, done); err != nil {
		return Decision{Err: err}
	}
	if s := capacityError(v); s != nil {
		return Decision{Stop: s}
	}
	if s := capacityNotMonotonic(v); s != nil {
		return Decision{Stop: s}
	}

	// a co-location gate that could not judge is judged once more first
	if l := rejudge(v); l != nil {
		return Decision{Launch: l}
	}

	// the current phase: the first with a run that must execute and is not
	// done, or whose need is not known yet
	phase, phaseKind := "", ""
	for _, r := range v.Plan.Runs {
		if need, known := required(r, v); !known || (need && !satisfied(r, done)) {
			phase, phaseKind = r.Phase, r.PhaseKind
			break
		}
	}
	if phase == "" {
		return Decision{Complete: len(v.Active) == 0}
	}
	var d Decision
	if phaseKind == "colocation" {
		d.Launch = colocationWave(v, phase, done)
	} else {
		if s := gateError(v); s != nil {
			return Decision{Stop: s}
		}
		regime, err := chooseRegime(v.Plan, v.Verdicts)
		if err != nil {
			return Decision{Stop: &Stop{Reason: state.StopNoRegime, Detail: err.Error()}}
		}
		if regime.Name != v.Regime {
			d.Regime = &regime
		}
		if d.Launch, err = matrixWave(v, phase, regime, done); err != nil {
			return Decision{Err: err}
		}
	}
	if pc := v.Plan.PowerCheck; pc != nil && len(d.Launch) > 0 && !started(v, pc.Before) {
		// before the matrix: at its first launch always, and at a launch
		// before it once every gate was measured
		res := Power(v.Plan, pc, v.Measurements, pendingRuns(v, done))
		if phase == pc.Before || res.CannotTell == "" {
			if !res.Passed() {
				return Decision{Regime: d.Regime, Stop: &Stop{Reason: state.StopPowerCheck, Detail: res.Detail(pc.Amendment), Figures: res.Figures()}}
			}
			if phase == pc.Before {
				d.Power = &res
			}
		}
	}
	if len(d.Launch) == 0 {
		if len(v.Active) == 0 && (len(v.Awaiting) > 0 || len(v.Held) > 0) {
			return Decision{Regime: d.Regime, Stop: &Stop{Reason: state.StopAwaitingAmendment, Detail: awaitingDetail(v.Awaiting, v.Held)}}
		}
		return d
	}
	fit, refused, err := fitBudget(v, d.Launch)
	switch {
	case err != nil:
		return Decision{Err: err}
	case len(fit) == 0:
		return Decision{Regime: d.Regime, Stop: refused}
	}
	d.Launch, d.Refused = fit, refused
	for _, w := range d.Launch {
		d.Reserve = append(d.Reserve, reserveItems(v.Plan, w)...)
	}
	return d
}

// fitBudget checks the units of a wave against the budget in order, as
// the plan's estimate walks its launches (protocols' first refused wave):
// each unit's reservation on top of those before it. The units that fit
// launch; the first that does not is refused, and with it the campaign
// stops (budget), once the units before it started. A later unit never
// overtakes a refused one.
func fitBudget(v View, wave []Launch) (fit []Launch, refused *Stop, err error) {
	acc := v.Account
	before := 0 // runs launched before: started ones, and the wave's that fit
	for _, r := range v.Runs {
		if r.Attempts > 0 || r.Done {
			before++
		}
	}
	for _, l := range wave {
		want, err := acc.Reserve(reserveItems(v.Plan, l))
		var ref *budget.Refusal
		if errors.As(err, &ref) {
			return fit, budgetStop(ref, l, before), nil
		} else if err != nil {
			return nil, nil, err
		}
		acc.ReservedGPUSeconds += want
		before += len(l.Runs)
		fit = append(fit, l)
	}
	return fit, nil, nil
}

// reserveItems are a unit's runs as its reservation counts them.
func reserveItems(p *protocols.Plan, l Launch) []budget.Item {
	items := make([]budget.Item, len(l.Runs))
	for i, r := range l.Runs {
		items[i] = budget.Item{Run: r.ID, GPUs: r.GPUs, ExpectedS: reserveS(p, r)}
	}
	return items
}

// budgetStop is the stop of a wave the budget refuses: the wave, the runs
// launched before it, the figures (runs_before among them).
func budgetStop(ref *budget.Refusal, l Launch, before int) *Stop {
	first := ""
	if len(l.Runs) > 0 {
		first = l.Runs[0].ID
	}
	figures := ref.Figures()
	figures["runs_before"] = float64(before)
	return &Stop{Reason: state.StopBudget, Figures: figures,
		Detail: fmt.Sprintf("the wave launching %s (after %d runs) is refused: %s (A-P3-4: a wave is refused when its conservative reservation would pass the cap)", first, before, ref.Error())}
}

// pendingRuns says which runs are still to run: not done, and required
// (a conditional run whose condition is not known yet is not counted).
func pendingRuns(v View, done map[string]bool) func(string) bool {
	pending := map[string]bool{}
	for _, r := range v.Plan.Runs {
		if need, known := required(r, v); need && known && !done[r.ID] {
			pending[r.ID] = true
		}
	}
	return func(id string) bool { return pending[id] }
}

// started says whether a run of phase has had an attempt.
func started(v View, phase string) bool {
	for i, r := range v.Runs { // in plan order, one per plan run
		if v.Plan.Runs[i].Phase == phase && r.Attempts > 0 {
			return true
		}
	}
	return false
}

// doneRuns says which runs are done, by id.
func doneRuns(runs []state.Run) map[string]bool {
	done := make(map[string]bool, len(runs))
	for _, r := range runs {
		done[r.ID] = r.Done
	}
	return done
}

// reserveS is the seconds a run's reservation counts: its expected
// duration, or its worst case when the protocol reserves at the bounds.
func reserveS(p *protocols.Plan, r protocols.Run) float64 {
	if p.Totals.Reserve == "bounds" && r.BoundS > 0 {
		return r.BoundS
	}
	return r.ExpectedS
}

// thresholds applies the protocol's stop rules; the denominator is the
// plan's measured runs.
func thresholds(v View) *Stop {
	var n gates.Counts
	for i, r := range v.Runs {
		if i >= len(v.Plan.Runs) || !v.Plan.Runs[i].Measured {
			continue
		}
		n.Measured++
		switch r.State() {
		case state.RunQuarantined:
			// seed 002, A-P3-5: "more than 20% of measured runs are
			// drain-quarantined"; a run without a known reason counts
			if rs, ok := v.QuarantineReasons[r.ID]; !ok || rs == state.ReasonDrainQuarantine {
				n.Quarantined++
			}
		case state.RunFailed:
			n.Failed++
		}
	}
	rules := gates.StopRules{QuarantinedFractionGT: v.Plan.Stop.QuarantinedFractionGT, FailedFractionGT: v.Plan.Stop.FailedFractionGT}
	if stop, rule, detail, figures := rules.Evaluate(n); stop {
		return &Stop{Reason: state.StopReason(rule), Detail: detail, Figures: figures}
	}
	return nil
}

// satisfied says whether a run needs nothing more: it is done, or it is a
// background load whose targets are all done (it only served beside them).
func satisfied(r protocols.Run, done map[string]bool) bool {
	if done[r.ID] {
		return true
	}
	if r.Kind != "background" || len(r.Until) == 0 {
		return false
	}
	for _, t := range r.Until {
		if !done[t] {
			return false
		}
	}
	return true
}

// required says whether a run must execute: runs without a condition
// always; a run conditional on "gate G failed" once G failed; a capacity
// point once its search calls for it. known is false while the gate has
// no verdict yet, or the search has not reached the point.
func required(r protocols.Run, v View) (need, known bool) {
	if r.Capacity != nil {
		return capacityRequired(r, v)
	}
	verdicts := v.Verdicts
	if r.Condition == "" {
		return true, true
	}
	gate, ok := strings.CutSuffix(strings.TrimPrefix(r.Condition, "gate "), " failed")
	if !ok {
		return false, true
	}
	verdict, seen := verdicts[gate]
	if !seen {
		return false, false
	}
	return verdict == gates.Fail, true
}

// matrixWave picks the units of a phase to start now under the regime, in
// plan order: a later unit never overtakes one waiting for slots.
func matrixWave(v View, phase string, regime protocols.RegimeInfo, done map[string]bool) ([]Launch, error) {
	var wave []Launch
	busy := map[string]bool{}
	for s, b := range v.Busy {
		busy[s] = b
	}
	for _, unit := range units(v.Plan, phase) {
		if v.Active[unit[0].Unit] {
			continue
		}
		var todo []protocols.Run
		for _, r := range unit {
			if need, _ := required(r, v); need && !done[r.ID] {
				todo = append(todo, withRate(r, v))
			}
		}
		if len(todo) == 0 || slices.ContainsFunc(todo, func(r protocols.Run) bool { return v.waiting(r.ID) }) {
			continue // a unit that holds a run waiting for an amendment does not start
		}
		if slices.ContainsFunc(todo[0].Needs, v.waiting) {
			continue
		}
		for _, n := range todo[0].Needs {
			if !done[n] && !slices.ContainsFunc(todo, func(r protocols.Run) bool { return r.ID == n }) {
				return nil, fmt.Errorf("run %s needs %s, which is not done", todo[0].ID, n)
			}
		}
		gpus := 0
		for _, r := range todo {
			gpus = max(gpus, r.GPUs)
		}
		slots := freeSlots(v.Plan, regime, busy, gpus)
		if slots == nil {
			break
		}
		for _, s := range slots {
			busy[s.Name] = true
		}
		wave = append(wave, Launch{Unit: unit[0].Unit, Runs: todo, Slots: slots, Regime: regime.Name})
	}
	return wave, nil
}

// colocationWave picks the next block of a co-location check: the target
// solo, then each regime's backgrounds and target, a later regime only
// after the gate before it failed. Blocks run one at a time on their
// fixed slots.
func colocationWave(v View, phase string, done map[string]bool) []Launch {
	if len(v.Active) > 0 {
		return nil
	}
	byName := slotsByName(v.Plan)
	blocks := consecutive(v.Plan, phase, func(a, b protocols.Run) bool { return a.Regime == b.Regime })
	for _, b := range blocks {
		need, known := required(b[0], v)
		if !known {
			return nil // wait for the gate before it
		}
		if !need {
			continue
		}
		var todo []protocols.Run
		for _, r := range b {
			if !satisfied(r, done) {
				if v.waiting(r.ID) {
					return nil // the block waits for an amendment
				}
				todo = append(todo, r)
			}
		}
		var gate *protocols.GateInfo
		for i := range v.Plan.Gates {
			if v.Plan.Gates[i].Regime == b[0].Regime {
				gate = &v.Plan.Gates[i]
			}
		}
		if len(todo) == 0 {
			if gate != nil {
				if _, seen := v.Verdicts[gate.Name]; !seen {
					// the block's runs completed but the gate was never judged
					// (the controller died in between): judge it now
					return []Launch{{Unit: b[0].Unit, Coloc: true, Gate: gate, Regime: b[0].Regime}}
				}
			}
			continue
		}
		var slots []protocols.SlotInfo
		seen := map[string]bool{}
		for _, r := range todo {
			if !seen[r.Slot] {
				seen[r.Slot] = true
				slots = append(slots, byName[r.Slot])
			}
		}
		return []Launch{{Unit: b[0].Unit, Runs: todo, Slots: slots, Coloc: true, Gate: gate, Regime: b[0].Regime}}
	}
	return nil
}

// units returns the phase's units in plan order.
func units(plan *protocols.Plan, phase string) [][]protocols.Run {
	return consecutive(plan, phase, func(a, b protocols.Run) bool { return a.Unit == b.Unit })
}

// consecutive returns the phase's runs in plan order, grouped: a run
// joins the group before it when same(the group's first run, it) holds.
func consecutive(plan *protocols.Plan, phase string, same func(a, b protocols.Run) bool) [][]protocols.Run {
	var out [][]protocols.Run
	for _, r := range plan.Runs {
		if r.Phase != phase {
			continue
		}
		if n := len(out); n > 0 && same(out[n-1][0], r) {
			out[n-1] = append(out[n-1], r)
		} else {
			out = append(out, []protocols.Run{r})
		}
	}
	return out
}

// rejudge returns the judging of a co-location gate whose only verdict so
// far is an error: it is judged once more (an infrastructure failure, such
// as a validator that crashed), once nothing else runs; a second error
// stops for review (gateError).
func rejudge(v View) []Launch {
	if len(v.Active) > 0 {
		return nil
	}
	for i := range v.Plan.Gates {
		g := &v.Plan.Gates[i]
		if v.Verdicts[g.Name] != gates.Error || v.GateErrors[g.Name] >= 2 {
			continue
		}
		for _, r := range v.Plan.Runs {
			if r.PhaseKind == "colocation" && r.Regime == g.Regime {
				return []Launch{{Unit: r.Unit, Coloc: true, Gate: g, Regime: r.Regime}}
			}
		}
	}
	return nil
}

// gateError stops the campaign when a regime's gate could not judge (an
// error verdict: a throughput it could not read, a validator that
// crashed) before any regime was authorized: the check cannot tell whether
// the regime is valid, so it neither passes nor falls back to the next
// regime (fail closed); a person reviews. The stop names the error and the
// regimes not tried.
func gateError(v View) *Stop {
	for i, r := range v.Plan.Regimes {
		if r.Gate == "" || v.Verdicts[r.Gate] == gates.Pass {
			return nil // a regime is authorized before any erroring gate
		}
		if v.Verdicts[r.Gate] != gates.Error {
			continue
		}
		if v.GateErrors[r.Gate] < 2 {
			return nil // it is judged once more first
		}
		var untried []string
		for _, later := range v.Plan.Regimes[i+1:] {
			untried = append(untried, later.Name)
		}
		detail := fmt.Sprintf("gate %s could not judge regime %s: %s", r.Gate, r.Name, v.VerdictDetails[r.Gate])
		if len(untried) > 0 {
			detail += "; regimes not tried: " + strings.Join(untried, ", ")
		}
		return &Stop{Reason: state.StopGateError, Detail: detail}
	}
	return nil
}

// chooseRegime is the first regime in fallback order that needs no gate
// or whose gate passed.
func chooseRegime(plan *protocols.Plan, verdicts map[string]string) (protocols.RegimeInfo, error) {
	for _, r := range plan.Regimes {
		if r.Gate == "" || verdicts[r.Gate] == gates.Pass {
			return r, nil
		}
	}
	return protocols.RegimeInfo{}, errors.New("no regime is authorized: every regime needs a co-location gate that has not passed")
}

// freeSlots finds adjacent free slots of the regime with enough GPUs,
// the earliest in the regime's order; nil when none are free.
func freeSlots(plan *protocols.Plan, regime protocols.RegimeInfo, busy map[string]bool, gpus int) []protocols.SlotInfo {
	byName := slotsByName(plan)
	for i := range regime.Slots {
		var take []protocols.SlotInfo
		have := 0
		for j := i; j < len(regime.Slots) && have < gpus; j++ {
			s := byName[regime.Slots[j]]
			if busy[s.Name] {
				break
			}
			take = append(take, s)
			have += len(s.GPUs)
		}
		if have >= gpus {
			return take
		}
	}
	return nil
}

func slotsByName(plan *protocols.Plan) map[string]protocols.SlotInfo {
	byName := make(map[string]protocols.SlotInfo, len(plan.Slots))
	for _, s := range plan.Slots {
		byName[s.Name] = s
	}
	return byName
}

// awaitingDetail is the detail of the stop when nothing more can run
// but runs that wait for an amendment, or are held for a shared cause.
func awaitingDetail(ws []outcome.Awaiting, hs []outcome.Held) string {
	detail := "nothing more can run"
	if len(ws) > 0 {
		detail += ": these runs failed for a reason that allows no rerun and wait for an amendment (seed 002: \"A semantic workload/config failure requires a reviewed protocol amendment\"): " + awaitingText(ws)
	}
	if len(hs) > 0 {
		detail += "; " + outcome.HeldMark + outcome.HeldText(hs) + " (the same server, started the same way: an amendment that covers the failed run, or resume --retry-shared-cause, lets them run)"
	}
	return detail
}

// awaitingText names the runs for a stop's detail and an operator.
func awaitingText(ws []outcome.Awaiting) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = fmt.Sprintf("%s (attempt %d, %s)", w.Run, w.Attempt, w.Reason)
	}
	return strings.Join(parts, ", ")
}
