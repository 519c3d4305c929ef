package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"warden/pkg/amend"
	"warden/pkg/api"
	"warden/pkg/atomicfile"
	"warden/pkg/campaigndir"
	"warden/pkg/failpoint"
	"warden/pkg/launch"
	"warden/pkg/lockfile"
	"warden/pkg/provenance"
	"warden/pkg/state"
	"warden/protocols"
)

// Amendments (seed 002 ran under seven): controller amend records a
// reviewed change of the protocol, controller readjudicate recomputes
// recorded verdicts under one, controller freeze ends scheduling for good.
// amend and freeze work on a running campaign through its controller (it
// takes an amendment at its next scheduling decision) or directly on a
// stopped one; readjudicate on a stopped one. The amendment is recorded in
// the state database, its commit point, and under provenance/amendments/ID.

// campaignOf is the campaign an amendment applies to; controller.json
// follows an installed amendment.
func campaignOf(dir string, set campaigndir.Settings, store *state.Store) amend.Campaign {
	return amend.Campaign{Dir: dir, Workdir: set.Workdir, Store: store, SaveSettings: func(path, sha string) error {
		set.ProtocolPath, set.ProtocolSHA256 = path, sha
		return atomicfile.WriteJSON(filepath.Join(dir, campaigndir.SettingsFile), set, 0o644)
	}}
}

func noController(dir string) error {
	if lockfile.Held(filepath.Join(dir, api.LockFile)) {
		return &exitError{1, fmt.Errorf("controller pid %d runs campaign %s: stop it first (controller stop -d %s), then amend and resume",
			lockfile.Owner(filepath.Join(dir, api.LockFile)), dir, dir)}
	}
	return nil
}

func newAmendCmd() *cobra.Command {
	var dir, file, id, reason, output string
	var yes, readjudicate bool
	cmd := &cobra.Command{
		Use:   "amend -d DIR -f NEW_PROTOCOL --id ID --reason TEXT",
		Short: "Register a reviewed amendment of the campaign's protocol",
		Long: `amend validates the new protocol and shows what it changes as a plan diff
(runs added, removed and changed field by field; classes, gates, stop rules,
budget; the totals). It refuses to change a run that already has a result
unless --readjudicate says the amendment re-adjudicates it (controller
readjudicate). With --yes it records the amendment: id, time, reason, the
operator's uid, the old and new protocol hashes and the diff, in the state
database and under provenance/amendments/ID, with the new protocol's files
hashed and copied; resume then accepts the amended inputs. Without --yes it
only shows the diff. A running controller takes a recorded amendment at its
next scheduling decision; the attempts in flight keep the rules they
started under (each attempt records the protocol hash and amendments it ran
under).

Exit status: 0 shown or recorded; 1 refused; 2 usage or an invalid protocol.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" || file == "" || id == "" || reason == "" {
				return &exitError{2, errors.New("amend: -d DIR, -f NEW_PROTOCOL, --id and --reason are required")}
			}
			abs, err := filepath.Abs(dir)
			if err != nil {
				return err
			}
			newPath, err := filepath.Abs(file)
			if err != nil {
				return err
			}
			req := amend.Request{Protocol: newPath, ID: id, Reason: reason, Readjudicate: readjudicate, Yes: yes, UID: os.Getuid()}
			var res amend.Result
			if lockfile.Held(filepath.Join(abs, api.LockFile)) {
				// the running controller takes it at its next decision
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				err := api.NewClient(abs, 5*time.Minute).Amend(ctx, api.AmendRequest(req), &res)
				cancel()
				if err != nil {
					return &exitError{1, err}
				}
			} else {
				set, err := campaigndir.ReadSettings(abs)
				if err != nil {
					return &exitError{2, err}
				}
				store, err := state.Open(filepath.Join(abs, api.StateFile), state.Options{Timeout: 2 * time.Second})
				if err != nil {
					return &exitError{1, err}
				}
				defer store.Close()
				if res, _, err = amend.Amend(campaignOf(abs, set, store), req); err != nil {
					var ps *protocols.Problems
					if errors.As(err, &ps) {
						return &exitError{2, err}
					}
					return &exitError{1, err}
				}
			}
			return writeAmendOutput(cmd.OutOrStdout(), output, res)
		},
	}
	cmd.Flags().StringVarP(&dir, "dir", "d", "", "campaign directory")
	cmd.Flags().StringVarP(&file, "file", "f", "", "the amended protocol")
	cmd.Flags().StringVar(&id, "id", "", "the amendment's id, e.g. A-P3-5")
	cmd.Flags().StringVar(&reason, "reason", "", "why, as reviewed")
	cmd.Flags().BoolVar(&yes, "yes", false, "record the amendment (without it, only the diff is shown)")
	cmd.Flags().BoolVar(&readjudicate, "readjudicate", false, "the amendment re-adjudicates runs that already have a result")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output: text or json")
	return cmd
}

func writeAmendOutput(w io.Writer, output string, res amend.Result) error {
	if output == "json" {
		return writeJSON(w, res)
	}
	d, id, status := res.Diff, res.Amendment, res.Status
	fmt.Fprintf(w, "amendment %s: protocol %s -> %s\n", id, short(d.Before), short(d.After))
	for _, c := range d.Changed {
		for _, f := range c.Fields {
			fmt.Fprintf(w, "  run %-40s %-20s %s -> %s\n", c.Run, f.Field, f.Old, f.New)
		}
	}
	for _, f := range append(append([]amend.FieldDiff{}, d.Fields...), d.Totals...) {
		fmt.Fprintf(w, "  %-46s %s -> %s\n", f.Field, clip(string(f.Old)), clip(string(f.New)))
	}
	if len(d.Changed)+len(d.Fields)+len(d.Totals) == 0 {
		fmt.Fprintln(w, "  no change to the plan")
	}
	fmt.Fprintln(w, status)
	return nil
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

func clip(s string) string {
	if len(s) > 70 {
		return s[:67] + "..."
	}
	return s
}

func newReadjudicateCmd() *cobra.Command {
	var dir, amendment, output string
	cmd := &cobra.Command{
		Use:   "readjudicate -d DIR --amendment ID [RUN...]",
		Short: "Recompute recorded verdicts under an amendment, without touching a GPU",
		Long: `readjudicate recomputes the drain verdicts of recorded attempts from their
recorded figures (drain_s) under the amended rules (the class's allowance and
watchdog of the current plan), runs the validators again over the recorded
artifacts of attempts a validator failed (their output under
provenance/amendments/ID/readjudicated), and records the new verdict beside the old,
citing the amendment: a 288.6 s drain against a new 600 s allowance makes
the run usable. It starts no server and touches no GPU. A run whose new
verdict makes it usable counts as such for the stop thresholds and ctlq; the
old verdict stays visible (ctlq show). With RUN arguments only those runs.

Exit status: 0 done; 1 refused; 2 usage.`,
		RunE: func(cmd *cobra.Command, runs []string) error {
			if dir == "" || amendment == "" {
				return &exitError{2, errors.New("readjudicate: -d DIR and --amendment ID are required")}
			}
			abs, err := filepath.Abs(dir)
			if err != nil {
				return err
			}
			if err := noController(abs); err != nil {
				return err
			}
			plan, err := api.ReadPlan(abs)
			if err != nil {
				return &exitError{1, err}
			}
			store, err := state.Open(filepath.Join(abs, api.StateFile), state.Options{Timeout: 2 * time.Second})
			if err != nil {
				return &exitError{1, err}
			}
			defer store.Close()
			as, err := store.Amendments()
			if err != nil {
				return &exitError{1, err}
			}
			found := false
			for _, a := range as {
				found = found || (a.ID == amendment && (a.Kind == "amend" || a.Kind == ""))
			}
			if !found {
				return &exitError{1, fmt.Errorf("readjudicate: no amendment %s of the protocol is recorded", amendment)}
			}
			set, err := campaigndir.ReadSettings(abs)
			if err != nil {
				return &exitError{2, err}
			}
			reaper := launch.NewReaper()
			if err := reaper.Start(context.Background()); err != nil {
				return &exitError{1, err}
			}
			defer reaper.Close()
			outDir := filepath.Join(abs, provenance.SubDir, "amendments", amendment, "readjudicated")
			changes, err := amend.Readjudicate(campaignOf(abs, set, store), plan, amendment, runs, &launch.Launcher{Reaper: reaper}, outDir)
			if err != nil {
				return &exitError{1, err}
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"schema": amend.Schema, "amendment": amendment, "readjudicated": changes})
			}
			for _, c := range changes {
				fmt.Fprintf(cmd.OutOrStdout(), "%s attempt %d: %s %s -> %s (%s)\n", c.Run, c.Attempt, c.Old, c.OldReason, c.New, c.Detail)
			}
			if len(changes) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no recorded verdict changes under amendment", amendment)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&dir, "dir", "d", "", "campaign directory")
	cmd.Flags().StringVar(&amendment, "amendment", "", "the amendment whose rules apply")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output: text or json")
	return cmd
}

// reportFreeze prints the outcome of a freeze a controller carried out.
func reportFreeze(w io.Writer, dir, id, output string) error {
	st, err := state.OpenReadOnly(filepath.Join(dir, api.StateFile), 5*time.Second)
	if err != nil {
		return &exitError{1, err}
	}
	defer st.Close()
	cp, err := st.Campaign()
	if err != nil {
		return &exitError{1, err}
	}
	if cp.State != state.CampaignFrozen {
		return &exitError{1, fmt.Errorf("the controller exited without freezing the campaign (it is %s); see %s", cp.State, filepath.Join(dir, api.LogFile))}
	}
	runs, err := st.Runs()
	if err != nil {
		return &exitError{1, err}
	}
	var notRun []string
	for _, r := range runs {
		if r.NotRun == id {
			notRun = append(notRun, r.ID)
		}
	}
	if output == "json" {
		return writeJSON(w, map[string]any{"schema": amend.Schema, "amendment": id, "state": "frozen", "not_run": notRun})
	}
	fmt.Fprintf(w, "campaign frozen by %s; %d runs not run: %v\n", id, len(notRun), notRun)
	return nil
}

func newFreezeCmd() *cobra.Command {
	var dir, id, reason, output string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "freeze -d DIR --id ID --reason TEXT",
		Short: "Freeze the matrix: no run is scheduled again; the missing ones are not-run",
		Long: `freeze stops scheduling for good (seed 002, A-P3-7): every run without a
result becomes not-run with the amendment as its reason, never deleted and
never imputed; the campaign ends frozen. A running controller first ends
its in-flight attempts through the graceful path (they end interrupted and
are kept), then freezes and exits. ctlq status and ctlq runs show the
not-run runs.

Exit status: 0 frozen; 1 refused; 2 usage.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" || id == "" || reason == "" {
				return &exitError{2, errors.New("freeze: -d DIR, --id and --reason are required")}
			}
			abs, err := filepath.Abs(dir)
			if err != nil {
				return err
			}
			lock := filepath.Join(abs, api.LockFile)
			if lockfile.Held(lock) {
				// the running controller ends its runs, then freezes
				pid := lockfile.Owner(lock)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := api.NewClient(abs, 10*time.Second).Freeze(ctx, api.FreezeRequest{ID: id, Reason: reason, UID: os.Getuid()})
				cancel()
				if err != nil {
					return &exitError{1, fmt.Errorf("ask controller pid %d to freeze: %w", pid, err)}
				}
				for deadline := time.Now().Add(timeout); lockfile.Held(lock); time.Sleep(100 * time.Millisecond) {
					if time.Now().After(deadline) {
						return &exitError{1, fmt.Errorf("controller pid %d still runs after %s; see %s", pid, timeout, filepath.Join(abs, api.LogFile))}
					}
				}
				return reportFreeze(cmd.OutOrStdout(), abs, id, output)
			}
			store, err := state.Open(filepath.Join(abs, api.StateFile), state.Options{Timeout: 2 * time.Second})
			if err != nil {
				return &exitError{1, err}
			}
			defer store.Close()
			cp, err := store.Campaign()
			if err != nil {
				return &exitError{1, err}
			}
			notRun, err := store.Freeze(state.Amendment{ID: id, Date: time.Now().UTC().Format("2006-01-02"), Title: reason, Text: reason,
				OperatorUID: os.Getuid(), OldSHA256: cp.ProtocolSHA256, ProtocolSHA256: cp.ProtocolSHA256})
			if err != nil {
				return &exitError{1, fmt.Errorf("freeze %s: %w", abs, err)}
			}
			failpoint.Hit("freeze-recorded")
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"schema": amend.Schema, "amendment": id, "state": "frozen", "not_run": notRun})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "campaign frozen by %s; %d runs not run: %v\n", id, len(notRun), notRun)
			return nil
		},
	}
	cmd.Flags().StringVarP(&dir, "dir", "d", "", "campaign directory")
	cmd.Flags().StringVar(&id, "id", "", "the freezing amendment's id, e.g. A-P3-7")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Minute, "with a running controller: how long to wait for it to end its runs and freeze")
	cmd.Flags().StringVar(&reason, "reason", "", "why, as reviewed")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output: text or json")
	return cmd
}
