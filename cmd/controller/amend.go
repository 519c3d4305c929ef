package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"warden/internal/cli"
	"warden/pkg/amend"
	"warden/pkg/api"
	"warden/pkg/campaigndir"
	"warden/pkg/dirlayout"
	"warden/pkg/lockfile"
	"warden/protocols"
)

// Amendments (seed 002 ran under seven): controller amend records a
// reviewed change of the protocol, controller readjudicate recomputes
// recorded verdicts under one, controller freeze ends scheduling for good.
// amend and freeze work on a running campaign through its controller (it
// takes an amendment at its next scheduling decision) or directly on a
// stopped one; readjudicate on a stopped one. The amendment is recorded in
// the state database, its commit point, and under provenance/amendments/ID.

// refusal is the exit error for err: 2 (usage) for a directory that is
// no campaign directory, 1 otherwise.
func refusal(err error) error {
	if err := notOwnedExit(err); isNotOwned(err) {
		return err
	}
	var se *campaigndir.SettingsError
	if errors.As(err, &se) {
		return &cli.ExitError{Code: 2, Err: err}
	}
	return &cli.ExitError{Code: 1, Err: err}
}

// noController refuses while a controller holds the campaign.
func noController(dir string) error {
	if lockfile.Held(dirlayout.Lock(dir)) {
		return &cli.ExitError{Code: 1, Err: fmt.Errorf("controller pid %d runs campaign %s: stop it first (controller stop -d %s), then amend and resume",
			lockfile.Owner(dirlayout.Lock(dir)), dir, dir)}

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
readjudicate), and to change a capacity search (capacity.<phase> in the
diff: its rates, follow-ups or SLO; its on_non_monotonic may change) once
any of its points has run: the points judged under the old SLO and those
after them under the new would make one found rate of both. With --yes it records the amendment: id, time, reason, the
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
				return &cli.ExitError{Code: 2, Err: errors.New("amend: -d DIR, -f NEW_PROTOCOL, --id and --reason are required")}
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
			if lockfile.Held(dirlayout.Lock(abs)) {
				// the running controller takes it at its next decision
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				err := api.NewClient(abs, 5*time.Minute).Amend(ctx, api.AmendRequest(req), &res)
				cancel()
				if err != nil {
					return &cli.ExitError{Code: 1, Err: err}
				}
			} else if res, err = campaigndir.Amend(abs, req); err != nil {
				var ps *protocols.Problems
				if errors.As(err, &ps) {
					return &cli.ExitError{Code: 2, Err: err}
				}
				return refusal(err)
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			res.WriteText(cmd.OutOrStdout())
			return nil
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

Exit status: 0 done; 1 refused; 2 usage; 7 the campaign directory (or its
settings, plan, database or provenance) is another user's or writable by
others: the validators it would run are read from it.`,
		RunE: func(cmd *cobra.Command, runs []string) error {
			if dir == "" || amendment == "" {
				return &cli.ExitError{Code: 2, Err: errors.New("readjudicate: -d DIR and --amendment ID are required")}
			}
			abs, err := filepath.Abs(dir)
			if err != nil {
				return err
			}
			if err := noController(abs); err != nil {
				return err
			}
			changes, err := campaigndir.Readjudicate(abs, amendment, runs)
			if err != nil {
				return refusal(err)
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"schema": amend.Schema, "amendment": amendment, "readjudicated": changes})
			}
			amend.WriteReadjudicated(cmd.OutOrStdout(), amendment, changes)
			return nil
		},
	}
	cmd.Flags().StringVarP(&dir, "dir", "d", "", "campaign directory")
	cmd.Flags().StringVar(&amendment, "amendment", "", "the amendment whose rules apply")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output: text or json")
	return cmd
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
				return &cli.ExitError{Code: 2, Err: errors.New("freeze: -d DIR, --id and --reason are required")}
			}
			abs, err := filepath.Abs(dir)
			if err != nil {
				return err
			}
			var fr amend.Frozen
			lock := dirlayout.Lock(abs)
			if lockfile.Held(lock) {
				// the running controller ends its runs, then freezes
				pid := lockfile.Owner(lock)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err = api.NewClient(abs, 10*time.Second).Freeze(ctx, api.FreezeRequest{ID: id, Reason: reason, UID: os.Getuid()})
				cancel()
				if err != nil {
					return &cli.ExitError{Code: 1, Err: fmt.Errorf("ask controller pid %d to freeze: %w", pid, err)}
				}
				if !lockfile.Wait(lock, timeout, 0, nil) {
					return &cli.ExitError{Code: 1, Err: fmt.Errorf("controller pid %d still runs after %s; see %s", pid, timeout, dirlayout.Log(abs))}
				}
				fr, err = amend.ReadFrozen(abs, id)
			} else {
				fr, err = amend.Freeze(abs, id, reason, os.Getuid(), time.Now())
			}
			if err != nil {
				return &cli.ExitError{Code: 1, Err: err}
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), fr)
			}
			fr.WriteText(cmd.OutOrStdout())
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
