// Package campaigndir creates a campaign directory and keeps its identity:
// the settings resume reuses (controller.json), the creation of the
// directory with its plan, provenance, ledger and state database (nothing
// is left behind when it fails), and the proof that a state database
// belongs to its directory. It also opens a campaign for what is done to
// it: its controller takes it (Lock, Open) and the GPU backend its
// settings name; amend and readjudicate work on it while no controller
// runs; stop and resume read what its records say once none does. The
// directory's layout (its file names and paths) is dirlayout's.
package campaigndir

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"

	"warden/internal/shellquote"
	"warden/pkg/atomicfile"
	"warden/pkg/dirlayout"
	"warden/pkg/gpu/fakegpu"
	"warden/pkg/launch"
	"warden/pkg/lockfile"
	"warden/pkg/provenance"
	"warden/pkg/slurm"
	"warden/pkg/state"
	"warden/protocols"
)

// SettingsFile records how the campaign was started, for resume.
const SettingsFile = dirlayout.SettingsFile

// Settings are the campaign's start-time choices that resume reuses (DIR/controller.json).
type Settings struct {
	Schema int `json:"schema"`
	// CampaignID and ProtocolSHA256 tie the directory to its database:
	// resume refuses a state.db whose campaign is another's.
	CampaignID     string `json:"campaign_id,omitempty"`
	ProtocolSHA256 string `json:"protocol_sha256,omitempty"`
	ProtocolPath   string `json:"protocol_path"` // absolute
	Workdir        string `json:"workdir"`       // absolute; where commands run
	GPUBackend     string `json:"gpu_backend"`   // "fake" or "nvml"
	FakeGPUDir     string `json:"fake_gpu_dir,omitempty"`
	Cgroups        string `json:"cgroups"` // "auto": a leaf cgroup per process where cgroup v2 is writable; "off": process groups only
	// Executor is where attempts run: "local" (this host; "" in campaigns
	// made before there was a choice) or "slurm" (a Slurm step each, with
	// Slurm's options).
	Executor string         `json:"executor,omitempty"`
	Slurm    *slurm.Options `json:"slurm,omitempty"`

	// Metrics are the Prometheus outputs controller start was given
	// (--metrics, --metrics-textfile, the file's path absolute): a resume
	// without those flags serves the same ones.
	Metrics *MetricsSettings `json:"metrics,omitempty"`
	// Notify is the command run when the campaign needs a person
	// (controller start --notify); resume keeps it.
	Notify *NotifySettings `json:"notify,omitempty"`

	// FakeExplicit records that the fake backend was asked for by name
	// (--gpu-backend fake). A fake campaign without it was made when
	// "auto" still fell back to fake GPUs: resume refuses it unless
	// --gpu-backend fake is given.
	FakeExplicit bool `json:"fake_gpus_explicit,omitempty"`
}

// MetricsSettings are a campaign's Prometheus outputs.
type MetricsSettings struct {
	Addr     string `json:"addr,omitempty"`
	Textfile string `json:"textfile,omitempty"`
}

// NotifySettings name the notification command: a shell command line
// (/bin/sh -c) given the event as JSON on its standard input, ended after
// TimeoutS seconds.
type NotifySettings struct {
	Command  string  `json:"command"`
	TimeoutS float64 `json:"timeout_s"`
}

// StartOptions are the choices of controller start.
type StartOptions struct {
	// Metrics are the Prometheus outputs, recorded for resume (nil: none).
	Metrics *MetricsSettings
	// Notify is the notification command, recorded for resume (nil: none).
	Notify     *NotifySettings
	Backend    string // resolved: "fake" or "nvml"
	FakeGPUDir string // fake backend: the fake host's directory; "" for DIR/fake-gpus
	Cgroups    string
	// AllowOverBudget starts a campaign whose estimate or worst case
	// passes the budget cap (it then stops when a wave would pass it).
	AllowOverBudget bool
	// Executor is "local" or "slurm"; Slurm its options.
	Executor string
	Slurm    *slurm.Options
}

// ReadSettings reads the settings of the campaign in dir; a directory
// without them, or with settings that do not decode, is refused with a
// *SettingsError.
func ReadSettings(dir string) (Settings, error) {
	var s Settings
	b, err := os.ReadFile(dirlayout.Settings(dir))
	if err != nil {
		return s, &SettingsError{fmt.Errorf("%s is not a campaign directory (no %s): %w", dir, SettingsFile, err)}
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, &SettingsError{fmt.Errorf("read %s: %w", dirlayout.Settings(dir), err)}
	}
	return s, nil
}

// SettingsError says that a directory is no campaign directory, or one
// whose settings are broken: the commands' usage error, not a refusal.
type SettingsError struct{ Err error }

func (e *SettingsError) Error() string { return e.Err.Error() }
func (e *SettingsError) Unwrap() error { return e.Err }

// runLedger runs the ledger commands through a launcher of their own: the
// starting command has no other children to reap.
func runLedger(dir, workdir string, cmds []protocols.CommandSpec, vars map[string]string) error {
	if len(cmds) == 0 {
		return nil
	}
	reaper := launch.NewReaper()
	if err := reaper.Start(context.Background()); err != nil {
		return err
	}
	defer reaper.Close()
	return RunLedger(&launch.Launcher{Reaper: reaper}, dir, workdir, cmds, vars, os.Stderr)
}

// Create makes the campaign directory: the plan, the provenance
// record, the settings and the state database. It refuses a directory that
// holds anything else.
//
// It creates nothing until its checks pass: the protocol is planned and
// every provenance input is checked and hashed (a missing file, a FIFO, a
// device, a file over the size limit is refused) before the directory is
// made. A failure after that removes what this call made: the directory
// and any parents it created, or, for a directory that existed (empty, as
// checkEmptyDir requires), everything in it, leaving it existing and empty.
func Create(protocolPath, dir string, so StartOptions, now time.Time) (*protocols.Plan, error) {
	abs, err := filepath.Abs(protocolPath)
	if err != nil {
		return nil, err
	}
	plan, err := protocols.PlanFile(abs, protocols.Options{CheckInputs: true})
	if err != nil {
		return nil, err
	}
	if err := OverBudget(plan); err != nil && !so.AllowOverBudget {
		return nil, &OverBudgetError{Err: err}
	}
	workdir := plan.Protocol.Workdir
	if !filepath.IsAbs(workdir) {
		workdir = filepath.Join(filepath.Dir(abs), workdir)
	}
	entries := []provenance.Entry{{Path: abs, Role: "protocol"}}
	for _, p := range plan.Provenance {
		path := p.Path
		if !filepath.IsAbs(path) {
			path = filepath.Join(workdir, path)
		}
		if p.Shards != "" {
			shards, err := provenance.Shards(path, p.Shards, p.Role, p.Private)
			if err != nil {
				return nil, err
			}
			entries = append(entries, shards...)
			continue
		}
		entries = append(entries, provenance.Entry{Path: path, Role: p.Role, Private: p.Private, Frozen: p.SHA256, FrozenAt: p.SHA256At})
	}
	if err := checkEmptyDir(dir, plan, entries); err != nil {
		return nil, err
	}
	if err := checkOwner(dir, dir, os.Geteuid()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		// an empty directory another user owns: the campaign would be
		// theirs to change (its mode becomes 0700 all the same)
		return nil, err
	}
	// The limit is the default until the protocol carries one
	// (provenance_max_file_gb); then: MaxFileBytes from the plan.
	provOpts := provenance.Options{}
	hashed, err := provenance.Hash(entries, provOpts)
	if err != nil {
		return nil, err
	}

	undo, err := makeCampaignDir(dir)
	if err != nil {
		return nil, fmt.Errorf("create campaign directory: %w", err)
	}
	if err := populateCampaign(plan, abs, dir, workdir, hashed, provOpts, so, now); err != nil {
		if uerr := undo(); uerr != nil {
			return nil, fmt.Errorf("%w (and removing what this start made failed: %v)", err, uerr)
		}
		return nil, err
	}
	return plan, nil
}

// makeCampaignDir creates dir/runs and returns a function that removes
// what it created: the topmost directory it had to create, or, when dir
// already existed, every entry in dir but those it held before (none, or
// the inputs directory checkEmptyDir accepted).
func makeCampaignDir(dir string) (undo func() error, err error) {
	dir = filepath.Clean(dir)
	before := map[string]bool{}
	if ents, err := os.ReadDir(dir); err == nil {
		for _, e := range ents {
			before[e.Name()] = true
		}
	}
	top := ""
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); !errors.Is(err, os.ErrNotExist) {
			break
		}
		top = d
		if filepath.Dir(d) == d {
			break
		}
	}
	undo = func() error {
		if top != "" {
			return os.RemoveAll(top)
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		var errs []error
		for _, e := range ents {
			if !before[e.Name()] {
				errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
			}
		}
		return errors.Join(errs...)
	}
	if err := atomicfile.MkdirAll(dirlayout.Runs(dir), 0o755); err != nil {
		return nil, errors.Join(err, undo())
	}
	// Owner-only: the campaign holds pids, argv, paths and what the
	// clients and servers printed (a leak of a private prompt among it);
	// no other local user may read any of it.
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, errors.Join(err, undo())
	}
	return undo, nil
}

// populateCampaign writes the campaign into its new directory: the
// provenance record (copies checked against the hashes taken before), the
// ledger, the plan, the settings, the fake GPUs and the state database.
func populateCampaign(plan *protocols.Plan, abs, dir, workdir string, hashed []provenance.Entry, provOpts provenance.Options, so StartOptions, now time.Time) error {
	var err error
	if err := provenance.Write(dir, hashed, provOpts); err != nil {
		return err
	}
	if err := provenance.WriteSeeds(dir, plan.Protocol.SHA256, plan.Seeds); err != nil {
		return err
	}
	ledgerVars := map[string]string{"CAMPAIGN_DIR": dir, "PROTOCOL_DIR": filepath.Dir(abs), "WORKDIR": workdir}
	if err := runLedger(dir, workdir, plan.Ledger, ledgerVars); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	if err := assignPorts(plan); err != nil {
		return err
	}
	if err := atomicfile.WriteJSON(dirlayout.Plan(dir), plan, 0o444); err != nil {
		return fmt.Errorf("write plan: %w", err)
	}
	campaignID := fmt.Sprintf("%s-%s-%04x", plan.Protocol.Name, now.UTC().Format("20060102T150405Z"), rand.IntN(1<<16))
	st := Settings{Schema: 1, CampaignID: campaignID, ProtocolSHA256: plan.Protocol.SHA256,
		ProtocolPath: abs, Workdir: workdir, GPUBackend: so.Backend, Cgroups: so.Cgroups,
		Executor: so.Executor, Slurm: so.Slurm, Metrics: so.Metrics, Notify: so.Notify}
	if st.Cgroups == "" {
		st.Cgroups = "auto"
	}
	if so.Backend == "fake" {
		st.FakeExplicit = true
		// The fake GPUs stand for the host: a directory given by the
		// operator is shared with whatever else claims GPUs there.
		st.FakeGPUDir = so.FakeGPUDir
		if st.FakeGPUDir == "" {
			st.FakeGPUDir = filepath.Join(dir, dirlayout.FakeGPUsDir)
		}
		if st.FakeGPUDir, err = filepath.Abs(st.FakeGPUDir); err != nil {
			return err
		}
		gpus := 0
		for _, s := range plan.Slots {
			for _, g := range s.GPUs {
				gpus = max(gpus, g+1)
			}
		}
		if _, err := os.Stat(filepath.Join(st.FakeGPUDir, "gpus.json")); errors.Is(err, os.ErrNotExist) {
			if err := fakegpu.Init(st.FakeGPUDir, gpus, 143771); err != nil {
				return fmt.Errorf("fake GPUs: %w", err)
			}
		}
	}
	if err := atomicfile.WriteJSON(dirlayout.Settings(dir), st, 0o644); err != nil {
		return fmt.Errorf("write settings: %w", err)
	}

	store, err := dirlayout.OpenStore(dir, state.Options{Timeout: 2 * time.Second})
	if err != nil {
		return err
	}
	defer store.Close()
	runs := make([]state.Run, len(plan.Runs))
	for i, r := range plan.Runs {
		runs[i] = state.Run{
			ID: r.ID, Order: i, Phase: r.Phase, Kind: r.Kind, Cell: r.Cell, Load: r.Load,
			Needs: r.Needs, GPUs: r.GPUs, ExpectedS: r.ExpectedS, Class: r.Class,
		}
	}
	c := state.Campaign{
		ID:                campaignID,
		ProtocolName:      plan.Protocol.Name,
		ProtocolSHA256:    plan.Protocol.SHA256,
		ProtocolPath:      abs,
		Dir:               dir,
		CreatedAt:         now,
		State:             state.CampaignRunning,
		BudgetCapGPUHours: plan.Totals.BudgetCapGPUHours,
		PriorGPUHours:     plan.Totals.BudgetConsumedGPUHours,
		BudgetUnit:        plan.Totals.Unit,
		Regime:            plan.Regime,
		RegimeConcurrency: regimeConcurrency(plan, plan.Regime),
		GPUBackend:        so.Backend,
	}
	if err := store.CreateCampaign(c, runs); err != nil {
		return err
	}
	return recordPriors(store, plan, hashed, workdir)
}

// recordPriors records the gate verdicts of every co-location check that
// ran before the campaign (a phase with a prior verdict), as the plan
// read them; the file's hash in provenance must be the one the plan read.
func recordPriors(store *state.Store, plan *protocols.Plan, hashed []provenance.Entry, workdir string) error {
	for _, ph := range plan.Phases {
		pr := ph.Prior
		if pr == nil {
			continue
		}
		if !pr.Read {
			return fmt.Errorf("phase %s: the prior verdict %s was not read", ph.Name, pr.File)
		}
		path := pr.File
		if !filepath.IsAbs(path) {
			path = filepath.Join(workdir, path)
		}
		for _, e := range hashed {
			if e.Path == path && e.SHA256 != pr.SHA256 {
				return fmt.Errorf("phase %s: the prior verdict %s changed while the campaign started (sha256 %s, then %s)", ph.Name, pr.File, pr.SHA256, e.SHA256)
			}
		}
		for _, g := range pr.Gates {
			detail := fmt.Sprintf("prior verdict of %s (%s, sha256 %s), not run in this campaign", pr.Check, pr.File, pr.SHA256)
			if g.Detail != "" {
				detail += ": " + g.Detail
			}
			if _, err := store.AddGateVerdict(state.GateVerdict{Gate: g.Gate, Verdict: g.Verdict, Figures: g.Figures, Detail: detail}); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkEmptyDir refuses a directory that holds another campaign or other
// files. It accepts one whose only entry is the directory inputs/
// (dirlayout.InputsDir) holding nothing but the protocol being started
// and files its provenance names (inputs: the protocol's entry and its
// provenance files, their paths absolute), in directories of their own
// if need be: what controller sweep writes before it starts the campaign.
func checkEmptyDir(dir string, plan *protocols.Plan, inputs []provenance.Entry) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("campaign directory %s: %w", dir, err)
	}
	if len(entries) == 0 {
		return nil
	}
	if len(entries) == 1 && entries[0].Name() == dirlayout.InputsDir && entries[0].IsDir() {
		return checkInputsOnly(dir, inputs)
	}
	if _, err := os.Stat(dirlayout.State(dir)); err == nil {
		if lock := dirlayout.Lock(dir); lockfile.Held(lock) {
			// a controller runs it and holds its database: say which, as
			// resume does, not that the database is locked
			return fmt.Errorf("refused: controller pid %d already runs the campaign in %s; follow it with: ctlq status -d %s", lockfile.Owner(lock), dir, shellquote.Word(dir))
		}
		s, err := dirlayout.OpenStoreReadOnly(dir, time.Second)
		if err != nil {
			return fmt.Errorf("%s already holds a campaign (%v); choose another directory", dir, err)
		}
		defer s.Close()
		c, err := s.Campaign()
		if err != nil {
			return fmt.Errorf("%s already holds a campaign database; choose another directory", dir)
		}
		if c.ProtocolSHA256 == plan.Protocol.SHA256 {
			return fmt.Errorf("%s already holds campaign %s of this protocol; continue it with: controller resume -d %s", dir, c.ID, dir)
		}
		return fmt.Errorf("%s holds another campaign (%s, protocol %s sha256 %s); choose another directory", dir, c.ID, c.ProtocolName, c.ProtocolSHA256)
	}
	return fmt.Errorf("%s is not empty and holds no campaign; choose an empty or new directory", dir)
}

// checkInputsOnly refuses an inputs directory (checkEmptyDir) that holds
// anything but regular files among inputs and the directories above them:
// a file the campaign does not hash, a link, a FIFO.
func checkInputsOnly(dir string, inputs []provenance.Entry) error {
	known := map[string]bool{}
	for _, e := range inputs {
		known[filepath.Clean(e.Path)] = true
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	root := filepath.Join(abs, dirlayout.InputsDir)
	return filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		switch {
		case err != nil:
			return fmt.Errorf("campaign directory %s: %w", dir, err)
		case d.IsDir():
			return nil
		case !d.Type().IsRegular() || !known[path]:
			return fmt.Errorf("%s holds %s, which is neither the protocol being started nor one of its provenance files; choose an empty or new directory", dir, path)
		}
		return nil
	})
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func regimeConcurrency(plan *protocols.Plan, name string) int {
	for _, r := range plan.Regimes {
		if r.Name == name {
			return r.Concurrency
		}
	}
	return 1
}

// assignPorts gives every slot with port: auto a TCP port that is free now
// on every address, distinct from every other slot's; plan.json records
// it, so a resumed campaign uses the same ports. (A port can still be
// taken between now and a run; the port gate then says so.)
func assignPorts(plan *protocols.Plan) error {
	used := map[int]bool{}
	for _, s := range plan.Slots {
		if !s.PortAuto {
			used[s.Port] = true
		}
	}
	for i := range plan.Slots {
		s := &plan.Slots[i]
		if !s.PortAuto {
			continue
		}
		p, err := launch.FreePort(used)
		if err != nil {
			return fmt.Errorf("slot %s: choose a free port for port: auto: %w", s.Name, err)
		}
		used[p], s.Port = true, p
	}
	return nil
}

// CheckBelongs proves that the database belongs to the campaign directory:
// the campaign id and the protocol hash agree across state.db,
// controller.json, plan.json and provenance/SHA256SUMS (campaigns started
// before controller.json recorded them are checked by the directory the
// database was created in). A database copied from another campaign is
// refused, naming both.
func CheckBelongs(dir string, set Settings, plan *protocols.Plan, cp state.Campaign) error {
	refuse := func(what, here, db string) error {
		return fmt.Errorf("refused: %s holds another campaign's database: %s is %s here but %s in state.db (campaign %s, created in %s)",
			dir, what, here, db, cp.ID, cp.Dir)
	}
	switch {
	case set.CampaignID != "" && set.CampaignID != cp.ID:
		return refuse("the campaign id", set.CampaignID+" (controller.json)", cp.ID)
	case set.ProtocolSHA256 != "" && set.ProtocolSHA256 != cp.ProtocolSHA256:
		return refuse("the protocol sha256", set.ProtocolSHA256+" (controller.json)", cp.ProtocolSHA256)
	case plan.Protocol.SHA256 != cp.ProtocolSHA256:
		return refuse("the protocol sha256", plan.Protocol.SHA256+" (plan.json)", cp.ProtocolSHA256)
	case set.CampaignID == "" && filepath.Clean(cp.Dir) != filepath.Clean(dir):
		return refuse("the campaign directory", dir, cp.Dir)
	}
	entries, err := provenance.Read(dir)
	if err != nil {
		return fmt.Errorf("read %s's provenance: %w", dir, err)
	}
	for _, e := range entries {
		if e.Role == "protocol" && filepath.Clean(e.Path) != filepath.Clean(cp.ProtocolPath) {
			return refuse("the protocol file", e.Path+" (provenance)", cp.ProtocolPath)
		}
	}
	return nil
}

// OverBudgetError is Create's refusal of a plan whose estimate or worst
// case passes the budget cap (see OverBudget).
type OverBudgetError struct{ Err error }

func (e *OverBudgetError) Error() string {
	return "refused: " + e.Err.Error() + "; give --allow-over-budget to start it anyway (it stops when a wave would pass the cap)"
}

func (e *OverBudgetError) Unwrap() error { return e.Err }

// OverBudget says whether the plan's estimate, or its worst case (every
// conditional run executes), passes the budget cap, or a wave of the
// estimate's timeline would be refused; each names the first wave the
// budget refuses, and how many runs launch before it.
func OverBudget(p *protocols.Plan) error {
	t := p.Totals
	unit := budgetUnit(t)
	switch {
	case t.RemainingAfterEstimate < 0:
		return fmt.Errorf("over budget: the estimate of %.3f %s passes the %.3f remaining of the cap %.3f by %.3f; %s",
			t.GPUHoursEstimate, unit, t.BudgetRemainingGPUHours, t.BudgetCapGPUHours, -t.RemainingAfterEstimate, firstRefused(t))
	case t.RemainingAfterWorstCase < 0:
		return fmt.Errorf("over budget in the worst case: the estimate of %.3f %s plus %.3f if every conditional run executes passes the %.3f remaining of the cap %.3f by %.3f; %s",
			t.GPUHoursEstimate, unit, t.ConditionalGPUHours, t.BudgetRemainingGPUHours, t.BudgetCapGPUHours, -t.RemainingAfterWorstCase, firstRefused(t))
	case t.FirstRefused != nil:
		r := t.FirstRefused
		return fmt.Errorf("%s: over budget: the wave launching %s (after %d runs, at %.0f s on the estimate's timeline) would be refused: consumed %.3f + in flight %.3f + its own %.3f = %.3f %s, over the cap of %.3f (A-P3-4: a wave is refused when its conservative reservation would pass the cap)",
			r.Budget, r.Run, r.RunsBefore, r.StartS, r.ChargedGPUH, r.InFlightGPUH, r.LaunchGPUH, r.TotalGPUH, unit, r.CapGPUH)
	}
	return nil
}

// AllowedOverBudget is what start says of a plan OverBudget refuses when
// --allow-over-budget starts it anyway: what runs, and where it stops.
func AllowedOverBudget(p *protocols.Plan) string {
	if r := p.Totals.FirstRefused; r != nil {
		return fmt.Sprintf("over the budget cap, started anyway (--allow-over-budget): the campaign runs the %d runs launched before the wave launching %s, then stops (budget) at that wave, as the estimate's timeline has it", r.RunsBefore, r.Run)
	}
	return "over the budget cap in the worst case, started anyway (--allow-over-budget): the campaign runs the waves that fit and stops (budget) at the first that would pass the cap"
}

// firstRefused names the plan's first refused wave, for a refusal of
// its totals.
func firstRefused(t protocols.Totals) string {
	r := t.FirstRefused
	if r == nil {
		return "no wave of the estimate's timeline is refused (conditional runs are not placed on it): the campaign stops (budget) at the first wave that would pass the cap"
	}
	return fmt.Sprintf("the first wave refused is the one launching %s (after %d runs, at %.0f s on the estimate's timeline: consumed %.3f + in flight %.3f + its own %.3f = %.3f %s, over the cap of %.3f; %s)",
		r.Run, r.RunsBefore, r.StartS, r.ChargedGPUH, r.InFlightGPUH, r.LaunchGPUH, r.TotalGPUH, budgetUnit(t), r.CapGPUH, r.Budget)
}

func budgetUnit(t protocols.Totals) string {
	if t.Unit == "" {
		return "GPU-hours"
	}
	return t.Unit
}
