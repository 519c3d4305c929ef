package main

import (
	"context"
	"errors"
	"os"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"warden/internal/cli"
	"warden/pkg/launch"
	"warden/pkg/notify"
)

// newNotifyRunCmd is the supervisor of one notification
// (notify.Config.Supervisor): the controller starts it, and it ends the
// command at its bound and what the command left even when the
// controller is killed meanwhile.
func newNotifyRunCmd() *cobra.Command {
	var dir, command string
	var timeoutS float64
	cmd := &cobra.Command{
		Use:    "notify-run --dir DIR --timeout-s S --command CMD",
		Short:  "Run one notification to its end (started by the controller)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" || command == "" {
				return &cli.ExitError{Code: 2, Err: errors.New("notify-run: --dir and --command are required")}
			}
			reaper, err := startReaper(context.Background())
			if err != nil {
				return err
			}
			defer reaper.Close()
			return notify.Supervise(notify.Config{Command: command, TimeoutS: timeoutS, Dir: dir, Log: zerolog.Nop(),
				Launcher: &launch.Launcher{Reaper: reaper, Boot: launch.BootIDFromEnv()}}, os.Stdin, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the campaign directory")
	cmd.Flags().StringVar(&command, "command", "", "the notification command (/bin/sh -c)")
	cmd.Flags().Float64Var(&timeoutS, "timeout-s", 30, "its bound")
	return cmd
}
