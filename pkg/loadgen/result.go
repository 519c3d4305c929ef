package loadgen

// ResultSchema names the format of result.json; SegmentSchema that of
// segments.jsonl lines.
const (
	ResultSchema  = "warden.loadgen.result/1"
	SegmentSchema = "warden.loadgen.segment/1"
)

// LagThresholdS is the generator lag, sent minus planned, above which a
// run's lag is sustained: the seed's moderate run is valid only with "no
// sustained client lag" over one second. One request over it sets the
// flag (fail closed).
const LagThresholdS = 1.0

// Result is result.json, written last: its presence means the client
// finished writing. Times are CLOCK_MONOTONIC nanoseconds.
type Result struct {
	Schema string `json:"schema"`
	// Complete is true when the timeline ran to its end and every
	// admitted request ended before the drain bound. False when
	// interrupted, when the manifest ran out, when the drain reached its
	// bound (requests abandoned), or after a harness error.
	Complete    bool   `json:"complete"`
	Interrupted bool   `json:"interrupted"`
	LoadPoint   string `json:"load_point"`
	Endpoint    string `json:"endpoint"`
	Model       string `json:"model"`
	// ServerKind is the stream read (serverkind.go).
	ServerKind ServerKind `json:"server_kind"`
	// ServedModels are the model ids the server's /v1/models listed before
	// the run, Model among them (Config.CheckServedModel); absent when not
	// checked.
	ServedModels []string `json:"served_models,omitempty"`

	Load           LoadInfo         `json:"load"`
	Manifest       ManifestInfo     `json:"manifest"`
	Clock          ClockInfo        `json:"clock"`
	Timeline       TimelineInfo     `json:"timeline"`
	Segments       []SegmentSummary `json:"segments"`
	ProfileWindows []ProfileWindow  `json:"profile_windows"`
	Clean          CleanSummary     `json:"clean"`
	Lag            LagSummary       `json:"lag"`
	Drain          DrainInfo        `json:"drain"`
	Totals         Totals           `json:"totals"`
	Files          Files            `json:"files"`
	// Modalities are the chat requests' output modalities asked for;
	// Audio the clean interval's audio figures (audio.go). Both absent
	// when no modalities were asked for.
	Modalities []string      `json:"modalities,omitempty"`
	Audio      *AudioSummary `json:"audio,omitempty"`
	// AudioFormat is the format the server declares, which every audio
	// chunk was held to (audio.go); absent when no audio was asked for.
	AudioFormat *AudioFormat `json:"audio_format,omitempty"`
	// SeedRecords describes requests.jsonl and events.jsonl
	// (seedrecords.go); absent when they were not asked for.
	SeedRecords *SeedRecordsInfo `json:"seed_records,omitempty"`
	// Stress is the stress loads' block (stress.go, release.go); absent
	// without stress options.
	Stress *StressSummary `json:"stress,omitempty"`
	// Quality is the quality pass's block (quality.go); absent without
	// --quality-rows.
	Quality *QualitySummary `json:"quality,omitempty"`
}

// LoadInfo is how requests were admitted.
type LoadInfo struct {
	// ClosedLoop: --request-rate inf, at most MaxConcurrency outstanding.
	ClosedLoop bool `json:"closed_loop"`
	// RequestRate is "inf" or λ in requests per second.
	RequestRate string `json:"request_rate"`
	// LambdaRPS is λ (0 in a closed loop).
	LambdaRPS      float64 `json:"lambda_rps"`
	MaxConcurrency int     `json:"max_concurrency"`
	// Dispatchers is the number of open-loop dispatchers that shared the
	// schedule (absent in a closed loop).
	Dispatchers int `json:"dispatchers,omitempty"`
	// Arrival is the open-loop class used (closed in a closed loop).
	Arrival string `json:"arrival"`
	Seed    uint64 `json:"workload_seed"`
	// RateFraction, SaturationCompletedRPS and SaturationResultSHA256 say
	// how λ was derived: λ = fraction × T_sat of that saturation result.
	RateFraction           float64 `json:"rate_fraction,omitempty"`
	SaturationCompletedRPS float64 `json:"saturation_completed_rps,omitempty"`
	SaturationResultSHA256 string  `json:"saturation_result_sha256,omitempty"`
	IgnoreEOS              bool    `json:"ignore_eos"`
	Temperature            float64 `json:"temperature"`
}

// ManifestInfo identifies the manifest; never its prompts or path.
type ManifestInfo struct {
	SHA256 string `json:"sha256"`
	Rows   int    `json:"rows"`
	// Used counts rows sent, from the first, each at most once.
	Used int `json:"used"`
	// Exhausted: admission wanted a row past the last (never wraps).
	Exhausted    bool   `json:"exhausted"`
	Arrival      string `json:"arrival"`
	PromptFormat string `json:"prompt_format"` // token-ids or text
	// RowsNeeded is the open-loop check made before the start: rows
	// planned before the estimated end of admission (0 in a closed loop).
	RowsNeeded int64 `json:"rows_needed"`
}

// ClockInfo anchors the monotonic times to wall-clock time: wall time of
// x = anchor_wall + (x - anchor_mono_ns). T0 is the run's clock zero,
// the start of the warm-up and the planned time of the first request.
type ClockInfo struct {
	AnchorWall   string `json:"anchor_wall"`
	AnchorMonoNS int64  `json:"anchor_mono_ns"`
	T0MonoNS     int64  `json:"t0_mono_ns"`
}

// TimelineInfo is the timeline asked for.
type TimelineInfo struct {
	WarmupS                 float64 `json:"warmup_s"`
	CleanSegmentS           float64 `json:"clean_segment_s"`
	NumCleanSegments        int     `json:"num_clean_segments"`
	ProfileWindows          int     `json:"profile_windows"`
	ProfileHoldS            float64 `json:"profile_hold_s"`
	ProfileWarmupIterations int     `json:"profile_warmup_iterations"`
	ProfileActiveIterations int     `json:"profile_active_iterations"`
	RecoveryS               float64 `json:"recovery_s"`
	DrainTimeoutS           float64 `json:"drain_timeout_s"`
	// RequestDeadlineS is each request's deadline from its planned send
	// (0: none).
	RequestDeadlineS float64 `json:"request_deadline_s"`
}

// SegmentSummary is one line of segments.jsonl and one entry of
// result.json's segments: an interval of the timeline and what happened
// in it. Planned and Admitted count requests by planned and sent time;
// Ended, Succeeded, Failed and ByClass by the time they ended.
type SegmentSummary struct {
	Schema       string         `json:"schema"`
	Name         string         `json:"name"` // warmup, clean-1, profile-1, recovery-1, drain
	Kind         string         `json:"kind"` // warmup, clean, profile, recovery, drain
	Index        int            `json:"index,omitempty"`
	StartMonoNS  int64          `json:"start_mono_ns"`
	EndMonoNS    int64          `json:"end_mono_ns"`
	Seconds      float64        `json:"seconds"`
	Planned      int            `json:"planned"`
	Admitted     int            `json:"admitted"`
	Ended        int            `json:"ended"`
	Succeeded    int            `json:"succeeded"`
	Failed       int            `json:"failed"`
	ByClass      map[Class]int  `json:"by_class"`
	CompletedRPS float64        `json:"completed_rps"`
	OfferedRPS   float64        `json:"offered_rps"`
	OutputTokens int            `json:"output_tokens"`
	Latency      SegmentLatency `json:"latency"`
	// File holds the records of the requests that ended in the segment.
	File string `json:"file"`
}

// SegmentLatency summarizes the successes that ended in a segment.
type SegmentLatency struct {
	TTFT Dist `json:"ttft_ms"`
	E2E  Dist `json:"e2e_ms"`
}

// Latency summarizes the successes that ended in the clean interval,
// timed from the send (the methodology's entry): TTFT = first token -
// sent; TPOT = (end - first token) / (output tokens - 1), for outputs of
// two tokens or more; ITL = gaps between token chunks inside the clean
// interval (1%-wide histogram buckets); E2E (JCT) = end - sent.
type Latency struct {
	TTFT Dist `json:"ttft_ms"`
	TPOT Dist `json:"tpot_ms"`
	ITL  Dist `json:"itl_ms"`
	E2E  Dist `json:"e2e_ms"`
}

// CleanSummary is the union of the clean segments: the throughput and
// latency denominator.
type CleanSummary struct {
	Seconds     float64 `json:"seconds"`
	StartMonoNS int64   `json:"start_mono_ns"`
	EndMonoNS   int64   `json:"end_mono_ns"`
	// Completed counts successes that ended inside the interval, wherever
	// they were admitted; Failed the other requests that ended inside.
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	// Admitted and Planned count requests by sent and planned time inside
	// the interval; AdmittedNotSuccess those of them that did not succeed,
	// wherever they ended.
	Admitted           int `json:"admitted"`
	Planned            int `json:"planned"`
	AdmittedNotSuccess int `json:"admitted_not_success"`
	// CompletedRPS is T = completed / seconds: a saturation run's T_sat.
	CompletedRPS float64 `json:"completed_rps"`
	OfferedRPS   float64 `json:"offered_rps"`
	PlannedRPS   float64 `json:"planned_rps"`
	// OfferedOverLambda is offered_rps / λ (0 in a closed loop).
	OfferedOverLambda float64 `json:"offered_over_lambda"`
	InputTokens       int     `json:"input_tokens"`
	OutputTokens      int     `json:"output_tokens"`
	InputTokensPerS   float64 `json:"input_tokens_per_s"`
	OutputTokensPerS  float64 `json:"output_tokens_per_s"`
	Latency           Latency `json:"latency"`
}

// LagSummary is the generator lag, sent - planned, of every admitted
// request and of those planned inside the clean interval.
type LagSummary struct {
	All           Dist    `json:"all_ms"`
	Clean         Dist    `json:"clean_ms"`
	ThresholdS    float64 `json:"threshold_s"`
	OverThreshold int     `json:"over_threshold"`
	// Sustained is true when any request's lag passed the threshold.
	Sustained bool `json:"sustained"`
}

// DrainInfo is the end of the run: from the end of admission until the
// last outstanding request ended or the drain bound ran out. Requests are
// never cancelled in the drain; those still outstanding at the bound are
// abandoned, recorded as deadline-exceeded.
type DrainInfo struct {
	StartMonoNS        int64   `json:"start_mono_ns"`
	EndMonoNS          int64   `json:"end_mono_ns"`
	Seconds            float64 `json:"seconds"`
	OutstandingAtStart int     `json:"outstanding_at_start"`
	// Unfinished counts requests without an ending of their own when the
	// records were frozen: Abandoned at the drain bound, or cancelled by
	// an interruption.
	Unfinished int `json:"unfinished"`
	Abandoned  int `json:"abandoned"`
	// TimedOut: the drain bound ran out before every request ended.
	TimedOut bool `json:"timed_out"`
}

// Totals counts every admitted request by class.
type Totals struct {
	Admitted int           `json:"admitted"`
	ByClass  map[Class]int `json:"by_class"`
	// OutputMismatches counts requests whose usage gave other than the
	// requested output tokens; InputMismatches those whose prompt tokens
	// differ from the manifest's input_tokens (for chat the server counts
	// its template too).
	OutputMismatches int `json:"output_mismatches"`
	InputMismatches  int `json:"input_mismatches"`
	// ClientCounted counts the requests whose server sent no usage and
	// whose output tokens the client counted from the stream
	// (Record.UsageSource "client"); they are in neither mismatch count.
	ClientCounted int `json:"client_counted"`
}

// Files lists what the run wrote, relative to the result directory.
type Files struct {
	Segments string   `json:"segments"`
	Requests []string `json:"requests"`
}
