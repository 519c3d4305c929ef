// Package state is the campaign's durable record: a bbolt file, DIR/state.db,
// holding the campaign, its runs and their attempts, an append-only event
// log, the budget ledger, gate verdicts and amendments. It also writes each
// attempt's DIR/runs/RUN/aN/state.json. It never starts processes or talks
// to GPUs.
//
// # Schema
//
// Every value is JSON (encoding/json, snake_case keys), readable by other
// tools. Sequence keys are big-endian uint64, so they sort numerically.
//
//	state.db
//	├── meta
//	│   └── "schema_version" -> 2              (JSON number)
//	├── campaign
//	│   ├── "campaign" -> Campaign             (one record)
//	│   └── "counters" -> counters             (derived from the runs; since version 2)
//	├── runs
//	│   └── <run id> -> Run                    (the plan; derived fields kept current)
//	├── attempts
//	│   └── <run id> NUL <%06d n> -> Attempt   (sorted by run, then number)
//	├── live                                   (since version 2)
//	│   └── <attempt key> -> empty             (the attempts in a non-terminal state)
//	├── events
//	│   └── <seq> -> Event                     (append-only, 1..N)
//	├── ledger
//	│   └── <seq> -> LedgerEntry               (append-only, 1..N)
//	├── gates
//	│   └── <seq> -> GateVerdict               (append-only)
//	└── amendments
//	    └── <seq> -> Amendment                 (append-only, ids unique)
//
// The counters record is {"runs_by_state": {RunState: count, ...},
// "remaining_expected_s": sum of Run.ExpectedS over the runs not done}; a
// state with no runs has no key. CreateCampaign writes it with the runs,
// and NewAttempt and Transition change it in the transaction that changes a
// run's state or Done. The live index holds one empty value per attempt in
// a non-terminal state, under the attempt's key: NewAttempt adds it and the
// transition to a terminal state removes it. With them, Summary (and so a
// status query) reads the campaign bucket and the live attempts only: its
// cost does not grow with the number of runs or events.
//
// Version 0 is a file without buckets; Open runs the upgrade functions from
// the recorded version to SchemaVersion in one transaction, and refuses a
// newer version (ErrSchemaTooNew). OpenReadOnly never upgrades
// (ErrSchemaTooOld). The upgrade from 1 to 2 computes the counters from the
// runs and the live index from the attempts.
//
// # Attempt states
//
//	planned -> reserved | failed | interrupted
//	reserved -> preflight | failed | interrupted
//	preflight -> starting | failed | interrupted
//	starting -> ready | stopping | interrupted
//	ready -> measuring | stopping | interrupted
//	measuring -> stopping | interrupted
//	stopping -> cleanup | interrupted
//	cleanup -> validating | failed | interrupted
//	validating -> complete | quarantined | failed | interrupted
//
// complete, quarantined, failed and interrupted are terminal. The table lives
// in attemptTransitions and only checkTransition reads it; an illegal move is
// a *TransitionError naming both states. Once a server may be running
// (starting, ready, measuring) a failure does not jump to failed: it moves to
// stopping with a Reason, kept as PendingReason, and cleanup or validating
// then end in failed with that reason, so the server is always shut down and
// the GPUs proven empty. Reasons are strings that are never renamed.
//
// The campaign moves running -> stopped | complete and stopped -> running.
//
// # Invariants
//
// Check verifies these in one read transaction (a *Violation per breach,
// each naming its Rule); Options.Strict verifies them inside every write
// transaction before it commits.
//
//   - schema: schema_version is SchemaVersion and every bucket exists.
//   - record: every value decodes and matches its key.
//   - attempt-state: states and reasons are known; failed, quarantined and
//     interrupted attempts carry a reason.
//   - attempt-numbers: a run's attempts are numbered 1..N and Run.Attempts == N.
//   - one-result: a run has at most one complete or quarantined attempt, and
//     no attempt follows it.
//   - one-live: only a run's latest attempt may be in a non-terminal state.
//   - run-fields: Run.Done, Run.Result and Run.LastState agree with the
//     attempts, so that counting runs by state reads the runs bucket only.
//   - counters: with a campaign recorded, the counters record exists and
//     equals a count of the runs by Run.State, and its remaining seconds the
//     sum of ExpectedS over the runs not done (within 1e-6 s plus 1e-9 of
//     the sum: the counter is changed one run at a time); without a
//     campaign there is no counters record.
//   - live-index: the live bucket names exactly the attempts in a
//     non-terminal state, each with an empty value.
//   - event-seq: event keys are 1..N without gaps.
//   - event-chain: each attempt's events go "" -> planned -> ... with each
//     From equal to the previous To; the last To is the attempt's State and
//     Attempt.EventSeqs lists exactly those events. Campaign events (Run "")
//     chain the same way and end at the campaign's State.
//   - ledger: ledger keys are 1..N; prior + charge entries sum to
//     Campaign.ConsumedGPUSeconds, reserve - release entries to
//     Campaign.ReservedGPUSeconds, which never goes negative.
//
// Every write is one bbolt Update transaction; every state change (campaign
// or attempt) appends its event in that same transaction. UpdateCampaign
// (heartbeat) and UpdateAttempt (processes, signals with their times, exits)
// change no state and append no event.
//
// # Files
//
// Dir/state.json (StateFile: the attempt and its events, mode 0644) is a
// view of the database, written by one background writer per Store after
// the commits, in their order, each write a temporary file in the same
// directory renamed into place (no fsync; RewriteStateFile fsyncs the file
// and the directory). The writer keeps only the latest state of each
// file: the changes of a live attempt that come within StateFileWindow of
// the first one not yet written are written once, as the last of them.
// A transition to a terminal state returns only once the file holds its
// state, so an attempt reported ended has its final state.json; Close and FlushStateFiles write
// what is queued. So the file is always whole and, while the controller
// runs, at most about StateFileWindow behind a live attempt's record. A
// crash or power cut may leave it behind or empty; the database is the
// truth and resume rewrites such files (RepairStateFiles). A write that
// fails is returned, matching ErrStateFile, by the change that waited for
// it, else by the attempt's next change or FlushStateFiles.
//
// # Caveats
//
//   - Values returned by the store are copies decoded from JSON; nothing
//     points into bbolt's memory map. Code in this package must copy any
//     []byte out of a transaction before it ends (decode does).
//   - Nothing slow runs inside a transaction: no process start, no NVML, no
//     HTTP, no file writes. The mutate and init callbacks run inside the
//     write transaction and must only set fields.
//   - One read-write handle per file: a second Open, in this process or
//     another, fails with ErrLocked after Options.Timeout (default 1 s;
//     never forever). OpenReadOnly takes a shared lock, so it also times out
//     while a writer holds the file: query a live controller through its
//     API, and open the file read-only only when no controller answers.
//   - Every open (read-only or read-write) verifies the whole file and
//     reports damage as ErrCorrupt; it never repairs. Before bbolt maps the
//     file: an existing file of 0 bytes is refused (bbolt would make a new
//     database of it), as is one with invalid meta pages or shorter than its
//     meta page says (bbolt would fault reading past its end). Once the
//     lock is held (no writer can change a page meanwhile), every page the
//     tree reaches is read with ordinary reads, never the memory map, and
//     checked (pages.go: its own id in its header, a branch or leaf type,
//     inside the high-water mark, reached once and not free, its elements
//     packed inside it, not empty unless it is the root; the free list
//     inside the file; every page reached or free), then bbolt's Check
//     verifies key order. One bit flipped in the header of a page in use is
//     refused this way. A negative schema version is ErrCorrupt for both
//     opens. Garbage that makes bbolt fault or panic while opening is also
//     reported as ErrCorrupt, but the memory map of such a file stays until
//     the process exits: keep backups.
//   - Strict mode reads the whole database on every write: it is for tests.
//   - Options.NoSync skips the fsync at each commit: it is for building
//     large fixtures in tests and benchmarks, never for a campaign, since a
//     crash can lose committed transactions.
//   - Summary and LiveAttempts trust the counters and the live index; a
//     missing counters record or an index entry naming no attempt is
//     returned as a *Violation, and only Check compares them with the runs.
//   - Check and Strict compare ledger sums with a tolerance of 1e-6 GPU
//     seconds.
package state
