package loadgen

// Class is a request's terminal class, from the methodology's taxonomy
// (seed 000, section 12). Stored as its string; never renumbered.
type Class string

const (
	// Success: HTTP 200, the stream ended with [DONE], usage was reported,
	// and (with --ignore-eos) exactly the requested output tokens.
	Success Class = "success"
	// QualityFailed is never assigned by loadgen: it needs a quality gate
	// the operator runs on outputs loadgen does not keep.
	QualityFailed Class = "quality-failed"
	// ClientCancelled: the client was interrupted (SIGTERM, SIGINT) while
	// the request was outstanding, or closed it after its first output
	// chunk (Stress.CancelAfterFirstChunk).
	ClientCancelled Class = "client-cancelled"
	// DeadlineExceeded: past its deadline from the planned send
	// (Config.RequestDeadline), or still outstanding when the drain
	// timeout ran out.
	DeadlineExceeded Class = "deadline-exceeded"
	// AdmissionRejected: HTTP 429 or 503.
	AdmissionRejected Class = "admission-rejected"
	// OOM: an error status or stream error event that says out of memory.
	OOM Class = "oom"
	// WorkerLost: another 5xx status, or an error event in the stream.
	WorkerLost Class = "worker-lost"
	// TransportError: no response (connection refused, reset) or a stream
	// cut before [DONE]: a partial response is a failure.
	TransportError Class = "transport-error"
	// InvalidOutput: a 200 stream without usage, with a chunk that is not
	// JSON, or with other than the requested output tokens.
	InvalidOutput Class = "invalid-output"
	// HarnessError: a 4xx status (the server refused what the client
	// built), a 3xx (a redirect, never followed: it would send the body
	// again elsewhere) or a request the client could not build.
	HarnessError Class = "harness-error"
)

// Classes lists every class, in the order summaries print them.
var Classes = []Class{Success, QualityFailed, ClientCancelled, DeadlineExceeded, AdmissionRejected,
	OOM, WorkerLost, TransportError, InvalidOutput, HarnessError}

// Record is one request's line in requests/<segment>.jsonl. Times are
// CLOCK_MONOTONIC nanoseconds (result.json's clock block anchors them to
// wall-clock time); 0 means the instant never came. It holds counts and
// times only: never prompt or generated text.
type Record struct {
	Schema string `json:"schema"`
	// ID is the manifest's request id; Row its 0-based line.
	ID  string `json:"id"`
	Row int    `json:"row"`
	// Segment is where the request ended (completed, failed, or was cut
	// off by the drain timeout); AdmitSegment where it was sent.
	Segment      string `json:"segment"`
	AdmitSegment string `json:"admit_segment"`
	// PlannedNS is when the schedule planned the send (closed loop: when
	// a slot freed); SentNS when the client handed it to its transport.
	// Generator lag is sent - planned.
	PlannedNS int64 `json:"planned_mono_ns"`
	SentNS    int64 `json:"sent_mono_ns"`
	// FirstTokenNS is the first chunk carrying a token (a non-empty text,
	// content or reasoning field): the client's TTFT. FirstChunkNS is the
	// first chunk with a non-empty choices array, where vLLM's benchmark
	// client takes its TTFT (a chat stream's role-only first chunk).
	FirstTokenNS int64 `json:"first_token_mono_ns"`
	FirstChunkNS int64 `json:"first_chunk_mono_ns"`
	EndNS        int64 `json:"end_mono_ns"`
	// ExpectedInputTokens is the manifest's; PromptTokens and OutputTokens
	// the server's usage (0 without usage).
	ExpectedInputTokens   int `json:"expected_input_tokens"`
	PromptTokens          int `json:"prompt_tokens"`
	RequestedOutputTokens int `json:"requested_output_tokens"`
	OutputTokens          int `json:"output_tokens"`
	// UsageSource is "client" when the server sent no usage and its kind
	// may send none (SGLang-Omni): OutputTokens are then the token chunks
	// the client counted, a lower bound, and PromptTokens 0. Absent when
	// the counts are the server's.
	UsageSource string `json:"usage_source,omitempty"`
	// Chunks counts stream chunks that carried a token; ITLMaxNS is the
	// largest gap between two of them.
	Chunks     int   `json:"token_chunks"`
	ITLMaxNS   int64 `json:"itl_max_ns"`
	HTTPStatus int   `json:"http_status"`
	Class      Class `json:"class"`
	// Reason says why a request is not a success, in the client's words;
	// never the server's error text.
	Reason string `json:"reason,omitempty"`
	// Unsent: admitted, but its deadline (Config.RequestDeadline) had
	// passed before the send, so it never reached the transport.
	Unsent bool `json:"unsent,omitempty"`
	// Audio is the request's streamed audio (audio.go); absent when the
	// stream carried none.
	Audio *AudioRecord `json:"audio,omitempty"`
	// Stress is the stress the request was put under (stress.go); absent
	// without stress options.
	Stress *StressRecord `json:"stress,omitempty"`
}

// RecordSchema names the format of Record lines.
const RecordSchema = "warden.loadgen.request/1"
