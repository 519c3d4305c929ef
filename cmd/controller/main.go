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
	var resumeFlag bool
	var ro resumeOptions
	root := &cobra.Command{
		Use:   "controller",
		Short: "Run pre-registered GPU serving benchmark campaigns",
		Long: `controller runs pre-registered benchmark campaigns against inference servers:

  controller sweep -d DIR --serve-cmd CMD --grid KEY=V1,V2 ...
                                         write a config or rate sweep's protocol and start it
  controller plan -f PROTOCOL            validate and expand, touching no GPU
  controller start -f PROTOCOL -d DIR    create the campaign and run it, detached
  controller resume -d DIR               continue after a crash, reboot or stop
  controller stop -d DIR                 stop gracefully, leaving it resumable

controller --resume -d DIR is controller resume -d DIR, with the same flags.
ctlq shows what a campaign is doing.

Exit status: each command's help lists its own; with --resume, those of
controller resume. Without a command or --resume it prints this help (0).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !resumeFlag {
				return cmd.Help()
			}
			return ro.run(cmd)
		},
	}
	root.Flags().BoolVar(&resumeFlag, "resume", false, "resume the campaign in -d DIR: controller resume, with its flags")
	ro.flags(root, "with --resume: ")
	root.AddCommand(newSweepCmd(), newPlanCmd(), newStartCmd(), newResumeCmd(), newStopCmd(), newDaemonCmd(), newValidateCmd(),
		newAmendCmd(), newReadjudicateCmd(), newFreezeCmd(), newCheckCmd(), newNodeAttemptCmd(), newNotifyRunCmd(), mancmd.New(root, "CONTROLLER"))
	cli.DocumentDefaults(root, 1)
	return root
}
