package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"warden/internal/cli"
	"warden/pkg/api"
	"warden/pkg/dirlayout"
	"warden/pkg/state"
	"warden/pkg/views"
	"warden/pkg/views/watch"
)

func newWatchCmd(o *options) *cobra.Command {
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "A live view of the campaign, redrawn in place until the controller exits",
		Long: `watch shows the campaign live: its state and stop reason, progress of all
runs and of the measured runs, the GPU-hour budget (charged, in flight,
reserved, cap), an ETA re-estimated from the durations seen so far, one lane
per slot with its run, state and time in that state, GPU memory and power
from the attempts' gpu-samples.jsonl, and the last events.

On a terminal the view is full-screen and redrawn in place (q quits); the
last frame is printed when it ends. When stdout is not a terminal, watch
prints one plain line whenever something changes. Either way it ends when
no controller runs the campaign (at once for a finished one); when it ends
on a controller that is not alive while the campaign is unfinished, it
prints the hint ctlq status gives, the resume.

Exit status: 0 when the operator quit (q); otherwise, once the controller
exited, that of ctlq status:
` + statusExitText,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runWatch(cmd, o, interval)
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "how often to look")
	return cmd
}

// runWatch is ctlq watch and ctlq status -w.
func runWatch(cmd *cobra.Command, o *options, interval time.Duration) error {
	src, err := o.open()
	if err != nil {
		return err
	}
	src.close()
	plan, _ := dirlayout.ReadPlan(src.dir)
	w := watch.NewWatcher(src.dir, plan, func() (watch.Source, error) {
		s, err := o.open()
		if err != nil {
			return nil, err
		}
		return watchSource{s}, nil
	})
	out := cmd.OutOrStdout()
	var sn watch.Snapshot
	if f, ok := out.(*os.File); ok && cli.IsTerminal(f) {
		sn, err = w.Full(f, interval)
	} else {
		sn, err = w.Plain(out, interval)
	}
	if err != nil {
		return &cli.ExitError{Code: exitOther, Err: err}
	}
	if !sn.Ended {
		return nil // the operator quit
	}
	if views.ControllerDead(sn.Status) {
		// it ended on a dead controller: what ctlq status would say next
		fmt.Fprintf(out, "hint       %s\n", views.Hint(sn.Status, src.dir, storageFault(src.dir)))
	}
	return statusExit(sn.Status)
}

// watchSource is a source as the watcher looks through it.
type watchSource struct{ s *source }

func (w watchSource) Status() (api.Status, error) { return w.s.status() }
func (w watchSource) Close()                      { w.s.close() }

func (w watchSource) Runs(ctx context.Context) ([]api.RunBrief, error) {
	if w.s.store != nil {
		return api.BuildRuns(w.s.store, "")
	}
	return w.s.client.Runs(ctx, "")
}

func (w watchSource) Events(ctx context.Context, after uint64, limit int) ([]state.Event, error) {
	if w.s.store != nil {
		return w.s.store.Events(after, limit)
	}
	return w.s.apiEvents(ctx, after, limit)
}
