package protocols

import (
	"fmt"
	"slices"
	"strconv"
)

// The power check's plan: which runs each gate judges and under which
// rule, how many windows (recoveries) a run holds, and which runs before
// the matrix measure the gate's false-failure rate. The rule is read from
// the judging validator's own command (Warden's `validate layer2` or
// `validate recovery`), so that the check and the gate cannot disagree.

// Measures the power check knows: what a validator subcommand measures,
// and which subcommand judges each.
const (
	MeasureRepresentativeness = "representativeness"
	MeasureRecovery           = "recovery"
	// MeasureProfileWindow is the profile windows' bound: the time a
	// window's traces take to be complete against the judged runs'
	// --profile-window-budget-seconds.
	MeasureProfileWindow = "profile_window"
	// DefaultHeadroom is a profile window bound's headroom over the
	// slowest measured window.
	DefaultHeadroom = 1.25
)

// measuredBy is what each of Warden's validate subcommands measures.
var measuredBy = map[string][]string{
	"layer2":          {MeasureRepresentativeness},
	"recovery":        {MeasureRecovery},
	"power":           {MeasureRepresentativeness, MeasureRecovery},
	"profile-windows": {MeasureProfileWindow},
}

// judgedBy is the subcommand that applies each measure's rule, and the
// flag that names the rule.
var judgedBy = map[string]struct{ subcommand, ruleFlag string }{
	MeasureRepresentativeness: {"layer2", "--representativeness"},
	MeasureRecovery:           {"recovery", "--rule"},
	MeasureProfileWindow:      {"profile-windows", ""},
}

// Rules of a gate (validate's --representativeness and --rule).
const (
	RuleLiteral    = "literal"
	RuleCalibrated = "calibrated"
	// DefaultCalibrationQuantile is validate's --calibration-quantile default.
	DefaultCalibrationQuantile = 0.99
	// RecoveryCalibrationQuantile is validate recovery's: a recovery
	// failure gets no rerun, so the calibrated recovery rule needs a higher
	// quantile for a campaign to complete (docs/validators.md).
	RecoveryCalibrationQuantile = 0.995
)

// CalibrationQuantile is the calibrated rule's default quantile of a
// measure.
func CalibrationQuantile(measure string) float64 {
	if measure == MeasureRecovery {
		return RecoveryCalibrationQuantile
	}
	return DefaultCalibrationQuantile
}

// PowerCheckInfo is the power check of a plan.
type PowerCheckInfo struct {
	MinCompletionProbability float64 `json:"min_completion_probability"`
	Amendment                string  `json:"amendment,omitempty"`
	// Before is the phase whose first launch the check guards: the first
	// phase of kind primary. Before it, the check is also made at every
	// launch once every gate has a measurement.
	Before string          `json:"before"`
	Gates  []PowerGateInfo `json:"gates"`
}

// PowerGateInfo is one gate of the power check.
type PowerGateInfo struct {
	Measure  string `json:"measure"`
	JudgedBy string `json:"judged_by"`
	// Retries are the exact reruns a failure of the gate gets: a
	// representativeness failure is a profile-artifact one
	// (retries.infrastructure), a recovery failure none.
	Retries int `json:"retries"`
	// Judged are the runs the gate judges (in every phase), with the rule
	// each is judged by.
	Judged []PowerJudged `json:"judged"`
	// MeasuredBy are the runs before the check whose validators measure
	// the gate's false-failure rate.
	MeasuredBy []string `json:"measured_by"`
	// Headroom is a profile window bound's over the slowest measured
	// window (profile_window only).
	Headroom float64 `json:"headroom,omitempty"`
	// Amendment would fix the gate (the gate's, else the check's).
	Amendment string `json:"amendment,omitempty"`
}

// PowerJudged is a judged run: its rule, the calibrated rule's quantile,
// and its windows (and recoveries).
type PowerJudged struct {
	Run      string  `json:"run"`
	Rule     string  `json:"rule"`
	Quantile float64 `json:"quantile,omitempty"`
	Units    int     `json:"units"`
	// BudgetS is the run's profile window budget (its client's
	// --profile-window-budget-seconds; loadgen's default 24).
	BudgetS float64 `json:"budget_s,omitempty"`
}

// validatePowerCheck checks the block on its own (the runs are checked
// by powerCheck, after the expansion).
func (b *builder) validatePowerCheck() {
	pc := b.p.PowerCheck
	if pc == nil {
		return
	}
	c := b.c
	if v := pc.MinCompletionProbability; !(v > 0 && v <= 1) {
		c.add(pc.Meta.At("min_completion_probability"), "power_check.min_completion_probability", "a probability in (0, 1], got %v", v)
	}
	if len(pc.Gates) == 0 {
		c.add(pc.Meta.At("gates"), "power_check.gates", "name at least one gate")
	}
	names := map[string]bool{}
	for _, v := range b.p.Validators {
		names[v.Name] = true
	}
	seen := map[string]bool{}
	each(pc.Gates, "power_check.gates", func(f string, g *PowerGate) {
		if _, ok := judgedBy[g.Measure]; !ok {
			c.add(g.Meta.At("measure"), f+".measure", "unknown measure %q (representativeness, recovery, profile_window)", g.Measure)
		}
		if _, given := g.Meta.Fields["headroom"]; given && (g.Measure != MeasureProfileWindow || !(g.Headroom >= 1)) {
			c.add(g.Meta.At("headroom"), f+".headroom", "a headroom is a profile_window gate's, at least 1, got %v", g.Headroom)
		}
		if seen[g.Measure] {
			c.add(g.Meta.At("measure"), f+".measure", "measure %q is named twice", g.Measure)
		}
		seen[g.Measure] = true
		unknown(c, names, g.JudgedBy, g.Meta.At("judged_by"), f+".judged_by", "validator", "validators")
	})
}

// powerCheck builds the plan's power check from the expanded runs.
func (b *builder) powerCheck(plan *Plan) {
	pc := b.p.PowerCheck
	if pc == nil || len(b.c.list) > 0 {
		return
	}
	info := &PowerCheckInfo{MinCompletionProbability: pc.MinCompletionProbability, Amendment: pc.Amendment}
	first := -1
	for i, r := range plan.Runs {
		if r.PhaseKind == "primary" {
			info.Before, first = r.Phase, i
			break
		}
	}
	if first < 0 {
		b.c.add(pc.Meta.Pos, "power_check", "the power check guards the first launch of a phase of kind primary, and the protocol has none")
		return
	}
	for gi, g := range pc.Gates {
		f := fmt.Sprintf("power_check.gates[%d]", gi)
		gate := PowerGateInfo{Measure: g.Measure, JudgedBy: g.JudgedBy, Amendment: g.Amendment}
		if gate.Amendment == "" {
			gate.Amendment = pc.Amendment
		}
		switch g.Measure {
		case MeasureRepresentativeness, MeasureProfileWindow:
			gate.Retries = plan.Retries // profile-artifact failures
		}
		if g.Measure == MeasureProfileWindow {
			gate.Headroom = DefaultHeadroom
			if g.Headroom != 0 {
				gate.Headroom = g.Headroom
			}
		}
		for _, r := range plan.Runs[:first] {
			if slices.ContainsFunc(r.Validators, func(v ValidatorSpec) bool { return slices.Contains(validatorMeasures(v.Command.Argv), g.Measure) }) {
				gate.MeasuredBy = append(gate.MeasuredBy, r.ID)
			}
		}
		if len(gate.MeasuredBy) == 0 {
			b.c.add(g.Meta.Pos, f, "no run before phase %q has a validator that measures %s (controller validate %s or power): the check could never tell",
				info.Before, g.Measure, judgedBy[g.Measure].subcommand)
		}
		for _, r := range plan.Runs {
			i := slices.IndexFunc(r.Validators, func(v ValidatorSpec) bool { return v.Name == g.JudgedBy })
			if i < 0 {
				continue
			}
			j, why := judgedRun(r, r.Validators[i].Command.Argv, g.Measure)
			if why != "" {
				b.c.add(g.Meta.At("judged_by"), f+".judged_by", "run %s: %s", r.ID, why)
				return
			}
			gate.Judged = append(gate.Judged, j)
		}
		if len(gate.Judged) == 0 {
			b.c.add(g.Meta.At("judged_by"), f+".judged_by", "validator %q judges no run", g.JudgedBy)
		}
		info.Gates = append(info.Gates, gate)
	}
	plan.PowerCheck = info
}

// validatorMeasures is what a validator command measures: Warden's
// `validate SUBCOMMAND` commands only.
func validatorMeasures(argv []string) []string {
	if sub := validateSubcommand(argv); sub != "" {
		return measuredBy[sub]
	}
	return nil
}

// validateSubcommand is SUBCOMMAND of a `CONTROLLER validate SUBCOMMAND`
// argument vector, else "".
func validateSubcommand(argv []string) string {
	if len(argv) >= 3 && argv[1] == "validate" {
		return argv[2]
	}
	return ""
}

// judgedRun reads the rule a judging validator applies and the run's
// windows from its client's --num-profile-windows.
func judgedRun(r Run, argv []string, measure string) (PowerJudged, string) {
	j := PowerJudged{Run: r.ID, Rule: RuleLiteral}
	want := judgedBy[measure]
	if sub := validateSubcommand(argv); sub != want.subcommand {
		return j, fmt.Sprintf("the judging validator is not `controller validate %s`, so the %s rule it applies cannot be told", want.subcommand, measure)
	}
	quantile := CalibrationQuantile(measure)
	for i := 3; i < len(argv) && want.ruleFlag != ""; i++ {
		name, val, eq := cutFlag(argv[i])
		if !eq && i+1 < len(argv) {
			val = argv[i+1]
		}
		switch name {
		case want.ruleFlag:
			j.Rule = val
		case "--calibration-quantile":
			q, err := strconv.ParseFloat(val, 64)
			if err != nil || !(q > 0 && q < 1) {
				return j, fmt.Sprintf("--calibration-quantile %q: a number in (0, 1)", val)
			}
			quantile = q
		}
	}
	switch j.Rule {
	case RuleLiteral:
	case RuleCalibrated:
		j.Quantile = quantile
	default:
		return j, fmt.Sprintf("%s %q: literal or calibrated", want.ruleFlag, j.Rule)
	}
	n, why := profileWindows(r.Client.Argv)
	if why != "" {
		return j, why
	}
	j.Units = n
	if measure == MeasureProfileWindow {
		j.Rule, j.BudgetS = "", 24
		if v, ok := flagValue(r.Client.Argv, "--profile-window-budget-seconds"); ok {
			b, err := strconv.ParseFloat(v, 64)
			if err != nil || !(b > 0) {
				return j, fmt.Sprintf("its client's --profile-window-budget-seconds %q is not a number of seconds", v)
			}
			j.BudgetS = b
		}
	}
	return j, ""
}

// flagValue is a flag's value in an argument vector (--name VALUE or
// --name=VALUE).
func flagValue(argv []string, flag string) (string, bool) {
	for i := 0; i < len(argv); i++ {
		name, val, eq := cutFlag(argv[i])
		if name != flag {
			continue
		}
		if !eq && i+1 < len(argv) {
			val = argv[i+1]
		}
		return val, true
	}
	return "", false
}

// profileWindows is the client's --num-profile-windows.
func profileWindows(argv []string) (int, string) {
	val, ok := flagValue(argv, "--num-profile-windows")
	if !ok {
		return 0, "its client gives no --num-profile-windows: how many windows (and recoveries) a run holds cannot be told"
	}
	n, err := strconv.Atoi(val)
	if err != nil || n < 1 {
		return 0, fmt.Sprintf("its client's --num-profile-windows %q is not a count of windows", val)
	}
	return n, ""
}

// cutFlag splits --name=value; eq says a value was joined to it.
func cutFlag(arg string) (name, val string, eq bool) {
	for i := 0; i < len(arg); i++ {
		if arg[i] == '=' {
			return arg[:i], arg[i+1:], true
		}
	}
	return arg, "", false
}
