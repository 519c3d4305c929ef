package views

import (
	"fmt"
	"io"
	"strings"

	"warden/pkg/state"
)

// The gates that judge a sample, as a person reads them: each verdict
// that measured its own rule's false-failure rate on the run's data
// (layer2's smd.self.*, recovery's recovery.self.*, docs/validators.md),
// one line: the rule in force, the samples it was read from, how often a
// representative unit (a window, a recovery) passes the literal rule, and
// how often a representative run fails it.

// SelfCheckRow is one gate's false-failure figures of one verdict.
type SelfCheckRow struct {
	Gate    string // the verdict's gate (validator:NAME)
	Attempt int
	// Measure is representativeness or recovery.
	Measure string
	// Rule is literal or calibrated (the rule the verdict judged by), at
	// Quantile.
	Rule     string
	Quantile float64
	// Samples are the blocks (representativeness) or samples (recovery).
	Samples int
	// UnitPass is the literal rule's pass fraction of a representative
	// unit; RunFail its failure rate on a representative run.
	UnitPass, RunFail float64
}

// selfFigures are the figure names of each measure's false-failure rate.
var selfFigures = []struct{ measure, prefix, samples, unit, calibrated string }{
	{"representativeness", "smd.self.", "smd.self.blocks", "smd.self.window_pass_fraction", "smd.calibrated.quantile"},
	{"recovery", "recovery.self.", "recovery.self.samples", "recovery.self.unit_pass_fraction", "recovery.calibrated.quantile"},
}

// SelfChecks reads a verdict's false-failure figures; none when it has
// none.
func SelfChecks(g state.GateVerdict) []SelfCheckRow {
	var out []SelfCheckRow
	for _, sf := range selfFigures {
		unit, ok := g.Figures[sf.unit]
		if !ok {
			continue
		}
		row := SelfCheckRow{Gate: g.Gate, Attempt: g.Attempt, Measure: sf.measure, Rule: "literal",
			Samples: int(g.Figures[sf.samples]), UnitPass: unit, RunFail: g.Figures[sf.prefix+"false_failure_rate"]}
		if q, ok := g.Figures[sf.calibrated]; ok {
			row.Rule, row.Quantile = "calibrated", q
		}
		out = append(out, row)
	}
	return out
}

// Text is the row as one sentence.
func (r SelfCheckRow) Text() string {
	units, what := "windows", "blocks of the clean segment C"
	if r.Measure == "recovery" {
		units, what = "recoveries", "samples of the clean segments"
	}
	return fmt.Sprintf("%s (judged by the %s): on %d %s the literal rule passes %.1f%% of representative %s; a representative run fails it %.1f%% of the time",
		r.Measure, r.RuleText(), r.Samples, what, 100*r.UnitPass, units, 100*r.RunFail)
}

// RuleText names the rule: "literal rule", "calibrated rule, quantile Q".
func (r SelfCheckRow) RuleText() string {
	if r.Rule == "calibrated" {
		return fmt.Sprintf("calibrated rule, quantile %g", r.Quantile)
	}
	return r.Rule + " rule"
}

// printSelfChecks writes the false-failure rates of an attempt's gates.
func printSelfChecks(w io.Writer, gs []state.GateVerdict) {
	var lines []string
	for _, g := range gs {
		if !strings.HasPrefix(g.Gate, "validator:") {
			continue
		}
		for _, r := range SelfChecks(g) {
			lines = append(lines, fmt.Sprintf("  attempt %d %s: %s", r.Attempt, r.Gate, r.Text()))
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(w, "\nthe gates that judge a sample, on this run's own data (their false-failure rate):")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}
