package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"warden/internal/cli"
	"warden/pkg/campaigndir"
	"warden/pkg/planview"
	"warden/protocols"
)

// Exit codes of controller plan (start refuses with exitOverBudget too).
const (
	exitInvalid    = 2 // the protocol is not valid
	exitOverBudget = 3 // valid, but the estimate or the worst case passes the budget cap
)

// tableWidth is the width the plan table keeps to without --wide.
const tableWidth = planview.Width

func newPlanCmd() *cobra.Command {
	var file, output, regime string
	var wide, checkInputs bool
	cmd := &cobra.Command{
		Use:   "plan -f PROTOCOL",
		Short: "Validate a protocol and print its runs in execution order, without touching a GPU",
		Long: `plan validates and expands a protocol and prints the runs in execution
order with the expected wall time and the GPU-hour estimate against the
budget cap. It touches no GPU and writes nothing.

The table fits 120 columns (the run, its kind, GPUs, slot, expected
seconds and condition); --wide adds phase, cell, load, needs, regime and
class.

Exit status: 0 when the protocol is valid and its estimate fits the budget;
2 when it is not valid (every problem is printed with its file, line, column
and field); 3 when it is valid but the GPU-hour estimate, or the worst case
with every conditional run, passes the budget cap (start then refuses it
unless --allow-over-budget).

plan also looks for every input the runs will read (each is a problem,
exit 2, with file, line and field): each provenance file, relative to the
workdir; each file a client's argv names after --manifest (after the
plan-time variables, such as one from vars, are substituted); and the
executable of every server, client, validator, co-location gate validator
and ledger command, a path (with a slash, relative to the workdir) that
must be an executable file or a name that must be on PATH; each missing
file once. Arguments holding a launch-time variable and
{shell: ...} commands are not checked. With the Slurm executor the
executables run on a node and are not checked (the ledger's are): the plan says so
(inputs_unchecked in -o json, a line on stderr otherwise).
--check-inputs=false skips the search, to plan a protocol away from the
machine it is frozen for (start always looks); the problems of inputs this
machine lacks say so ("input": true in -o json) and the message names the
flag (the document's "hint"). A provenance file that does not exist and is
close to a load's manifest that is not among them is reported as the
cause, with that manifest, instead of a line per run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return &cli.ExitError{Code: 2, Err: errors.New("plan: -f PROTOCOL is required")}
			}
			plan, err := protocols.PlanFile(file, protocols.Options{Regime: regime, CheckInputs: checkInputs})
			if err != nil {
				var ps *protocols.Problems
				if errors.As(err, &ps) {
					hint := planview.InputsHint(ps)
					if output == "json" {
						doc := map[string]any{"schema": protocols.PlanSchema, "valid": false, "problems": ps.List, "omitted": ps.Omitted}
						if hint != "" {
							doc["hint"] = hint
						}
						writeJSON(cmd.OutOrStdout(), doc)
						return &cli.ExitError{Code: 2, Err: nil}
					}
					if hint != "" {
						hint = "\n" + hint
					}
					return &cli.ExitError{Code: 2, Err: fmt.Errorf("%s: %d problem(s):\n%w%s", file, len(ps.List)+ps.Omitted, err, hint)}
				}
				return &cli.ExitError{Code: 2, Err: err}
			}
			switch output {
			case "json":
				if err := writeJSON(cmd.OutOrStdout(), plan); err != nil {
					return err
				}
			case "table", "":
				if err := planview.Write(cmd.OutOrStdout(), plan, wide); err != nil {
					return err
				}
				for _, u := range plan.InputsUnchecked {
					fmt.Fprintln(cmd.ErrOrStderr(), "not checked:", u)
				}
			default:
				return &cli.ExitError{Code: 2, Err: fmt.Errorf("plan: unknown output %q (json or table)", output)}
			}
			if err := overBudget(plan); err != nil {
				return &cli.ExitError{Code: exitOverBudget, Err: fmt.Errorf("%w; controller start refuses it unless --allow-over-budget (then it stops when a wave would pass the cap)", err)}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&wide, "wide", false, "every column, however wide")
	cmd.Flags().BoolVar(&checkInputs, "check-inputs", true, "look for the provenance files, manifests and executables the runs read")
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

// overBudget says whether the plan's estimate, or its worst case, passes
// the budget cap: campaigndir.OverBudget, the rule start applies too.
func overBudget(p *protocols.Plan) error { return campaigndir.OverBudget(p) }
