// Command controller runs pre-registered benchmark campaigns: it plans a
// protocol, executes its runs detached from the terminal, and resumes after
// a crash or a reboot.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"warden/internal/cli"
	"warden/internal/mancmd"
)

func main() {
	os.Exit(cli.Run(newRoot(), 1, func(_ *cobra.Command, err error, s cli.Status) {
		switch {
		case !s.Carried:
			fmt.Fprintln(os.Stderr, "controller:", err)
		case s.Cause != nil && s.Cause.Error() != "":
			fmt.Fprintln(os.Stderr, s.Cause)
		}
	}))
}

func newRoot() *cobra.Command {
	var resumeFlag, foreground bool
	var dir, backend string
	root := &cobra.Command{
		Use:   "controller",
		Short: "Run pre-registered GPU serving benchmark campaigns",
		Long: `controller runs pre-registered benchmark campaigns against inference servers:

  controller plan -f PROTOCOL            validate and expand, touching no GPU
  controller start -f PROTOCOL -d DIR    create the campaign and run it, detached
  controller --resume -d DIR             continue after a crash, reboot or stop
  controller stop -d DIR                 stop gracefully, leaving it resumable

ctlq shows what a campaign is doing.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !resumeFlag {
				return cmd.Help()
			}
			return resume(cmd, dir, backend, foreground, "table", metricsOptions{})
		},
	}
	root.Flags().BoolVar(&resumeFlag, "resume", false, "resume the campaign in -d DIR (same as the resume command)")
	root.Flags().StringVarP(&dir, "dir", "d", "", "campaign directory (with --resume)")
	root.Flags().BoolVar(&foreground, "foreground", false, "with --resume: run in this process instead of detaching")
	root.Flags().StringVar(&backend, "gpu-backend", "", "with --resume: the GPU backend; must match the campaign's (fake: resume a campaign whose fake GPUs auto chose)")
	root.AddCommand(newPlanCmd(), newStartCmd(), newResumeCmd(), newStopCmd(), newDaemonCmd(), newValidateCmd(),
		newAmendCmd(), newReadjudicateCmd(), newFreezeCmd(), newNodeAttemptCmd(), newNotifyRunCmd(), mancmd.New(root, "CONTROLLER"))
	return root
}
