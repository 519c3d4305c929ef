package protocols

import "encoding/json"

// PlanSchema is the version of the Plan's JSON form.
const PlanSchema = 1

// Plan is a protocol expanded into the runs a campaign executes, in order.
// It is pure data: nothing in it has touched a GPU or a file beyond the
// protocol itself.
type Plan struct {
	Schema     int              `json:"schema"`
	Protocol   ProtocolInfo     `json:"protocol"`
	Regime     string           `json:"regime"` // the regime the estimate assumes
	Regimes    []RegimeInfo     `json:"regimes"`
	Slots      []SlotInfo       `json:"slots"`
	Classes    []Class          `json:"classes"`
	Provenance []ProvenanceInfo `json:"provenance"`
	// Seeds are the protocol's named seeds (workload, order, analysis),
	// recorded at start in DIR/provenance/seeds.json.
	Seeds   map[string]int64 `json:"seeds,omitempty"`
	Ledger  []CommandSpec    `json:"ledger,omitempty"`
	Gates   []GateInfo       `json:"gates,omitempty"`
	Phases  []PhaseInfo      `json:"phases"`
	Runs    []Run            `json:"runs"`
	Stop    StopInfo         `json:"stop"`
	Retries int              `json:"retries_infrastructure"`
	// PowerCheck is the protocol's power check, with the runs it judges.
	PowerCheck *PowerCheckInfo `json:"power_check,omitempty"`
	Privacy    []string        `json:"privacy_forbidden_fields,omitempty"`
	CleanupS   float64         `json:"cleanup_timeout_s"`
	SampleS    float64         `json:"sample_interval_s"` // 0: no GPU sampling
	// IdleSettleS is the settle period of the idle power reading (0: the
	// preflight reading alone).
	IdleSettleS float64 `json:"idle_settle_s,omitempty"`

	// PrivacyMinLeakBytes is privacy.min_leak_bytes (0 in plans written
	// before it existed: read as DefaultMinLeakBytes).
	PrivacyMinLeakBytes int `json:"privacy_min_leak_bytes,omitempty"`

	// Executor is where the protocol says attempts run.
	Executor ExecutorInfo `json:"executor"`
	// SlurmRequests are the steps and allocations the runs ask Slurm for,
	// with the Slurm executor.
	SlurmRequests []SlurmRequest `json:"slurm_requests,omitempty"`
	Totals        Totals         `json:"totals"`
	// InputsUnchecked names the inputs the plan could not look for (with
	// Options.CheckInputs), each with the reason.
	InputsUnchecked []string `json:"inputs_unchecked,omitempty"`
}

// ExecutorInfo is the protocol's executor, with its defaults applied.
type ExecutorInfo struct {
	Kind  string     `json:"kind"` // "local" or "slurm"
	Slurm *SlurmInfo `json:"slurm,omitempty"`
}

// SlurmInfo is the Slurm executor's request (see SlurmExecutor).
type SlurmInfo struct {
	Partition     string `json:"partition,omitempty"`
	Account       string `json:"account,omitempty"`
	Constraint    string `json:"constraint,omitempty"`
	Exclusive     bool   `json:"exclusive,omitempty"`
	QueueTimeoutS int    `json:"queue_timeout_s"`
	Nodes         int    `json:"nodes"`
}

// ProtocolInfo identifies the protocol a plan came from.
type ProtocolInfo struct {
	Name    string `json:"name"`
	Title   string `json:"title,omitempty"`
	Frozen  string `json:"frozen,omitempty"`
	File    string `json:"file"`
	Format  int    `json:"format"`
	SHA256  string `json:"sha256"`
	Workdir string `json:"workdir"` // relative to the protocol file's directory
	Unit    string `json:"unit,omitempty"`
}

// RegimeInfo is a regime with its slots resolved.
type RegimeInfo struct {
	Name        string   `json:"name"`
	Concurrency int      `json:"concurrency"`
	Slots       []string `json:"slots"`
	Gate        string   `json:"gate,omitempty"` // gate that must pass first
}

// SlotInfo is a slot with its CPU list normalized.
type SlotInfo struct {
	Name string `json:"name"`
	GPUs []int  `json:"gpus"`
	CPUs string `json:"cpus"`
	NUMA *int   `json:"numa,omitempty"`
	// Port is 0 in a plan for a slot with port: auto (PortAuto) until
	// controller start chooses a free one and records it in DIR/plan.json.
	Port     int  `json:"port"`
	PortAuto bool `json:"port_auto,omitempty"`
}

// ProvenanceInfo is a file to hash at campaign start.
type ProvenanceInfo struct {
	Path    string `json:"path"`
	Role    string `json:"role"`
	Private bool   `json:"private"`
	// SHA256 is the hash the protocol freezes for the file, SHA256At where
	// (FILE:LINE:COL of its sha256 field); empty when none is frozen.
	SHA256   string `json:"sha256,omitempty"`
	SHA256At string `json:"sha256_at,omitempty"`
	// Shards is the glob of a model directory's files to record.
	Shards string `json:"shards,omitempty"`
}

// PriorInfo is a prior verdict as the plan read it: Read is false when
// the plan did not look at its inputs (the file is read at start then).
type PriorInfo struct {
	File       string      `json:"file"`
	Read       bool        `json:"read"`
	SHA256     string      `json:"sha256,omitempty"`
	Check      string      `json:"check,omitempty"`
	GPUHours   float64     `json:"gpu_hours,omitempty"`
	Authorized string      `json:"authorized_regime,omitempty"`
	Gates      []PriorGate `json:"gates,omitempty"`
}

// GateInfo is a gate the plan will evaluate, with its rule.
type GateInfo struct {
	Name                string       `json:"name"`
	Kind                string       `json:"kind"`
	Regime              string       `json:"regime,omitempty"`
	Solo                string       `json:"solo_run,omitempty"`
	Target              string       `json:"target_run,omitempty"`
	ThroughputFile      string       `json:"throughput_file,omitempty"`
	ThroughputField     string       `json:"throughput_field,omitempty"`
	ThroughputTolerance float64      `json:"throughput_tolerance,omitempty"`
	Validator           *CommandSpec `json:"validator,omitempty"`
	FigureTolerance     float64      `json:"figure_tolerance,omitempty"`
	ProfileWindows      int          `json:"profile_windows,omitempty"`
	Condition           string       `json:"condition,omitempty"`
	// Prior is the verdict file the gate's verdict is read from, when the
	// check ran before the campaign (no run of the plan judges it).
	Prior string `json:"prior,omitempty"`
}

// PhaseInfo summarizes a phase.
type PhaseInfo struct {
	Name  string `json:"name"`
	Kind  string `json:"kind"`
	Order string `json:"order"`
	Runs  int    `json:"runs"`
	// Prior is a colocation phase's verdict from before the campaign.
	Prior *PriorInfo `json:"prior,omitempty"`
	Cells int        `json:"cells"`
	// Capacity is a capacity phase's search: Runs counts its worst case,
	// MaxPoints per cell.
	Capacity *CapacitySpec `json:"capacity,omitempty"`
}

// Run is one unit the controller executes.
type Run struct {
	Index     int               `json:"index"`
	ID        string            `json:"id"`
	Phase     string            `json:"phase"`
	PhaseKind string            `json:"phase_kind"`
	Kind      string            `json:"kind"`
	Cell      string            `json:"cell"`
	Axes      map[string]string `json:"axes"`
	Load      string            `json:"load"`
	Repeat    int               `json:"repeat"`
	Needs     []string          `json:"needs"`
	NeedVars  map[string]string `json:"need_vars,omitempty"` // NEED_<AS>_DIR name -> run id
	GPUs      int               `json:"gpus"`
	Slot      string            `json:"slot,omitempty"` // fixed placement (co-location runs)
	Regime    string            `json:"regime"`
	Class     string            `json:"class"`
	DrainS    float64           `json:"drain_allowance_s"`
	WatchdogS float64           `json:"watchdog_s"`
	// ClientDrainS is the drain bound the run's client is given (the value
	// of its --drain-timeout-seconds), when it has one: never shorter than
	// the class's allowance (the plan refuses it).
	ClientDrainS *float64 `json:"client_drain_bound_s,omitempty"`
	ExpectedS    float64  `json:"expected_s"`
	// The run's bounds: the measuring deadline (client start to exit), where
	// the end of admission is read, and the worst case from server start to
	// cleanup (ready timeout + deadline + shutdown graces + cleanup timeout).
	DeadlineS    float64 `json:"deadline_s"`
	AdmissionEnd string  `json:"admission_end"`
	ResultFile   string  `json:"result_file"`
	// Manifest is the provenance path of the input the client reads (the
	// load's manifest), when the load names one: its result's
	// manifest.sha256 is checked against the hash recorded at start.
	Manifest  string  `json:"manifest,omitempty"`
	BoundS    float64 `json:"bound_s"`
	Measured  bool    `json:"measured"`
	Unit      int     `json:"unit"` // runs of one unit run back to back, in one slot
	Condition string  `json:"condition,omitempty"`
	// Capacity says which point of a capacity search the run is; its
	// client's ${CAPACITY_RATE} is decided when it starts (Condition is then
	// "capacity search").
	Capacity    *CapacityPoint    `json:"capacity,omitempty"`
	Backgrounds []string          `json:"backgrounds,omitempty"` // runs that must be serving beside this one
	Until       []string          `json:"until,omitempty"`       // a background: stopped after these runs
	ClientStart string            `json:"client_start"`
	Server      ServerSpec        `json:"server"`
	Client      CommandSpec       `json:"client"`
	Env         map[string]string `json:"env,omitempty"`
	Validators  []ValidatorSpec   `json:"validators,omitempty"`

	// Where and when the estimate placed the run (seconds from campaign start).
	PlannedSlots []string `json:"planned_slots"`
	PlannedGPUs  []int    `json:"planned_gpus"`
	StartS       float64  `json:"planned_start_s"`
}

// CommandSpec is a command with plan-time variables substituted; the
// launch-time ones remain as ${NAME} for Expand.
type CommandSpec struct {
	Argv  []string `json:"argv,omitempty"`
	Shell string   `json:"shell,omitempty"`
}

// ServerSpec is a run's server.
type ServerSpec struct {
	Name           string            `json:"name"`
	Kind           string            `json:"kind"`
	Command        CommandSpec       `json:"command"`
	Env            map[string]string `json:"env,omitempty"`
	HealthPath     string            `json:"health_path"`
	HealthStatus   int               `json:"health_status"`
	ReadyTimeoutS  float64           `json:"ready_timeout_s"`
	ConfigEndpoint string            `json:"config_endpoint,omitempty"`
	ShutdownGraceS float64           `json:"shutdown_grace_s"`
	GroupGraceS    float64           `json:"group_grace_s"`
	Expect         []ExpectSpec      `json:"expect,omitempty"`
}

// ExpectSpec is an effective value the server log must show.
type ExpectSpec struct {
	Name    string          `json:"name"`
	Pattern string          `json:"pattern,omitempty"`
	Path    string          `json:"path,omitempty"`
	Equals  json.RawMessage `json:"equals,omitempty"`
}

func expectSpec(e Expect) ExpectSpec {
	x := ExpectSpec{Name: e.Name, Pattern: e.Pattern, Path: e.Path}
	if e.Equals.JSON != "" {
		x.Equals = json.RawMessage(e.Equals.JSON)
	}
	return x
}

// ValidatorSpec is a validator command for a run.
type ValidatorSpec struct {
	Name    string      `json:"name"`
	Command CommandSpec `json:"command"`
	// TimeoutS bounds the validator's run (seconds); MemoryMiB its address
	// space, 0: half of the host's memory when it starts.
	TimeoutS  float64 `json:"timeout_s"`
	MemoryMiB float64 `json:"memory_mib,omitempty"`
}

// StopInfo are the stop thresholds.
type StopInfo struct {
	QuarantinedFractionGT *float64 `json:"quarantined_fraction_gt,omitempty"`
	FailedFractionGT      *float64 `json:"failed_fraction_gt,omitempty"`
	MinFreeGB             *float64 `json:"min_free_gb,omitempty"`
	MaxArtifactsGB        *float64 `json:"max_artifacts_gb,omitempty"`
}

// Totals sums up the plan.
type Totals struct {
	Runs             int            `json:"runs"`
	ByKind           map[string]int `json:"by_kind"`
	ByPhase          map[string]int `json:"by_phase"`
	Measured         int            `json:"measured"`
	Conditional      int            `json:"conditional"`
	PrimaryCells     int            `json:"primary_cells"`
	ExpectedWallS    float64        `json:"expected_wall_s"`
	GPUHoursEstimate float64        `json:"gpu_hours_estimate"`
	// BoundsGPUHours is what every run (conditional ones too) would cost at
	// its bounds; Reserve says which of the two a wave reserves.
	BoundsGPUHours float64 `json:"bounds_gpu_hours"`
	Reserve        string  `json:"reserve"`
	// ConservativeGPUHours is what the runs that are not conditional would
	// cost at their bounds (GPUHoursEstimate is their nominal cost).
	ConservativeGPUHours float64 `json:"conservative_gpu_hours"`
	// Colocation is the co-location check's cost and Matrix the rest's,
	// apart (seed 002, A-P3-1: "The one-time co-location validation is
	// reported separately from matrix cost"); conditional runs excluded.
	Colocation CostInfo `json:"colocation"`
	Matrix     CostInfo `json:"matrix"`
	// PeakReservation is the largest total a launch checks against the cap
	// on the estimate's timeline: the GPU time charged by then (nominal,
	// plus the budget's consumed hours), the reservations of the units in
	// flight and the launching unit's own, each at what a wave reserves.
	// PeakReservationRun is the first run of that launch; ReservationFits
	// says the peak is within the cap.
	PeakReservationGPUHours float64 `json:"peak_reservation_gpu_hours"`
	PeakReservationRun      string  `json:"peak_reservation_run,omitempty"`
	ReservationFits         bool    `json:"reservation_fits"`
	// FirstRefused is the first launch whose reservation would not fit,
	// when one would not (ReservationFits false).
	FirstRefused            *RefusedLaunch `json:"first_refused,omitempty"`
	ConditionalGPUHours     float64        `json:"conditional_gpu_hours"`
	BudgetCapGPUHours       float64        `json:"budget_cap_gpu_hours"`
	BudgetConsumedGPUHours  float64        `json:"budget_consumed_gpu_hours"`
	BudgetRemainingGPUHours float64        `json:"budget_remaining_gpu_hours"`
	RemainingAfterEstimate  float64        `json:"budget_remaining_after_estimate_gpu_hours"`
	RemainingAfterWorstCase float64        `json:"budget_remaining_after_worst_case_gpu_hours"`
	Unit                    string         `json:"unit,omitempty"`
}

// CostInfo is a part of the plan's cost: its runs (not conditional), what
// they cost nominally (expected_s) and conservatively (their bounds).
type CostInfo struct {
	Runs                 int     `json:"runs"`
	NominalGPUHours      float64 `json:"nominal_gpu_hours"`
	ConservativeGPUHours float64 `json:"conservative_gpu_hours"`
}

// RunByID returns the run with the given id.
func (p *Plan) RunByID(id string) (*Run, bool) {
	for i := range p.Runs {
		if p.Runs[i].ID == id {
			return &p.Runs[i], true
		}
	}
	return nil, false
}
