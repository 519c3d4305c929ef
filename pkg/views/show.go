package views

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"warden/internal/shellquote"
	"warden/pkg/api"
	"warden/pkg/dirlayout"
	"warden/pkg/state"
)

// PrintRun is ctlq show's text for one run: its attempts with their
// transitions, processes, exits and signals, and gate verdicts; the
// run's own verdicts; the Layer-2 windows; the data sanity blocks.
func PrintRun(w io.Writer, d api.RunDetail) {
	blocks := SanityBlocks(d) // read from the attempts' directories as recorded
	d = Escaped(d)
	r := d.Run
	fmt.Fprintf(w, "run %s (%s, phase %s, cell %s, load %s): %s\n", r.ID, r.Kind, r.Phase, r.Cell, r.Load, d.State)
	fmt.Fprintf(w, "gpus %s\n", backendLine(d.GPUBackend, d.FakeGPUs))
	if len(r.Needs) > 0 {
		fmt.Fprintf(w, "needs %s\n", strings.Join(r.Needs, ", "))
	}
	for _, a := range d.Attempts {
		printAttemptHead(w, a)
		for _, e := range d.Damage() {
			if e.Attempt == a.N {
				fmt.Fprintf(w, "  DAMAGED EVIDENCE: %s\n", e.Error)
			}
		}
		printTransitions(w, a, d.Events)
		printProcs(w, a)
		printHappenings(w, a)
		printGates(w, "  ", gatesOf(d.Gates, a.N))
	}
	if runGates := gatesOf(d.Gates, 0); len(runGates) > 0 {
		fmt.Fprintln(w)
		printGates(w, "", runGates)
	}
	for _, g := range d.Gates {
		if strings.HasPrefix(g.Gate, "validator:") {
			printWindows(w, g.Attempt, g)
		}
	}
	printSelfChecks(w, d.Gates)
	for _, a := range d.Attempts {
		if raw, ok := blocks[strconv.Itoa(a.N)]; ok {
			fmt.Fprintf(w, "\nattempt %d data sanity (%s):\n", a.N, dirlayout.Sanity(a.Dir))
			printSanity(w, raw)
		}
	}
}

// printAttemptHead writes an attempt's outcome, re-adjudication, directory,
// placement, Slurm step and amendments.
func printAttemptHead(w io.Writer, a state.Attempt) {
	fmt.Fprintf(w, "\nattempt %d: %s", a.N, a.State)
	if a.Reason != "" {
		fmt.Fprintf(w, " (%s)", a.Reason)
	}
	if rj := a.Readjudicated; rj != nil {
		fmt.Fprintf(w, "\n  re-adjudicated under amendment %s: %s", rj.Amendment, rj.State)
		if rj.Reason != "" {
			fmt.Fprintf(w, " (%s)", rj.Reason)
		}
		fmt.Fprintf(w, ": %s; recorded verdict %s kept", rj.Detail, a.State)
	}
	fmt.Fprintf(w, "\n  dir   %s\n", a.Dir)
	fmt.Fprintf(w, "  slot  %s, GPUs %s, CPUs %s, port %s\n", orDash(a.Slot), joinInts(a.GPUIDs), orDash(a.CPUs), portText(a.Port))
	if s := a.Slurm; s != nil {
		fmt.Fprintf(w, "  slurm job %s (%s), step %s, node %s, SLURM_STEP_GPUS %s, GPU UUIDs %s, CPUs %s\n",
			orDash(s.JobID), s.JobName, orDash(s.StepID), orDash(s.Node), orDash(s.StepGPUs), orDash(strings.Join(s.GPUUUIDs, ",")), orDash(s.CPUs))
		if !s.Start.IsZero() {
			fmt.Fprintf(w, "  slurm accounting: started %s, ended %s\n", s.Start.Local().Format(time.RFC3339), s.End.Local().Format(time.RFC3339))
		}
	}
	if len(a.Amendments) > 0 {
		fmt.Fprintf(w, "  ran under protocol %.12s and amendments %s\n", a.ProtocolSHA256, strings.Join(a.Amendments, ", "))
	}
}

// printTransitions writes the table of an attempt's events.
func printTransitions(w io.Writer, a state.Attempt, events []state.Event) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  TIME\tFROM\tTO\tREASON\tMESSAGE")
	for _, e := range events {
		if e.Run == a.RunID && e.Attempt == a.N {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", e.Wall.Local().Format("15:04:05.000"), orDash(e.From), e.To, orDash(e.Reason), e.Message)
		}
	}
	tw.Flush()
}

// printProcs writes an attempt's processes and what contains them.
func printProcs(w io.Writer, a state.Attempt) {
	if len(a.Procs) == 0 {
		return
	}
	fmt.Fprintln(w, "  processes")
	for _, p := range a.Procs {
		contained := "cgroup " + p.Cgroup
		switch {
		case p.Cgroup == "" && a.Slurm != nil:
			contained = "process group, in Slurm's step " + orDash(a.Slurm.JobID) + "." + orDash(a.Slurm.StepID)
		case p.Cgroup == "":
			contained = "NOT in a cgroup: process group only"
		}
		fmt.Fprintf(w, "    %s pid %d (start %d, pgid %d, %s): %s\n", p.Role, p.PID, p.StartTime, p.PGID, contained, shellquote.Join(p.Argv))
	}
}

// printHappenings writes an attempt's exits and signals, in the order they
// happened.
func printHappenings(w io.Writer, a state.Attempt) {
	type happening struct {
		at   time.Time
		what string
	}
	var hs []happening
	for _, x := range a.Exits {
		how := fmt.Sprintf("exit code %d", x.Code)
		if x.Signal != "" {
			how = "killed by " + x.Signal
		}
		hs = append(hs, happening{x.At, fmt.Sprintf("%s pid %d %s", x.Role, x.PID, how)})
	}
	for _, s := range a.Signals {
		hs = append(hs, happening{s.At, fmt.Sprintf("%s to %s %d (%s)", s.Signal, s.Target, s.PID, s.Role)})
	}
	sort.SliceStable(hs, func(i, j int) bool { return hs[i].at.Before(hs[j].at) })
	for _, h := range hs {
		fmt.Fprintf(w, "  %s  %s\n", h.at.Local().Format("15:04:05.000"), h.what)
	}
}

// gatesOf is the verdicts of attempt n (0: the run's own).
func gatesOf(all []state.GateVerdict, n int) []state.GateVerdict {
	var out []state.GateVerdict
	for _, g := range all {
		if g.Attempt == n {
			out = append(out, g)
		}
	}
	return out
}

// printGates writes a table of verdicts, each line after indent; nothing
// when there are none.
func printGates(w io.Writer, indent string, gates []state.GateVerdict) {
	if len(gates) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, indent+"GATE\tVERDICT\tDETAIL\tFIGURES")
	for _, g := range gates {
		verdict, detail := GateText(g)
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\n", indent, g.Gate, verdict, orDash(detail), figuresText(g.Figures))
	}
	tw.Flush()
}

// GateText is how a verdict reads to an operator. The cpu-local gate
// errs when the GPU backend reports no CPU affinity for a GPU (the fake
// backend never does): that is a check that could not be made, not a
// fault, so it reads "n/a". The verdict itself stays an error in the
// records and in -o json; only its presentation differs. A cpu-local
// verdict that judged some GPU has a gpuN_nonlocal_cpus figure.
func GateText(g state.GateVerdict) (verdict, detail string) {
	if g.Gate == "cpu-local" && g.Verdict == state.VerdictError && g.Figures["slot_cpus"] > 0 {
		judged := false
		for k := range g.Figures {
			if strings.HasPrefix(k, "gpu") && strings.HasSuffix(k, "_nonlocal_cpus") {
				judged = true
			}
		}
		if !judged {
			return "n/a", "not judged: no CPU affinity from the GPU backend"
		}
	}
	return g.Verdict, g.Detail
}

// figuresText writes figures as sorted name=value pairs.
func figuresText(f map[string]float64) string {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.FormatFloat(f[k], 'g', 6, 64)
	}
	return strings.Join(parts, " ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func portText(p int) string {
	if p == 0 {
		return "-"
	}
	return strconv.Itoa(p)
}

func joinInts(xs []int) string {
	if len(xs) == 0 {
		return "-"
	}
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, ",")
}
