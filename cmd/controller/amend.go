package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"warden/pkg/api"
	"warden/pkg/atomicfile"
	"warden/pkg/failpoint"
	"warden/pkg/gates"
	"warden/pkg/launch"
	"warden/pkg/lockfile"
	"warden/pkg/provenance"
	"warden/pkg/runner"
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

// AmendSchema is the version of the -o json documents of amend,
// readjudicate and freeze.
const AmendSchema = 1

// Diff is what an amendment changes in the plan.
type Diff struct {
	Added   []string    `json:"runs_added"`
	Removed []string    `json:"runs_removed"`
	Changed []RunChange `json:"runs_changed"`
	Fields  []FieldDiff `json:"protocol_changed"` // classes, gates, budget, stop rules
	Totals  []FieldDiff `json:"totals_changed"`
	Done    []string    `json:"changed_runs_with_a_result,omitempty"`
	Before  string      `json:"old_protocol_sha256"`
	After   string      `json:"new_protocol_sha256"`
}

// RunChange is a run whose fields an amendment changes.
type RunChange struct {
	Run    string      `json:"run"`
	Fields []FieldDiff `json:"fields"`
}

// FieldDiff is one changed field, old and new as JSON.
type FieldDiff struct {
	Field string          `json:"field"`
	Old   json.RawMessage `json:"old"`
	New   json.RawMessage `json:"new"`
}

// runFields are the fields of a run an amendment may change, by their
// JSON names; where the run was placed by the estimate is not one.
var runFields = []string{"kind", "class", "drain_allowance_s", "watchdog_s", "expected_s", "deadline_s", "admission_end",
	"result_file", "bound_s", "measured", "gpus", "needs", "condition", "server", "client", "env", "validators", "client_start"}

func jsonFields(v any) map[string]json.RawMessage {
	b, _ := json.Marshal(v)
	var m map[string]json.RawMessage
	json.Unmarshal(b, &m)
	return m
}

func diffFields(prefix string, old, new map[string]json.RawMessage, only []string) []FieldDiff {
	keys := only
	if keys == nil {
		seen := map[string]bool{}
		for k := range old {
			seen[k] = true
		}
		for k := range new {
			seen[k] = true
		}
		for k := range seen {
			keys = append(keys, k)
		}
		sort.Strings(keys)
	}
	var out []FieldDiff
	for _, k := range keys {
		o, n := old[k], new[k]
		var ov, nv any
		json.Unmarshal(o, &ov)
		json.Unmarshal(n, &nv)
		if !reflect.DeepEqual(ov, nv) {
			out = append(out, FieldDiff{Field: prefix + k, Old: o, New: n})
		}
	}
	return out
}

// planDiff compares two plans.
func planDiff(old, new *protocols.Plan) Diff {
	d := Diff{Added: []string{}, Removed: []string{}, Changed: []RunChange{}, Before: old.Protocol.SHA256, After: new.Protocol.SHA256}
	oldRuns := map[string]protocols.Run{}
	for _, r := range old.Runs {
		oldRuns[r.ID] = r
	}
	newIDs := map[string]bool{}
	for _, r := range new.Runs {
		newIDs[r.ID] = true
		o, ok := oldRuns[r.ID]
		if !ok {
			d.Added = append(d.Added, r.ID)
			continue
		}
		if f := diffFields("", jsonFields(o), jsonFields(r), runFields); len(f) > 0 {
			d.Changed = append(d.Changed, RunChange{Run: r.ID, Fields: f})
		}
	}
	for _, r := range old.Runs {
		if !newIDs[r.ID] {
			d.Removed = append(d.Removed, r.ID)
		}
	}
	for _, part := range []struct {
		name     string
		old, new any
	}{{"classes.", old.Classes, new.Classes}, {"gates.", old.Gates, new.Gates}, {"stop.", old.Stop, new.Stop},
		{"regimes.", old.Regimes, new.Regimes}, {"retries.", old.Retries, new.Retries}} {
		ob, _ := json.Marshal(part.old)
		nb, _ := json.Marshal(part.new)
		if string(ob) != string(nb) {
			d.Fields = append(d.Fields, FieldDiff{Field: part.name[:len(part.name)-1], Old: ob, New: nb})
		}
	}
	d.Totals = diffFields("totals.", jsonFields(old.Totals), jsonFields(new.Totals), []string{"budget_cap_gpu_hours", "gpu_hours_estimate", "bounds_gpu_hours", "expected_wall_s", "reserve"})
	return d
}

// noController refuses while a controller holds the campaign.
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
			req := api.AmendRequest{Protocol: newPath, ID: id, Reason: reason, Readjudicate: readjudicate, Yes: yes, UID: os.Getuid()}
			var res amendResult
			if lockfile.Held(filepath.Join(abs, api.LockFile)) {
				// the running controller takes it at its next decision
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				err := api.NewClient(abs, 5*time.Minute).Amend(ctx, req, &res)
				cancel()
				if err != nil {
					return &exitError{1, err}
				}
			} else {
				set, err := readSettings(abs)
				if err != nil {
					return &exitError{2, err}
				}
				store, err := state.Open(filepath.Join(abs, api.StateFile), state.Options{Timeout: 2 * time.Second})
				if err != nil {
					return &exitError{1, err}
				}
				defer store.Close()
				if res, _, err = amendCampaign(abs, set, store, req); err != nil {
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

// amendResult is the outcome of an amendment, as -o json prints it.
type amendResult struct {
	Schema    int    `json:"schema"`
	Amendment string `json:"amendment"`
	Recorded  bool   `json:"recorded"`
	Status    string `json:"status"`
	Diff      Diff   `json:"diff"`
}

// amendCampaign checks an amendment against the campaign and, when asked,
// records and installs it; it returns the amended plan when it recorded
// one. The campaign's store is open for writing (the command's own, or the
// running controller's).
func amendCampaign(dir string, set settings, store *state.Store, req api.AmendRequest) (amendResult, *protocols.Plan, error) {
	res := amendResult{Schema: AmendSchema, Amendment: req.ID}
	if req.ID == "" || req.Reason == "" || req.Protocol == "" {
		return res, nil, errors.New("amend: the protocol, --id and --reason are required")
	}
	old, err := api.ReadPlan(dir)
	if err != nil {
		return res, nil, err
	}
	plan, err := protocols.PlanFile(req.Protocol, protocols.Options{})
	if err != nil {
		return res, nil, err
	}
	d := planDiff(old, plan)
	if len(d.Added) > 0 || len(d.Removed) > 0 {
		return res, nil, fmt.Errorf("amend %s: it adds runs %v and removes runs %v; an amendment here changes runs, it does not add or remove them (freeze a matrix instead: controller freeze)", req.ID, d.Added, d.Removed)
	}
	for _, c := range d.Changed {
		r, err := store.Run(c.Run)
		if err == nil && r.Done {
			d.Done = append(d.Done, c.Run)
		}
	}
	if len(d.Done) > 0 && !req.Readjudicate {
		return res, nil, fmt.Errorf("amend %s would change runs that already have a result: %v; an amendment may change them only to re-adjudicate them: add --readjudicate, then run controller readjudicate -d %s --amendment %s",
			req.ID, d.Done, dir, req.ID)
	}
	res.Diff = d
	if !req.Yes {
		res.Status = "shown, not recorded (add --yes to record it)"
		return res, nil, nil
	}
	if err := recordAmendment(dir, set, store, plan, req.Protocol, req.ID, req.Reason, req.UID, d); err != nil {
		return res, nil, err
	}
	res.Recorded, res.Status = true, "recorded"
	return res, plan, nil
}

func writeAmendOutput(w io.Writer, output string, res amendResult) error {
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
	for _, f := range append(append([]FieldDiff{}, d.Fields...), d.Totals...) {
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

// recordAmendment writes the amendment's files under
// provenance/amendments/ID, records it in the database (the commit point),
// then installs it: the new inputs' hashes and copies, plan.json and
// controller.json. A controller that dies after the commit and before the
// install is finished at resume (installAmendment).
func recordAmendment(dir string, set settings, store *state.Store, plan *protocols.Plan, newPath, id, reason string, uid int, d Diff) error {
	adir := filepath.Join(dir, provenance.SubDir, "amendments", id)
	if err := atomicfile.MkdirAll(adir, 0o700); err != nil {
		return err
	}
	if err := atomicfile.WriteJSON(filepath.Join(adir, api.PlanFile), plan, 0o444); err != nil {
		return err
	}
	diff, err := json.Marshal(d)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(adir, "diff.json"), diff, 0o444); err != nil {
		return err
	}
	if err := atomicfile.WriteJSON(filepath.Join(adir, "amendment.json"), map[string]any{"protocol_path": newPath}, 0o444); err != nil {
		return err
	}
	failpoint.Hit("amend-files-written")
	a := state.Amendment{ID: id, Kind: "amend", Date: time.Now().UTC().Format("2006-01-02"), Title: reason, Text: reason,
		OperatorUID: uid, OldSHA256: d.Before, ProtocolSHA256: d.After, Diff: diff}
	for _, c := range d.Changed {
		a.Runs = append(a.Runs, c.Run)
	}
	err = store.Amend(a, func(c *state.Campaign) error {
		c.ProtocolSHA256, c.ProtocolPath = plan.Protocol.SHA256, newPath
		c.BudgetCapGPUHours = plan.Totals.BudgetCapGPUHours
		return nil
	})
	if errors.Is(err, state.ErrExists) {
		// recorded by an amend that died before it installed it: the same
		// amendment (same new protocol) is installed now; another is refused
		if prior, perr := amendmentByID(store, id); perr != nil || prior.ProtocolSHA256 != d.After {
			return fmt.Errorf("record amendment %s: %w with another protocol", id, err)
		}
	} else if err != nil {
		return fmt.Errorf("record amendment %s: %w", id, err)
	}
	failpoint.Hit("amend-recorded")
	return installAmendment(dir, set, id)
}

// installAmendment makes the recorded amendment id the campaign's inputs:
// the new protocol's files hashed and copied into provenance (the index
// replaced), its plan as plan.json, and controller.json. It is idempotent.
func installAmendment(dir string, set settings, id string) error {
	adir := filepath.Join(dir, provenance.SubDir, "amendments", id)
	var meta struct {
		ProtocolPath string `json:"protocol_path"`
	}
	b, err := os.ReadFile(filepath.Join(adir, "amendment.json"))
	if err != nil {
		return fmt.Errorf("install amendment %s: %w", id, err)
	}
	if err := json.Unmarshal(b, &meta); err != nil {
		return fmt.Errorf("install amendment %s: %w", id, err)
	}
	var plan protocols.Plan
	pb, err := os.ReadFile(filepath.Join(adir, api.PlanFile))
	if err != nil {
		return fmt.Errorf("install amendment %s: %w", id, err)
	}
	if err := json.Unmarshal(pb, &plan); err != nil {
		return fmt.Errorf("install amendment %s: %w", id, err)
	}
	entries := []provenance.Entry{{Path: meta.ProtocolPath, Role: "protocol"}}
	for _, p := range plan.Provenance {
		path := p.Path
		if !filepath.IsAbs(path) {
			path = filepath.Join(set.Workdir, path)
		}
		entries = append(entries, provenance.Entry{Path: path, Role: p.Role, Private: p.Private})
	}
	hashed, err := provenance.Hash(entries, provenance.Options{})
	if err != nil {
		return fmt.Errorf("install amendment %s: %w", id, err)
	}
	if hashed[0].SHA256 == "" {
		return fmt.Errorf("install amendment %s: the protocol was not hashed", id)
	}
	if err := provenance.Write(dir, hashed, provenance.Options{}); err != nil {
		return fmt.Errorf("install amendment %s: %w", id, err)
	}
	failpoint.Hit("amend-provenance-installed")
	if err := atomicfile.WriteFile(filepath.Join(dir, api.PlanFile), pb, 0o444); err != nil {
		return err
	}
	set.ProtocolPath, set.ProtocolSHA256 = meta.ProtocolPath, plan.Protocol.SHA256
	return atomicfile.WriteJSON(filepath.Join(dir, settingsFile), set, 0o644)
}

// amendmentByID is the recorded amendment id.
func amendmentByID(store *state.Store, id string) (state.Amendment, error) {
	as, err := store.Amendments()
	if err != nil {
		return state.Amendment{}, err
	}
	for _, a := range as {
		if a.ID == id {
			return a, nil
		}
	}
	return state.Amendment{}, fmt.Errorf("amendment %s: %w", id, state.ErrNotFound)
}

// finishAmendment installs the latest recorded amendment when the
// campaign's plan is not yet the amended one (a controller died between
// recording and installing it).
func finishAmendment(dir string, set settings, store *state.Store, plan *protocols.Plan) (bool, error) {
	as, err := store.Amendments()
	if err != nil {
		return false, err
	}
	for i := len(as) - 1; i >= 0; i-- {
		a := as[i]
		if a.Kind != "amend" {
			continue
		}
		if a.ProtocolSHA256 == plan.Protocol.SHA256 {
			return false, nil
		}
		return true, installAmendment(dir, set, a.ID)
	}
	return false, nil
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
			set, err := readSettings(abs)
			if err != nil {
				return &exitError{2, err}
			}
			reaper := launch.NewReaper()
			if err := reaper.Start(context.Background()); err != nil {
				return &exitError{1, err}
			}
			defer reaper.Close()
			outDir := filepath.Join(abs, provenance.SubDir, "amendments", amendment, "readjudicated")
			changes, err := readjudicate(store, plan, amendment, runs, &launch.Launcher{Reaper: reaper}, set.Workdir, outDir)
			if err != nil {
				return &exitError{1, err}
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"schema": AmendSchema, "amendment": amendment, "readjudicated": changes})
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

// Readjudicated is one new verdict readjudicate recorded.
type Readjudicated struct {
	Run       string `json:"run"`
	Attempt   int    `json:"attempt"`
	Old       string `json:"old_state"`
	OldReason string `json:"old_reason,omitempty"`
	New       string `json:"new_state"`
	NewReason string `json:"new_reason,omitempty"`
	Detail    string `json:"detail"`
}

// readjudicate re-judges the drain of the terminal attempts that have a
// recorded drain (drain_s) under the plan's classes. It records the
// re-adjudication (an amendment of kind readjudicate citing amendment,
// naming the runs) before the new verdicts, so that a kill in between
// leaves a record of what was asked; a second run then re-adjudicates what
// is left.
// The validators of an attempt a validator failed are run again over its
// artifacts (runner.Revalidate, through l; their output under outDir); nil
// l skips those attempts.
func readjudicate(store *state.Store, plan *protocols.Plan, amendment string, only []string, l *launch.Launcher, workdir, outDir string) ([]Readjudicated, error) {
	type change struct {
		Readjudicated
		rj state.Readjudication
		g  state.GateVerdict
	}
	var changes []change
	var touched []string
	for _, r := range plan.Runs {
		if len(only) > 0 && !contains(only, r.ID) {
			continue
		}
		run, err := store.Run(r.ID)
		if err != nil {
			return nil, err
		}
		as, err := store.Attempts(r.ID)
		if err != nil {
			return nil, err
		}
		for _, a := range as {
			if a.State.Live() || a.State == state.Interrupted {
				continue
			}
			if run.Done && run.Result != a.N {
				continue // the run has another result; this attempt stays as it was
			}
			cur, curReason := a.State, a.Reason
			if a.Readjudicated != nil {
				cur, curReason = a.Readjudicated.State, a.Readjudicated.Reason
			}
			validated := curReason == state.ReasonValidatorFailed || curReason == state.ReasonProfileArtifact || curReason == state.ReasonQualityFailed
			drained, timed := a.Figures["drain_s"]
			drainDecides := cur != state.Failed || curReason == state.ReasonDrainWatchdog
			if !(timed && drainDecides) && !validated {
				continue // neither the drain nor a validator decided it
			}
			next, reason := state.Complete, state.Reason("")
			var notes []string
			// the validators again, over the recorded artifacts
			if validated && l != nil {
				vs, err := runner.Revalidate(l, r, a, workdir, filepath.Join(outDir, r.ID, fmt.Sprintf("a%d", a.N)))
				if err != nil {
					return nil, err
				}
				for _, vd := range vs {
					notes = append(notes, fmt.Sprintf("%s %s", vd.Gate, vd.Verdict))
					if !vd.Passed() && next != state.Failed {
						next, reason = state.Failed, state.ReasonValidatorFailed
						switch vd.Class {
						case gates.ClassProfileArtifact:
							reason = state.ReasonProfileArtifact
						case gates.ClassQuality:
							next, reason = state.Quarantined, state.ReasonQualityFailed
						}
					}
				}
			}
			var v gates.Verdict
			if timed && next != state.Failed {
				var outcome gates.DrainOutcome
				v, outcome = gates.Drain(drained, r.DrainS, r.WatchdogS, time.Now())
				switch outcome {
				case gates.DrainQuarantine:
					if next == state.Complete {
						next, reason = state.Quarantined, state.ReasonDrainQuarantine
					}
				case gates.DrainWatchdog:
					next, reason = state.Failed, state.ReasonDrainWatchdog
				case gates.DrainUnknown:
					continue
				}
				notes = append(notes, fmt.Sprintf("drain %.3f s against the amended allowance %.0f s (watchdog %.0f s) of class %s", drained, r.DrainS, r.WatchdogS, r.Class))
			} else {
				v = gates.Verdict{Gate: "readjudication", Verdict: gates.Pass, At: time.Now()}
				if next == state.Failed {
					v.Verdict = gates.Fail
				}
			}
			if validated && l == nil {
				continue
			}
			if next == cur && reason == curReason {
				continue
			}
			detail := strings.Join(notes, "; ")
			v.Detail = "re-adjudicated under amendment " + amendment + ": " + detail
			changes = append(changes, change{
				Readjudicated: Readjudicated{Run: r.ID, Attempt: a.N, Old: string(cur), OldReason: string(curReason), New: string(next), NewReason: string(reason), Detail: detail},
				rj:            state.Readjudication{Amendment: amendment, State: next, Reason: reason, Detail: detail},
				g:             state.GateVerdict{Gate: v.Gate, Verdict: v.Verdict, Detail: v.Detail, Figures: v.Figures, At: v.At},
			})
			touched = append(touched, r.ID)
			if next.Terminal() && (next == state.Complete || next == state.Quarantined) {
				run.Done, run.Result = true, a.N // a later attempt of the run is not made a second result
			}
		}
	}
	if len(changes) == 0 {
		return nil, nil
	}
	as, err := store.Amendments()
	if err != nil {
		return nil, err
	}
	k := 1
	for _, a := range as {
		if a.Kind == "readjudicate" && a.Cites == amendment {
			k++
		}
	}
	err = store.Amend(state.Amendment{ID: fmt.Sprintf("%s/readjudicate-%d", amendment, k), Kind: "readjudicate",
		Cites: amendment, Text: fmt.Sprintf("%d attempts re-adjudicated under %s", len(changes), amendment), OperatorUID: os.Getuid(), Runs: touched}, nil)
	if err != nil {
		return nil, err
	}
	failpoint.Hit("readjudicate-recorded")
	var out []Readjudicated
	for _, c := range changes {
		if _, err := store.Readjudicate(c.Run, c.Attempt, c.rj, c.g); err != nil {
			return out, err
		}
		out = append(out, c.Readjudicated)
	}
	return out, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
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
		return writeJSON(w, map[string]any{"schema": AmendSchema, "amendment": id, "state": "frozen", "not_run": notRun})
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
				return writeJSON(cmd.OutOrStdout(), map[string]any{"schema": AmendSchema, "amendment": id, "state": "frozen", "not_run": notRun})
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
