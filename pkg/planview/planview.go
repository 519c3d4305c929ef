// Package planview lays out a plan for a person: the table of its runs in
// execution order, its totals against the budget, and the bounds of each
// kind of run, as controller plan prints them.
package planview

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"warden/pkg/slurm"
	"warden/protocols"
)

// Width is the width the table keeps to without wide.
const Width = 120

// Write writes the plan as a table: without wide, the columns an operator
// checks (run, kind, GPUs, slot, expected seconds, condition), each line
// cut to Width in its last column so run ids stay whole.
func Write(w io.Writer, p *protocols.Plan, wide bool) error {
	fmt.Fprintf(w, "protocol %s  sha256 %s\n", p.Protocol.Name, p.Protocol.SHA256)
	fmt.Fprintf(w, "estimate assumes regime %s\n\n", p.Regime)
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	if wide {
		fmt.Fprintln(tw, "#\tRUN\tPHASE\tKIND\tCELL\tLOAD\tNEEDS\tGPUS\tON\tSLOT\tREGIME\tCLASS\tEXPECTED_S\tWHEN")
	} else {
		fmt.Fprintln(tw, "#\tRUN\tKIND\tGPUS\tON\tSLOT\tEXPECTED_S\tWHEN")
	}
	for _, r := range p.Runs {
		needs := strings.Join(r.Needs, ",")
		if needs == "" {
			needs = "-"
		}
		on := "-"
		if len(r.PlannedGPUs) > 0 {
			on = joinInts(r.PlannedGPUs)
		}
		slot := strings.Join(r.PlannedSlots, "+")
		if slot == "" {
			slot = r.Slot
		}
		if slot == "" {
			slot = "-"
		}
		when := "always"
		if r.Condition != "" {
			when = "if " + r.Condition
		}
		if wide {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%.0f\t%s\n",
				r.Index, r.ID, r.Phase, r.Kind, r.Cell, r.Load, needs, r.GPUs, on, slot, r.Regime, r.Class, r.ExpectedS, when)
		} else {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%.0f\t%s\n",
				r.Index, r.ID, r.Kind, r.GPUs, on, slot, r.ExpectedS, when)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, line := range strings.SplitAfter(buf.String(), "\n") {
		if !wide && len([]rune(strings.TrimSuffix(line, "\n"))) > Width {
			line = string([]rune(line)[:Width-1]) + "…\n"
		}
		io.WriteString(w, line)
	}
	fmt.Fprintln(w, "\nGPUS: how many GPUs the run needs. ON: the GPUs the estimate places it on;")
	fmt.Fprintln(w, "- for a conditional run, which is placed only if it executes.")
	t := p.Totals
	fmt.Fprintf(w, "\n%d runs:", t.Runs)
	kinds := make([]string, 0, len(t.ByKind))
	for k := range t.ByKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(w, " %s %d,", k, t.ByKind[k])
	}
	fmt.Fprintf(w, "\n  of which %d measured, %d conditional\n", t.Measured, t.Conditional)
	fmt.Fprintf(w, "primary cells: %d\n", t.PrimaryCells)
	fmt.Fprintf(w, "expected wall time under %s: %.0f s (%.2f h)\n", p.Regime, t.ExpectedWallS, t.ExpectedWallS/3600)
	unit := t.Unit
	if unit == "" {
		unit = "GPU-hours"
	}
	fmt.Fprintf(w, "GPU-hour estimate: %.3f %s (+%.3f if conditional runs execute)\n", t.GPUHoursEstimate, unit, t.ConditionalGPUHours)
	fmt.Fprintf(w, "budget: cap %.3f, already consumed %.3f, remaining %.3f, remaining after this estimate %.3f (worst case %.3f)\n",
		t.BudgetCapGPUHours, t.BudgetConsumedGPUHours, t.BudgetRemainingGPUHours, t.RemainingAfterEstimate, t.RemainingAfterWorstCase)
	fmt.Fprintf(w, "at every run's bounds: %.3f %s; a wave reserves %s\n", t.BoundsGPUHours, unit, reserveText(t.Reserve))
	writeCosts(w, t, unit)
	writeCapacity(w, p, unit)
	writeBounds(w, p, wide)
	writePowerCheck(w, p)
	writeSlurm(w, p)
	if len(p.Provenance) > 0 {
		fmt.Fprintf(w, "provenance files hashed at start and again before every wave: %d (%d private)\n", len(p.Provenance), countPrivate(p.Provenance))
	}
	for _, pi := range p.Provenance {
		switch {
		case pi.SHA256 != "":
			fmt.Fprintf(w, "  frozen hash (plan with its inputs, start and amend refuse another file):\n    sha256 %s\n    %s\n    frozen at %s\n", pi.SHA256, pi.Path, pi.SHA256At)
		case pi.Shards != "":
			fmt.Fprintf(w, "  model shards (hashed once at start, re-checked by size and modification time, never copied):\n    %s/%s\n", pi.Path, pi.Shards)
		}
	}
	return nil
}

// writePowerCheck says which runs' gates the power check judges, under
// which rule, and which runs before the matrix measure them.
func writePowerCheck(w io.Writer, p *protocols.Plan) {
	pc := p.PowerCheck
	if pc == nil {
		return
	}
	wrapTo(w, fmt.Sprintf("power check: before phase %s starts (and at a launch before it once every gate was measured), stop for review when the campaign's expected completion probability under these gates is below %g:",
		pc.Before, pc.MinCompletionProbability), "  ")
	for _, g := range pc.Gates {
		rules := map[string]int{}
		var order []string
		for _, j := range g.Judged {
			r := j.Rule
			switch {
			case g.Measure == protocols.MeasureProfileWindow:
				r = fmt.Sprintf("with a %g s budget and headroom %g", j.BudgetS, g.Headroom)
			case j.Rule == protocols.RuleCalibrated:
				r = fmt.Sprintf("calibrated at %g", j.Quantile)
			}
			if rules[r] == 0 {
				order = append(order, r)
			}
			rules[r]++
		}
		var rs []string
		for _, r := range order {
			rs = append(rs, fmt.Sprintf("%d %s", rules[r], r))
		}
		wrapTo(w, fmt.Sprintf("  %s, judged by validator %s (%d exact rerun(s)) on %d run(s) (%s); measured by %s",
			g.Measure, g.JudgedBy, g.Retries, len(g.Judged), strings.Join(rs, ", "), strings.Join(g.MeasuredBy, ", ")), "    ")
	}
	if pc.Amendment != "" {
		wrapTo(w, "  a stop names the amendment "+pc.Amendment, "    ")
	}
}

// wrapTo writes text cut at spaces into lines of at most Width columns,
// the first keeping text's own indent, the others indented by indent.
func wrapTo(w io.Writer, text, indent string) {
	line := text[:len(text)-len(strings.TrimLeft(text, " "))]
	first := true
	for _, word := range strings.Fields(text) {
		switch {
		case first:
			line += word
			first = false
		case len(line)+1+len(word) > Width:
			fmt.Fprintln(w, line)
			line = indent + word
		default:
			line += " " + word
		}
	}
	fmt.Fprintln(w, line)
}

// writeCapacity lays out each capacity search's bounded worst case: the
// most points it runs per cell and what they cost, and its SLO.
func writeCapacity(w io.Writer, p *protocols.Plan, unit string) {
	for _, ph := range p.Phases {
		c := ph.Capacity
		if c == nil {
			continue
		}
		var nominal, bounds float64
		for _, r := range p.Runs {
			if r.Phase == ph.Name {
				nominal += r.ExpectedS * float64(r.GPUs) / 3600
				bounds += r.BoundS * float64(r.GPUs) / 3600
			}
		}
		fmt.Fprintf(w, "\ncapacity search %s: rate %g..%g requests/s to a resolution of %g\n", ph.Name, c.RateMin, c.RateMax, c.Resolution)
		fmt.Fprintf(w, "  at most %d points per cell: %d of the bisection, follow-ups at %s of the found rate, overload at %gx\n",
			c.MaxPoints, c.BisectionPoints, joinFloats(c.FollowUps), c.Overload)
		fmt.Fprintf(w, "  worst case: %d runs over %d cells, %.3f %s nominal, %.3f at their bounds\n", ph.Runs, ph.Cells, nominal, unit, bounds)
		slo, _ := json.Marshal(c.SLO)
		fmt.Fprintf(w, "  SLO: %s\n", slo)
	}
}

func joinFloats(fs []float64) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = strconv.FormatFloat(f, 'g', -1, 64)
	}
	return strings.Join(parts, ", ")
}

func reserveText(mode string) string {
	if mode == "bounds" {
		return "each run's bounds (budget.reserve: bounds, the default)"
	}
	return "each run's expected seconds (budget.reserve: nominal)"
}

// writeCosts lays out the cost of the co-location check apart from the
// rest (seed 002, A-P3-1), nominal and conservative, and the peak of the
// wave reservations on the estimate's timeline against the cap.
func writeCosts(w io.Writer, t protocols.Totals, unit string) {
	fmt.Fprintf(w, "\ncost in %s (conditional runs apart):\n", unit)
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PART\tRUNS\tNOMINAL\tCONSERVATIVE")
	fmt.Fprintf(tw, "co-location check (apart from the matrix)\t%d\t%.3f\t%.3f\n", t.Colocation.Runs, t.Colocation.NominalGPUHours, t.Colocation.ConservativeGPUHours)
	fmt.Fprintf(tw, "matrix, burn-ins, confirmations\t%d\t%.3f\t%.3f\n", t.Matrix.Runs, t.Matrix.NominalGPUHours, t.Matrix.ConservativeGPUHours)
	fmt.Fprintf(tw, "total\t%d\t%.3f\t%.3f\n", t.Colocation.Runs+t.Matrix.Runs, t.GPUHoursEstimate, t.ConservativeGPUHours)
	fmt.Fprintf(tw, "conditional runs, if they execute\t%d\t+%.3f\t+%.3f\n", t.Conditional, t.ConditionalGPUHours, t.BoundsGPUHours-t.ConservativeGPUHours)
	tw.Flush()
	io.WriteString(w, buf.String())
	verdict := "within the cap: every wave fits"
	if !t.ReservationFits {
		verdict = "OVER the cap: a wave would be refused, stop reason budget"
	}
	wrapTo(w, fmt.Sprintf("peak wave reservation (charged + reserved + launch): %.3f of the %.3f cap, %s",
		t.PeakReservationGPUHours, t.BudgetCapGPUHours, verdict), "  ")
	if t.PeakReservationRun != "" {
		fmt.Fprintf(w, "  at the launch of %s on the estimate's timeline\n", t.PeakReservationRun)
	}
	if r := t.FirstRefused; r != nil {
		wrapTo(w, fmt.Sprintf("first wave refused: the launch of %s, after %d runs (%.0f s): consumed %.3f + in flight %.3f + its own %.3f = %.3f, over the cap %.3f (%s)",
			r.Run, r.RunsBefore, r.StartS, r.ChargedGPUH, r.InFlightGPUH, r.LaunchGPUH, r.TotalGPUH, r.CapGPUH, r.Budget), "  ")
	}
}

// writeBounds lists the bounds and validators of each kind of run: the
// ready timeout, the measuring deadline, the drain allowance and watchdog,
// where the end of admission is read, and the worst case.
//
// Without wide, a row past Width continues its last column (the
// validators) on lines of its own, aligned under it.
func writeBounds(w io.Writer, p *protocols.Plan, wide bool) {
	type key struct {
		load, class                          string
		ready, deadline, drain, watchdog, to float64
		clientDrain                          string
		admission, validators                string
	}
	var keys []key
	runs := map[key][]string{}
	for _, r := range p.Runs {
		var vs []string
		if r.Manifest != "" {
			vs = append(vs, "manifest-hash") // the built-in check of the client's manifest.sha256
		}
		for _, v := range r.Validators {
			vs = append(vs, v.Name)
		}
		cd := "-"
		if r.ClientDrainS != nil {
			cd = fmt.Sprintf("%.0f", *r.ClientDrainS)
		}
		k := key{r.Load, r.Class, r.Server.ReadyTimeoutS, r.DeadlineS, r.DrainS, r.WatchdogS, r.BoundS, cd, r.AdmissionEnd, strings.Join(vs, ", ")}
		if _, seen := runs[k]; !seen {
			keys = append(keys, k)
		}
		runs[k] = append(runs[k], r.ID)
	}
	fmt.Fprintln(w, "\nbounds (every run is ended past them; DRAIN_S is the class's drain allowance, CLIENT_S the client's own drain bound):")
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LOAD\tCLASS\tRUNS\tREADY_S\tDEADLINE_S\tDRAIN_S\tWATCHDOG_S\tCLIENT_S\tADMISSION\tWORST_S\tVALIDATORS")
	for _, k := range keys {
		vs := k.validators
		if vs == "" {
			vs = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%s\t%s\t%.0f\t%s\n", k.load, k.class, len(runs[k]), k.ready, k.deadline, k.drain, k.watchdog, k.clientDrain, k.admission, k.to, vs)
	}
	tw.Flush()
	for _, line := range strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n") {
		if !wide {
			line = wrapLastColumn(line, Width)
		}
		fmt.Fprintln(w, line)
	}
}

// wrapLastColumn continues a line's last column, a comma-separated list
// that starts after the line's last run of two spaces, on further lines
// aligned under it, so that each line keeps to width where it can.
func wrapLastColumn(line string, width int) string {
	if len(line) <= width {
		return line
	}
	i := strings.LastIndex(line, "  ")
	if i < 0 {
		return line
	}
	start := i + 2
	var out strings.Builder
	cur := line[:start]
	for _, item := range strings.Split(line[start:], ", ") {
		// the item and the comma that follows it on a line it does not end
		if len(cur) > start && len(cur)+len(item)+1 > width {
			out.WriteString(strings.TrimSuffix(cur, " ") + "\n")
			cur = strings.Repeat(" ", start)
		}
		cur += item + ", "
	}
	out.WriteString(strings.TrimSuffix(cur, ", "))
	return out.String()
}

func countPrivate(ps []protocols.ProvenanceInfo) int {
	n := 0
	for _, p := range ps {
		if p.Private {
			n++
		}
	}
	return n
}

func joinInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, ",")
}

// writeSlurm says, for a plan with the Slurm executor, what it asks Slurm
// for (the srun and salloc requests, each with the runs or co-location
// blocks that make it) and the expected wall time on the protocol's nodes.
func writeSlurm(w io.Writer, p *protocols.Plan) {
	x := p.Executor.Slurm
	if p.Executor.Kind != "slurm" || x == nil {
		return
	}
	o := slurm.Options{Partition: x.Partition, Account: x.Account, Constraint: x.Constraint, Exclusive: x.Exclusive, QueueTimeoutS: x.QueueTimeoutS}
	fmt.Fprintf(w, "executor: Slurm, each attempt a step (controller start's --executor and --slurm-* flags override)\n")
	for _, r := range p.SlurmRequests {
		if r.Allocation {
			fmt.Fprintf(w, "  %d co-location block(s), one allocation each:\n", r.Runs)
			writeArgs(w, o.SallocArgv("NAME", r.GPUs, r.CPUs))
			continue
		}
		fmt.Fprintf(w, "  %d run(s), each a step:\n", r.Runs)
		writeArgs(w, o.SrunArgv(slurm.Request{GPUs: r.GPUs, CPUs: r.CPUs, JobName: "NAME"}, []string{"controller", "node-attempt"}))
	}
	most := 0
	for _, r := range p.Regimes {
		most = max(most, r.Concurrency)
	}
	per := "steps share nodes as Slurm places them"
	if x.Exclusive {
		per = "each on a node of its own"
	}
	fmt.Fprintf(w, "expected wall time on %d node(s): %.0f s (%.2f h), up to %d step(s) at once, %s\n",
		x.Nodes, p.Totals.ExpectedWallS, p.Totals.ExpectedWallS/3600, most, per)
}

// writeArgs writes a command line indented, wrapped to Width with shell
// continuations.
func writeArgs(w io.Writer, argv []string) {
	line := "   "
	for _, a := range argv {
		if len(line)+1+len(a) > Width-2 && line != "   " {
			fmt.Fprintln(w, line+" \\")
			line = "     "
		}
		line += " " + a
	}
	fmt.Fprintln(w, line)
}

// InputsHint is what controller plan adds to problems among which are
// inputs this machine lacks (files, manifests, executables, a prior
// verdict): how to plan the protocol without looking for them. "" when
// none is.
func InputsHint(ps *protocols.Problems) string {
	n := ps.Inputs()
	if n == 0 {
		return ""
	}
	what := fmt.Sprintf("%d of these problems are", n)
	if n == 1 {
		what = "1 of these problems is"
	}
	if n == len(ps.List) && ps.Omitted == 0 {
		what = "every one of these problems is"
		if n == 1 {
			what = "this problem is"
		}
	}
	return what + " an input this machine lacks (a file, a manifest, an executable): to plan the protocol away from the machine it is frozen for, run controller plan --check-inputs=false (controller start always looks for them)"
}
