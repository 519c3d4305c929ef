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
	"strings"
	"time"

	"github.com/spf13/cobra"

	"warden/internal/cli"
	"warden/internal/mancmd"
	"warden/pkg/api"
	"warden/pkg/dirlayout"
	"warden/pkg/lockfile"
	"warden/pkg/outcome"
	"warden/pkg/state"
	"warden/pkg/views"
)

// Exit codes of ctlq status.
const (
	exitOK           = 0 // running with a live controller, or complete
	exitOther        = 2 // anything else: not a campaign, unreadable, usage
	exitStopped      = 3 // stopped for review
	exitControllerX  = 4 // the controller is not alive while the campaign is unfinished, or left attempts live
	exitOperatorStop = 5 // stopped by an operator (controller stop, SIGTERM): resumable as it is
	exitDamaged      = 6 // the state database is damaged or empty; ctlq changed nothing
)

func main() {
	os.Exit(cli.Run(newRoot(), exitOther, func(cmd *cobra.Command, _ error, s cli.Status) {
		if err := s.Cause; err != nil {
			fmt.Fprintln(os.Stderr, "ctlq:", views.Esc(err.Error()))
			if jsonOutput(cmd) {
				writeJSON(os.Stdout, errorDoc{Schema: errorSchema, Error: err.Error(), ExitCode: s.Code})
			}
		}
	}))
}

// errorSchema is the version of the error document.
const errorSchema = 1

// errorDoc is what a command given -o json prints on stdout when it fails
// (the message goes to stderr too; the exit status is the command's).
type errorDoc struct {
	Schema   int    `json:"schema"`
	Error    string `json:"error"`
	ExitCode int    `json:"exit_code"`
}

// jsonOutput says whether cmd took -o json as its output format (report's
// -o is a file name, not a format).
func jsonOutput(cmd *cobra.Command) bool {
	if cmd == nil || cmd.Name() == "report" {
		return false
	}
	f := cmd.Flags().Lookup("output")
	return f != nil && f.Value.String() == "json"
}

type options struct {
	dir    string
	output string
}

// statusExitText is the exit status of ctlq status (and of ctlq watch,
// once the controller it watched exited).
const statusExitText = `Exit status:
  0  the campaign runs with a live controller, or is complete (or frozen)
  3  the campaign is stopped for review (stop_reason says why; the hint
     names the amendment, or the resume, that comes next)
  4  the controller is not alive while the campaign is unfinished (or it left
     attempts live: it died, during a stop say; resume reclaims them); the
     hint is the resume: controller resume -d DIR
  5  an operator stopped the campaign (stop_reason operator-stop): resume it as it is
  6  the state database is damaged or empty (every page is verified when it
     is opened); ctlq changed nothing, and controller resume refuses it too,
     keeping a copy as state.db.damaged-<UTC time>
  2  anything else (not a campaign directory, permission denied, unreadable,
     bad usage)`

// queryExitText is the exit status of the commands that print records
// (runs, show, events).
const queryExitText = `Exit status: 0 printed; 6 the state database is damaged or empty (ctlq
changed nothing); 2 anything else (not a campaign directory, permission
denied, unreadable, a controller that holds the campaign but does not
answer, bad usage`

func newRoot() *cobra.Command {
	o := &options{output: "table"}
	root := &cobra.Command{
		Use:   "ctlq",
		Short: "Query a Warden campaign",
		Long: `ctlq shows a campaign's state. It asks the controller through its socket
(DIR/ctl.sock) and, when no controller answers, reads DIR/state.db read-only.

Exit status: each command's help lists its own (ctlq status, ctlq watch:
0 running or complete, 3 stopped for review, 4 no live controller while
unfinished, 5 stopped by an operator, 6 damaged database, 2 anything else;
ctlq report: 7 when it would write private text).

-o json (status, runs, show, events): on an error the command prints
{"schema": 1, "error": MESSAGE, "exit_code": N} on stdout, the message on
stderr too, and exits N as it would without -o json. ctlq watch has no -o
(it is a live view; use status -o json); ctlq report's -o is the HTML file
and refuses "json" and "table".`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVarP(&o.dir, "dir", "d", os.Getenv("WARDEN_DIR"), "campaign directory (default $WARDEN_DIR)")
	root.AddCommand(withOutput(newStatusCmd(o), o), withOutput(newRunsCmd(o), o), withOutput(newShowCmd(o), o),
		withOutput(newEventsCmd(o), o), newWatchCmd(o), newReportCmd(o), newMetricsCmd(o), mancmd.New(root, "CTLQ"))
	cli.DocumentDefaults(root, exitOther)
	return root
}

// withOutput gives a command -o: table or json. (ctlq report's -o is the
// file it writes, so the flag is not the root's.)
func withOutput(cmd *cobra.Command, o *options) *cobra.Command {
	cmd.Flags().StringVarP(&o.output, "output", "o", "table", "output: table or json")
	return cmd
}

// source answers queries through the socket or the database.
type source struct {
	dir    string
	client *api.Client
	store  *state.Store // set when reading the database
}

// withSource is a command's run: fn on the campaign's source, opened
// first (its error is the command's) and closed once fn returns.
func (o *options) withSource(fn func(cmd *cobra.Command, args []string, src *source) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		src, err := o.open()
		if err != nil {
			return err
		}
		defer src.close()
		return fn(cmd, args, src)
	}
}

func (o *options) open() (*source, error) {
	if o.dir != "" && o.output != "table" && o.output != "json" {
		return nil, &cli.ExitError{Code: exitOther, Err: fmt.Errorf("unknown output %q (table or json)", o.output)}
	}
	dir, err := o.campaignDir()
	if err != nil {
		return nil, err
	}
	s := &source{dir: dir, client: api.NewClient(dir, 5*time.Second)}
	if _, err := os.Stat(dirlayout.Socket(dir)); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := s.client.Status(ctx)
		cancel()
		if err == nil {
			return s, nil
		}
	}
	st, err := openDatabase(dir, func(pid int) error {
		return fmt.Errorf("controller pid %d holds %s but does not answer on %s", pid, dir, dirlayout.SocketFile)
	})
	if err != nil {
		return nil, err
	}
	s.store = st
	return s, nil
}

var errNoDir = errors.New("no campaign directory: give -d DIR or set WARDEN_DIR")

// campaignDir is the campaign directory -d names, absolute, once it
// holds a state database.
func (o *options) campaignDir() (string, error) {
	if o.dir == "" {
		return "", &cli.ExitError{Code: exitOther, Err: errNoDir}
	}
	dir, _ := filepath.Abs(o.dir)
	if _, err := os.Stat(dirlayout.State(dir)); err != nil {
		return "", &cli.ExitError{Code: exitOther, Err: campaignDirError(dir, err)}
	}
	return dir, nil
}

// openDatabase opens the campaign's state database read-only: a damaged
// or empty one exits 6, one a controller holds is refused with held's
// words for that controller's pid.
func openDatabase(dir string, held func(pid int) error) (*state.Store, error) {
	st, err := dirlayout.OpenStoreReadOnly(dir, 500*time.Millisecond)
	switch {
	case errors.Is(err, state.ErrLocked):
		return nil, &cli.ExitError{Code: exitOther, Err: held(lockfile.Owner(dirlayout.Lock(dir)))}
	case errors.Is(err, state.ErrCorrupt):
		return nil, &cli.ExitError{Code: exitDamaged, Err: fmt.Errorf("the state database %s is damaged or empty; ctlq changed nothing (controller resume refuses it too and keeps a copy): %w",
			dirlayout.State(dir), err)}
	case err != nil:
		return nil, &cli.ExitError{Code: exitOther, Err: err}
	}
	return st, nil
}

// campaignDirError says why DIR/state.db could not be looked at: only a
// missing file means that dir is not a campaign directory; a directory
// that this user may not read (a campaign is owner-only) is permission
// denied, and says so.
func campaignDirError(dir string, err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s is not a campaign directory (no %s)", dir, dirlayout.StateFile)
	}
	return fmt.Errorf("cannot read campaign directory %s: %w", dir, err)
}

func (s *source) close() {
	if s.store != nil {
		s.store.Close()
	}
}

// ask answers a query from the database when the source reads it, else
// from the controller's API within timeout.
func ask[T any](s *source, timeout time.Duration, fromDB func() (T, error), fromAPI func(context.Context) (T, error)) (T, error) {
	if s.store != nil {
		return fromDB()
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return fromAPI(ctx)
}

// controller is what the database reader knows of the controller: whether
// one holds the campaign's lock.
func (s *source) controller() api.Controller {
	return api.Controller{Alive: lockfile.Held(dirlayout.Lock(s.dir))}
}

func (s *source) status() (api.Status, error) {
	return ask(s, 5*time.Second, func() (api.Status, error) {
		st, err := api.BuildStatus(s.store, s.dir, s.controller(), time.Now())
		st.Source = "database"
		return st, err
	}, s.client.Status)
}

// apiEvents asks the controller's API for at most limit events after
// sequence number after.
func (s *source) apiEvents(ctx context.Context, after uint64, limit int) ([]state.Event, error) {
	page, err := s.client.Events(ctx, after, limit)
	return page.Events, err
}

// runs lists the campaign's runs in state filter (all when empty).
func (s *source) runs(timeout time.Duration, filter string) ([]api.RunBrief, error) {
	return ask(s, timeout, func() ([]api.RunBrief, error) { return api.BuildRuns(s.store, filter) },
		func(ctx context.Context) ([]api.RunBrief, error) { return s.client.Runs(ctx, filter) })
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newStatusCmd(o *options) *cobra.Command {
	var watch bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "The campaign's state, controller liveness, runs by state, budget and what runs now",
		Long: `status prints the campaign's state and stop reason, the controller's pid and
heartbeat (or, once it exited, when the campaign finished or stopped), the
runs by state, the budget (consumed is charged plus in flight), what runs
now and for how long, the ETA while a live controller runs it, the runs
that wait for an amendment, and a hint: the command that comes next (the
hint field of -o json; absent while a live controller runs the campaign
and once it is complete or frozen).

` + statusExitText,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if watch {
				return runWatch(cmd, o, time.Second)
			}
			return o.withSource(o.printStatus)(cmd, args)
		},
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "the live view of ctlq watch")
	return cmd
}

// printStatus is ctlq status on src.
func (o *options) printStatus(cmd *cobra.Command, _ []string, src *source) error {
	st, err := src.status()
	if err != nil {
		return &cli.ExitError{Code: exitOther, Err: err}
	}
	doc := statusDoc{Status: st}
	if src.store != nil {
		aw, err := outcome.AwaitingAmendment(src.store)
		if err != nil {
			return &cli.ExitError{Code: exitOther, Err: err}
		}
		if aw == nil {
			aw = []outcome.Awaiting{}
		}
		doc.AwaitingAmendment = &aw
		if plan, err := dirlayout.ReadPlan(src.dir); err == nil {
			held, err := outcome.SharedCause(plan, src.store)
			if err != nil {
				return &cli.ExitError{Code: exitOther, Err: err}
			}
			if held == nil {
				held = []outcome.Held{}
			}
			doc.HeldSharedCause = &held
		}
	}
	exit := statusExit(st)
	var storage views.Storage
	if views.ControllerDead(st) {
		storage = storageFault(src.dir) // the controller could record neither the fault nor a stop
	}
	doc.Hint = views.Hint(st, src.dir, storage)
	if o.output == "json" {
		writeJSON(cmd.OutOrStdout(), doc)
	} else {
		views.PrintStatus(cmd.OutOrStdout(), st)
		views.PrintAwaiting(cmd.OutOrStdout(), doc.AwaitingAmendment)
		views.PrintHeld(cmd.OutOrStdout(), doc.HeldSharedCause)
		if doc.Hint != "" {
			fmt.Fprintf(cmd.OutOrStdout(), "hint       %s\n", doc.Hint)
		}
	}
	return exit
}

// statusDoc is ctlq status's -o json document: the campaign's status and,
// when read from the database, the runs that wait for an amendment (a
// failure that allows no rerun: resume starts no attempt of them). Read
// through a running controller the list is absent: the database is the
// controller's.
type statusDoc struct {
	api.Status
	AwaitingAmendment *[]outcome.Awaiting `json:"awaiting_amendment,omitempty"`
	// HeldSharedCause, read with it, are the runs not tried yet that
	// share a failed run's server cause (outcome.SharedCause): a resume
	// without an amendment or --retry-shared-cause launches none of them.
	HeldSharedCause *[]outcome.Held `json:"held_shared_cause,omitempty"`
	// Hint is the command that comes next (views.Hint): the resume of a
	// campaign whose controller is dead (exit 4) or that an operator
	// stopped (exit 5), the amendment or resume after a stop for review
	// (exit 3); absent while a live controller runs it and once it is
	// complete or frozen.
	Hint string `json:"hint,omitempty"`
}

func statusExit(st api.Status) error {
	switch {
	case st.Campaign.State == string(state.CampaignComplete), st.Campaign.State == string(state.CampaignFrozen):
		return nil
	case views.ControllerDead(st):
		// no controller while the campaign runs, or attempts still live
		// with none: it died (during a stop, say) and left them; that is
		// not a stop for review
		return &cli.ExitError{Code: exitControllerX, Err: nil}
	case st.Campaign.State == string(state.CampaignStopped) && st.Campaign.StopReason == state.StopOperator:
		return &cli.ExitError{Code: exitOperatorStop, Err: nil}
	case st.Campaign.State == string(state.CampaignStopped):
		return &cli.ExitError{Code: exitStopped, Err: nil}
	case st.Campaign.State == string(state.CampaignRunning):
		return nil
	}
	return &cli.ExitError{Code: exitOther, Err: nil}
}

func newRunsCmd(o *options) *cobra.Command {
	var filter string
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "Every run in plan order with its attempts",
		Long: `runs prints every run in plan order, its phase, kind and state, and its
attempts with their states and reasons (-o json: {"schema", "runs"}, each
run's id under "run", as in ctlq show and ctlq events).

` + queryExitText + ").",
		Args: cobra.NoArgs,
		RunE: o.withSource(func(cmd *cobra.Command, _ []string, src *source) error {
			runs, err := src.runs(10*time.Second, filter)
			if err != nil {
				return &cli.ExitError{Code: exitOther, Err: err}
			}
			if o.output == "json" {
				return writeJSON(cmd.OutOrStdout(), api.Runs{Schema: api.Schema, Runs: runs})
			}
			return views.PrintRuns(cmd.OutOrStdout(), runs)
		}),
	}
	cmd.Flags().StringVar(&filter, "state", "", "only runs in this state (pending, running, complete, quarantined, failed)")
	cmd.RegisterFlagCompletionFunc("state", cobra.FixedCompletions(runStates, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func newShowCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "show RUN",
		Short: "One run: attempts, transitions with times, commands, exit codes, signals, gate verdicts, data sanity blocks, failed processes' last stderr lines, the serving benchmark result",
		Long: `show prints one run: its attempts, transitions with times, commands, exit
codes, signals, gate verdicts and data sanity blocks, and, for each client
or server of a failed attempt that exited non-zero or was killed, the end
of its standard error (ROLE.err in the attempt directory): the last 20
lines within its last 4 KiB (stderr_tails in -o json). A file is read only
under the campaign's runs/ directory, never through a link, never under
the directory of a private input, and is not shown when it holds private
text (or when the private inputs cannot be read to tell): a note says why.

Once the attempt that counts (the run's result, else its last) has ended,
show ends with its serving benchmark result, in the rows and names of
vLLM's vllm bench serve (Successful requests, Request throughput (req/s),
Output and Total token throughput (tok/s), Mean, Median and P99 of TTFT,
TPOT, ITL and E2EL in ms), read from the attempt's client/result.json
(loadgen's, its clean interval); a figure the result does not give reads
"missing", with why. -o json carries the same figures as serving
(throughput_rps, output_tokens_per_s, total_tokens_per_s, ttft_mean_ms,
ttft_p50_ms, ttft_p99_ms, ...; null when missing, latency_missing says
why). docs/report.md gives the rows and where vLLM's layout was read.

` + queryExitText + `, or no run of that id: the message names the closest
ids the campaign has).`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: o.completeRuns,
		RunE: o.withSource(func(cmd *cobra.Command, args []string, src *source) error {
			d, err := ask(src, 10*time.Second, func() (api.RunDetail, error) { return api.BuildRun(src.store, args[0]) },
				func(ctx context.Context) (api.RunDetail, error) { return src.client.Run(ctx, args[0]) })
			if errors.Is(err, state.ErrNotFound) {
				var ids []string
				if runs, rerr := src.runs(10*time.Second, ""); rerr == nil {
					for _, r := range runs {
						ids = append(ids, r.ID)
					}
				}
				return &cli.ExitError{Code: exitOther, Err: errors.New(views.UnknownRun(args[0], ids))}
			}
			if err != nil {
				return &cli.ExitError{Code: exitOther, Err: err}
			}
			d.CheckEvidence() // here, where the files are read, not in the controller's answer
			plan, _ := dirlayout.ReadPlan(src.dir)
			tails := views.StderrTails(d, views.NewStderrGuard(src.dir, views.MinLeakOf(plan)))
			serving := views.ServingOf(d)
			if o.output == "json" {
				return writeJSON(cmd.OutOrStdout(), views.RunWithSanity{RunDetail: d, Sanity: views.SanityBlocks(d), StderrTails: tails, Serving: serving})
			}
			views.PrintRun(cmd.OutOrStdout(), d)
			if serving != nil {
				views.PrintServing(cmd.OutOrStdout(), *serving)
			}
			views.PrintStderrTails(cmd.OutOrStdout(), tails)
			return nil
		}),
	}
}

func newEventsCmd(o *options) *cobra.Command {
	var follow bool
	var after uint64
	cmd := &cobra.Command{
		Use:   "events",
		Short: "The event log; -f follows it until the controller exits",
		Long: `events prints the event log, one event a line. With -o json the output is
JSON lines: one object per event, each with "schema" beside the event's
fields (seq, mono_ns, wall, run, attempt, from, to, reason, message,
figures), so that -f can stream them.

` + queryExitText + ").",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			retries := 0
			for {
				src, err := o.open()
				if err != nil {
					return err
				}
				evs, err := ask(src, 10*time.Second, func() ([]state.Event, error) { return src.store.Events(after, 10000) },
					func(ctx context.Context) ([]state.Event, error) { return src.apiEvents(ctx, after, 10000) })
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
					return &cli.ExitError{Code: exitOther, Err: err}
				}
				retries = 0
				for _, e := range evs {
					if o.output == "json" {
						json.NewEncoder(w).Encode(api.EventLine{Schema: api.Schema, Event: e})
					} else {
						views.PrintEvent(w, e)
					}
					after = e.Seq
				}
				if !follow {
					return nil
				}
				if len(evs) == 0 && !st.Controller.Alive {
					if o.output == "json" {
						return nil
					}
					cp := views.Escaped(st.Campaign)
					fmt.Fprintf(w, "controller not running; campaign %s", cp.State)
					if cp.StopReason != "" {
						fmt.Fprintf(w, " (%s: %s)", cp.StopReason, cp.StopDetail)
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

// runStates are the run states --state takes.
var runStates = []string{string(state.RunPending), string(state.RunRunning), string(state.RunComplete), string(state.RunQuarantined), string(state.RunFailed)}

// completeRuns completes a run id from the campaign in -d DIR.
func (o *options) completeRuns(_ *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	src, err := o.open()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
	}
	defer src.close()
	runs, err := src.runs(5*time.Second, "")
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveError
	}
	var out []string
	for _, r := range runs {
		if strings.HasPrefix(r.ID, prefix) {
			out = append(out, r.ID+"\t"+r.State)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
