// Command ctlq shows what a campaign is doing: through the controller's
// socket while it runs, and from the state database, opened read-only,
// when no controller answers.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"warden/pkg/api"
	"warden/pkg/lockfile"
	"warden/pkg/state"
)

// Exit codes of ctlq status.
const (
	exitOK          = 0 // running with a live controller, or complete
	exitOther       = 2 // anything else: not a campaign, unreadable, usage
	exitStopped     = 3 // stopped for review
	exitControllerX = 4 // the controller is not alive while the campaign is unfinished, or left attempts live
)

type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func main() {
	root := newRoot()
	if err := root.Execute(); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.err != nil {
				fmt.Fprintln(os.Stderr, "ctlq:", ee.err)
			}
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "ctlq:", err)
		os.Exit(exitOther)
	}
}

type options struct {
	dir    string
	output string
}

func newRoot() *cobra.Command {
	o := &options{}
	root := &cobra.Command{
		Use:   "ctlq",
		Short: "Query a Warden campaign",
		Long: `ctlq shows a campaign's state. It asks the controller through its socket
(DIR/ctl.sock) and, when no controller answers, reads DIR/state.db read-only.

Exit status of ctlq status:
  0  the campaign runs with a live controller, or is complete
  3  the campaign is stopped for review (stop_reason says why)
  4  the controller is not alive while the campaign is unfinished (or it left
     attempts live: it died, during a stop say; resume reclaims them)
  2  anything else (not a campaign directory, unreadable, bad usage)`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVarP(&o.dir, "dir", "d", os.Getenv("WARDEN_DIR"), "campaign directory (default $WARDEN_DIR)")
	root.PersistentFlags().StringVarP(&o.output, "output", "o", "table", "output: table or json")
	root.AddCommand(newStatusCmd(o), newRunsCmd(o), newShowCmd(o), newEventsCmd(o))
	return root
}

// source answers queries through the socket or the database.
type source struct {
	dir    string
	client *api.Client
	store  *state.Store // set when reading the database
}

func (o *options) open() (*source, error) {
	if o.dir == "" {
		return nil, &exitError{exitOther, errors.New("no campaign directory: give -d DIR or set WARDEN_DIR")}
	}
	if o.output != "table" && o.output != "json" {
		return nil, &exitError{exitOther, fmt.Errorf("unknown output %q (table or json)", o.output)}
	}
	dir, _ := filepath.Abs(o.dir)
	if _, err := os.Stat(filepath.Join(dir, api.StateFile)); err != nil {
		return nil, &exitError{exitOther, fmt.Errorf("%s is not a campaign directory (no %s)", dir, api.StateFile)}
	}
	s := &source{dir: dir, client: api.NewClient(dir, 5*time.Second)}
	if _, err := os.Stat(filepath.Join(dir, api.SocketFile)); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := s.client.Status(ctx)
		cancel()
		if err == nil {
			return s, nil
		}
	}
	st, err := state.OpenReadOnly(filepath.Join(dir, api.StateFile), 500*time.Millisecond)
	if err != nil {
		if errors.Is(err, state.ErrLocked) {
			lock := filepath.Join(dir, api.LockFile)
			return nil, &exitError{exitOther, fmt.Errorf("controller pid %d holds %s but does not answer on %s", lockfile.Owner(lock), dir, api.SocketFile)}
		}
		return nil, &exitError{exitOther, err}
	}
	s.store = st
	return s, nil
}

func (s *source) close() {
	if s.store != nil {
		s.store.Close()
	}
}

func (s *source) status() (api.Status, error) {
	if s.store == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return s.client.Status(ctx)
	}
	ctl := api.Controller{Alive: lockfile.Held(filepath.Join(s.dir, api.LockFile))}
	st, err := api.BuildStatus(s.store, s.dir, ctl, time.Now())
	st.Source = "database"
	return st, err
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newStatusCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "The campaign's state, controller liveness, runs by state, budget and what runs now",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			src, err := o.open()
			if err != nil {
				return err
			}
			defer src.close()
			st, err := src.status()
			if err != nil {
				return &exitError{exitOther, err}
			}
			if o.output == "json" {
				writeJSON(cmd.OutOrStdout(), st)
			} else {
				printStatus(cmd.OutOrStdout(), st)
			}
			return statusExit(st)
		},
	}
}

func statusExit(st api.Status) error {
	switch {
	case st.Campaign.State == string(state.CampaignComplete):
		return nil
	case st.Campaign.State == string(state.CampaignStopped) && !st.Controller.Alive && len(st.Current) > 0:
		// attempts still live with no controller: it died (during a stop,
		// say) and left them; that is not a stop for review
		return &exitError{exitControllerX, nil}
	case st.Campaign.State == string(state.CampaignStopped):
		return &exitError{exitStopped, nil}
	case st.Campaign.State == string(state.CampaignRunning) && !st.Controller.Alive:
		return &exitError{exitControllerX, nil}
	case st.Campaign.State == string(state.CampaignRunning):
		return nil
	}
	return &exitError{exitOther, nil}
}

func printStatus(w io.Writer, st api.Status) {
	c := st.Campaign
	fmt.Fprintf(w, "campaign   %s (protocol %s, sha256 %.12s)\n", c.ID, c.Protocol, c.SHA256)
	fmt.Fprintf(w, "state      %s", c.State)
	if c.StopReason != "" {
		fmt.Fprintf(w, " (%s: %s)", c.StopReason, c.StopDetail)
	}
	fmt.Fprintln(w)
	alive := "not alive"
	if st.Controller.Alive {
		alive = "alive"
	}
	fmt.Fprintf(w, "controller pid %d, %s, heartbeat %.1f s ago (via %s)\n", st.Controller.PID, alive, st.Controller.HeartbeatAgeS, st.Source)
	var states []string
	for k := range st.Runs.ByState {
		states = append(states, k)
	}
	sort.Strings(states)
	var parts []string
	for _, k := range states {
		parts = append(parts, fmt.Sprintf("%s %d", k, st.Runs.ByState[k]))
	}
	fmt.Fprintf(w, "runs       %d: %s\n", st.Runs.Total, strings.Join(parts, ", "))
	unit := st.Budget.Unit
	if unit == "" {
		unit = "GPU-hours"
	}
	fmt.Fprintf(w, "budget     cap %.3f, consumed %.3f (charged %.3f + in flight %.3f), reserved %.3f, remaining %.3f %s\n",
		st.Budget.CapGPUHours, st.Budget.ConsumedGPUHours+st.Budget.InFlightGPUHours, st.Budget.ConsumedGPUHours, st.Budget.InFlightGPUHours,
		st.Budget.ReservedGPUHours, st.Budget.RemainingGPUHours, unit)
	for _, cur := range st.Current {
		fmt.Fprintf(w, "now        %s attempt %d %s for %.1f s on %s\n", cur.Run, cur.Attempt, cur.State, cur.ElapsedS, cur.Slot)
	}
	if st.ETAS != nil && c.State == string(state.CampaignRunning) {
		fmt.Fprintf(w, "eta        %s\n", (time.Duration(*st.ETAS) * time.Second).String())
	}
}

func newRunsCmd(o *options) *cobra.Command {
	var filter string
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "Every run in plan order with its attempts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			src, err := o.open()
			if err != nil {
				return err
			}
			defer src.close()
			var runs []api.RunBrief
			if src.store != nil {
				runs, err = api.BuildRuns(src.store, filter)
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				runs, err = src.client.Runs(ctx, filter)
				cancel()
			}
			if err != nil {
				return &exitError{exitOther, err}
			}
			if o.output == "json" {
				return writeJSON(cmd.OutOrStdout(), runs)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "RUN\tPHASE\tKIND\tSTATE\tATTEMPTS")
			for _, r := range runs {
				var as []string
				for _, a := range r.Attempts {
					s := fmt.Sprintf("a%d %s", a.N, a.State)
					if a.Reason != "" {
						s += " (" + a.Reason + ")"
					}
					as = append(as, s)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.ID, r.Phase, r.Kind, r.State, strings.Join(as, ", "))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&filter, "state", "", "only runs in this state (pending, running, complete, quarantined, failed)")
	return cmd
}

func newShowCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "show RUN",
		Short: "One run: attempts, transitions with times, commands, exit codes, signals, gate verdicts, data sanity blocks",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := o.open()
			if err != nil {
				return err
			}
			defer src.close()
			var d api.RunDetail
			if src.store != nil {
				d, err = api.BuildRun(src.store, args[0])
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				d, err = src.client.Run(ctx, args[0])
				cancel()
			}
			if errors.Is(err, state.ErrNotFound) {
				return &exitError{exitOther, fmt.Errorf("no run %q in this campaign", args[0])}
			}
			if err != nil {
				return &exitError{exitOther, err}
			}
			if o.output == "json" {
				return writeJSON(cmd.OutOrStdout(), runWithSanity{RunDetail: d, Sanity: sanityBlocks(d)})
			}
			printRun(cmd.OutOrStdout(), d)
			return nil
		},
	}
}

func printRun(w io.Writer, d api.RunDetail) {
	r := d.Run
	fmt.Fprintf(w, "run %s (%s, phase %s, cell %s, load %s): %s\n", r.ID, r.Kind, r.Phase, r.Cell, r.Load, d.State)
	if len(r.Needs) > 0 {
		fmt.Fprintf(w, "needs %s\n", strings.Join(r.Needs, ", "))
	}
	for _, a := range d.Attempts {
		fmt.Fprintf(w, "\nattempt %d: %s", a.N, a.State)
		if a.Reason != "" {
			fmt.Fprintf(w, " (%s)", a.Reason)
		}
		fmt.Fprintf(w, "\n  dir %s\n  slot %s, GPUs %v, CPUs %s, port %d\n", a.Dir, a.Slot, a.GPUIDs, a.CPUs, a.Port)
		for _, e := range d.Events {
			if e.Run == a.RunID && e.Attempt == a.N {
				fmt.Fprintf(w, "  %s  %-11s -> %-11s %s %s\n", e.Wall.Format("15:04:05.000"), e.From, e.To, e.Reason, e.Message)
			}
		}
		for _, p := range a.Procs {
			contained := "cgroup " + p.Cgroup
			if p.Cgroup == "" {
				contained = "NOT in a cgroup: process group only"
			}
			fmt.Fprintf(w, "  %s pid %d (start %d, pgid %d, %s): %s\n", p.Role, p.PID, p.StartTime, p.PGID, contained, strings.Join(p.Argv, " "))
		}
		for _, x := range a.Exits {
			how := fmt.Sprintf("exit code %d", x.Code)
			if x.Signal != "" {
				how = "killed by " + x.Signal
			}
			fmt.Fprintf(w, "  %s  %s pid %d %s\n", x.At.Format("15:04:05.000"), x.Role, x.PID, how)
		}
		for _, s := range a.Signals {
			fmt.Fprintf(w, "  %s  %s to %s %d (%s)\n", s.At.Format("15:04:05.000"), s.Signal, s.Target, s.PID, s.Role)
		}
	}
	for _, g := range d.Gates {
		fmt.Fprintf(w, "gate %s (attempt %d): %s %s %v\n", g.Gate, g.Attempt, g.Verdict, g.Detail, g.Figures)
	}
	blocks := sanityBlocks(d)
	for _, a := range d.Attempts {
		if raw, ok := blocks[strconv.Itoa(a.N)]; ok {
			fmt.Fprintf(w, "\nattempt %d data sanity (%s):\n", a.N, filepath.Join(a.Dir, "sanity.json"))
			printSanity(w, raw)
		}
	}
}

func newEventsCmd(o *options) *cobra.Command {
	var follow bool
	var after uint64
	cmd := &cobra.Command{
		Use:   "events",
		Short: "The event log; -f follows it until the controller exits",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			retries := 0
			for {
				src, err := o.open()
				if err != nil {
					return err
				}
				var evs []state.Event
				if src.store != nil {
					evs, err = src.store.Events(after, 10000)
				} else {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					var page api.Events
					page, err = src.client.Events(ctx, after, 10000)
					cancel()
					evs = page.Events
				}
				var st api.Status
				if err == nil && follow {
					st, err = src.status()
				}
				src.close()
				if errors.Is(err, api.ErrNoController) && follow && retries < 20 {
					// the controller exited between two requests: read the database next time
					retries++
					time.Sleep(100 * time.Millisecond)
					continue
				}
				if err != nil {
					return &exitError{exitOther, err}
				}
				retries = 0
				for _, e := range evs {
					if o.output == "json" {
						json.NewEncoder(w).Encode(e)
					} else {
						printEvent(w, e)
					}
					after = e.Seq
				}
				if !follow {
					return nil
				}
				if len(evs) == 0 && !st.Controller.Alive {
					fmt.Fprintf(w, "controller not running; campaign %s", st.Campaign.State)
					if st.Campaign.StopReason != "" {
						fmt.Fprintf(w, " (%s: %s)", st.Campaign.StopReason, st.Campaign.StopDetail)
					}
					fmt.Fprintln(w)
					return nil
				}
				if len(evs) == 0 {
					time.Sleep(500 * time.Millisecond)
				}
			}
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events until the controller exits")
	cmd.Flags().Uint64Var(&after, "after", 0, "start after this event number")
	return cmd
}

func printEvent(w io.Writer, e state.Event) {
	what := e.Run
	if e.Attempt > 0 {
		what = fmt.Sprintf("%s a%d", e.Run, e.Attempt)
	}
	if what == "" {
		what = "campaign"
	}
	fmt.Fprintf(w, "%6d %s %-28s %s -> %s", e.Seq, e.Wall.Local().Format("15:04:05"), what, e.From, e.To)
	if e.Reason != "" {
		fmt.Fprintf(w, " [%s]", e.Reason)
	}
	if e.Message != "" {
		fmt.Fprintf(w, " %s", e.Message)
	}
	fmt.Fprintln(w)
}
