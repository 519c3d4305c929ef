package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"warden/internal/cli"
	"warden/pkg/campaigndir"
	"warden/pkg/slurm"
	"warden/protocols"
)

// executorOptions are start's choice of where attempts run.
type executorOptions struct {
	executor string
	slurm    slurm.Options
}

func (o *executorOptions) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.executor, "executor", "local", "where attempts run: local (this host) or slurm (a Slurm step each; recorded for resume)")
	cmd.RegisterFlagCompletionFunc("executor", cobra.FixedCompletions([]string{"local", "slurm"}, cobra.ShellCompDirectiveNoFileComp))
	f.StringVar(&o.slurm.Partition, "slurm-partition", "", "with --executor slurm: the partition (srun -p); default the cluster's")
	f.StringVar(&o.slurm.Account, "slurm-account", "", "with --executor slurm: the account (srun -A)")
	f.StringVar(&o.slurm.Constraint, "slurm-constraint", "", "with --executor slurm: node features (srun -C)")
	f.BoolVar(&o.slurm.Exclusive, "slurm-exclusive", false, "with --executor slurm: a node of its own for each run's step (srun --exclusive)")
	f.IntVar(&o.slurm.QueueTimeoutS, "slurm-queue-timeout", slurm.DefaultQueueTimeoutS, "with --executor slurm: seconds a step may wait for busy resources (srun --immediate)")
	f.StringVar(&o.slurm.NodeController, "slurm-node-controller", "", "with --executor slurm: the controller binary the nodes run, at the same path on every node (default: this binary's path)")
}

// startOptions fills the campaign's start options with where attempts
// run: the flags given, then the protocol's executor section.
func (o *executorOptions) startOptions(so *campaigndir.StartOptions, backendFlag string, changed func(flag string) bool, protocol string) error {
	given := map[string]bool{}
	for flag, name := range map[string]string{"executor": "executor", "slurm-partition": "partition", "slurm-account": "account",
		"slurm-constraint": "constraint", "slurm-exclusive": "exclusive", "slurm-queue-timeout": "queue_timeout"} {
		given[name] = changed(flag)
	}
	plan, _ := protocols.PlanFile(protocol, protocols.Options{}) // an invalid protocol is start's to report
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("the controller's own path, for the nodes: %w", err)
	}
	return campaigndir.ResolveExecutor(so, campaigndir.ExecutorChoice{Executor: o.executor, Slurm: o.slurm, Given: given}, plan, backendFlag, self)
}

// Exit codes of node-attempt.
const (
	exitNodeOK     = 0 // the attempt ran to a terminal state, reported
	exitNodeFailed = 1 // the attempt could not begin (the report says nothing more)
)

func newNodeAttemptCmd() *cobra.Command {
	var specPath string
	cmd := &cobra.Command{
		Use:    "node-attempt --spec FILE",
		Short:  "Run one attempt on this Slurm node (started by the controller through srun)",
		Hidden: true,
		Long: `node-attempt is the node-side runner of the Slurm executor: srun starts it in
the attempt's step; it runs the attempt from preflight to its terminal state
on this node (the step's GPUs, read through the campaign's GPU backend; its
CPUs; processes in their own groups inside the step's cgroup) and reports
every record as a JSON line on standard output. The controller writes them
into the campaign's database. Lines on standard input are the controller's
commands (stop, budget, until); the end of the input ends the attempt.
Exit codes: 0 the attempt reached a terminal state; 1 it could not begin.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if specPath == "" {
				return &cli.ExitError{Code: 2, Err: errors.New("node-attempt: --spec FILE is required")}
			}
			if err := campaigndir.RunNodeAttempt(specPath, os.Stdout, os.Stdin, os.Stderr); err != nil {
				return &cli.ExitError{Code: exitNodeFailed, Err: err}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&specPath, "spec", "", "the attempt's node spec (written by the controller)")
	return cmd
}
