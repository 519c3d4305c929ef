package schedule

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"warden/pkg/state"
	"warden/protocols"
)

// The power check (docs/protocol.md): before the first launch of the
// phase it guards, the probability that every run a gate still has to
// judge passes it, from the gate's false-failure rate measured on the runs
// before. A run of u windows (recoveries) passes a gate whose unit passes
// with probability p with p^u; with k exact reruns (a profile-artifact
// failure's), 1-(1-p^u)^(1+k). The campaign's completion probability is
// the product over the gates and their judged runs. Under the literal
// rule p is the measured pass fraction; under the calibrated rule at
// quantile q it is q by construction (a judged run's own clean data set
// its thresholds; one whose data are too few for the quantile errors, and
// the validator says so on that run).

// Measurement is one attempt's measured false-failure figures of a gate:
// the literal rule's pass fraction of one unit (a window, a recovery) on
// the run's own data, and how many samples it was read from.
type Measurement struct {
	Run      string
	Attempt  int
	Measure  string
	UnitPass float64
	Samples  int
	// ReadyS is, for the profile window bound, the slowest window's
	// traces complete, from its /start_profile call.
	ReadyS float64
}

// MeasurementsOf reads the power figures (power.MEASURE.unit_pass_fraction
// and power.MEASURE.samples) of one gate verdict.
func MeasurementsOf(v state.GateVerdict) []Measurement {
	var out []Measurement
	for _, m := range []string{protocols.MeasureRepresentativeness, protocols.MeasureRecovery} {
		u, ok := v.Figures["power."+m+".unit_pass_fraction"]
		n := v.Figures["power."+m+".samples"]
		if ok && !math.IsNaN(u) && n > 0 {
			out = append(out, Measurement{Run: v.Run, Attempt: v.Attempt, Measure: m, UnitPass: u, Samples: int(n)})
		}
	}
	m := protocols.MeasureProfileWindow
	if r, ok := v.Figures["power."+m+".ready_s_max"]; ok && r > 0 && v.Figures["power."+m+".samples"] > 0 {
		out = append(out, Measurement{Run: v.Run, Attempt: v.Attempt, Measure: m, ReadyS: r, Samples: int(v.Figures["power."+m+".samples"])})
	}
	return out
}

// PowerResult is the power check's judgement.
type PowerResult struct {
	// Completion is the campaign's expected completion probability under
	// the rules in force; Min the protocol's threshold.
	Completion, Min float64
	Gates           []PowerGate
	// CannotTell says why the check cannot tell ("" when it can): a gate
	// no run measured.
	CannotTell string
}

// PowerGate is one gate's part.
type PowerGate struct {
	Measure, JudgedBy string
	Rule              string // the rule of its first judged run
	Quantile          float64
	Judged            int     // runs still to judge
	Retries           int     // exact reruns a failure gets
	UnitPass          float64 // the literal pass fraction of a unit, over every measurement
	Samples           int     // the fewest samples of a measurement
	Measured          []string
	// ReadyS is the slowest measured window (profile_window), Headroom
	// the bound's, BudgetS the least budget of a judged run.
	ReadyS, Headroom, BudgetS float64
	// RunPass is the least pass probability of a judged run (reruns
	// counted); Completion the product over the judged runs.
	RunPass, Completion float64
	// Calibrated is Completion under the calibrated rule at
	// protocols.CalibrationQuantile, when the rule in force is the
	// literal one (else NaN): what adopting it would give.
	Calibrated float64
	// Amendment would fix the gate.
	Amendment string
}

// Passed says whether the campaign may go on.
func (r PowerResult) Passed() bool { return r.CannotTell == "" && r.Completion >= r.Min }

// Power judges the power check pc of plan from the measurements, for the
// runs still to judge (pending).
func Power(plan *protocols.Plan, pc *protocols.PowerCheckInfo, ms []Measurement, pending func(run string) bool) PowerResult {
	res := PowerResult{Completion: 1, Min: pc.MinCompletionProbability}
	runs := map[string]protocols.Run{}
	for _, r := range plan.Runs {
		runs[r.ID] = r
	}
	for _, g := range pc.Gates {
		pg := PowerGate{Measure: g.Measure, JudgedBy: g.JudgedBy, Retries: g.Retries, Completion: 1, RunPass: 1, Calibrated: math.NaN(), Amendment: g.Amendment}
		var mine []Measurement
		for _, m := range ms {
			if m.Measure == g.Measure {
				mine = append(mine, m)
				if !slices.Contains(pg.Measured, m.Run) {
					pg.Measured = append(pg.Measured, m.Run)
				}
			}
		}
		if len(mine) == 0 {
			if res.CannotTell != "" {
				res.CannotTell += "; "
			}
			res.CannotTell += fmt.Sprintf("no run measured the %s gate's false-failure rate yet (the runs before the matrix that measure it: %s)", g.Measure, strings.Join(g.MeasuredBy, ", "))
			res.Gates = append(res.Gates, pg)
			continue
		}
		pg.UnitPass, pg.Samples = meanPass(mine), minSamples(mine)
		pg.Headroom = g.Headroom
		literal := true
		calibrated := 1.0
		for _, j := range g.Judged {
			if !pending(j.Run) {
				continue
			}
			if pg.Judged == 0 {
				pg.Rule, pg.Quantile, pg.BudgetS = j.Rule, j.Quantile, j.BudgetS
			}
			pg.Judged++
			pg.BudgetS = math.Min(pg.BudgetS, j.BudgetS)
			basis := basisFor(runs, runs[j.Run], mine)
			var unit float64
			if g.Measure == protocols.MeasureProfileWindow {
				// a bound, not a rate: the slowest measured window with its
				// headroom within the run's budget, or every window late
				pg.ReadyS = max(pg.ReadyS, maxReady(basis))
				unit = b2f(maxReady(basis)*g.Headroom <= j.BudgetS)
				literal = false
			} else {
				unit = unitPass(j.Rule, j.Quantile, basis)
			}
			p := runPass(unit, j.Units, g.Retries)
			pg.RunPass = math.Min(pg.RunPass, p)
			pg.Completion *= p
			if j.Rule != protocols.RuleLiteral {
				literal = false
			}
			calibrated *= runPass(unitPass(protocols.RuleCalibrated, protocols.CalibrationQuantile(g.Measure), basis), j.Units, g.Retries)
		}
		if literal && pg.Judged > 0 {
			pg.Calibrated = calibrated
		}
		res.Completion *= pg.Completion
		res.Gates = append(res.Gates, pg)
	}
	return res
}

// basisFor is the measurements that speak for judged run r: those of runs
// of its cell, else of runs with its server command (its configuration),
// else all.
func basisFor(runs map[string]protocols.Run, r protocols.Run, ms []Measurement) []Measurement {
	same := func(f func(protocols.Run) bool) []Measurement {
		var out []Measurement
		for _, m := range ms {
			if mr, ok := runs[m.Run]; ok && f(mr) {
				out = append(out, m)
			}
		}
		return out
	}
	if b := same(func(m protocols.Run) bool { return m.Cell == r.Cell }); len(b) > 0 {
		return b
	}
	cfg := serverKey(r)
	if b := same(func(m protocols.Run) bool { return serverKey(m) == cfg }); len(b) > 0 {
		return b
	}
	return ms
}

// serverKey is what a run's server configuration is: its command and
// environment.
func serverKey(r protocols.Run) string {
	var b strings.Builder
	for _, a := range r.Server.Command.Argv {
		b.WriteString(a)
		b.WriteByte(0)
	}
	b.WriteString(r.Server.Command.Shell)
	for _, k := range sortedKeys(r.Server.Env) {
		b.WriteString(k + "=" + r.Server.Env[k] + "\x00")
	}
	return b.String()
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// unitPass is a unit's pass probability under the rule.
func unitPass(rule string, q float64, basis []Measurement) float64 {
	if rule == protocols.RuleCalibrated {
		return q
	}
	return meanPass(basis)
}

// runPass is a run's pass probability: units units, retries exact reruns.
func runPass(unit float64, units, retries int) float64 {
	p := math.Pow(unit, float64(units))
	return 1 - math.Pow(1-p, float64(1+retries))
}

func maxReady(ms []Measurement) float64 {
	r := 0.0
	for _, m := range ms {
		r = max(r, m.ReadyS)
	}
	return r
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func meanPass(ms []Measurement) float64 {
	s := 0.0
	for _, m := range ms {
		s += m.UnitPass
	}
	return s / float64(len(ms))
}

func minSamples(ms []Measurement) int {
	n := math.MaxInt
	for _, m := range ms {
		n = min(n, m.Samples)
	}
	return n
}

// Detail says the result in words, for a stop or a record.
func (r PowerResult) Detail(amendment string) string {
	var parts []string
	if r.CannotTell != "" {
		parts = append(parts, "the power check cannot tell: "+r.CannotTell)
	} else {
		parts = append(parts, fmt.Sprintf("before the matrix, the campaign's expected completion probability under its gates is %s (the protocol's power_check wants at least %s)",
			prob(r.Completion), prob(r.Min)))
	}
	var fix []string
	for _, g := range r.Gates {
		if len(g.Measured) == 0 {
			continue
		}
		if g.Measure == protocols.MeasureProfileWindow {
			parts = append(parts, profileWindowDetail(g))
			continue
		}
		rule := g.Rule
		if g.Rule == protocols.RuleCalibrated {
			rule = fmt.Sprintf("calibrated rule at quantile %g", g.Quantile)
		} else {
			rule += " rule"
		}
		parts = append(parts, fmt.Sprintf("gate %s (%s, %s): a representative run passes with probability %s (%d exact rerun(s) counted), so its %d judged run(s) pass with %s; measured on %s: the literal rule passes %.1f%% of units over %d samples",
			g.JudgedBy, g.Measure, rule, prob(g.RunPass), g.Retries, g.Judged, prob(g.Completion), strings.Join(g.Measured, ", "), 100*g.UnitPass, g.Samples))
		if !math.IsNaN(g.Calibrated) && g.Calibrated > g.Completion {
			fix = append(fix, fmt.Sprintf("under the calibrated rule at quantile %g gate %s's runs would pass with %s", protocols.CalibrationQuantile(g.Measure), g.JudgedBy, prob(g.Calibrated)))
		}
	}
	parts = append(parts, fix...)
	if r.CannotTell == "" && !r.Passed() {
		// the amendments of the gates that fall short, else the check's
		var names []string
		for _, g := range r.Gates {
			if g.Amendment != "" && g.Completion < r.Min && !slices.Contains(names, g.Amendment) {
				names = append(names, g.Amendment)
			}
		}
		if len(names) == 0 && amendment != "" {
			names = append(names, amendment)
		}
		if len(names) > 0 {
			parts = append(parts, "the dated amendment that would fix it: "+strings.Join(names, "; ")+" (controller amend -d DIR -f FILE --id ID --reason TEXT --yes, then resume)")
		}
	}
	return strings.Join(parts, "; ")
}

// profileWindowDetail says the profile window bound in words: inside the
// budget, or by how much a budget that fits passes it.
func profileWindowDetail(g PowerGate) string {
	need := g.ReadyS * g.Headroom
	head := fmt.Sprintf("gate %s (profile windows): the slowest measured window's traces were complete %.1f s after /start_profile (%s); with headroom %g a window needs %.1f s",
		g.JudgedBy, g.ReadyS, strings.Join(g.Measured, ", "), g.Headroom, need)
	if need <= g.BudgetS {
		return head + fmt.Sprintf(", inside the judged runs' %g s budget", g.BudgetS)
	}
	return head + fmt.Sprintf(", over the judged runs' %g s budget: every window would be late, so its %d judged run(s) pass with %s; a budget of %.1f s adds %.1f s a window, outside a cost estimate of %g s a window",
		g.BudgetS, g.Judged, prob(g.Completion), need, need-g.BudgetS, g.BudgetS)
}

// Figures are the result's numbers.
func (r PowerResult) Figures() map[string]float64 {
	f := map[string]float64{"completion_probability": r.Completion, "min_completion_probability": r.Min}
	for _, g := range r.Gates {
		p := g.JudgedBy + "."
		f[p+"judged_runs"] = float64(g.Judged)
		if g.Measure == protocols.MeasureProfileWindow {
			f[p+"ready_s_max"] = g.ReadyS
			f[p+"budget_s"] = g.BudgetS
		} else {
			f[p+"unit_pass_fraction"] = g.UnitPass
		}
		f[p+"run_pass_probability"] = g.RunPass
		f[p+"completion_probability"] = g.Completion
		if !math.IsNaN(g.Calibrated) {
			f[p+"calibrated_completion_probability"] = g.Calibrated
		}
	}
	return f
}

// prob prints a probability: small ones in scientific notation.
func prob(p float64) string {
	if p > 0 && p < 0.001 {
		return fmt.Sprintf("%.2g", p)
	}
	return fmt.Sprintf("%.3f", p)
}
