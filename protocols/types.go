package protocols

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// FormatVersion is the protocol format this package reads: the value of the
// top-level "warden" key.
const FormatVersion = 1

// Protocol is a protocol file as written. Field comments are the format's
// reference; docs/protocol.md walks through it with examples.
type Protocol struct {
	Meta Meta `yaml:"-"`

	Warden      int              `yaml:"warden" warden:"required"` // format version, 1
	Name        string           `yaml:"name" warden:"required"`   // campaign name, a safe path component
	Title       string           `yaml:"title"`
	Frozen      string           `yaml:"frozen"` // date the protocol was frozen
	Description string           `yaml:"description"`
	Seeds       map[string]int64 `yaml:"seeds"` // named seeds, recorded (order seeds are given in phases)

	Workdir    string            `yaml:"workdir"` // where commands run, relative to the protocol file; default its directory
	Host       Host              `yaml:"host" warden:"required"`
	Budget     Budget            `yaml:"budget" warden:"required"`
	Vars       map[string]string `yaml:"vars"` // constants, usable as ${NAME} in every command
	Provenance []ProvenanceFile  `yaml:"provenance"`
	Ledger     []Command         `yaml:"ledger"` // commands whose output is recorded at campaign start (versions, pip freeze)

	Slots   []Slot   `yaml:"slots" warden:"required"`
	Regimes []Regime `yaml:"regimes" warden:"required"`
	Classes []Class  `yaml:"classes" warden:"required"`
	Servers []Server `yaml:"servers" warden:"required"`
	Loads   []Load   `yaml:"loads" warden:"required"`
	Axes    []Axis   `yaml:"axes" warden:"required"`
	Phases  []Phase  `yaml:"phases" warden:"required"`

	// SampleIntervalS is how often GPU power, clocks, memory and
	// processes are sampled while a server runs (a process that is not
	// the attempt's fails the run); default 1, 0 switches sampling off,
	// and the mid-run process check with it (energy counters are still
	// read at each attempt's ends).
	SampleIntervalS *float64 `yaml:"sample_interval_s"`
	// IdleSettleS is how long, before each server starts, the GPUs' power
	// is read every second for its idle level, the lowest reading kept (a
	// GPU warm from the run before draws more: the energy per request
	// subtracts this level); default 0: the preflight reading alone.
	IdleSettleS float64 `yaml:"idle_settle_s"`

	Cleanup    Cleanup     `yaml:"cleanup"`
	Executor   Executor    `yaml:"executor"`
	Stop       StopRules   `yaml:"stop"`
	Retries    Retries     `yaml:"retries"`
	Privacy    Privacy     `yaml:"privacy"`
	Validators []Validator `yaml:"validators"`
	// PowerCheck, when set, stops the campaign for review before the
	// first run of its first primary phase launches when the campaign
	// cannot be expected to complete under its gates that judge a sample
	// (docs/protocol.md, "The power check"). Warden's own stop, not a
	// seed's rule; it changes no verdict.
	PowerCheck *PowerCheck `yaml:"power_check"`
}

// PowerCheck is the check, before a campaign's matrix, that the gates
// that judge a sample (representativeness, recovery) pass representative
// runs often enough for the campaign to complete: from the false-failure
// rates measured on the runs before the matrix (validate power, or the
// judging validators' own figures), the probability that every judged run
// passes, with the exact reruns the outcome policy allows.
type PowerCheck struct {
	Meta Meta `yaml:"-"`
	// MinCompletionProbability is the least expected completion
	// probability the campaign goes on with, in (0, 1].
	MinCompletionProbability float64 `yaml:"min_completion_probability" warden:"required"`
	// Amendment names, in the stop, the dated amendment that would fix a
	// gate the check finds too strict (its id and file).
	Amendment string      `yaml:"amendment"`
	Gates     []PowerGate `yaml:"gates" warden:"required"`
}

// PowerGate is one gate the power check judges.
type PowerGate struct {
	Meta Meta `yaml:"-"`
	// Measure is representativeness (layer2's SMD rule), recovery, or
	// profile_window (a window's traces complete within the judged runs'
	// budget, judged by validate profile-windows).
	Measure string `yaml:"measure" warden:"required"`
	// JudgedBy names the validator that applies the gate's rule: a
	// `controller validate layer2` (representativeness), `validate
	// recovery` or `validate profile-windows` (profile_window) command,
	// whose --representativeness / --rule and --calibration-quantile say
	// the rule in force; its runs are the judged ones.
	JudgedBy string `yaml:"judged_by" warden:"required"`
	// Headroom (profile_window only; default 1.25) is how much longer
	// than the slowest measured window a judged run's window budget must
	// be.
	Headroom float64 `yaml:"headroom"`
	// Amendment names the dated amendment that would fix this gate, in a
	// stop it causes; default the power check's own amendment.
	Amendment string `yaml:"amendment"`
}

// Host is the machine the protocol was frozen for.
type Host struct {
	Meta      Meta   `yaml:"-"`
	Name      string `yaml:"name"`
	GPUModel  string `yaml:"gpu_model"`
	GPUs      int    `yaml:"gpus" warden:"required"` // GPU indices 0..gpus-1
	CPUs      int    `yaml:"cpus" warden:"required"` // logical CPUs 0..cpus-1
	NUMANodes int    `yaml:"numa_nodes"`             // nodes 0..numa_nodes-1; default 1
}

// Budget is the cumulative GPU-hour cap.
type Budget struct {
	Meta             Meta    `yaml:"-"`
	CapGPUHours      float64 `yaml:"cap_gpu_hours" warden:"required"`
	ConsumedGPUHours float64 `yaml:"consumed_gpu_hours"` // spent before this campaign, counted against the cap
	Unit             string  `yaml:"unit"`               // what a GPU-hour is here, e.g. "H20-hours"
	// Reserve says how conservative a wave's reservation is: "bounds" (default) reserves
	// each run's worst case (ready timeout + measuring deadline + shutdown
	// graces + cleanup timeout), seed 002 A-P3-4's "conservative
	// reservation"; "nominal" reserves each run's expected_s only.
	Reserve string `yaml:"reserve"`
}

// ProvenanceFile is a file whose SHA-256 is recorded at campaign start and
// re-checked at resume. Relative paths are relative to the workdir (which
// defaults to the protocol file's directory); plan and start refuse a
// missing one, naming its line.
type ProvenanceFile struct {
	Meta    Meta   `yaml:"-"`
	Path    string `yaml:"path" warden:"required"`
	Role    string `yaml:"role" warden:"required"` // client, helper, mapping, manifest, config, ...
	Private bool   `yaml:"private"`                // hashed only, never copied; must be 0600 in a 0700 directory
	Note    string `yaml:"note"`
	// SHA256 is the hash the protocol freezes for the file (64 lower-case
	// hex digits): a file with another hash refuses controller plan (when
	// it looks at its inputs), start and amend, naming this field and both
	// hashes. Default: none, the file's hash at start is recorded.
	SHA256 string `yaml:"sha256"`
	// Shards, when given, is a glob (filepath.Match): path is then a
	// directory, and each of its files that matches is recorded, hashed
	// once at start, never copied, and re-checked by its size and
	// modification time (seed 002: "model path and shard hashes").
	Shards string `yaml:"shards"`
}

// Slot is a set of GPUs with its CPU mask, NUMA node and port.
type Slot struct {
	Meta Meta   `yaml:"-"`
	Name string `yaml:"name" warden:"required"`
	GPUs []int  `yaml:"gpus" warden:"required"`
	CPUs string `yaml:"cpus" warden:"required"` // CPU list, e.g. "0-19" or "0,2,4-7"
	NUMA *int   `yaml:"numa"`
	// Port is the slot's server port: a number, or "auto" for one that
	// controller start chooses free and records in the campaign's plan.
	Port SlotPort `yaml:"port" warden:"required"`
}

// SlotPort is a slot's port: a fixed number, or auto.
type SlotPort struct {
	N    int
	Auto bool
}

func (p *SlotPort) decodeNode(d *decoder, n *yaml.Node, path string) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
		if n.Value == "auto" {
			p.Auto = true
			return
		}
		d.c.add(posOf(n), path, "expected a TCP port number or auto, got %s", kindName(n))
		return
	}
	d.decode(n, reflectValue(&p.N), path)
}

// Regime says how many runs may share the host. Regimes are listed in
// fallback order: the first whose gate passes (or that needs none) is used.
type Regime struct {
	Meta        Meta     `yaml:"-"`
	Name        string   `yaml:"name" warden:"required"`
	Concurrency int      `yaml:"concurrency" warden:"required"`
	Slots       []string `yaml:"slots"` // default: the first `concurrency` slots
	Gated       bool     `yaml:"gated"` // needs its co-location check to pass first
}

// Class is a run class: how long a client may drain before the run is
// quarantined, and when the hard watchdog ends it.
//
// A Class is also part of the Plan's JSON form, so it carries JSON names
// (the YAML ones) and leaves its Meta out.
type Class struct {
	Meta            Meta    `yaml:"-" json:"-"`
	Name            string  `yaml:"name" json:"name" warden:"required"`
	DrainAllowanceS float64 `yaml:"drain_allowance_s" json:"drain_allowance_s" warden:"required"`
	WatchdogS       float64 `yaml:"watchdog_s" json:"watchdog_s" warden:"required"` // drain seconds after which the client is ended and the run fails
	Note            string  `yaml:"note" json:"note,omitempty"`
}

// Server kinds with a known readiness probe.
var serverKinds = map[string]Health{
	"vllm":        {Path: "/health", Status: 200},
	"sglang":      {Path: "/health", Status: 200},
	"vllm-omni":   {Path: "/health", Status: 200},
	"sglang-omni": {Path: "/health", Status: 200},
	"standin":     {Path: "/health", Status: 200},
	"custom":      {},
}

// configEndpoints is where each server kind reports its effective
// configuration as JSON, when it does (docs/servers.md, "Effective
// configuration"):
//   - vLLM: GET /server_info?config_format=json, served with
//     VLLM_SERVER_DEV_MODE=1 ({"vllm_config": ..., "vllm_env": ...,
//     "system_env": ...}; vllm/entrypoints/serve/instrumentator/server_info.py);
//     vLLM-Omni builds vLLM's app (build_app), so the same;
//   - SGLang: GET /get_server_info (the server arguments and scheduler
//     info at the top level; python/sglang/srt/entrypoints/http_server.py).
//
// SGLang-Omni has none: its routes (sglang_omni/serve/openai_api.py) report
// no server arguments, so its effective configuration is checked by its
// launch arguments and by patterns on its startup log, and an expectation
// with a path on it is a plan error (checkConfigPaths). The stand-in
// serves the shapes of the kinds that have one.
var configEndpoints = map[string]string{
	"vllm":      "/server_info?config_format=json",
	"vllm-omni": "/server_info?config_format=json",
	"sglang":    "/get_server_info",
	"standin":   "/server_info?config_format=json",
}

// kindEnv is the environment each server kind gets unless the protocol's
// server sets the variable itself:
//   - SGLang-Omni: SGLANG_OMNI_STRICT_PORT=1. Its launcher checks its port
//     before loading the model and, when the port is busy, serves on
//     another one found free with only a warning in its log
//     (sglang_omni/serve/launcher.py, _find_available_port); the variable
//     makes a busy port an error, so that the server fails at once instead
//     of serving where the controller does not look.
var kindEnv = map[string]map[string]string{
	"sglang-omni": {"SGLANG_OMNI_STRICT_PORT": "1"},
}

// Server is an inference-server template.
type Server struct {
	Meta           Meta              `yaml:"-"`
	Name           string            `yaml:"name" warden:"required"`
	Kind           string            `yaml:"kind" warden:"required"` // vllm, sglang, vllm-omni, sglang-omni, standin, custom
	Command        Command           `yaml:"command" warden:"required"`
	Env            map[string]string `yaml:"env"`              // plus the kind's own unless set here: sglang-omni SGLANG_OMNI_STRICT_PORT=1
	Health         *Health           `yaml:"health"`           // default per kind; required for custom
	ReadyTimeoutS  float64           `yaml:"ready_timeout_s"`  // default 900
	ShutdownGraceS float64           `yaml:"shutdown_grace_s"` // after SIGTERM to the API parent; default 60
	GroupGraceS    float64           `yaml:"group_grace_s"`    // after SIGTERM to the group, before SIGKILL; default 10
	Expect         []Expect          `yaml:"expect"`           // effective values the server must show
	// ConfigEndpoint is the path the server reports its effective
	// configuration at as JSON, for expectations with a path. Default per
	// kind (configEndpoints); sglang-omni and custom servers have none
	// unless given, and an expectation with a path on a server without
	// one is a plan error.
	ConfigEndpoint string `yaml:"config_endpoint"`
}

// Health is a readiness probe.
type Health struct {
	Meta   Meta   `yaml:"-"`
	Path   string `yaml:"path" warden:"required"`
	Status int    `yaml:"status"` // default 200
}

// Expect is an effective value the server must show: either a regular
// expression its startup output must match (pattern), or a dotted JSON
// path into the configuration it reports at its config endpoint and the
// value it must hold there (path and equals).
type Expect struct {
	Meta    Meta      `yaml:"-"`
	Name    string    `yaml:"name" warden:"required"`
	Pattern string    `yaml:"pattern"`
	Path    string    `yaml:"path"`
	Equals  JSONValue `yaml:"equals"`
}

// JSONValue is a YAML scalar kept as JSON: a number, true or false, null,
// or a string.
type JSONValue struct {
	JSON string // empty when not given
}

func (j *JSONValue) decodeNode(d *decoder, n *yaml.Node, path string) {
	if n.Kind != yaml.ScalarNode {
		d.c.add(posOf(n), path, "expected a number, true, false, null or a string, got %s", kindName(n))
		return
	}
	switch n.ShortTag() {
	case "!!int", "!!float":
		f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			d.c.add(posOf(n), path, "expected a finite number, got %s", n.Value)
			return
		}
		j.JSON = strconv.FormatFloat(f, 'g', -1, 64)
	case "!!bool":
		j.JSON = strconv.FormatBool(n.Value == "true" || n.Value == "True" || n.Value == "TRUE")
	case "!!null":
		j.JSON = "null"
	default:
		b, _ := json.Marshal(n.Value)
		j.JSON = string(b)
	}
}

// Load is a load point: what the client does against a fresh server.
type Load struct {
	Meta        Meta              `yaml:"-"`
	Name        string            `yaml:"name" warden:"required"`
	Kind        string            `yaml:"kind" warden:"required"`
	Server      string            `yaml:"server"` // server template; default the first
	Client      Command           `yaml:"client" warden:"required"`
	Env         map[string]string `yaml:"env"`
	Needs       []Need            `yaml:"needs"`
	ExpectedS   float64           `yaml:"expected_s" warden:"required"` // conservative duration, server start to cleanup
	Measured    *bool             `yaml:"measured"`                     // counts toward stop thresholds; default by kind
	ClientStart string            `yaml:"client_start"`                 // after-ready (default) or at-start (cold start)
	Class       string            `yaml:"class"`                        // overrides the axis value's class
	// DeadlineS is the measuring deadline: seconds from the client's start
	// to its exit, past which the run is ended (reason measure-deadline).
	// Default: expected_s plus the class's drain watchdog.
	DeadlineS float64 `yaml:"deadline_s"`
	// ReadyTimeoutS replaces the server's ready_timeout_s for this load's
	// runs (a burn-in's cold compile takes longer than a warm start).
	ReadyTimeoutS float64 `yaml:"ready_timeout_s"`
	// AdmissionEnd says where the end of admission (the start of drain)
	// is read: "phase-file" (default: the client's drain line, and its
	// drained line, else its done line, in $WARDEN_PHASE_FILE) or
	// "result-file" (ResultFile's drain.start_mono_ns and drain.end_mono_ns,
	// CLOCK_MONOTONIC nanoseconds).
	AdmissionEnd string `yaml:"admission_end"`
	// ResultFile is the client's result, relative to the attempt
	// directory; default client/result.json.
	ResultFile string `yaml:"result_file"`
	// Manifest names the input the load's client reads, as its path is
	// written under provenance (plan-time variables allowed, e.g.
	// "${MANIFEST}"). After the client, the manifest.sha256 its result file
	// reports must equal the hash recorded at start, or the run fails
	// input-changed (seed 002, stop condition 1; sanity block "exact
	// manifest hash").
	Manifest string `yaml:"manifest"`
}

// Load kinds and whether each is measured by default.
var loadKinds = map[string]bool{
	"saturation":   true,
	"moderate":     true,
	"confirmation": true,
	"burn-in":      false,
	"background":   false,
	"cold-start":   true,
	"closed-loop":  true,
	"open-loop":    true,
	"aa":           true,
	"smoke":        false,
	"stress":       true,
}

// Need is a run this load needs: its result directory is given to the
// commands as ${NEED_<AS>_DIR}. Written as a load name of the same cell
// ("saturation", exported as NEED_SATURATION_DIR) or as
// {run: RUN-ID-TEMPLATE, as: NAME}.
type Need struct {
	Pos  Pos
	Load string // a load of the same cell, or
	Run  string // a run id template
	As   string
}

// Axis is one dimension of the matrices, with its values in order.
type Axis struct {
	Meta   Meta        `yaml:"-"`
	Name   string      `yaml:"name" warden:"required"` // lower-case; exported as ${NAME} in upper case
	Values []AxisValue `yaml:"values" warden:"required"`
}

// AxisValue is one value of an axis and what it brings to a run.
type AxisValue struct {
	Meta       Meta              `yaml:"-"`
	ID         string            `yaml:"id" warden:"required"`
	Note       string            `yaml:"note"`
	Class      string            `yaml:"class"`       // run class of cells with this value
	GPUs       int               `yaml:"gpus"`        // GPUs a run of this value needs
	Server     string            `yaml:"server"`      // server template
	ServerArgs []string          `yaml:"server_args"` // appended to the server command
	Expect     []Expect          `yaml:"expect"`      // added to the server's expectations
	Vars       map[string]string `yaml:"vars"`        // exported as ${NAME}; may use protocol vars
}

// Phase is a step of the campaign: phases run in order, each to completion.
type Phase struct {
	Meta       Meta        `yaml:"-"`
	Name       string      `yaml:"name" warden:"required"`
	Kind       string      `yaml:"kind" warden:"required"`
	ID         string      `yaml:"id"` // run id template; default ${CELL_ID}.${LOAD}, plus .r${REPEAT} with repeats
	Matrix     *Matrix     `yaml:"matrix"`
	Loads      []string    `yaml:"loads"`
	Order      Order       `yaml:"order"`
	Repeats    int         `yaml:"repeats"` // process-level repeats of every cell; default 1
	Regime     string      `yaml:"regime"`  // pin the phase to a regime instead of the campaign's
	Colocation *Colocation `yaml:"colocation"`
	// Prior, on a colocation phase, is the check's verdict from when it
	// ran before this campaign (seed 002, A-P3-4: "E-a consumed 3.964
	// H20-hours"): the phase then plans no runs, and its gates' verdicts
	// are read from the file (docs/protocol.md, "A co-location check that
	// already ran").
	Prior    *ColocPrior `yaml:"prior"`
	Capacity *Capacity   `yaml:"capacity"` // the search of a phase of kind capacity
	// Vars are variables of this phase's runs: they override the
	// protocol's vars (e.g. one profile window for the co-location check's
	// target); an axis value may not set them again.
	Vars map[string]string `yaml:"vars"`
}

var phaseKinds = map[string]bool{
	"colocation":   true,
	"burn-in":      true,
	"primary":      true,
	"confirmation": true,
	"aa":           true,
	"cold-start":   true,
	"steady-state": true,
	"smoke":        true,
	"capacity":     true,
	"stress":       true,
}

// Capacity is a capacity search, seed 000 section 13 (translated): "capacity is not
// peak throughput but the largest sustainable arrival rate under the
// quality, error-rate and tail-latency constraints"; a pre-registered SLO,
// a bisection for the largest rate that meets it, then repeats at fractions
// of the found rate and in overload. Each point is one run of the phase's
// load against a fresh server, its client given the point's arrival rate
// as ${CAPACITY_RATE} (requests/s).
type Capacity struct {
	Meta    Meta    `yaml:"-"`
	RateMin float64 `yaml:"rate_min" warden:"required"` // the search's lower bound (requests/s), the first point's rate
	RateMax float64 `yaml:"rate_max" warden:"required"` // the search's upper bound (requests/s), never run itself
	// Resolution is the width the bisection narrows the interval to: the
	// found rate is within one resolution of the largest rate that meets
	// the SLO.
	Resolution float64 `yaml:"resolution" warden:"required"`
	// FollowUps are the fractions of the found rate run once each after
	// the search (ascending, each in (0, 1)); default 0.5 0.8 0.95.
	FollowUps []float64 `yaml:"follow_ups"`
	// Overload is the overload point's multiple of the found rate (above
	// 1); default 1.2.
	Overload float64 `yaml:"overload"`
	SLO      SLO     `yaml:"slo" warden:"required"` // the bounds a point must meet to pass
	// OnNonMonotonic is stop (default) or continue: what the campaign
	// does when a point shows the search's verdicts not monotonic (it
	// fails the SLO at a rate no higher than one that passed it, so the
	// found rate is not a capacity): stop for review
	// (capacity-not-monotonic; a resume runs the remaining points), or go
	// on. Status, events and the report say so either way.
	OnNonMonotonic string `yaml:"on_non_monotonic"`
}

// SLO is a capacity search's pre-registered service-level objective: each
// bound given is read from the point's client result (loadgen's
// result.json), and a bound whose figure the result lacks makes the point
// an error, never a pass.
type SLO struct {
	Meta             Meta     `yaml:"-" json:"-"`
	SuccessMin       *float64 `yaml:"success_min" json:"success_min,omitempty"`                   // totals.by_class.success / totals.admitted
	TTFTP99MsMax     *float64 `yaml:"ttft_p99_ms_max" json:"ttft_p99_ms_max,omitempty"`           // clean.latency.ttft_ms.p99
	E2EP99MsMax      *float64 `yaml:"e2e_p99_ms_max" json:"e2e_p99_ms_max,omitempty"`             // clean.latency.e2e_ms.p99
	TTFAP99MsMax     *float64 `yaml:"ttfa_p99_ms_max" json:"ttfa_p99_ms_max,omitempty"`           // audio.ttfa_ms.p99
	ChunkGapP99MsMax *float64 `yaml:"chunk_gap_p99_ms_max" json:"chunk_gap_p99_ms_max,omitempty"` // audio.gaps_ms.p99
	RTFP99LT         *float64 `yaml:"rtf_p99_lt" json:"rtf_p99_lt,omitempty"`                     // audio.rtf.p99, strictly below
	// QueueGrowthMax bounds the queue's growth over the clean window: the
	// clean segments' admitted minus ended requests, over their admitted.
	QueueGrowthMax *float64 `yaml:"queue_growth_max" json:"queue_growth_max,omitempty"`
}

// Colocation is a co-location validity check: a target measured solo and
// then beside background loads, once per gated regime, in order.
type Colocation struct {
	Meta           Meta              `yaml:"-"`
	Target         map[string]string `yaml:"target" warden:"required"` // axis name -> value id
	Slot           string            `yaml:"slot" warden:"required"`
	Loads          []string          `yaml:"loads" warden:"required"`           // target loads, in order
	BackgroundLoad string            `yaml:"background_load" warden:"required"` // load run by each background
	Checks         []ColocCheck      `yaml:"checks" warden:"required"`
	Gate           ColocGate         `yaml:"gate" warden:"required"`
}

// ColocPrior is a co-location check's verdict from an earlier run of it.
type ColocPrior struct {
	Meta Meta `yaml:"-"`
	// Verdict is the verdict file (JSON, schema
	// warden.colocation-verdict/1): relative to the workdir, a literal
	// path. It is read and checked by plan (with its inputs) and start,
	// hashed into provenance, and checked again at every resume.
	Verdict string `yaml:"verdict" warden:"required"`
}

// ColocCheck validates one regime.
type ColocCheck struct {
	Meta        Meta         `yaml:"-"`
	Regime      string       `yaml:"regime" warden:"required"`
	Backgrounds []Background `yaml:"backgrounds" warden:"required"`
}

// Background is one background load of a co-location check.
type Background struct {
	Meta Meta              `yaml:"-"`
	Cell map[string]string `yaml:"cell" warden:"required"`
	Slot string            `yaml:"slot" warden:"required"`
}

// ColocGate is the pass rule of a co-location check.
type ColocGate struct {
	Meta                Meta     `yaml:"-"`
	ThroughputFile      string   `yaml:"throughput_file" warden:"required"`  // JSON file in the attempt directory
	ThroughputField     string   `yaml:"throughput_field" warden:"required"` // dotted path of the throughput in it
	ThroughputTolerance float64  `yaml:"throughput_tolerance" warden:"required"`
	Compare             string   `yaml:"compare"`   // the target load compared (default: the last)
	Validator           *Command `yaml:"validator"` // prints {"figures": {...}}; each figure compared solo vs co-located
	FigureTolerance     float64  `yaml:"figure_tolerance"`
	// ProfileWindows, when set, is how many profile windows the compared
	// target runs must each have had, counted from their phase files
	// (A-P3-1: "exactly one 2+8 window per moderate target").
	ProfileWindows int `yaml:"profile_windows"`
}

// Cleanup is the cleanup gate's rule.
type Cleanup struct {
	Meta     Meta    `yaml:"-"`
	TimeoutS float64 `yaml:"timeout_s"` // default 120
}

// Executor says where attempts run: on the controller's host ("local",
// the default) or each as a Slurm step ("slurm"). controller start's
// --executor and --slurm-* flags override it.
type Executor struct {
	Meta  Meta          `yaml:"-"`
	Kind  string        `yaml:"kind"`
	Slurm SlurmExecutor `yaml:"slurm"`
}

// SlurmExecutor is the Slurm executor's request. Host is then one node of
// the cluster, and a slot's GPU and CPU lists say how many it asks for.
type SlurmExecutor struct {
	Meta       Meta   `yaml:"-"`
	Partition  string `yaml:"partition"`
	Account    string `yaml:"account"`
	Constraint string `yaml:"constraint"`
	// Exclusive gives each run's step a node of its own (srun
	// --exclusive): nothing else runs beside it.
	Exclusive bool `yaml:"exclusive"`
	// QueueTimeoutS bounds a step's wait for busy resources; default 600.
	QueueTimeoutS int `yaml:"queue_timeout_s"`
	// Nodes is how many nodes the plan is for; default 1.
	Nodes int `yaml:"nodes"`
}

// StopRules are the protocol's stop thresholds (fractions of measured runs).
type StopRules struct {
	Meta                  Meta     `yaml:"-"`
	QuarantinedFractionGT *float64 `yaml:"quarantined_fraction_gt"`
	FailedFractionGT      *float64 `yaml:"failed_fraction_gt"`
	MinFreeGB             *float64 `yaml:"min_free_gb"`      // stop when the campaign's file system has less free
	MaxArtifactsGB        *float64 `yaml:"max_artifacts_gb"` // stop when the public artifacts (the runs and the provenance copies) grow past this
}

// Retries says how many exact retries an infrastructure failure gets.
type Retries struct {
	Meta           Meta `yaml:"-"`
	Infrastructure int  `yaml:"infrastructure"`
}

// DefaultForbiddenFields are the fields no artifact may hold when the
// protocol does not list its own (the seed's privacy contract: prompts,
// messages, content, generated text). An empty list switches the field
// check off.
var DefaultForbiddenFields = []string{"prompt", "messages", "content", "generated_text"}

// DefaultMinLeakBytes is privacy.min_leak_bytes when the protocol does
// not set it: a run of 48 bytes of a private value, from anywhere in it,
// found outside the private directory is a leak (the privacy scan's
// PrivateIndex in pkg/gates).
const DefaultMinLeakBytes = 48

// MinLeakBytesFloor is the smallest privacy.min_leak_bytes accepted.
const MinLeakBytesFloor = 16

// Privacy is the privacy scan's rule.
type Privacy struct {
	Meta            Meta     `yaml:"-"`
	ForbiddenFields []string `yaml:"forbidden_fields"`
	// MinLeakBytes is the leak length in bytes: every run of at least
	// this many bytes of any private value, from anywhere in the value,
	// is looked for in every file the campaign writes; at least 16;
	// default 48.
	MinLeakBytes *int `yaml:"min_leak_bytes"`
}

// Validator is a command run after each attempt of the named loads (all
// loads when none are named).
type Validator struct {
	Meta    Meta     `yaml:"-"`
	Name    string   `yaml:"name" warden:"required"`
	Command Command  `yaml:"command" warden:"required"`
	Loads   []string `yaml:"loads"`
	// TimeoutS bounds the validator's run, from its start to its exit:
	// past it the validator is ended (SIGTERM to it, then its group) and the
	// run fails harness-error (one exact rerun). Default 600.
	TimeoutS float64 `yaml:"timeout_s"`
	// MemoryMiB bounds the validator's address space (RLIMIT_AS, MiB): an
	// allocation past it fails inside the validator. Default: half of the
	// host's memory (MemTotal), read when the validator starts.
	MemoryMiB float64 `yaml:"memory_mib"`
	// Cells, when given, names the cells the validator judges: a run is
	// judged when its cell has, on every axis named, one of the values
	// listed (a run without that axis is not). Default: every cell.
	Cells CellFilter `yaml:"cells"`
	// Phases, when given, names the phases whose runs the validator
	// judges. Default: every phase.
	Phases []string `yaml:"phases"`
}

// CellFilter selects cells by axis values: {AXIS: value or [values], ...}.
type CellFilter struct {
	Pos  Pos
	Axes map[string]Selection
}

// IsZero reports whether no filter was given.
func (c CellFilter) IsZero() bool { return len(c.Axes) == 0 }

// Selects reports whether a run with these axis values is selected.
func (c CellFilter) Selects(axes map[string]string) bool {
	for name, sel := range c.Axes {
		v, ok := axes[name]
		if !ok || !slices.Contains(sel.Values, v) {
			return false
		}
	}
	return true
}

func (c *CellFilter) decodeNode(d *decoder, n *yaml.Node, path string) {
	c.Pos = posOf(n)
	c.Axes = map[string]Selection{}
	if n.Kind != yaml.MappingNode {
		d.c.add(posOf(n), path, "expected a mapping of axis names to values, got %s", kindName(n))
		return
	}
	for _, kv := range d.pairs(n, path) {
		c.Axes[kv[0].Value] = d.selection(kv[1], join(path, kv[0].Value))
	}
	if len(c.Axes) == 0 {
		d.c.add(posOf(n), path, "selects no axis: leave cells out to judge every cell")
	}
}

// Command is an argument vector, or {shell: "..."} run by /bin/sh -c. Each
// argument may use ${NAME} variables; $$ is a literal $.
type Command struct {
	Pos    Pos
	Argv   []string
	ArgPos []Pos
	Shell  string
}

// IsZero reports whether no command was given.
func (c Command) IsZero() bool { return len(c.Argv) == 0 && c.Shell == "" }

func (c *Command) decodeNode(d *decoder, n *yaml.Node, path string) {
	c.Pos = posOf(n)
	switch n.Kind {
	case yaml.SequenceNode:
		if len(n.Content) == 0 {
			d.c.add(posOf(n), path, "command is empty")
			return
		}
		d.eachString(n, path, func(s string, a *yaml.Node) {
			c.Argv = append(c.Argv, s)
			c.ArgPos = append(c.ArgPos, posOf(a))
		})
	case yaml.MappingNode:
		var s struct {
			Meta  Meta   `yaml:"-"`
			Shell string `yaml:"shell" warden:"required"`
		}
		d.decode(n, reflectValue(&s), path)
		if _, given := s.Meta.Fields["shell"]; given && strings.TrimSpace(s.Shell) == "" {
			d.c.add(s.Meta.At("shell"), join(path, "shell"), "shell command is empty")
		}
		c.Shell = s.Shell
		c.ArgPos = []Pos{s.Meta.At("shell")}
	default:
		d.c.add(posOf(n), path, "expected a command: a list of arguments, or {shell: \"...\"}; got %s", kindName(n))
	}
}

func (nd *Need) decodeNode(d *decoder, n *yaml.Node, path string) {
	nd.Pos = posOf(n)
	if n.Kind == yaml.ScalarNode {
		if s, ok := d.scalarString(n, path); ok {
			nd.Load = s
			nd.As = strings.ToUpper(strings.ReplaceAll(s, "-", "_"))
		}
		return
	}
	var s struct {
		Meta Meta   `yaml:"-"`
		Run  string `yaml:"run" warden:"required"`
		As   string `yaml:"as" warden:"required"`
	}
	d.decode(n, reflectValue(&s), path)
	nd.Run, nd.As = s.Run, s.As
}

// Matrix selects cells: each axis named gets the listed values (a single
// value may be written without a list); cells are the cartesian product.
// include adds cells (each entry is itself a product); exclude removes every
// cell that matches all the axes an entry names, as in a CI matrix.
type Matrix struct {
	Pos     Pos
	Axes    map[string]Selection
	Include []map[string]Selection
	Exclude []map[string]Selection
}

// Selection is the values chosen for one axis.
type Selection struct {
	Pos    Pos
	Values []string
}

func (m *Matrix) decodeNode(d *decoder, n *yaml.Node, path string) {
	m.Pos = posOf(n)
	m.Axes = map[string]Selection{}
	if n.Kind != yaml.MappingNode {
		d.c.add(posOf(n), path, "expected a matrix (a mapping of axis names to values), got %s", kindName(n))
		return
	}
	for _, kv := range d.pairs(n, path) {
		k, v := kv[0], kv[1]
		switch k.Value {
		case "include", "exclude":
			v, ok := d.resolve(v)
			if !ok {
				continue
			}
			if v.Kind != yaml.SequenceNode {
				d.c.add(posOf(v), join(path, k.Value), "expected a list of axis selections, got %s", kindName(v))
				continue
			}
			for i, e := range v.Content {
				e, ok := d.resolve(e)
				if !ok {
					continue
				}
				p := joinIndex(join(path, k.Value), i)
				if e.Kind != yaml.MappingNode {
					d.c.add(posOf(e), p, "expected a mapping of axis names to values, got %s", kindName(e))
					continue
				}
				sel := map[string]Selection{}
				for _, kv2 := range d.pairs(e, p) {
					sel[kv2[0].Value] = d.selection(kv2[1], join(p, kv2[0].Value))
				}
				if k.Value == "include" {
					m.Include = append(m.Include, sel)
				} else {
					m.Exclude = append(m.Exclude, sel)
				}
			}
		default:
			m.Axes[k.Value] = d.selection(v, join(path, k.Value))
		}
	}
}

func (d *decoder) selection(n *yaml.Node, path string) Selection {
	n, ok := d.resolve(n)
	if !ok {
		return Selection{}
	}
	s := Selection{Pos: posOf(n)}
	switch n.Kind {
	case yaml.ScalarNode:
		if v, ok := d.scalarString(n, path); ok {
			s.Values = []string{v}
		}
	case yaml.SequenceNode:
		d.eachString(n, path, func(v string, _ *yaml.Node) { s.Values = append(s.Values, v) })
	default:
		d.c.add(posOf(n), path, "expected a value or a list of values, got %s", kindName(n))
	}
	return s
}

// Order is how a phase orders its cells: "listed" (as declared), or
// {by: sha256, key: TEMPLATE} (ascending SHA-256 of the expanded key), or
// {by: shuffle, seed: N} (ascending SHA-256 of "N:CELL"), or
// {by: alternate, axis: NAME, seed: N} (each value's cells shuffled as
// above, then interleaved value by value in axis order).
type Order struct {
	Meta Meta   `yaml:"-"`
	By   string `yaml:"by" warden:"required"`
	Key  string `yaml:"key"`
	Seed int64  `yaml:"seed"`
	Axis string `yaml:"axis"`
}

func (o *Order) decodeNode(d *decoder, n *yaml.Node, path string) {
	if n.Kind == yaml.ScalarNode {
		if s, ok := d.scalarString(n, path); ok {
			o.By = s
			o.Meta = Meta{Pos: posOf(n), Fields: map[string]Pos{"by": posOf(n)}}
		}
		return
	}
	type plain Order
	var p plain
	d.decodeStruct(n, reflectValue(&p), path)
	*o = Order(p)
}

func joinIndex(path string, i int) string { return path + "[" + itoa(i) + "]" }
