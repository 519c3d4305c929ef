package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"warden/internal/cli"
	"warden/pkg/api"
	"warden/pkg/campaigndir"
	"warden/pkg/dirlayout"
	"warden/pkg/launch"
	"warden/pkg/lockfile"
	"warden/pkg/metrics"
	"warden/pkg/notify"
	"warden/pkg/outcome"
	"warden/pkg/sweep"
	"warden/protocols"
)

// result is the -o json document of start, resume and stop.
type result struct {
	Schema int    `json:"schema"`
	Action string `json:"action"` // start, resume, stop
	Dir    string `json:"dir"`
	// PID is the controller's pid: the one started (start, resume), or the
	// one stopped (stop; 0 when none ran).
	PID int `json:"pid"`
	// Running: a controller runs the campaign when the command returns
	// (start and resume detached); Foreground: it ran in this process.
	Running    bool   `json:"running"`
	Foreground bool   `json:"foreground,omitempty"`
	Note       string `json:"note,omitempty"`
	// AwaitingAmendment (resume) are the runs whose last attempt failed for
	// a reason that allows no rerun: resume starts no attempt of them until
	// an amendment covers them.
	AwaitingAmendment []outcome.Awaiting `json:"awaiting_amendment,omitempty"`
	// HeldSharedCause (resume) are the runs not tried yet that share the
	// cause of a failed run (outcome.SharedCause): resume launches none of
	// them until an amendment covers the failed run, unless
	// --retry-shared-cause (retryShared) asks for them.
	HeldSharedCause []outcome.Held `json:"held_shared_cause,omitempty"`
	retryShared     bool

	// The sweep's (controller sweep): the protocol it wrote and its
	// canonical SHA-256, the manifest, the runs it plans, whether it only
	// wrote and planned (--dry-run), and then the plan.
	Protocol       string              `json:"protocol,omitempty"`
	ProtocolSHA256 string              `json:"protocol_sha256,omitempty"`
	Manifest       *sweep.ManifestFile `json:"manifest,omitempty"`
	Configurations int                 `json:"configurations,omitempty"`
	Runs           int                 `json:"runs,omitempty"`
	DryRun         bool                `json:"dry_run,omitempty"`
	Plan           *protocols.Plan     `json:"plan,omitempty"`
}

func checkTableOrJSON(output string) error {
	if output != "table" && output != "json" {
		return &cli.ExitError{Code: 2, Err: fmt.Errorf("unknown output %q (table or json)", output)}
	}
	return nil
}

func newStartCmd() *cobra.Command {
	var file, dir string
	var sf startFlags
	cmd := &cobra.Command{
		Use:   "start -f PROTOCOL -d DIR",
		Short: "Create a campaign directory and run the campaign, detached",
		Long: `start validates the protocol, creates the campaign directory (refusing one
that holds anything else), records the protocol and every provenance file
with its SHA-256, and runs the campaign in a detached controller (its own
session, input from /dev/null, output to DIR/controller.log). It returns once
the controller reports that it is running, and prints its pid.

--foreground runs the controller in this process instead (for systemd and
tests); it returns when the campaign completes, stops, or is stopped. Its log
goes to DIR/controller.log and to stderr: readable lines when stderr is a
terminal, JSON lines otherwise (a journal, a pipe).

start refuses a protocol whose GPU-hour estimate, or worst case, passes the
budget cap (exit 3, as controller plan) unless --allow-over-budget, and an
existing directory that another user owns (exit 7: the campaign would be
theirs to change). Either way it names the first wave whose reservation
would be refused and how many runs launch before it; with
--allow-over-budget the campaign runs those and stops (budget) at that
wave. A directory that already holds a campaign is refused (exit 1),
naming the controller that runs it, if one does.

A directory whose only entry is inputs/, holding nothing but the protocol
being started and files its provenance names, counts as empty: it is what
controller sweep writes before it starts the campaign.

Exit status: 0 running (detached), or the campaign ran (--foreground); 1
refused or failed (a directory that holds anything else, the controller
could not start); 2 usage or an invalid protocol (every problem with its
file, line, column and field); 3 over the budget cap, without
--allow-over-budget; 5 NVML does not initialize for --gpu-backend auto or
nvml; 7 the directory is another user's.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" || dir == "" {
				return &cli.ExitError{Code: 2, Err: errors.New("start: -f PROTOCOL and -d DIR are required")}
			}
			abs, err := sf.check(cmd, dir)
			if err != nil {
				return err
			}
			if err := sf.create(cmd, file, abs); err != nil {
				return err
			}
			return sf.launch(cmd, result{Schema: 1, Action: "start", Dir: abs})
		},
	}
	sf.bind(cmd)
	cmd.Flags().StringVarP(&file, "file", "f", "", "protocol file")
	cmd.Flags().StringVarP(&dir, "dir", "d", "", "campaign directory (created)")
	return cmd
}

// startFlags are the flags controller start and controller sweep share:
// how the campaign is started, recorded for resume. Both start a campaign
// through create and launch, the one code path.
type startFlags struct {
	backend, fakeDir, cgroups, output, notifyCmd string
	notifyTimeoutS                               float64
	foreground, allowOver                        bool
	mo                                           metricsOptions
	eo                                           executorOptions
}

func (sf *startFlags) bind(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&sf.output, "output", "o", "table", "output: table or json (one document when the command returns)")
	cmd.Flags().BoolVar(&sf.allowOver, "allow-over-budget", false, "start even when the estimate or the worst case passes the budget cap")
	cmd.Flags().StringVar(&sf.notifyCmd, "notify", "", "a shell command run (/bin/sh -c) when the campaign needs a person: stopped for review, budget exhausted, complete, its controller found dead at resume; the event as JSON on stdin (kept by resume)")
	cmd.Flags().Float64Var(&sf.notifyTimeoutS, "notify-timeout-s", 30, "with --notify: end the command after this many seconds (at most 86400, a day)")
	sf.mo.flags(cmd)
	sf.eo.flags(cmd)
	cmd.Flags().StringVar(&sf.backend, "gpu-backend", "auto", "GPU backend: auto or nvml (NVML; refused, exit 5, where it does not initialize), or fake (file-backed GPUs, for tests and demos)")
	cmd.RegisterFlagCompletionFunc("gpu-backend", cobra.FixedCompletions([]string{"auto", "nvml", "fake"}, cobra.ShellCompDirectiveNoFileComp))
	cmd.Flags().BoolVar(&sf.foreground, "foreground", false, "run in this process instead of detaching")
	cmd.Flags().StringVar(&sf.fakeDir, "fake-gpus", "", "with the fake backend: the fake host's GPU directory (default DIR/fake-gpus, created)")
	cmd.Flags().StringVar(&sf.cgroups, "cgroups", "auto", "auto: a cgroup per process where cgroup v2 is writable; off: process groups and sessions only")
	cmd.RegisterFlagCompletionFunc("cgroups", cobra.FixedCompletions([]string{"auto", "off"}, cobra.ShellCompDirectiveNoFileComp))
}

// check checks the flags before anything is made, and returns the
// campaign directory made absolute.
func (sf *startFlags) check(cmd *cobra.Command, dir string) (string, error) {
	abs, err := checkRunFlags(sf.output, sf.mo, dir)
	if err != nil {
		return "", err
	}
	if sf.cgroups != "auto" && sf.cgroups != "off" {
		return "", &cli.ExitError{Code: 2, Err: fmt.Errorf("--cgroups is auto or off, not %q", sf.cgroups)}
	}
	if sf.notifyCmd == "" && cmd.Flags().Changed("notify-timeout-s") {
		return "", &cli.ExitError{Code: 2, Err: errors.New("--notify-timeout-s goes with --notify")}
	}
	if _, err := notify.CheckTimeout(sf.notifyTimeoutS); sf.notifyCmd != "" && err != nil {
		return "", &cli.ExitError{Code: 2, Err: fmt.Errorf("--notify-timeout-s: %w", err)}
	}
	return abs, nil
}

// create makes the campaign of the protocol file in abs: the backend
// resolved, the directory created and recorded (campaigndir.Create).
// Nothing of the campaign is left when it fails.
func (sf *startFlags) create(cmd *cobra.Command, file, abs string) error {
	so := campaigndir.StartOptions{FakeGPUDir: sf.fakeDir, Cgroups: sf.cgroups, AllowOverBudget: sf.allowOver, Metrics: sf.mo.settings()}
	if sf.notifyCmd != "" {
		so.Notify = &campaigndir.NotifySettings{Command: sf.notifyCmd, TimeoutS: sf.notifyTimeoutS}
	}
	if err := sf.eo.startOptions(&so, sf.backend, cmd.Flags().Changed, file); err != nil {
		return &cli.ExitError{Code: 2, Err: err}
	}
	resolved, note, err := campaigndir.ResolveBackend(sf.backend, so.Executor == "slurm")
	var noNVML *campaigndir.NoNVMLError
	if errors.As(err, &noNVML) {
		return &cli.ExitError{Code: exitNoGPUs, Err: err}
	} else if err != nil {
		return &cli.ExitError{Code: 2, Err: err}
	}
	so.Backend = resolved
	fmt.Fprintln(cmd.ErrOrStderr(), "GPU backend:", note)
	plan, err := campaigndir.Create(file, abs, so, time.Now())
	if err != nil {
		if isNotOwned(notOwnedExit(err)) {
			return notOwnedExit(err)
		}
		var ps *protocols.Problems
		if errors.As(err, &ps) {
			return &cli.ExitError{Code: 2, Err: fmt.Errorf("%s: %d problem(s):\n%w", file, len(ps.List)+ps.Omitted, err)}
		}
		var ob *campaigndir.OverBudgetError
		if errors.As(err, &ob) {
			return &cli.ExitError{Code: exitOverBudget, Err: ob}
		}
		return &cli.ExitError{Code: 1, Err: err}
	}
	if over := campaigndir.OverBudget(plan); over != nil {
		// started anyway: where it will stop, as plan says
		fmt.Fprintf(cmd.ErrOrStderr(), "%s\n  %v\n", campaigndir.AllowedOverBudget(plan), over)
	}
	if sf.output != "json" {
		fmt.Fprintln(cmd.OutOrStdout(), "campaign created in", abs)
	}
	if so.Metrics != nil {
		sf.mo.Textfile = so.Metrics.Textfile // absolute: the daemon runs in /
	}
	return nil
}

// launch runs the created campaign's controller, detached or in the
// foreground; res is the -o json document's start.
func (sf *startFlags) launch(cmd *cobra.Command, res result) error {
	return notOwnedExit(launchController(cmd, res, sf.foreground, "", sf.output, sf.mo))
}

// launchController runs the controller in this process (foreground) or
// detached, and reports how in the output format; res is the -o json
// document, its pid and whether the controller runs filled in here.
func launchController(cmd *cobra.Command, res result, foreground bool, backend, output string, mo metricsOptions) error {
	res, err := runController(cmd, res, foreground, backend, output, mo)
	if err == nil && output == "json" {
		return writeJSON(cmd.OutOrStdout(), res)
	}
	return err
}

// runController runs the controller as launchController does, printing
// only the text output; it returns res with the controller's pid and
// whether it runs, for the caller's -o json document.
func runController(cmd *cobra.Command, res result, foreground bool, backend, output string, mo metricsOptions) (result, error) {
	if output != "json" {
		for _, w := range res.AwaitingAmendment {
			fmt.Fprintf(cmd.OutOrStdout(), "waiting for an amendment, no further attempt without one: %s (attempt %d failed: %s)\n", w.Run, w.Attempt, w.Reason)
		}
		switch {
		case len(res.HeldSharedCause) > 0 && res.retryShared:
			fmt.Fprintf(cmd.OutOrStdout(), "runs that share a failed run's cause are tried (--retry-shared-cause): %s\n", outcome.HeldText(res.HeldSharedCause))
		case len(res.HeldSharedCause) > 0:
			fmt.Fprintf(cmd.OutOrStdout(), "held, not launched without an amendment that covers the failed run or --retry-shared-cause: %s\n", outcome.HeldText(res.HeldSharedCause))
		}
	}
	if foreground {
		if err := runDaemon(daemonOptions{dir: res.Dir, foreground: true, readyFD: -1, backend: backend, metrics: mo, retryShared: res.retryShared}); err != nil {
			return res, err
		}
		res.PID, res.Foreground = os.Getpid(), true
		return res, nil
	}
	pid, err := detach(res.Dir, mo, res.retryShared)
	if err != nil {
		return res, err
	}
	res.PID, res.Running = pid, true
	if output != "json" {
		fmt.Fprintf(cmd.OutOrStdout(), "controller running, pid %d; follow it with: ctlq status -d %s\n", pid, res.Dir)
	}
	return res, nil
}

// resumeOptions are the flags of controller resume, which the root's
// --resume takes too: one spelling of a resume, whichever way it is asked.
type resumeOptions struct {
	dir, backend, output string
	foreground           bool
	retryShared          bool
	mo                   metricsOptions
}

// flags registers the resume flags on fs; with is what the root's help
// says they go with ("" for the resume command itself).
func (ro *resumeOptions) flags(cmd *cobra.Command, with string) {
	ro.mo.flags(cmd)
	cmd.Flags().StringVarP(&ro.output, "output", "o", "table", with+"output: table or json (one document when the command returns)")
	cmd.Flags().StringVarP(&ro.dir, "dir", "d", "", with+"campaign directory")
	cmd.Flags().StringVar(&ro.backend, "gpu-backend", "", with+"GPU backend; must match the campaign's (fake: resume a campaign whose fake GPUs auto chose)")
	cmd.Flags().BoolVar(&ro.foreground, "foreground", false, with+"run in this process instead of detaching")
	cmd.Flags().BoolVar(&ro.retryShared, "retry-shared-cause", false, with+"also launch the runs not tried yet that share a failed run's server and cause (server-exit, oom, server-not-ready, config-mismatch), which are held until an amendment covers the failed run")
}

func (ro *resumeOptions) run(cmd *cobra.Command) error {
	return resume(cmd, *ro)
}

// resumeLong is the help of controller resume (and of the root's
// --resume, the same command).
const resumeLong = `resume takes the campaign's lock (refused while another controller holds it),
re-hashes the protocol and every provenance file (a change is refused, naming
the file and both hashes), ends what a dead controller left behind (only
processes whose pid, start time and boot id match the records, whose
recorded cgroup is the campaign's, and whose environment names this campaign
or, emptied or rewritten as setproctitle does, names none while they are
still in the process group they were started in), marks those attempts
interrupted, charges their GPU time, removes the empty cgroups it left, and
continues with the first run that is not complete. It detaches like start
unless --foreground.
controller --resume -d DIR is controller resume -d DIR: the same flags.

A stop for review whose cause is the server (a run whose last attempt
failed server-exit, oom, server-not-ready or config-mismatch, with no
amendment that names it registered since) holds every run not tried yet
(but those of its own unit, which follow its next attempt) that starts
the same server (the same server spec in the plan: command,
environment, health check, expectations; only the slot differs): resume
names them and launches none of them, nor what needs them, until an
amendment covers the failed run, or --retry-shared-cause asks for them.
When nothing else can run the campaign stops awaiting-amendment, naming
the runs and the cause.

Before it claims anything, resume verifies every page of DIR/state.db. A
damaged or empty database is refused: the file is left as it is, a copy is
kept beside it as state.db.damaged-<UTC time> (one per distinct content),
and resume exits 6, naming both.

Exit status: 0 running (or nothing to resume); 1 refused or failed; 2 usage
or not a campaign; 5 the campaign's NVML GPUs cannot be opened here; 6 the
state database is damaged or empty; 7 the campaign directory, its settings,
plan, database or provenance index (or an amendment recorded under it) is
another user's or writable by its group or others: what resume runs is read
from them, so it refuses, naming the file and how to fix it.`

func newResumeCmd() *cobra.Command {
	var ro resumeOptions
	cmd := &cobra.Command{
		Use:   "resume -d DIR",
		Short: "Continue a campaign after a crash, a reboot, a stop or a stop for review",
		Long:  resumeLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ro.run(cmd)
		},
	}
	ro.flags(cmd, "")
	return cmd
}

// checkRunFlags checks the flags start and resume share, -o and the
// metrics options, and returns the campaign directory made absolute.
func checkRunFlags(output string, mo metricsOptions, dir string) (string, error) {
	if err := checkTableOrJSON(output); err != nil {
		return "", err
	}
	if err := mo.check(); err != nil {
		return "", err
	}
	return filepath.Abs(dir)
}

func resume(cmd *cobra.Command, ro resumeOptions) error {
	dir, backend, foreground, output, mo := ro.dir, ro.backend, ro.foreground, ro.output, ro.mo
	if dir == "" {
		return &cli.ExitError{Code: 2, Err: errors.New("resume: -d DIR is required")}
	}
	abs, err := checkRunFlags(output, mo, dir)
	if err != nil {
		return err
	}
	if err := notOwnedExit(campaigndir.CheckOwned(abs, os.Geteuid())); isNotOwned(err) {
		return err // what it would run is another user's to choose
	}
	set, err := campaigndir.ReadSettings(abs)
	if err != nil {
		return &cli.ExitError{Code: 2, Err: err}
	}
	if mo.Addr == "" && mo.Textfile == "" && set.Metrics != nil {
		// the outputs controller start was given, unless this resume names its own
		mo.Addr, mo.Textfile = set.Metrics.Addr, set.Metrics.Textfile
	}
	if !lockfile.Held(dirlayout.Lock(abs)) {
		// every page verified before anything is claimed or recorded; the
		// daemon's own open verifies again under the campaign's lock
		if err := campaigndir.CheckDatabase(abs); err != nil {
			return damagedExit(err)
		}
		if done, msg := campaigndir.Finished(abs); done {
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), result{Schema: 1, Action: "resume", Dir: abs, Note: msg})
			}
			fmt.Fprintln(cmd.OutOrStdout(), msg)
			return nil
		}
	}
	if err := campaigndir.CheckResumeBackend(set, backend); err != nil {
		var noNVML *campaigndir.NoNVMLError
		if errors.As(err, &noNVML) {
			return &cli.ExitError{Code: exitNoGPUs, Err: err}
		}
		return &cli.ExitError{Code: 1, Err: err}
	}
	if !foreground && lockfile.Held(dirlayout.Lock(abs)) {
		return &cli.ExitError{Code: 1, Err: fmt.Errorf("refused: controller pid %d already runs campaign %s", lockfile.Owner(dirlayout.Lock(abs)), abs)}
	}
	res := result{Schema: 1, Action: "resume", Dir: abs, retryShared: ro.retryShared}
	if !lockfile.Held(dirlayout.Lock(abs)) {
		if res.AwaitingAmendment, res.HeldSharedCause, err = awaitingAmendment(abs); err != nil {
			return &cli.ExitError{Code: 1, Err: err}
		}
	}
	return notOwnedExit(damagedExit(launchController(cmd, res, foreground, backend, output, mo)))
}

// exitNotOwned is the exit status of every command that would run what a
// campaign directory records (resume, start --foreground on it,
// readjudicate) when the directory, or a file in it that decides what
// runs, is another user's or writable by others (campaigndir.CheckOwned).
const exitNotOwned = 7

// notOwnedExit gives a *campaigndir.NotOwnedError its own exit status.
func notOwnedExit(err error) error {
	var no *campaigndir.NotOwnedError
	if errors.As(err, &no) {
		return &cli.ExitError{Code: exitNotOwned, Err: err}
	}
	return err
}

// isNotOwned says whether err is notOwnedExit's.
func isNotOwned(err error) bool {
	var ee *cli.ExitError
	return errors.As(err, &ee) && ee.Code == exitNotOwned
}

// awaitingAmendment reads, before a resume, the runs that wait for an
// amendment (outcome.AwaitingAmendment) and those held for a cause they
// share with a failed run (outcome.SharedCause).
func awaitingAmendment(dir string) ([]outcome.Awaiting, []outcome.Held, error) {
	plan, err := dirlayout.ReadPlan(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("resume: %w", err)
	}
	s, err := dirlayout.OpenStoreReadOnly(dir, 5*time.Second)
	if err != nil {
		return nil, nil, fmt.Errorf("resume: read the campaign's runs: %w", err)
	}
	defer s.Close()
	aw, err := outcome.AwaitingAmendment(s)
	if err != nil {
		return nil, nil, err
	}
	held, err := outcome.SharedCause(plan, s)
	return aw, held, err
}

// exitDamaged is resume's exit status when the campaign's state database
// is damaged or empty: it was refused unchanged and a copy kept.
const exitDamaged = 6

// damagedExit gives a *campaigndir.DamagedError its own exit status.
func damagedExit(err error) error {
	var de *campaigndir.DamagedError
	if errors.As(err, &de) {
		return &cli.ExitError{Code: exitDamaged, Err: err}
	}
	return err
}

func newDaemonCmd() *cobra.Command {
	var dir string
	var retryShared bool
	var readyFD int
	var mo metricsOptions
	cmd := &cobra.Command{
		Use:    "daemon -d DIR",
		Short:  "The detached controller (started by start and resume)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDaemon(daemonOptions{dir: dir, readyFD: readyFD, metrics: mo, retryShared: retryShared})
		},
	}
	mo.flags(cmd)
	cmd.Flags().BoolVar(&retryShared, "retry-shared-cause", false, "launch the runs held for a cause they share with a failed run")
	cmd.Flags().StringVarP(&dir, "dir", "d", "", "campaign directory")
	cmd.Flags().IntVar(&readyFD, "ready-fd", -1, "file descriptor to report readiness on")
	return cmd
}

// detach re-runs this binary as the daemon in a new session, with input
// from /dev/null and output to DIR/controller.log, and returns its pid once
// the daemon reports that it runs (or why it could not).
func detach(dir string, mo metricsOptions, retryShared bool) (int, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer r.Close()
	logf, err := os.OpenFile(dirlayout.Log(dir), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		w.Close()
		return 0, err
	}
	defer logf.Close()
	args := []string{"daemon", "-d", dir, "--ready-fd", "3"}
	if mo.Addr != "" {
		args = append(args, "--metrics", mo.Addr)
	}
	if mo.Textfile != "" {
		args = append(args, "--metrics-textfile", mo.Textfile)
	}
	if retryShared {
		args = append(args, "--retry-shared-cause")
	}
	d := exec.Command(self, args...)
	d.Stdin = nil // /dev/null
	d.Stdout, d.Stderr = logf, logf
	d.ExtraFiles = []*os.File{w}
	d.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	d.Dir = "/"
	if err := d.Start(); err != nil {
		w.Close()
		return 0, fmt.Errorf("start daemon: %w", err)
	}
	w.Close()
	pid := d.Process.Pid
	// The daemon outlives this command by design: it is released, not waited for.
	d.Process.Release()

	// The daemon reports once and closes its end, or dies.
	reported, err := launch.AwaitReady(r, 2*time.Minute)
	var nr *launch.NotReadyError
	switch {
	case errors.As(err, &nr):
		return 0, &cli.ExitError{Code: 1, Err: errors.New(nr.Reason)}
	case errors.Is(err, launch.ErrReadyTimeout):
		return 0, &cli.ExitError{Code: 1, Err: fmt.Errorf("controller pid %d did not report within 2 minutes; see %s", pid, dirlayout.Log(dir))}
	case err != nil:
		return 0, &cli.ExitError{Code: 1, Err: fmt.Errorf("controller pid %d exited before it ran; see %s", pid, dirlayout.Log(dir))}
	case reported == 0:
		return pid, nil
	}
	return reported, nil
}

// exitNoGPUs is start's and resume's exit status when the GPUs cannot be
// read: NVML does not initialize for --gpu-backend auto or nvml, or for
// an NVML campaign (campaigndir.NoNVMLError). Fake GPUs are never taken
// instead; --gpu-backend fake asks for them.
const exitNoGPUs = 5

// exitDied is controller stop's exit status when the controller is not
// alive while the campaign is unfinished: it died (before or during the
// stop) and may have left processes; resume reclaims them.
const exitDied = 4

// afterStop reports what the records say once no controller holds the
// campaign (campaigndir.AfterStop): a controller that died and left the
// campaign unfinished exits 4, never a success. pid is the controller that
// was asked to stop (0: none was running).
func afterStop(cmd *cobra.Command, dir string, pid int, human bool) error {
	note, err := campaigndir.AfterStop(dir, pid)
	var died *campaigndir.DiedError
	switch {
	case errors.As(err, &died):
		return &cli.ExitError{Code: exitDied, Err: err}
	case err != nil:
		return &cli.ExitError{Code: 1, Err: err}
	case human:
		fmt.Fprintln(cmd.OutOrStdout(), note)
		return nil
	}
	return writeJSON(cmd.OutOrStdout(), result{Schema: 1, Action: "stop", Dir: dir, PID: pid, Note: note})
}

func newStopCmd() *cobra.Command {
	var dir, output string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "stop -d DIR",
		Short: "Stop the controller gracefully, leaving the campaign resumable",
		Long: `stop asks the controller to end its in-flight runs (servers through their
API parent, then cleanup), record them interrupted and exit. It returns when
the controller has exited. The campaign is left stopped (stop reason
operator-stop) and resumable. A controller that holds the campaign but
does not answer on its socket yet (a resume still ending what the
controller before it left) is asked again every 100 ms until it answers
or exits, within --timeout; it is sent SIGTERM at once (the kernel's holder of
DIR/controller.lock, which must be the pid the lock file names), which a
starting controller takes as a stop: it ends its start-up and stops
before it launches anything.

Exit status: 0 when the controller stopped and nothing of the campaign is
left live (or none ran and the campaign is stopped or complete); 1 when the
controller could not be asked or did not exit within --timeout; 2 when DIR
is not a campaign directory (no state.db) or the usage is wrong; 4 when the
controller is not alive while the campaign is unfinished or attempts are
left live (it died, before or during the stop): resume reclaims them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			abs, err := campaignDirArg("stop", dir, output)
			if err != nil {
				return err
			}
			human := output != "json"
			out := cmd.OutOrStdout()
			lock := dirlayout.Lock(abs)
			if !lockfile.Held(lock) {
				return afterStop(cmd, abs, 0, human)
			}
			pid := lockfile.Owner(lock)
			asked, err := askStop(abs, timeout, func() {
				// a controller starting up (a resume ending what the one
				// before it left) serves no socket yet: it takes SIGTERM
				// as a stop, before it launches anything
				holder := lockfile.Holder(lock)
				if holder > 0 {
					err := syscall.Kill(holder, syscall.SIGTERM)
					if human && err == nil {
						fmt.Fprintf(out, "controller pid %d holds the campaign and is starting: sent it SIGTERM; waiting for it\n", holder)
					}
				}
			})
			if err != nil {
				return &cli.ExitError{Code: 1, Err: fmt.Errorf("ask controller pid %d to stop: %w", pid, err)}
			}
			if !asked {
				// it exited while starting: what its records say
				return afterStop(cmd, abs, pid, human)
			}
			if human {
				fmt.Fprintf(out, "stopping controller pid %d", pid)
			}
			var dot func()
			if human {
				dot = func() { fmt.Fprint(out, ".") }
			}
			exited := lockfile.Wait(lock, timeout, 5*time.Second, dot)
			if human {
				fmt.Fprintln(out)
			}
			if !exited {
				return &cli.ExitError{Code: 1, Err: fmt.Errorf("controller pid %d still runs after %s; see %s", pid, timeout, dirlayout.Log(abs))}
			}
			return afterStop(cmd, abs, pid, human)
		},
	}
	cmd.Flags().StringVarP(&dir, "dir", "d", "", "campaign directory")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output: table or json (one document when the command returns)")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Minute, "how long to wait for the controller to exit")
	return cmd
}

// askStop asks the controller holding the campaign in dir to stop. A
// controller that holds the lock but serves no socket yet is starting (a
// resume that reconciles what its predecessor left): starting is called
// once, and the request is sent again, every 100 ms, until its socket
// answers or the lock is let go, within bound. asked is false when the
// lock was let go before any controller answered. A stop asked twice is
// one stop.
func askStop(dir string, bound time.Duration, starting func()) (asked bool, err error) {
	lock := dirlayout.Lock(dir)
	deadline := time.Now().Add(bound)
	waiting := false
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = api.NewClient(dir, 10*time.Second).Stop(ctx)
		cancel()
		switch {
		case err == nil:
			return true, nil
		case !errors.Is(err, api.ErrNoController):
			return false, err
		case !lockfile.Held(lock):
			return false, nil
		case time.Now().After(deadline):
			return false, fmt.Errorf("its socket did not answer within %s: %w", bound, err)
		}
		if !waiting {
			waiting = true
			starting()
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// metricsOptions are the opt-in Prometheus outputs of a controller, as
// its flags give them.
type metricsOptions struct{ metrics.Outputs }

func (mo *metricsOptions) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&mo.Addr, "metrics", "", "serve Prometheus metrics on this loopback address (127.0.0.1:PORT), at any path (resume: the one start was given, unless named)")
	cmd.Flags().StringVar(&mo.Textfile, "metrics-textfile", "", "write Prometheus metrics to this file every 10 s, for node_exporter's textfile collector (name it *.prom; resume: the one start was given, unless named)")
}

// settings are the outputs as the campaign records them, the textfile's
// path absolute (the daemon runs in /); nil when there are none.
func (mo metricsOptions) settings() *campaigndir.MetricsSettings {
	if mo.Addr == "" && mo.Textfile == "" {
		return nil
	}
	ms := &campaigndir.MetricsSettings{Addr: mo.Addr, Textfile: mo.Textfile}
	if ms.Textfile != "" {
		if abs, err := filepath.Abs(ms.Textfile); err == nil {
			ms.Textfile = abs
		}
	}
	return ms
}

func (mo metricsOptions) check() error {
	if mo.Addr != "" {
		if err := metrics.CheckLoopback(mo.Addr); err != nil {
			return &cli.ExitError{Code: 2, Err: err}
		}
	}
	return nil
}
