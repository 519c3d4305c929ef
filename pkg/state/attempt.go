package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"warden/pkg/atomicfile"
	"warden/pkg/failpoint"
)

// StateFileName is the name of the file written in an attempt's directory.
const StateFileName = "state.json"

// NewAttempt records attempt number previous+1 of runID, in state planned,
// and appends its event. init, if not nil, fills in the other fields (slot,
// GPUs, ...) inside the transaction; the run id, number, state, directory,
// times and events are set by the store. An empty ProtocolSHA256 and a nil
// Amendments are taken from the campaign. It fails with ErrRunDone for a
// done run and ErrLiveAttempt while the previous attempt is live. When dir
// is set, dir (and its parents) and dir/state.json are queued for writing
// after the commit, as a live transition's are (see Transition); a caller
// that writes into dir at once makes it first.
func (s *Store) NewAttempt(runID, dir string, init func(*Attempt)) (Attempt, error) {
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	var a Attempt
	var events []Event
	var campaign, campaignDir string
	err := s.update("new attempt of run "+runID, func(tx *bolt.Tx) error {
		var c Campaign
		if err := get(tx.Bucket(bucketCampaign), keyCampaign, &c); err != nil {
			return err
		}
		campaign, campaignDir = c.ID, c.Dir
		rb := tx.Bucket(bucketRuns)
		var r Run
		if err := get(rb, []byte(runID), &r); err != nil {
			return err
		}
		switch {
		case r.Done:
			return ErrRunDone
		case r.LastState.Live():
			return fmt.Errorf("%w: attempt %d is %s", ErrLiveAttempt, r.Attempts, r.LastState)
		}
		if init != nil {
			init(&a)
		}
		now := s.stamp()
		a.RunID, a.N, a.State, a.Reason, a.PendingReason = runID, r.Attempts+1, Planned, "", ""
		a.Dir, a.CreatedAt, a.UpdatedAt, a.EventSeqs = dir, now, now, nil
		if a.ProtocolSHA256 == "" {
			a.ProtocolSHA256 = c.ProtocolSHA256
		}
		if a.Amendments == nil {
			ids, err := amendmentIDs(tx)
			if err != nil {
				return err
			}
			a.Amendments = ids
		}
		e, err := s.appendEvent(tx, Event{Run: runID, Attempt: a.N, From: "", To: string(Planned),
			Message: "attempt created"})
		if err != nil {
			return err
		}
		a.EventSeqs = []uint64{e.Seq}
		events = []Event{e}
		before := r
		r.Attempts, r.LastState = a.N, Planned
		if err := updateCounters(tx, before, r); err != nil {
			return err
		}
		if err := setLive(tx, runID, a.N, true); err != nil {
			return err
		}
		if err := put(rb, []byte(runID), r); err != nil {
			return err
		}
		return put(tx.Bucket(bucketAttempts), attemptKey(runID, a.N), a)
	})
	if err != nil {
		return Attempt{}, err
	}
	// queued as a live transition's: the directory and the file are made
	// within StateFileWindow, or as the attempt's next state
	return a, s.queueStateFile(stateJob{campaign, campaignDir, a, events, false}, false)
}

// Transition moves attempt n of runID to state to, in one transaction that
// checks the transition table, applies mutate (if not nil; it runs inside
// the transaction, so keep it quick, and it may not change what
// UpdateAttempt's may not), updates the run's derived fields and appends an
// event carrying reason, msg and figures.
//
// Reasons: a transition to stopping with a reason leaves the happy path and
// records it as PendingReason; failed takes reason, or else PendingReason,
// and needs one; interrupted takes reason, or else ReasonInterrupted;
// quarantined needs a reason; complete and quarantined are refused while a
// PendingReason is set; other transitions take no reason. A violation fails
// with ErrInvalid, an illegal transition with a *TransitionError, and a
// second result for the run with ErrRunDone.
//
// After the commit, if the attempt has a Dir, Dir/state.json is queued for
// rewriting (see the package's Files section): a transition to a terminal
// state returns once it is written, the others at once. If only a write
// fails, the committed attempt is returned with an error matching
// ErrStateFile (by this change when it waited, else by the attempt's next
// change or FlushStateFiles); RewriteStateFile retries it.
func (s *Store) Transition(runID string, n int, to AttemptState, reason Reason, msg string,
	figures map[string]float64, mutate func(*Attempt) error) (Attempt, error) {
	return s.TransitionWith(runID, n, to, reason, msg, figures, mutate, With{})
}

// With is what a transition records beside it, in its transaction: gate
// verdicts and budget ledger entries of the same attempt. One commit (and
// one fsync) instead of one each.
type With struct {
	Gates  []GateVerdict
	Ledger []LedgerEntry
	// Through are live states the attempt passes through, in order, on
	// its way to the transition's state, each with its own event: one
	// commit for steps between which nothing acts.
	Through []Hop
}

// Hop is a state passed through on the way to a transition's (With).
type Hop struct {
	To      AttemptState `json:"to"`
	Message string       `json:"message,omitempty"`
	// At is when the attempt entered To: its event's time (zero: the
	// commit's). An At after the commit's time is taken as the commit's.
	At time.Time `json:"at,omitzero"`
	// Figures go with its event, as a transition's figures do.
	Figures map[string]float64 `json:"figures,omitempty"`
}

// TransitionWith is Transition that also records the gate verdicts and
// ledger entries in with, atomically with the transition.
func (s *Store) TransitionWith(runID string, n int, to AttemptState, reason Reason, msg string,
	figures map[string]float64, mutate func(*Attempt) error, with With) (Attempt, error) {
	op := fmt.Sprintf("transition run %s attempt %d to %s", runID, n, to)
	return s.changeAttempt(op, runID, n, func(tx *bolt.Tx, a *Attempt, r *Run) (*Event, error) {
		for i := range with.Gates {
			if err := s.addGate(tx, &with.Gates[i]); err != nil {
				return nil, err
			}
		}
		for i := range with.Ledger {
			if err := s.addLedgerTx(tx, &with.Ledger[i]); err != nil {
				return nil, err
			}
		}
		for _, h := range with.Through {
			if err := s.passThrough(tx, a, r, h); err != nil {
				return nil, err
			}
		}
		if err := checkTransition(a.State, to); err != nil {
			return nil, err
		}
		if to.result() && r.Done {
			return nil, fmt.Errorf("%w: attempt %d is its result", ErrRunDone, r.Result)
		}
		if mutate != nil {
			if err := keepIdentity(a, mutate); err != nil {
				return nil, err
			}
		}
		applied, err := applyReason(a, to, reason)
		if err != nil {
			return nil, err
		}
		from := a.State
		a.State = to
		if to.result() {
			r.Done, r.Result = true, n
		}
		r.LastState = to
		return &Event{From: string(from), To: string(to), Reason: string(applied),
			Message: msg, Figures: figures}, nil
	})
}

// passThrough moves a to the live state h.To with its event, inside the
// transaction of the transition it comes before.
func (s *Store) passThrough(tx *bolt.Tx, a *Attempt, r *Run, h Hop) error {
	if !h.To.Live() {
		return fmt.Errorf("%w: state %q passed through is not a live one", ErrInvalid, h.To)
	}
	if err := checkTransition(a.State, h.To); err != nil {
		return err
	}
	stored, err := s.appendEventAt(tx, Event{Run: a.RunID, Attempt: a.N, From: string(a.State), To: string(h.To), Message: h.Message, Figures: h.Figures}, h.At)
	if err != nil {
		return err
	}
	a.State, r.LastState = h.To, h.To
	a.EventSeqs = append(a.EventSeqs, stored.Seq)
	return nil
}

// applyReason checks reason against the transition to `to` and records it on
// a. It returns the reason the event carries.
func applyReason(a *Attempt, to AttemptState, reason Reason) (Reason, error) {
	if reason != "" && !reason.Valid() {
		return "", fmt.Errorf("%w: unknown reason %q", ErrInvalid, reason)
	}
	switch to {
	case Stopping:
		if reason != "" {
			a.PendingReason = reason
		}
		return a.PendingReason, nil
	case Failed:
		if reason == "" {
			reason = a.PendingReason
		}
		if reason == "" {
			return "", fmt.Errorf("%w: failed needs a reason", ErrInvalid)
		}
	case Interrupted:
		if reason == "" {
			reason = ReasonInterrupted
		}
	case Quarantined, Complete:
		if a.PendingReason != "" {
			return "", fmt.Errorf("%w: %s while the failure %q is pending", ErrInvalid, to, a.PendingReason)
		}
		if to == Quarantined && reason == "" {
			return "", fmt.Errorf("%w: quarantined needs a reason", ErrInvalid)
		}
		if to == Complete && reason != "" {
			return "", fmt.Errorf("%w: complete takes no reason, got %q", ErrInvalid, reason)
		}
	default:
		if reason != "" {
			return "", fmt.Errorf("%w: %s takes no reason, got %q", ErrInvalid, to, reason)
		}
		return "", nil
	}
	a.Reason = reason
	return reason, nil
}

// UpdateAttempt applies mutate to attempt n of runID without changing its
// state and without appending an event: it records processes, signals (with
// their times, in Signal.At), exits, commands and figures as they happen.
// The event log holds state changes only; the attempt record and its
// state.json hold these details. mutate runs inside the transaction and must
// not change the run id, number, state, reasons, directory or events
// (ErrInvalid). state.json is rewritten as in
// Transition.
func (s *Store) UpdateAttempt(runID string, n int, mutate func(*Attempt) error) (Attempt, error) {
	op := fmt.Sprintf("update run %s attempt %d", runID, n)
	return s.changeAttempt(op, runID, n, func(tx *bolt.Tx, a *Attempt, r *Run) (*Event, error) {
		return nil, keepIdentity(a, mutate)
	})
}

// changeAttempt loads attempt n of runID and its run, lets change modify
// them and optionally name an event to append, stores both with the
// counters and the live index they imply, commits, and then rewrites the
// attempt's state.json.
func (s *Store) changeAttempt(op, runID string, n int,
	change func(tx *bolt.Tx, a *Attempt, r *Run) (*Event, error)) (Attempt, error) {
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	var a Attempt
	var events []Event
	var campaign, campaignDir string
	err := s.update(op, func(tx *bolt.Tx) error {
		var c Campaign
		if err := get(tx.Bucket(bucketCampaign), keyCampaign, &c); err != nil {
			return err
		}
		campaign, campaignDir = c.ID, c.Dir
		ab, rb := tx.Bucket(bucketAttempts), tx.Bucket(bucketRuns)
		if err := get(ab, attemptKey(runID, n), &a); err != nil {
			return err
		}
		var r Run
		if err := get(rb, []byte(runID), &r); err != nil {
			return err
		}
		beforeRun, wasLive := r, a.State.Live()
		e, err := change(tx, &a, &r)
		if err != nil {
			return err
		}
		if err := updateCounters(tx, beforeRun, r); err != nil {
			return err
		}
		if a.State.Live() != wasLive {
			if err := setLive(tx, runID, n, a.State.Live()); err != nil {
				return err
			}
		}
		a.UpdatedAt = s.stamp()
		if e != nil {
			e.Run, e.Attempt = runID, n
			stored, err := s.appendEvent(tx, *e)
			if err != nil {
				return err
			}
			a.EventSeqs = append(a.EventSeqs, stored.Seq)
		}
		if events, err = attemptEvents(tx, a); err != nil {
			return err
		}
		if err := put(rb, []byte(runID), r); err != nil {
			return err
		}
		return put(ab, attemptKey(runID, n), a)
	})
	if err != nil {
		return Attempt{}, err
	}
	return a, s.queueStateFile(stateJob{campaign, campaignDir, a, events, false}, !a.State.Live())
}

// queueStateFile hands job to the writer of state.json files; with wait it
// returns once the file holds job's state or a later one.
func (s *Store) queueStateFile(job stateJob, wait bool) error {
	if job.a.Dir == "" {
		return nil
	}
	if s.files == nil {
		return s.writeStateFile(job)
	}
	return s.files.queue(job, wait)
}

// FlushStateFiles waits until every state.json queued so far is written
// and returns the errors (matching ErrStateFile) of the writes that no
// transition has returned.
func (s *Store) FlushStateFiles() error {
	if s.files == nil {
		return nil
	}
	return s.files.flush()
}

// Sync writes the state.json files still queued (FlushStateFiles) and
// asks the kernel for the write-back error, if any, that the file system
// of the campaign directory met since the store was opened or since the
// last Sync (syncfs(2), Linux 5.8 and later: the file system's error
// sequence, sampled when the database file was opened); it returns both
// errors. The kernel tells of a failed write-back those who had the
// failing file open, once: a client that met an I/O error on its own
// results saw it alone, and a write of the controller's, to blocks that do
// not fail, cannot tell. A read-only handle returns nil.
func (s *Store) Sync() error {
	if s.files == nil {
		return nil
	}
	return errors.Join(s.FlushStateFiles(), s.writeBackErr())
}

// writeBackErr is syncfs(2) through the database's open file.
func (s *Store) writeBackErr() error {
	rc, err := s.file.SyscallConn()
	if err != nil {
		return fmt.Errorf("sync the file system of %s: %w", s.path, err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Syncfs(int(fd)) }); err != nil {
		return fmt.Errorf("sync the file system of %s: %w", s.path, err)
	}
	if serr != nil {
		return fmt.Errorf("the file system of the campaign directory %s failed a write-back since the database was opened (syncfs): %w", filepath.Dir(s.path), serr)
	}
	return nil
}

// attemptEvents reads the events a lists.
func attemptEvents(tx *bolt.Tx, a Attempt) ([]Event, error) {
	b := tx.Bucket(bucketEvents)
	events := make([]Event, 0, len(a.EventSeqs))
	for _, seq := range a.EventSeqs {
		var e Event
		if err := get(b, seqKey(seq), &e); err != nil {
			return nil, fmt.Errorf("event %d of run %s attempt %d: %w", seq, a.RunID, a.N, err)
		}
		events = append(events, e)
	}
	return events, nil
}

// RewriteStateFile writes state.json of attempt n of runID again from the
// database, e.g. after a crash between a commit and the file write.
func (s *Store) RewriteStateFile(runID string, n int) error {
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	var a Attempt
	var events []Event
	var campaign, campaignDir string
	err := s.view(fmt.Sprintf("read run %s attempt %d", runID, n), func(tx *bolt.Tx) error {
		var c Campaign
		if err := get(tx.Bucket(bucketCampaign), keyCampaign, &c); err != nil {
			return err
		}
		campaign, campaignDir = c.ID, c.Dir
		if err := get(tx.Bucket(bucketAttempts), attemptKey(runID, n), &a); err != nil {
			return err
		}
		var err error
		events, err = attemptEvents(tx, a)
		return err
	})
	if err != nil {
		return err
	}
	return s.queueStateFile(stateJob{campaign, campaignDir, a, events, true}, true)
}

// writeStateFile writes a.Dir/state.json atomically (temporary file in the
// same directory, renamed into place), mode 0644. It does nothing when
// a.Dir is empty. Errors match ErrStateFile.
//
// The file is derived from the database, which every transition commits
// and fsyncs; so after a transition the file is renamed into place without
// fsyncs of its own (two per transition, the larger part of the per-run
// cost of supervision). A power cut may leave a recent attempt's file
// stale or empty: resume rewrites those from the database
// (RewriteStateFile, with durable set: fsync of the file and the
// directory).
//
// When the attempt directory is under the campaign directory (campaignDir),
// the file is written beneath it (atomicfile.Beneath): a link a child
// planted in the attempt's path is not followed out of the campaign.
func (s *Store) writeStateFile(job stateJob) error {
	campaign, campaignDir, a, events, durable := job.campaign, job.campaignDir, job.a, job.events, job.durable
	if a.Dir == "" {
		return nil
	}
	path := filepath.Join(a.Dir, StateFileName)
	raw, err := json.MarshalIndent(StateFile{Campaign: campaign, Attempt: a, Events: events}, "", "  ")
	if err != nil {
		return fmt.Errorf("write %s: %w: %w", path, ErrStateFile, err)
	}
	opts := []atomicfile.Option{atomicfile.BeforeRename(func() {
		failpoint.Hit("state-json-before-rename") // the temporary file written, not renamed
	})}
	if !durable {
		opts = append(opts, atomicfile.NoSync())
	}
	if rel, rerr := filepath.Rel(campaignDir, a.Dir); campaignDir != "" && rerr == nil && !strings.HasPrefix(rel, "..") {
		opts = append(opts, atomicfile.Beneath(campaignDir))
		err = mkdirBeneath(campaignDir, rel)
	} else {
		err = os.MkdirAll(a.Dir, 0o755)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w: %w", path, ErrStateFile, err)
	}
	err = atomicfile.WriteFile(path, append(raw, '\n'), 0o644, opts...)
	if err != nil {
		// err says "write PATH: ...".
		return fmt.Errorf("%w: %w", ErrStateFile, err)
	}
	return nil
}

// Attempt returns attempt n of runID, or ErrNotFound.
func (s *Store) Attempt(runID string, n int) (Attempt, error) {
	var a Attempt
	err := s.view(fmt.Sprintf("read run %s attempt %d", runID, n), func(tx *bolt.Tx) error {
		return get(tx.Bucket(bucketAttempts), attemptKey(runID, n), &a)
	})
	return a, err
}

// Attempts returns the attempts of runID in order.
func (s *Store) Attempts(runID string) ([]Attempt, error) {
	var out []Attempt
	err := s.view("read attempts of run "+runID, func(tx *bolt.Tx) (err error) {
		prefix := attemptPrefix(runID)
		out, err = seekRecords[Attempt](tx.Bucket(bucketAttempts), prefix, func(k []byte) bool { return bytes.HasPrefix(k, prefix) }, 0)
		return err
	})
	return out, err
}

// LiveAttempts returns the attempts not in a terminal state, in run id
// order. It reads the live index and one attempt per entry.
func (s *Store) LiveAttempts() ([]Attempt, error) {
	var out []Attempt
	err := s.view("read live attempts", func(tx *bolt.Tx) error {
		var err error
		out, err = liveAttempts(tx)
		return err
	})
	return out, err
}

// Summary reads the campaign, the counters and the live attempts in one
// transaction. Its cost does not grow with the number of runs or events:
// it reads neither bucket.
func (s *Store) Summary() (Summary, error) {
	var sum Summary
	err := s.view("read summary", func(tx *bolt.Tx) error {
		if err := get(tx.Bucket(bucketCampaign), keyCampaign, &sum.Campaign); err != nil {
			return err
		}
		c, err := getCounters(tx)
		if err != nil {
			return err
		}
		sum.RunsByState = make(map[string]int, len(c.RunsByState))
		for st, n := range c.RunsByState {
			sum.RunsByState[st] = n
			sum.RunsTotal += n
		}
		sum.RemainingExpectedS = c.RemainingExpectedS
		if sum.Live, err = liveAttempts(tx); err != nil {
			return err
		}
		sum.LastEventSeq = nextSeq(tx.Bucket(bucketEvents)) - 1
		return nil
	})
	return sum, err
}

// keepIdentity applies mutate to a and refuses changes to the fields that
// only the store sets.
func keepIdentity(a *Attempt, mutate func(*Attempt) error) error {
	before := *a
	before.EventSeqs = slices.Clone(a.EventSeqs)
	if err := mutate(a); err != nil {
		return err
	}
	if a.RunID != before.RunID || a.N != before.N || a.State != before.State ||
		a.Reason != before.Reason || a.PendingReason != before.PendingReason ||
		a.Dir != before.Dir || !slices.Equal(a.EventSeqs, before.EventSeqs) {
		return fmt.Errorf("%w: mutate changed the id, state, reasons, directory or events", ErrInvalid)
	}
	return nil
}

// mkdirBeneath creates root/rel and its parents, resolving beneath root.
func mkdirBeneath(root, rel string) error {
	r, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	return r.MkdirAll(rel, 0o755)
}
