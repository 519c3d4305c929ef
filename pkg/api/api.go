// Package api is the controller's read-only query API: the JSON types
// `ctlq` prints, the functions that build them from a campaign's state
// database, the HTTP handler the controller serves on its Unix socket, and
// the client `ctlq` uses. The same builders answer through the socket and,
// when no controller answers, from the database opened read-only, so both
// paths print the same thing.
package api

import (
	"time"

	"warden/pkg/dirlayout"
	"warden/pkg/endlog"
	"warden/pkg/state"
)

// Schema is the version of every JSON document of this package. 2: a
// run's id is "run" in every document (ctlq runs had "id", ctlq show
// "run.id" and "run_id"), an event's monotonic time "mono_ns" (was
// "mono"), ctlq show's run record is "record" beside the id, the budget's
// consumed_gpu_hours is charged plus in flight (was charged only, now
// charged_gpu_hours), and eta_s is null while no live controller runs the
// campaign.
const Schema = 2

// Status is `ctlq status -o json`.
type Status struct {
	Schema     int            `json:"schema"`
	Source     string         `json:"source"` // "socket" or "database"
	Campaign   CampaignStatus `json:"campaign"`
	Controller Controller     `json:"controller"`
	Runs       RunCounts      `json:"runs"`
	Budget     BudgetStatus   `json:"budget"`
	Current    []Current      `json:"current"`
	// ETAS is the expected seconds left, null while no live controller
	// runs the campaign (dead, exited, or the campaign not running).
	ETAS      *float64 `json:"eta_s"`
	LastEvent uint64   `json:"last_event_seq"`
	// Amendments are the campaign's amendments, re-adjudications and
	// freezes, in the order they were registered.
	Amendments []AmendmentBrief `json:"amendments"`
}

// AmendmentBrief is an amendment in a Status.
type AmendmentBrief struct {
	ID           string    `json:"id"`
	Kind         string    `json:"kind"`
	Text         string    `json:"reason"`
	Cites        string    `json:"cites,omitempty"`
	Runs         []string  `json:"runs,omitempty"`
	OldSHA256    string    `json:"old_protocol_sha256,omitempty"`
	SHA256       string    `json:"protocol_sha256,omitempty"`
	RegisteredAt time.Time `json:"registered_at"`
}

// CampaignStatus is the campaign part of a Status.
type CampaignStatus struct {
	ID       string `json:"id"`
	Protocol string `json:"protocol"`
	SHA256   string `json:"protocol_sha256"`
	Dir      string `json:"dir"`
	State    string `json:"state"` // running, stopped, complete, frozen
	// StateAt is when the campaign entered State (absent in campaigns
	// recorded before the record kept it, until their state changes).
	StateAt     time.Time          `json:"state_at,omitzero"`
	StopReason  state.StopReason   `json:"stop_reason"`
	StopDetail  string             `json:"stop_detail,omitempty"`
	StopFigures map[string]float64 `json:"stop_figures,omitempty"`
	Regime      string             `json:"regime,omitempty"`
	CreatedAt   time.Time          `json:"created_at"`
	// GPUBackend is what the campaign reads its GPUs through: "nvml",
	// "fake", or "unknown" (a campaign recorded before the field, not
	// yet resumed). FakeGPUs is true for "fake": the GPUs are files, and
	// no figure of the campaign is a GPU's.
	GPUBackend string `json:"gpu_backend"`
	FakeGPUs   bool   `json:"fake_gpus"`
	// CapacitySearches is where each capacity search stands: its points
	// judged, its found rate, and not_monotonic when that rate is not a
	// capacity (omitted for a campaign without a search).
	CapacitySearches []state.CapacitySearch `json:"capacity_searches,omitempty"`
}

// BackendOf is a campaign record's GPU backend as the API names it.
func BackendOf(c state.Campaign) (backend string, fake bool) {
	if c.GPUBackend == "" {
		return "unknown", false
	}
	return c.GPUBackend, c.GPUBackend == "fake"
}

// HeartbeatInterval is how often a running controller records its
// heartbeat (the runner's heartbeatEvery). A heartbeat younger than
// HeartbeatStale reads as healthy.
const (
	HeartbeatInterval = 10 * time.Second
	HeartbeatStale    = 3 * HeartbeatInterval
)

// Controller is what is known of the controller process.
type Controller struct {
	Alive              bool      `json:"alive"`
	PID                int       `json:"pid"`
	Heartbeat          time.Time `json:"heartbeat"`
	HeartbeatAgeS      float64   `json:"heartbeat_age_s"`
	HeartbeatIntervalS float64   `json:"heartbeat_interval_s"`
	// Healthy: alive, with a heartbeat younger than HeartbeatStale.
	Healthy bool `json:"healthy"`
}

// RunCounts counts runs by state (pending, running, complete, quarantined, failed).
type RunCounts struct {
	Total   int            `json:"total"`
	ByState map[string]int `json:"by_state"`
}

// BudgetStatus is the GPU-hour budget. ctlq status's text prints the
// same figures: consumed (charged + in flight).
type BudgetStatus struct {
	Unit        string  `json:"unit,omitempty"`
	CapGPUHours float64 `json:"cap_gpu_hours"`
	// ConsumedGPUHours is ChargedGPUHours plus InFlightGPUHours: what the
	// campaign has spent, counting what runs now.
	ConsumedGPUHours float64 `json:"consumed_gpu_hours"`
	// ChargedGPUHours is the ledger's prior consumption and charges.
	ChargedGPUHours  float64 `json:"charged_gpu_hours"`
	ReservedGPUHours float64 `json:"reserved_gpu_hours"`
	// InFlightGPUHours is the GPU time of the attempts whose server holds
	// its GPUs now and that are not charged yet: it accrues until their
	// charge at cleanup moves it into ChargedGPUHours.
	InFlightGPUHours float64 `json:"in_flight_gpu_hours"`
	// RemainingGPUHours is the cap less the charges and the reservations
	// (which cover the runs in flight).
	RemainingGPUHours float64 `json:"remaining_gpu_hours"`
}

// Current is a live attempt.
type Current struct {
	Run     string `json:"run"`
	Attempt int    `json:"attempt"`
	State   string `json:"state"`
	Slot    string `json:"slot,omitempty"`
	// ElapsedS is the attempt's age; InStateS the time since its last
	// transition, that is, in State.
	ElapsedS float64 `json:"elapsed_s"`
	InStateS float64 `json:"in_state_s"`
	// Slurm is the attempt's Slurm step, when it runs as one: job, step,
	// node, the node's GPU indices and UUIDs, CPUs.
	Slurm *state.SlurmStep `json:"slurm,omitempty"`
}

// Runs is `ctlq runs -o json` and the answer of GET /v1/runs.
type Runs struct {
	Schema int        `json:"schema"`
	Runs   []RunBrief `json:"runs"`
}

// RunBrief is one element of Runs.
type RunBrief struct {
	ID       string         `json:"run"`
	Phase    string         `json:"phase"`
	Kind     string         `json:"kind"`
	Cell     string         `json:"cell,omitempty"`
	State    string         `json:"state"`
	Attempts []AttemptBrief `json:"attempts"`
}

// AttemptBrief is an attempt in a RunBrief.
type AttemptBrief struct {
	N      int    `json:"n"`
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
}

// RunDetail is `ctlq show RUN -o json`.
type RunDetail struct {
	Schema int `json:"schema"`
	// GPUBackend and FakeGPUs are the campaign's (CampaignStatus).
	GPUBackend string              `json:"gpu_backend"`
	FakeGPUs   bool                `json:"fake_gpus"`
	Run        state.Run           `json:"run"`
	State      string              `json:"state"`
	Attempts   []state.Attempt     `json:"attempts"`
	Events     []state.Event       `json:"events"`
	Gates      []state.GateVerdict `json:"gates"`
	// DamagedEvidence are the attempts' evidence files that do not hold
	// what was recorded of them (EvidenceDamage), once a reader of the
	// campaign directory checked them (CheckEvidence): absent when the
	// detail comes unchecked (the controller's socket answers without
	// reading every file, within its deadline), empty when none is damaged.
	DamagedEvidence *[]EvidenceDamage `json:"damaged_evidence,omitempty"`
}

// CheckEvidence checks the evidence files of every attempt of the run
// (DamagedEvidence) and sets d.DamagedEvidence.
func (d *RunDetail) CheckEvidence() {
	out := []EvidenceDamage{}
	for _, a := range d.Attempts {
		out = append(out, DamagedEvidence(a)...)
	}
	d.DamagedEvidence = &out
}

// Damage is d.DamagedEvidence, none when unchecked.
func (d RunDetail) Damage() []EvidenceDamage {
	if d.DamagedEvidence == nil {
		return nil
	}
	return *d.DamagedEvidence
}

// EvidenceDamage is one damaged evidence file of an attempt: its digest
// recorded when the attempt's processes had ended no longer matches, or it
// (or a client result.json that has no digest) holds only NUL bytes
// (state.Attempt.CheckEvidence). Error names the file's path.
type EvidenceDamage struct {
	Attempt int    `json:"attempt"`
	Error   string `json:"error"`
}

// DamagedEvidence checks the attempt's evidence files: those with a
// recorded digest, and in any case its client's result.json and the
// other evidence files (dirlayout.EvidenceFiles), which without a digest
// are damaged when they hold only NUL bytes.
func DamagedEvidence(a state.Attempt) []EvidenceDamage {
	out := []EvidenceDamage{}
	errs := a.DamagedEvidence(dirlayout.EvidenceChecked...)
	for _, err := range errs {
		out = append(out, EvidenceDamage{Attempt: a.N, Error: err.Error()})
	}
	return out
}

// Events is the answer of GET /v1/events.
type Events struct {
	Schema int           `json:"schema"`
	Events []state.Event `json:"events"`
}

// EventLine is one line of `ctlq events -o json`: the events are JSON
// lines (one object per line, so -f can stream them), each an event with
// the schema beside its fields.
type EventLine struct {
	Schema int `json:"schema"`
	state.Event
}

// BuildStatus builds the status from the database. ctl is what the caller
// knows of the controller; its HeartbeatAgeS is computed here. It reads the
// store's Summary only, so its cost does not grow with the number of runs
// or events; the ETA is the expected seconds of the runs not done, less
// what the live attempts have already run of theirs (so it counts down
// while they run; one Run read per live attempt), spread over
// Campaign.RegimeConcurrency slots (at least one), and the budget unit
// is Campaign.BudgetUnit. Nothing is read from dir, the campaign
// directory: plan.json can be large, and the figures the status needs from
// it are kept in the campaign record; only without a controller running
// the end log (endlog.File, at most 1 MiB) bounds the time in flight.
func BuildStatus(s *state.Store, dir string, ctl Controller, now time.Time) (Status, error) {
	sum, err := s.Summary()
	if err != nil {
		return Status{}, err
	}
	c := sum.Campaign
	st := Status{
		Schema: Schema,
		Campaign: CampaignStatus{
			ID: c.ID, Protocol: c.ProtocolName, SHA256: c.ProtocolSHA256, Dir: c.Dir, State: string(c.State), StateAt: c.StateAt,
			StopReason: c.StopReason, StopDetail: c.StopDetail, StopFigures: c.StopFigures, Regime: c.Regime, CreatedAt: c.CreatedAt,
			CapacitySearches: c.Capacity,
		},
		Controller: ctl,
		Runs:       RunCounts{Total: sum.RunsTotal, ByState: sum.RunsByState},
		Budget: BudgetStatus{
			CapGPUHours:      c.BudgetCapGPUHours,
			ChargedGPUHours:  c.ConsumedGPUSeconds / 3600,
			ReservedGPUHours: c.ReservedGPUSeconds / 3600,
		},
		Current:   []Current{},
		LastEvent: sum.LastEventSeq,
	}
	st.Campaign.GPUBackend, st.Campaign.FakeGPUs = BackendOf(c)
	ends := provenEnds(dir, ctl)
	for _, a := range sum.Live {
		until := now
		if t, ok := ends[endlog.Key{Run: a.RunID, N: a.N}]; ok && t.Before(until) {
			until = t
		}
		st.Budget.InFlightGPUHours += InFlightGPUSeconds(a, until) / 3600
	}
	st.Budget.ConsumedGPUHours = st.Budget.ChargedGPUHours + st.Budget.InFlightGPUHours
	st.Budget.RemainingGPUHours = st.Budget.CapGPUHours - st.Budget.ChargedGPUHours - st.Budget.ReservedGPUHours
	if st.Controller.PID == 0 {
		st.Controller.PID = c.ControllerPID
	}
	if st.Controller.Heartbeat.IsZero() {
		st.Controller.Heartbeat = c.Heartbeat
	}
	st.Controller.HeartbeatIntervalS = HeartbeatInterval.Seconds()
	if !st.Controller.Heartbeat.IsZero() {
		age := now.Sub(st.Controller.Heartbeat)
		st.Controller.HeartbeatAgeS = age.Seconds()
		st.Controller.Healthy = st.Controller.Alive && age < HeartbeatStale
	}
	for _, a := range sum.Live {
		in := a.UpdatedAt
		if in.IsZero() {
			in = a.CreatedAt
		}
		st.Current = append(st.Current, Current{
			Run: a.RunID, Attempt: a.N, State: string(a.State), Slot: a.Slot,
			ElapsedS: now.Sub(a.CreatedAt).Seconds(), InStateS: now.Sub(in).Seconds(), Slurm: a.Slurm,
		})
	}
	st.Budget.Unit = c.BudgetUnit
	as, err := s.Amendments()
	if err != nil {
		return Status{}, err
	}
	st.Amendments = []AmendmentBrief{}
	for _, a := range as {
		kind := a.Kind
		if kind == "" {
			kind = "amend"
		}
		st.Amendments = append(st.Amendments, AmendmentBrief{ID: a.ID, Kind: kind, Text: a.Text, Cites: a.Cites, Runs: a.Runs,
			OldSHA256: a.OldSHA256, SHA256: a.ProtocolSHA256, RegisteredAt: a.RegisteredAt})
	}
	left := sum.RemainingExpectedS
	for _, a := range sum.Live {
		r, err := s.Run(a.RunID)
		if err != nil {
			return Status{}, err
		}
		left -= min(max(0, now.Sub(a.CreatedAt).Seconds()), r.ExpectedS)
	}
	if ctl.Alive && c.State == state.CampaignRunning {
		// an ETA only while a live controller runs the campaign: nothing
		// counts down otherwise
		etaS := max(0, left) / float64(max(1, c.RegimeConcurrency))
		st.ETAS = &etaS
	}
	return st, nil
}

// provenEnds reads the campaign's end log when no controller runs: an
// attempt recorded there had no process left at its time, and resume
// charges it to then, so its GPU time in flight stops there too. With a
// controller running, or no directory, none is read. A log that cannot be
// read bounds nothing (the time in flight grows to now, as resume would
// charge).
func provenEnds(dir string, ctl Controller) map[endlog.Key]time.Time {
	if ctl.Alive || dir == "" {
		return nil
	}
	ends, err := endlog.Read(dir)
	if err != nil {
		return nil
	}
	return ends
}

// InFlightGPUSeconds is the GPU time a live attempt holds and has not been
// charged for: its GPUs times the time since its server started, until its
// charge is recorded (the gpu_seconds figure). The reservation of its run
// still stands beside it: a wave's reservation is released when its unit
// ends.
func InFlightGPUSeconds(a state.Attempt, now time.Time) float64 {
	if !a.State.Live() {
		return 0
	}
	if _, charged := a.Figures["gpu_seconds"]; charged {
		return 0
	}
	for _, p := range a.Procs {
		if p.Role == "server" && !p.StartedAt.IsZero() && now.After(p.StartedAt) {
			return float64(len(a.GPUIDs)) * now.Sub(p.StartedAt).Seconds()
		}
	}
	return 0
}

// BuildRuns lists runs in plan order with their attempts; state filters
// by run state when not empty.
func BuildRuns(s *state.Store, filter string) ([]RunBrief, error) {
	runs, err := s.Runs()
	if err != nil {
		return nil, err
	}
	out := []RunBrief{}
	for _, r := range runs {
		if filter != "" && string(r.State()) != filter {
			continue
		}
		b := RunBrief{ID: r.ID, Phase: r.Phase, Kind: r.Kind, Cell: r.Cell, State: string(r.State()), Attempts: []AttemptBrief{}}
		if r.Attempts > 0 {
			atts, err := s.Attempts(r.ID)
			if err != nil {
				return nil, err
			}
			for _, a := range atts {
				b.Attempts = append(b.Attempts, AttemptBrief{N: a.N, State: string(a.State), Reason: string(a.Reason)})
			}
		}
		out = append(out, b)
	}
	return out, nil
}

// BuildRun is the detail of one run.
func BuildRun(s *state.Store, id string) (RunDetail, error) {
	r, err := s.Run(id)
	if err != nil {
		return RunDetail{}, err
	}
	cp, err := s.Campaign()
	if err != nil {
		return RunDetail{}, err
	}
	d := RunDetail{Schema: Schema, Run: r, State: string(r.State()), Attempts: []state.Attempt{}, Events: []state.Event{}}
	d.GPUBackend, d.FakeGPUs = BackendOf(cp)
	if d.Attempts, err = s.Attempts(id); err != nil {
		return RunDetail{}, err
	}
	if d.Attempts == nil {
		d.Attempts = []state.Attempt{}
	}
	for _, a := range d.Attempts {
		for _, seq := range a.EventSeqs {
			evs, err := s.Events(seq-1, 1)
			if err != nil {
				return RunDetail{}, err
			}
			d.Events = append(d.Events, evs...)
		}
	}
	if d.Gates, err = s.GateVerdicts(id); err != nil {
		return RunDetail{}, err
	}
	if d.Gates == nil {
		d.Gates = []state.GateVerdict{}
	}
	return d, nil
}
