// Package amend records amendments of a campaign's protocol, as seed 002
// ran under seven: the plan diff of a new protocol (PlanDiff), its record
// and install (Amend, Finish), and the re-adjudication of recorded
// attempts under one (Readjudicate). The state database's record of an
// amendment is its commit point: files are written before it, the
// install after it, and Finish completes an install a crash cut.
package amend

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"time"

	"warden/pkg/atomicfile"
	"warden/pkg/dirlayout"
	"warden/pkg/failpoint"
	"warden/pkg/gates"
	"warden/pkg/launch"
	"warden/pkg/outcome"
	"warden/pkg/provenance"
	"warden/pkg/state"
	"warden/pkg/validator"
	"warden/protocols"
)

// Campaign is the campaign an amendment applies to.
type Campaign struct {
	Dir     string
	Workdir string       // where the protocol's relative paths and commands resolve
	Store   *state.Store // open for writing
	// SaveSettings records the amended protocol's path and hash in the
	// campaign's settings (controller.json).
	SaveSettings func(protocolPath, sha256 string) error
}

// Request is an amendment asked for.
type Request struct {
	Protocol     string // the amended protocol, absolute
	ID, Reason   string
	Readjudicate bool // it re-adjudicates runs that already have a result
	Yes          bool // record it; otherwise only the diff
	UID          int  // the operator's uid
}

// Schema is the version of the -o json documents of amend,
// readjudicate and freeze.
const Schema = 1

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
	// ByField is Changes(): each change down to the field that changed,
	// once, with the runs it touches (what amend prints).
	ByField []Change `json:"changes"`
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

// PlanDiff compares two plans.
func PlanDiff(old, new *protocols.Plan) Diff {
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
	for _, ph := range old.Phases {
		ns, _ := new.CapacitySearch(ph.Name)
		if ph.Capacity == nil && ns == nil {
			continue
		}
		ob, _ := json.Marshal(ph.Capacity)
		nb, _ := json.Marshal(ns)
		if string(ob) != string(nb) {
			d.Fields = append(d.Fields, FieldDiff{Field: capacityField + ph.Name, Old: ob, New: nb})
		}
	}
	d.ByField = d.Changes()
	if d.ByField == nil {
		d.ByField = []Change{}
	}
	return d
}

// capacityField begins the diff's field of a phase's capacity search.
const capacityField = "capacity."

// searchesRun refuses an amendment of a capacity search any of whose
// points has run: its recorded verdicts were judged under the old search
// (its SLO, its rates) and the points after them would be judged under
// the new one, so that "found" would mix both. A change of
// on_non_monotonic alone, which judges nothing, is allowed. unstarted are
// the points of the searches it changes, which the amendment's record
// checks again, in its own transaction, against a point started meanwhile.
func searchesRun(id string, store *state.Store, old, plan *protocols.Plan, d Diff) (unstarted []string, err error) {
	for _, f := range d.Fields {
		phase, ok := strings.CutPrefix(f.Field, capacityField)
		if !ok {
			continue
		}
		was, now := old.CapacitySearch(phase)
		is, _ := plan.CapacitySearch(phase)
		if now && is != nil {
			a, b := *was, *is
			a.OnNonMonotonic, b.OnNonMonotonic = "", ""
			if ab, bb := jsonFields(a), jsonFields(b); reflect.DeepEqual(ab, bb) {
				continue // as the plan records them (no source positions)
			}
		}
		var ran []string
		for _, r := range old.Runs {
			if r.Capacity == nil || r.Phase != phase {
				continue
			}
			unstarted = append(unstarted, r.ID)
			if rec, err := store.Run(r.ID); err == nil && (rec.Done || rec.Attempts > 0) {
				ran = append(ran, r.ID)
			}
		}
		if len(ran) > 0 {
			return nil, fmt.Errorf("amend %s changes capacity search %s (%s) after %d of its points ran (%s): their verdicts were judged under the old search and the next points would be judged under the new, so its found rate would mix both; this amendment would change\n  %s: %s\n  to %s",
				id, phase, f.Field, len(ran), strings.Join(ran, ", "), f.Field, f.Old, f.New)
		}
	}
	return unstarted, nil
}

// Result is the outcome of an amendment, as -o json prints it.
type Result struct {
	Schema    int    `json:"schema"`
	Amendment string `json:"amendment"`
	Recorded  bool   `json:"recorded"`
	Status    string `json:"status"`
	Diff      Diff   `json:"diff"`
}

// Amend checks an amendment against the campaign and, when asked,
// records and installs it; it returns the amended plan when it recorded
// one. The campaign's store is open for writing (the command's own, or the
// running controller's).
func Amend(c Campaign, req Request) (Result, *protocols.Plan, error) {
	dir, store := c.Dir, c.Store
	res := Result{Schema: Schema, Amendment: req.ID}
	if req.ID == "" || req.Reason == "" || req.Protocol == "" {
		return res, nil, errors.New("amend: the protocol, --id and --reason are required")
	}
	old, err := dirlayout.ReadPlan(dir)
	if err != nil {
		return res, nil, err
	}
	plan, err := protocols.PlanFile(req.Protocol, protocols.Options{})
	if err != nil {
		return res, nil, err
	}
	d := PlanDiff(old, plan)
	if len(d.Added) > 0 || len(d.Removed) > 0 {
		return res, nil, fmt.Errorf("amend %s: it adds runs %v and removes runs %v; an amendment here changes runs, it does not add or remove them (freeze a matrix instead: controller freeze)", req.ID, d.Added, d.Removed)
	}
	for _, c := range d.Changed {
		r, err := store.Run(c.Run)
		if err == nil && r.Done {
			d.Done = append(d.Done, c.Run)
		}
	}
	unstarted, err := searchesRun(req.ID, store, old, plan, d)
	if err != nil {
		return res, nil, err
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
	if err := record(c, plan, req.Protocol, req.ID, req.Reason, req.UID, d, unstarted); err != nil {
		return res, nil, err
	}
	res.Recorded, res.Status = true, "recorded"
	return res, plan, nil
}

// record writes the amendment's files under
// provenance/amendments/ID, records it in the database (the commit point),
// then installs it: the new inputs' hashes and copies, plan.json and
// controller.json. A controller that dies after the commit and before the
// install is finished at resume (installAmendment).
func record(c Campaign, plan *protocols.Plan, newPath, id, reason string, uid int, d Diff, unstarted []string) error {
	dir, store := c.Dir, c.Store
	adir := filepath.Join(dir, provenance.SubDir, "amendments", id)
	if err := atomicfile.MkdirAll(adir, 0o700); err != nil {
		return err
	}
	if err := atomicfile.WriteJSON(dirlayout.Plan(adir), plan, 0o444); err != nil {
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
		OperatorUID: uid, OldSHA256: d.Before, ProtocolSHA256: d.After, Diff: diff, Unstarted: unstarted}
	for _, c := range d.Changed {
		a.Runs = append(a.Runs, c.Run)
	}
	err = store.Amend(a, func(c *state.Campaign) error {
		c.ProtocolSHA256, c.ProtocolPath = plan.Protocol.SHA256, newPath
		c.BudgetCapGPUHours = plan.Totals.BudgetCapGPUHours
		return nil
	})
	if errors.Is(err, state.ErrStarted) {
		return fmt.Errorf("record amendment %s: it changes a capacity search: %w", id, err)
	}
	if errors.Is(err, state.ErrExists) {
		// recorded by an amend that died before it installed it: the same
		// amendment (same new protocol) is installed now; another is refused
		if prior, perr := byID(store, id); perr != nil || prior.ProtocolSHA256 != d.After {
			return fmt.Errorf("record amendment %s: %w with another protocol", id, err)
		}
	} else if err != nil {
		return fmt.Errorf("record amendment %s: %w", id, err)
	}
	failpoint.Hit("amend-recorded")
	return install(c, id)
}

// install makes the recorded amendment id the campaign's inputs:
// the new protocol's files hashed and copied into provenance (the index
// replaced), its plan as plan.json, and controller.json. It is idempotent.
func install(c Campaign, id string) error {
	dir := c.Dir
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
	pb, err := os.ReadFile(dirlayout.Plan(adir))
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
			path = filepath.Join(c.Workdir, path)
		}
		if p.Shards != "" {
			shards, err := provenance.Shards(path, p.Shards, p.Role, p.Private)
			if err != nil {
				return fmt.Errorf("install amendment %s: %w", id, err)
			}
			entries = append(entries, shards...)
			continue
		}
		entries = append(entries, provenance.Entry{Path: path, Role: p.Role, Private: p.Private, Frozen: p.SHA256, FrozenAt: p.SHA256At})
	}
	// the campaign's record is the shards' cache: unchanged weights are not read again
	recorded, _ := provenance.Read(dir)
	hashed, err := provenance.Hash(entries, provenance.Options{Cache: recorded})
	if err != nil {
		return fmt.Errorf("install amendment %s: %w", id, err)
	}
	if hashed[0].SHA256 == "" {
		return fmt.Errorf("install amendment %s: the protocol was not hashed", id)
	}
	if err := provenance.Write(dir, hashed, provenance.Options{}); err != nil {
		return fmt.Errorf("install amendment %s: %w", id, err)
	}
	if err := provenance.WriteSeeds(dir, plan.Protocol.SHA256, plan.Seeds); err != nil {
		return fmt.Errorf("install amendment %s: %w", id, err)
	}
	failpoint.Hit("amend-provenance-installed")
	if err := atomicfile.WriteFile(dirlayout.Plan(dir), pb, 0o444); err != nil {
		return err
	}
	return c.SaveSettings(meta.ProtocolPath, plan.Protocol.SHA256)
}

// byID is the recorded amendment id.
func byID(store *state.Store, id string) (state.Amendment, error) {
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

// Finish installs the latest recorded amendment when the
// campaign's plan is not yet the amended one (a controller died between
// recording and installing it).
func Finish(c Campaign, plan *protocols.Plan) (bool, error) {
	store := c.Store
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
		return true, install(c, a.ID)
	}
	return false, nil
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

// Readjudicate re-judges the drain of the terminal attempts that have a
// recorded drain (drain_s) under the plan's classes. It records the
// re-adjudication (an amendment of kind readjudicate citing amendment,
// naming the runs) before the new verdicts, so that a kill in between
// leaves a record of what was asked; a second run then re-adjudicates what
// is left.
// The validators of an attempt a validator failed are run again over its
// artifacts (validator.Revalidate, through l; their output under outDir); nil
// l skips those attempts.
func Readjudicate(c Campaign, plan *protocols.Plan, amendment string, only []string, l *launch.Launcher, outDir string) ([]Readjudicated, error) {
	store := c.Store
	var changes []readjudication
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
			ch, changed, err := rejudge(r, a, amendment, l, c.Workdir, outDir)
			if err != nil {
				return nil, err
			}
			if !changed {
				continue
			}
			changes = append(changes, ch)
			touched = append(touched, r.ID)
			if next := ch.rj.State; next == state.Complete || next == state.Quarantined {
				run.Done, run.Result = true, a.N // a later attempt of the run is not made a second result
			}
		}
	}
	if len(changes) == 0 {
		return nil, nil
	}
	return recordReadjudications(store, amendment, changes, touched)
}

// readjudication is one attempt's new verdict under an amendment, as
// Readjudicate reports it and as the store records it.
type readjudication struct {
	Readjudicated
	rj state.Readjudication
	g  state.GateVerdict
}

// rejudge judges attempt a of run r again under amendment: its
// validators (through l, over its artifacts, their output under outDir),
// then its drain under the plan's class. changed false: the attempt's
// verdict stands (neither the drain nor a validator decided it, it cannot
// be judged again here, or the new verdict is the old one).
func rejudge(r protocols.Run, a state.Attempt, amendment string, l *launch.Launcher, workdir, outDir string) (readjudication, bool, error) {
	cur, curReason := a.State, a.Reason
	if a.Readjudicated != nil {
		cur, curReason = a.Readjudicated.State, a.Readjudicated.Reason
	}
	validated := curReason == state.ReasonValidatorFailed || curReason == state.ReasonProfileArtifact || curReason == state.ReasonQualityFailed ||
		curReason == state.ReasonClockLoad
	drained, timed := a.Figures["drain_s"]
	drainDecides := cur != state.Failed || curReason == state.ReasonDrainWatchdog
	if !(timed && drainDecides) && !validated {
		return readjudication{}, false, nil // neither the drain nor a validator decided it
	}
	if validated && l == nil {
		return readjudication{}, false, nil
	}
	next, reason := state.Complete, state.Reason("")
	var notes []string

	// The validators again, over the recorded artifacts.
	if validated {
		vs, err := validator.Revalidate(l, r, a, workdir, filepath.Join(outDir, dirlayout.AttemptRel(r.ID, a.N)))
		if err != nil {
			return readjudication{}, false, err
		}
		for _, vd := range vs {
			notes = append(notes, fmt.Sprintf("%s %s", vd.Gate, vd.Verdict))
			if !vd.Passed() && next != state.Failed {
				next, reason = state.Failed, outcome.ValidatorReason(vd.Class)
				if reason == state.ReasonQualityFailed {
					next = state.Quarantined
				}
			}
		}
	}

	// The drain, under the amended class.
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
			return readjudication{}, false, nil
		}
		notes = append(notes, fmt.Sprintf("drain %.3f s against the amended allowance %.0f s (watchdog %.0f s) of class %s", drained, r.DrainS, r.WatchdogS, r.Class))
	} else {
		v = gates.Verdict{Gate: "readjudication", Verdict: gates.Pass, At: time.Now()}
		if next == state.Failed {
			v.Verdict = gates.Fail
		}
	}
	if next == cur && reason == curReason {
		return readjudication{}, false, nil
	}
	detail := strings.Join(notes, "; ")
	v.Detail = "re-adjudicated under amendment " + amendment + ": " + detail
	return readjudication{
		Readjudicated: Readjudicated{Run: r.ID, Attempt: a.N, Old: string(cur), OldReason: string(curReason), New: string(next), NewReason: string(reason), Detail: detail},
		rj:            state.Readjudication{Amendment: amendment, State: next, Reason: reason, Detail: detail},
		g:             state.GateVerdict{Gate: v.Gate, Verdict: v.Verdict, Detail: v.Detail, Figures: v.Figures, At: v.At},
	}, true, nil
}

// recordReadjudications records the re-adjudication (an amendment of kind
// readjudicate citing amendment, naming the runs touched) and then each
// new verdict.
func recordReadjudications(store *state.Store, amendment string, changes []readjudication, touched []string) ([]Readjudicated, error) {
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
