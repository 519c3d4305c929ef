package state

import "errors"

var (
	// ErrLocked is returned by Open and OpenReadOnly when another handle (this
	// process or another) holds the database and the lock timeout passed.
	ErrLocked = errors.New("state database is locked by another handle")

	// ErrCorrupt is returned by Open and OpenReadOnly when the file is
	// empty (0 bytes) or truncated, its meta pages are invalid, a page fails
	// the verification every open runs (see Caveats in doc.go), its schema
	// version is negative, or its buckets do not match the schema. The store
	// never repairs a file.
	ErrCorrupt = errors.New("state database is corrupt: restore it from a backup or move it aside; the controller never repairs silently")

	// ErrSchemaTooNew is returned by Open and OpenReadOnly when the file was
	// written by a newer version of this package.
	ErrSchemaTooNew = errors.New("state database schema is newer than this program")

	// ErrSchemaTooOld is returned by OpenReadOnly when the file needs an
	// upgrade, which only a read-write Open performs.
	ErrSchemaTooOld = errors.New("state database schema needs an upgrade: open it read-write once")

	// ErrExists is returned by CreateCampaign when a campaign is already
	// recorded, and by AddAmendment for an amendment id already registered.
	ErrExists = errors.New("already exists")

	// ErrNotFound is returned when the campaign, a run or an attempt is not
	// recorded.
	ErrNotFound = errors.New("not found")

	// ErrRunDone is returned by NewAttempt for a run that already has a
	// complete or quarantined attempt, and by Transition when an attempt
	// would become a second result of its run.
	ErrRunDone = errors.New("run is already done")

	// ErrLiveAttempt is returned by NewAttempt when the run's latest attempt
	// has not reached a terminal state.
	ErrLiveAttempt = errors.New("run has a live attempt")

	// ErrStarted is returned by Amend when a run the amendment names in
	// Unstarted has an attempt, or a result.
	ErrStarted = errors.New("run has started")

	// ErrInvalid is returned for an argument the store refuses to record: an
	// empty or malformed id, an unknown reason, ledger kind or verdict, or a
	// reason that does not fit the transition.
	ErrInvalid = errors.New("invalid argument")

	// ErrInvariant is matched (errors.Is) by every *Violation that Check
	// returns, and so by every write refused in strict mode.
	ErrInvariant = errors.New("state invariant violated")

	// ErrStateFile is returned by Transition, UpdateAttempt,
	// FlushStateFiles and Close when a transaction committed but the
	// attempt's state.json could not be written; RewriteStateFile writes
	// it again.
	ErrStateFile = errors.New("committed, but state.json not written")
)
