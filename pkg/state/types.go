package state

import (
	"encoding/json"
	"time"
)

// CampaignState is the state of the whole campaign.
type CampaignState string

// Campaign states. See campaignTransitions for the allowed changes.
const (
	// CampaignRunning: the controller launches runs.
	CampaignRunning CampaignState = "running"
	// CampaignStopped: the controller launches nothing new and waits for a person;
	// StopReason says why.
	CampaignStopped CampaignState = "stopped"
	// CampaignComplete: every run of the plan is done.
	CampaignComplete CampaignState = "complete"
	// CampaignFrozen: an amendment froze the matrix (controller freeze):
	// nothing is scheduled again, and every run without a result is not-run.
	CampaignFrozen CampaignState = "frozen"
)

// StopReason says why a campaign stopped. The values are stored as
// strings and shown by ctlq: never rename or remove one. A run's failure
// that stops the campaign uses the run's Reason (StopForRun).
type StopReason string

// Campaign stop reasons.
const (
	// StopOperator: an operator stopped the controller (controller stop,
	// SIGTERM); the campaign is resumable as it is.
	StopOperator StopReason = "operator-stop"
	// StopBudget: the next wave's reservation would pass the GPU-hour cap.
	StopBudget StopReason = "budget"
	// StopBudgetExhausted: the GPU time charged and in flight passed the
	// cap while runs were in flight; they were ended gracefully.
	StopBudgetExhausted StopReason = "budget-exhausted"
	// StopNoRegime: no regime is authorized (every one needs a gate that
	// did not pass).
	StopNoRegime StopReason = "no-regime"
	// StopGateError: a regime's gate could not judge (an error verdict)
	// before any regime was authorized; the detail names the error and the
	// regimes not tried. Also: a capacity search's point could not be
	// judged against its SLO; the detail names the search and the point.
	StopGateError StopReason = "gate-error"
	// StopDisk: free disk space or the artifacts' size passed the
	// protocol's limits before a wave.
	StopDisk StopReason = "disk"
	// StopQuarantinedFraction: more than the protocol's fraction of the
	// measured runs is quarantined.
	StopQuarantinedFraction StopReason = "quarantined-fraction"
	// StopFailedFraction: more than the protocol's fraction of the
	// measured runs failed.
	StopFailedFraction StopReason = "failed-fraction"
	// StopHarnessError: the controller itself failed (an I/O error, a full
	// disk, a bug); the detail says what.
	StopHarnessError StopReason = "harness-error"
	// StopInputChanged: an input recorded at start (provenance) hashed
	// otherwise, or was missing, before a wave; the detail names the file
	// and both hashes.
	StopInputChanged StopReason = "input-changed"
	// StopAwaitingAmendment: nothing more can run while runs whose
	// failure allows no rerun wait for an amendment; the detail names them.
	StopAwaitingAmendment StopReason = "awaiting-amendment"
	// StopPowerCheck: before the matrix, the campaign's expected
	// completion probability under its gates that judge a sample is below
	// the protocol's power_check threshold, or cannot be told; the detail
	// names the gate, the figure and the amendment that would fix it.
	StopPowerCheck StopReason = "power-check"
	// StopCapacityNotMonotonic: a capacity search's point failed its SLO
	// at a rate no higher than one that passed it (or passed above one
	// that failed): the found rate is not a capacity, and the protocol
	// (on_non_monotonic: stop) stops for review; the detail names both
	// points and their rates.
	StopCapacityNotMonotonic StopReason = "capacity-not-monotonic"
)

// StopReasons lists the campaign-level stop reasons; a run's failure
// stops the campaign with StopForRun of its Reason.
var StopReasons = []StopReason{
	StopOperator, StopBudget, StopBudgetExhausted, StopNoRegime, StopGateError, StopDisk, StopQuarantinedFraction,
	StopFailedFraction, StopHarnessError, StopInputChanged, StopAwaitingAmendment, StopPowerCheck, StopCapacityNotMonotonic,
}

// StopForRun is the campaign's stop reason when a run's failure stops it:
// the run's own reason.
func StopForRun(r Reason) StopReason { return StopReason(r) }

// Campaign is the single record of the campaign bucket.
type Campaign struct {
	ID             string        `json:"id"`
	ProtocolName   string        `json:"protocol_name"`
	ProtocolSHA256 string        `json:"protocol_sha256"`
	ProtocolPath   string        `json:"protocol_path"`
	Dir            string        `json:"dir"`
	CreatedAt      time.Time     `json:"created_at"`
	State          CampaignState `json:"state"`
	// StateAt is when the campaign entered State (zero in campaigns
	// recorded before the field, until their state next changes).
	StateAt time.Time `json:"state_at,omitzero"`
	// StopReason, StopDetail and StopFigures describe the last stop; they are
	// cleared when the campaign runs again (the events keep the history).
	StopReason  StopReason         `json:"stop_reason,omitempty"`
	StopDetail  string             `json:"stop_detail,omitempty"`
	StopFigures map[string]float64 `json:"stop_figures,omitempty"`
	Regime      string             `json:"regime,omitempty"`
	// RegimeConcurrency is how many runs the regime runs at once (the ETA
	// divides the remaining expected seconds by it; 0 counts as 1).
	RegimeConcurrency int `json:"regime_concurrency"`
	// BudgetUnit names the unit of the budget figures, as the protocol
	// states it; empty means GPU-hours.
	BudgetUnit string `json:"budget_unit"`
	// BudgetCapGPUHours is the protocol's cap; PriorGPUHours what was consumed
	// before this campaign (written to the ledger as a "prior" entry).
	BudgetCapGPUHours float64 `json:"budget_cap_gpu_hours"`
	PriorGPUHours     float64 `json:"prior_gpu_hours"`
	// ConsumedGPUSeconds is the sum of the ledger's prior and charge entries;
	// ReservedGPUSeconds the sum of reserve minus release entries. Only
	// AddLedger changes them, in the transaction that appends the entry.
	ConsumedGPUSeconds float64   `json:"consumed_gpu_seconds"`
	ReservedGPUSeconds float64   `json:"reserved_gpu_seconds"`
	Heartbeat          time.Time `json:"heartbeat"`
	ControllerPID      int       `json:"controller_pid"`
	ControllerBootID   string    `json:"controller_boot_id"`
	// GPUBackend is the GPU backend the campaign reads: "nvml", or
	// "fake" (file-backed GPUs: nothing measured is a GPU's); "" in
	// campaigns recorded before the field existed, until their next
	// controller records it.
	GPUBackend string `json:"gpu_backend,omitempty"`
	// Capacity is where each capacity search stands, as its controller
	// last judged one of its points (SetCapacitySearch); in plan order.
	Capacity []CapacitySearch `json:"capacity_searches,omitempty"`
}

// CapacitySearch is where one capacity search stands: what ctlq status and
// its events say of it.
type CapacitySearch struct {
	Search string `json:"search"`
	// Judged is how many of its points are judged; Done says none is left
	// to run; Stop why it ended early (below-range, error).
	Judged int    `json:"judged"`
	Done   bool   `json:"done"`
	Stop   string `json:"stop,omitempty"`
	// FoundRPS is the bisection's λ* (requests/s), 0 until it ended.
	FoundRPS float64 `json:"found_rps,omitempty"`
	// NotMonotonic, when set, says why FoundRPS is not a capacity (the
	// points whose verdicts contradict each other).
	NotMonotonic string `json:"not_monotonic,omitempty"`
}

// RunState is the state of a run, derived from its fields (see Run.State).
type RunState string

// Run states, as counted by Summary.
const (
	// RunPending: no attempt yet, or the last attempt was interrupted.
	RunPending RunState = "pending"
	// RunRunning: the last attempt is live (not in a terminal state).
	RunRunning RunState = "running"
	// RunComplete: the run has a complete attempt.
	RunComplete RunState = "complete"
	// RunQuarantined: the run has a quarantined attempt.
	RunQuarantined RunState = "quarantined"
	// RunFailed: the last attempt failed and the run is not done.
	RunFailed RunState = "failed"
	// RunNotRun: a freeze, or a capacity search that ended before it, left
	// the run without a result for good; never imputed.
	RunNotRun RunState = "not-run"
)

// Run is one unit of the plan. Attempts, Done, Result and LastState are
// derived from the run's attempts; the store keeps them up to date, and the
// counters record (runs by state, remaining expected seconds) with them.
type Run struct {
	ID        string   `json:"id"`
	Order     int      `json:"order"` // position in the plan
	Phase     string   `json:"phase"`
	Kind      string   `json:"kind"`
	Cell      string   `json:"cell"`
	Load      string   `json:"load"`
	Needs     []string `json:"needs,omitempty"`
	GPUs      int      `json:"gpus"`
	ExpectedS float64  `json:"expected_s"`
	Class     string   `json:"class"`

	Attempts  int          `json:"attempts"`   // number of attempts
	Done      bool         `json:"done"`       // has a complete or quarantined attempt
	Result    int          `json:"result"`     // number of that attempt, 0 if none
	LastState AttemptState `json:"last_state"` // state of the latest attempt, "" if none
	// ResultState is the re-adjudicated state of the result attempt when a
	// re-adjudication made it the result or changed its state; "" else.
	ResultState AttemptState `json:"result_state,omitempty"`
	// NotRun is the amendment that froze the matrix with the run
	// unfinished; "" else.
	NotRun string `json:"not_run,omitempty"`
	// NotRunReason says why a run no amendment froze will never run (a
	// capacity search that ended before its point; MarkNotRun); "" else.
	NotRunReason string `json:"not_run_reason,omitempty"`
}

// Closed says the run has no result and never will: frozen, or not run.
func (r Run) Closed() bool { return !r.Done && (r.NotRun != "" || r.NotRunReason != "") }

// State derives the run's state from its fields.
func (r Run) State() RunState {
	switch {
	case r.Done && r.ResultState == Quarantined:
		return RunQuarantined
	case r.Done && r.ResultState != "":
		return RunComplete
	case r.Closed():
		return RunNotRun
	case r.Done && r.LastState == Quarantined:
		return RunQuarantined
	case r.Done:
		return RunComplete
	case r.LastState == Failed:
		return RunFailed
	case r.LastState.Live():
		return RunRunning
	default:
		return RunPending
	}
}

// Attempt is one try of a run.
type Attempt struct {
	RunID     string       `json:"run_id"`
	N         int          `json:"n"` // 1, 2, ... per run
	State     AttemptState `json:"state"`
	Reason    Reason       `json:"reason,omitempty"` // set by the terminal transition
	Dir       string       `json:"dir"`
	CreatedAt time.Time    `json:"created_at"`
	UpdatedAt time.Time    `json:"updated_at"`
	Slot      string       `json:"slot,omitempty"`
	GPUIDs    []int        `json:"gpu_ids,omitempty"`
	CPUs      string       `json:"cpus,omitempty"`
	Port      int          `json:"port,omitempty"`
	Procs     []Proc       `json:"procs,omitempty"`
	Signals   []Signal     `json:"signals,omitempty"`
	Exits     []Exit       `json:"exits,omitempty"`
	Commands  [][]string   `json:"commands,omitempty"`
	// PendingReason is the failure noted when the attempt left the happy path
	// (the transition into stopping); the terminal transition applies it.
	PendingReason  Reason             `json:"pending_reason,omitempty"`
	Figures        map[string]float64 `json:"figures,omitempty"`
	ProtocolSHA256 string             `json:"protocol_sha256"`
	Amendments     []string           `json:"amendments,omitempty"`
	// Slurm identifies the Slurm step the attempt ran as (the Slurm
	// executor); nil for an attempt run on the controller's own host.
	Slurm *SlurmStep `json:"slurm,omitempty"`
	// EventSeqs lists the sequence numbers of this attempt's events, in order.
	EventSeqs []uint64 `json:"event_seqs"`
	// Readjudicated is the latest new verdict on the attempt under an
	// amendment (controller readjudicate); State and Reason stay as
	// recorded.
	Readjudicated *Readjudication `json:"readjudicated,omitempty"`
	// Evidence are the digests of the attempt's evidence files, taken
	// once its processes had ended (EvidenceFile).
	Evidence []EvidenceFile `json:"evidence,omitempty"`
}

// usable reports whether the attempt is its run's result: complete or
// quarantined, or made so by a re-adjudication.
func (a Attempt) usable() bool {
	if a.Readjudicated != nil {
		return a.Readjudicated.State.result()
	}
	return a.State.result()
}

// SlurmStep is where an attempt ran on a Slurm cluster: the job and step
// the controller asked for, and what the node-side runner saw there.
type SlurmStep struct {
	// JobName is the name the job was submitted under (the campaign's
	// jobs share its prefix); JobID and StepID are Slurm's once known.
	JobName string `json:"job_name"`
	JobID   string `json:"job_id,omitempty"`
	StepID  string `json:"step_id,omitempty"`
	// Shared: the job is an allocation the attempt shares with others
	// (a co-location block's), its step one of several.
	Shared bool `json:"shared,omitempty"`
	// Node is the node the step ran on (SLURMD_NODENAME).
	Node string `json:"node,omitempty"`
	// StepGPUs is SLURM_STEP_GPUS: the node's indices of the step's GPUs.
	StepGPUs string `json:"step_gpus,omitempty"`
	// GPUUUIDs are the UUIDs the node's GPU backend read for them.
	GPUUUIDs []string `json:"gpu_uuids,omitempty"`
	// CPUs is the CPU list the step was allowed (its affinity mask).
	CPUs string `json:"cpus,omitempty"`
	// Start and End are Slurm's own times of the step, from its
	// accounting, once read (resume reads them for the charge).
	Start time.Time `json:"start,omitzero"`
	End   time.Time `json:"end,omitzero"`
}

// Proc identifies a process an attempt started. A bare pid is never trusted
// after a restart: PID, StartTime and BootID together name one process.
type Proc struct {
	Role      string    `json:"role"` // "server", "client", ...
	PID       int       `json:"pid"`
	StartTime uint64    `json:"start_time"` // clock ticks since boot, field 22 of /proc/PID/stat
	BootID    string    `json:"boot_id"`
	PGID      int       `json:"pgid"`
	Cgroup    string    `json:"cgroup,omitempty"`
	Argv      []string  `json:"argv"`
	StartedAt time.Time `json:"started_at"`
}

// Signal records one signal sent on behalf of an attempt.
type Signal struct {
	At     time.Time `json:"at"`
	Role   string    `json:"role"`
	Target string    `json:"target"` // "pid", "group" or "cgroup"
	PID    int       `json:"pid"`
	Signal string    `json:"signal"`
}

// Exit records how one of an attempt's processes ended.
type Exit struct {
	Role   string    `json:"role"`
	PID    int       `json:"pid"`
	Code   int       `json:"code"`
	Signal string    `json:"signal,omitempty"`
	At     time.Time `json:"at"`
}

// ControllerDied says whether the controller that last ran the campaign
// died: a controller that ends records the campaign stopped or complete,
// so one still running with a heartbeat had no controller that ended it.
// Only the controller that holds the campaign's lock may ask.
func (c Campaign) ControllerDied() bool {
	return c.State == CampaignRunning && !c.Heartbeat.IsZero()
}

// EventControllerDead is the reason of the campaign event a resume
// records when the controller before it died (the campaign was still
// running): its figures dead_from_unix (the last heartbeat) and
// dead_until_unix (the resume) bound the time nothing supervised the
// campaign.
const EventControllerDead = "controller-dead"

// Event is one entry of the append-only event log. Attempt events have Run
// and Attempt set and From/To attempt states; campaign events have Run ""
// and From/To campaign states (equal for a note).
type Event struct {
	Seq     uint64             `json:"seq"`
	Mono    int64              `json:"mono"` // CLOCK_MONOTONIC, ns
	Wall    time.Time          `json:"wall"`
	Run     string             `json:"run,omitempty"`
	Attempt int                `json:"attempt,omitempty"`
	From    string             `json:"from"`
	To      string             `json:"to"`
	Reason  string             `json:"reason,omitempty"`
	Message string             `json:"message,omitempty"`
	Figures map[string]float64 `json:"figures,omitempty"`
}

// Ledger entry kinds.
const (
	LedgerPrior   = "prior"   // GPU time consumed before this campaign
	LedgerCharge  = "charge"  // GPU time an attempt held
	LedgerReserve = "reserve" // a wave's conservative cost, before it starts
	LedgerRelease = "release" // a reservation given back
	// LedgerOverrun records, when a budget stop ended the runs in flight,
	// the GPU time charged past the cap. It is a note: the charges that
	// make it up are on the ledger already, so it counts in no total.
	LedgerOverrun = "overrun"
)

// LedgerEntry is one entry of the budget ledger.
type LedgerEntry struct {
	Seq        uint64    `json:"seq"`
	At         time.Time `json:"at"`
	Kind       string    `json:"kind"`
	Run        string    `json:"run,omitempty"`
	Attempt    int       `json:"attempt,omitempty"`
	GPUSeconds float64   `json:"gpu_seconds"`
	Note       string    `json:"note,omitempty"`
}

// Gate verdicts.
const (
	VerdictPass  = "pass"
	VerdictFail  = "fail"
	VerdictError = "error"
)

// GateVerdict is the outcome of one gate check.
type GateVerdict struct {
	Seq     uint64             `json:"seq"`
	Gate    string             `json:"gate"`
	Run     string             `json:"run,omitempty"`
	Attempt int                `json:"attempt,omitempty"`
	Verdict string             `json:"verdict"`
	Figures map[string]float64 `json:"figures,omitempty"`
	Detail  string             `json:"detail,omitempty"`
	At      time.Time          `json:"at"`
}

// Amendment is a dated, named change to the frozen protocol: a change of
// the protocol (kind amend), a re-adjudication of recorded attempts under
// one (readjudicate), or the freezing of the matrix (freeze).
type Amendment struct {
	ID             string `json:"id"`
	Kind           string `json:"kind,omitempty"` // amend, readjudicate, freeze; "" for amend
	Date           string `json:"date"`
	Title          string `json:"title"`
	Text           string `json:"text"` // the reason given
	OperatorUID    int    `json:"operator_uid"`
	OldSHA256      string `json:"old_protocol_sha256,omitempty"`
	ProtocolSHA256 string `json:"protocol_sha256"`
	// Cites is the amendment a re-adjudication applies.
	Cites string `json:"cites,omitempty"`
	// Runs are the runs it changed, re-adjudicated or left not-run.
	Runs []string `json:"runs,omitempty"`
	// Diff is the plan diff of an amend, as JSON.
	Diff         json.RawMessage `json:"diff,omitempty"`
	RegisteredAt time.Time       `json:"registered_at"`
	// Unstarted are runs that must have no attempt when the amendment is
	// recorded (checked in the same transaction, not stored): the points
	// of a capacity search it changes.
	Unstarted []string `json:"-"`
}

// Readjudication is a new verdict on a recorded attempt under an
// amendment, kept beside the attempt's own state and reason, which stay as
// they were recorded.
type Readjudication struct {
	Amendment string       `json:"amendment"`
	State     AttemptState `json:"state"` // complete, quarantined or failed
	Reason    Reason       `json:"reason,omitempty"`
	Detail    string       `json:"detail"`
	At        time.Time    `json:"at"`
}

// Summary is what a status query needs, read in one transaction without
// scanning the runs or the events.
type Summary struct {
	Campaign     Campaign       `json:"campaign"`
	RunsTotal    int            `json:"runs_total"`
	RunsByState  map[string]int `json:"runs_by_state"` // keys are RunState values; no key for a count of 0
	Live         []Attempt      `json:"live"`
	LastEventSeq uint64         `json:"last_event_seq"`
	// RemainingExpectedS is the sum of Run.ExpectedS over the runs not done.
	RemainingExpectedS float64 `json:"remaining_expected_s"`
}

// StateFile is the content of an attempt's DIR/state.json.
type StateFile struct {
	Campaign string  `json:"campaign"`
	Attempt  Attempt `json:"attempt"`
	Events   []Event `json:"events"`
}
