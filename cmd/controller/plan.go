package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"warden/protocols"
)

func newPlanCmd() *cobra.Command {
	var file, output, regime string
	cmd := &cobra.Command{
		Use:   "plan -f PROTOCOL",
		Short: "Validate a protocol and print its runs in execution order, without touching a GPU",
		Long: `plan validates and expands a protocol and prints the runs in execution
order with the expected wall time and the GPU-hour estimate against the
budget cap. It touches no GPU and writes nothing.

Exit status: 0 when the protocol is valid, 2 when it is not (every problem
is printed with its file, line, column and field).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return &exitError{2, errors.New("plan: -f PROTOCOL is required")}
			}
			plan, err := protocols.PlanFile(file, protocols.Options{Regime: regime})
			if err != nil {
				var ps *protocols.Problems
				if errors.As(err, &ps) {
					if output == "json" {
						writeJSON(cmd.OutOrStdout(), map[string]any{"schema": protocols.PlanSchema, "valid": false, "problems": ps.List, "omitted": ps.Omitted})
						return &exitError{2, nil}
					}
					return &exitError{2, fmt.Errorf("%s: %d problem(s):\n%w", file, len(ps.List)+ps.Omitted, err)}
				}
				return &exitError{2, err}
			}
			switch output {
			case "json":
				return writeJSON(cmd.OutOrStdout(), plan)
			case "table", "":
				return writePlanTable(cmd.OutOrStdout(), plan)
			default:
				return &exitError{2, fmt.Errorf("plan: unknown output %q (json or table)", output)}
			}
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "protocol file")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	cmd.Flags().StringVar(&regime, "regime", "", "regime the estimate assumes (default: the protocol's first)")
	return cmd
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func writePlanTable(w io.Writer, p *protocols.Plan) error {
	fmt.Fprintf(w, "protocol %s  sha256 %s\n", p.Protocol.Name, p.Protocol.SHA256)
	fmt.Fprintf(w, "estimate assumes regime %s\n\n", p.Regime)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tRUN\tPHASE\tKIND\tCELL\tLOAD\tNEEDS\tGPUS\tSLOT\tREGIME\tCLASS\tEXPECTED_S\tWHEN")
	for _, r := range p.Runs {
		needs := strings.Join(r.Needs, ",")
		if needs == "" {
			needs = "-"
		}
		gpus := "-"
		if len(r.PlannedGPUs) > 0 {
			gpus = joinInts(r.PlannedGPUs)
		}
		slot := strings.Join(r.PlannedSlots, "+")
		if slot == "" {
			slot = r.Slot
		}
		when := "always"
		if r.Condition != "" {
			when = "if " + r.Condition
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d (%s)\t%s\t%s\t%s\t%.0f\t%s\n",
			r.Index, r.ID, r.Phase, r.Kind, r.Cell, r.Load, needs, r.GPUs, gpus, slot, r.Regime, r.Class, r.ExpectedS, when)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
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
	fmt.Fprintf(w, " of which %d measured, %d conditional\n", t.Measured, t.Conditional)
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
	writeBounds(w, p)
	if len(p.Provenance) > 0 {
		fmt.Fprintf(w, "provenance files hashed at start: %d (%d private)\n", len(p.Provenance), countPrivate(p.Provenance))
	}
	return nil
}

func reserveText(mode string) string {
	if mode == "bounds" {
		return "each run's bounds (budget.reserve: bounds)"
	}
	return "each run's expected seconds (budget.reserve: nominal)"
}

// writeBounds lists the bounds and validators of each kind of run: the
// ready timeout, the measuring deadline, the drain allowance and watchdog,
// where the end of admission is read, and the worst case.
func writeBounds(w io.Writer, p *protocols.Plan) {
	type key struct {
		load, class                          string
		ready, deadline, drain, watchdog, to float64
		admission, validators                string
	}
	var keys []key
	runs := map[key][]string{}
	for _, r := range p.Runs {
		var vs []string
		for _, v := range r.Validators {
			vs = append(vs, v.Name)
		}
		k := key{r.Load, r.Class, r.Server.ReadyTimeoutS, r.DeadlineS, r.DrainS, r.WatchdogS, r.BoundS, r.AdmissionEnd, strings.Join(vs, ", ")}
		if _, seen := runs[k]; !seen {
			keys = append(keys, k)
		}
		runs[k] = append(runs[k], r.ID)
	}
	fmt.Fprintln(w, "\nbounds (every run is ended past them):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LOAD\tCLASS\tRUNS\tREADY_S\tDEADLINE_S\tDRAIN_S\tWATCHDOG_S\tADMISSION_END\tWORST_S\tVALIDATORS")
	for _, k := range keys {
		vs := k.validators
		if vs == "" {
			vs = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%s\t%.0f\t%s\n", k.load, k.class, len(runs[k]), k.ready, k.deadline, k.drain, k.watchdog, k.admission, k.to, vs)
	}
	tw.Flush()
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
