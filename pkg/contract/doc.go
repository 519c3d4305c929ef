// Package validate checks the artifact contracts that seed 002 freezes:
// the Layer-1 accounting stream and its sidecar (A-P3-5), the Layer-2
// profiler traces, the load client's segments and result, and the data
// sanity block. Each check is a pure function over files or readers and
// returns a Result, which is what `controller validate ...` prints as its
// last line and what the runner records as the gate "validator:NAME".
//
// Every check fails closed: an artifact it cannot read or parse, or a fact
// it needs and does not have (a signal time, a saturation result), gives
// an error or a fail verdict, never a pass. docs/validators.md describes
// the formats read and the figures reported.
package contract
