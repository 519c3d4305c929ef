// Package loadgen is Warden's fixed-duration load client for
// OpenAI-compatible inference servers (vLLM, SGLang): the client the
// OpProf Phase 3 seed requires before any GPU run, and the methodology's
// open- and closed-loop generator.
//
// A run follows one timeline from one clock zero (t0, the start of the
// warm-up and the planned time of the first request): warm-up, contiguous
// clean segments of fixed length, then optional profile windows
// (/start_profile, a hold, /stop_profile, all synchronous and timestamped)
// each followed by a fixed recovery. Admission runs from t0 through the
// last recovery; then it stops and the outstanding requests drain, never
// cancelled, until each has ended, bounded by the drain timeout: those
// still outstanding at the bound are abandoned and the run ends with
// ErrDrainAbandoned, incomplete. Every admitted request gets a
// Record with its planned, sent, first-token and end times and a terminal
// Class; result.json summarizes the clean interval (throughput T,
// latencies, generator lag). With Config.SeedRecords a run also writes
// the methodology's requests.jsonl and events.jsonl (seedrecords.go): a
// line for every planned initial request, sent or not, with its terminal
// status in section 12's spelling, and the client's events of each.
// Config.RequestDeadline ends each request at a deadline from its planned
// send (deadline-exceeded).
//
// Caveats:
//   - Records and results never hold prompt or generated text; chunk text
//     is decoded only to see whether a chunk carries a token.
//   - A manifest never wraps: an open-loop run that plans more requests
//     than the manifest holds is refused before the start
//     (ErrManifestTooShort); a run that reaches the end anyway stops
//     admitting and ends with ErrManifestExhausted.
//   - Every prompt sent is the bytes hashed at the start: a manifest
//     rewritten in place during the run stops it (ErrManifestChanged).
//   - The result directory of a finished run is never overwritten
//     (ErrResultExists).
//   - Times are CLOCK_MONOTONIC nanoseconds, comparable with the
//     controller's phase lines and a server's step records on the same
//     boot.
package loadgen
