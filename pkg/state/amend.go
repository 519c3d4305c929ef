package state

import (
	"errors"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// Amend registers a as an amendment of the protocol and applies change to
// the campaign record (its protocol hash, its cap) in one transaction: the
// amendment's commit point. It fails with ErrExists for an id registered
// already.
func (s *Store) Amend(a Amendment, change func(*Campaign) error) error {
	return s.update("amend "+a.ID, func(tx *bolt.Tx) error {
		for _, id := range a.Unstarted {
			var r Run
			if err := get(tx.Bucket(bucketRuns), []byte(id), &r); err != nil {
				return fmt.Errorf("amendment %s: run %s: %w", a.ID, id, err)
			}
			if r.Attempts > 0 || r.Done {
				return fmt.Errorf("amendment %s: %w: run %s has an attempt (%s) now", a.ID, ErrStarted, id, r.State())
			}
		}
		c, err := s.addAmendment(tx, a, fmt.Sprintf("amendment %s (%s): %s", a.ID, kindOf(a), a.Text))
		if err != nil {
			return err
		}
		if change != nil {
			if err := change(&c); err != nil {
				return err
			}
		}
		return put(tx.Bucket(bucketCampaign), keyCampaign, c)
	})
}

func kindOf(a Amendment) string {
	if a.Kind == "" {
		return "amend"
	}
	return a.Kind
}

// addAmendment stores a (unique id) with its event, and returns the
// campaign record for the caller to change and store.
func (s *Store) addAmendment(tx *bolt.Tx, a Amendment, msg string) (Campaign, error) {
	var c Campaign
	if a.ID == "" {
		return c, fmt.Errorf("%w: empty amendment id", ErrInvalid)
	}
	if err := get(tx.Bucket(bucketCampaign), keyCampaign, &c); err != nil {
		return c, err
	}
	ids, err := amendmentIDs(tx)
	if err != nil {
		return c, err
	}
	if slices.Contains(ids, a.ID) {
		return c, fmt.Errorf("amendment %s: %w", a.ID, ErrExists)
	}
	if a.RegisteredAt.IsZero() {
		a.RegisteredAt = s.stamp()
	}
	b := tx.Bucket(bucketAmendments)
	if err := put(b, seqKey(nextSeq(b)), a); err != nil {
		return c, err
	}
	_, err = s.appendEvent(tx, Event{From: string(c.State), To: string(c.State), Reason: "amendment", Message: msg})
	return c, err
}

// ErrHasResult is returned by Readjudicate for a run whose result is
// another attempt: a run never has two results.
var ErrHasResult = errors.New("the run has another attempt as its result")

// Readjudicate records rj, a new verdict under an amendment, beside
// attempt n of runID (whose own state and reason stay as recorded), with
// the gate verdict it rests on, in one transaction. A re-adjudication that
// makes the attempt usable (complete or quarantined) makes it the run's
// result; the attempt must be terminal, and the run may have no other
// result.
func (s *Store) Readjudicate(runID string, n int, rj Readjudication, g GateVerdict) (Attempt, error) {
	op := fmt.Sprintf("re-adjudicate run %s attempt %d", runID, n)
	return s.changeAttempt(op, runID, n, func(tx *bolt.Tx, a *Attempt, r *Run) (*Event, error) {
		if a.State.Live() {
			return nil, fmt.Errorf("%w: attempt %d is %s", ErrLiveAttempt, n, a.State)
		}
		if !rj.State.result() && rj.State != Failed {
			return nil, fmt.Errorf("%w: a re-adjudication is complete, quarantined or failed, not %s", ErrInvalid, rj.State)
		}
		if r.Done && r.Result != n {
			return nil, fmt.Errorf("run %s: %w (attempt %d)", runID, ErrHasResult, r.Result)
		}
		if rj.At.IsZero() {
			rj.At = s.stamp()
		}
		a.Readjudicated = &rj
		if rj.State.result() {
			r.Done, r.Result, r.ResultState = true, n, rj.State
		} else if r.Result == n {
			r.Done, r.Result, r.ResultState = false, 0, ""
		}
		if g.Gate != "" {
			g.Run, g.Attempt = runID, n
			if err := s.addGate(tx, &g); err != nil {
				return nil, err
			}
		}
		// the attempt's own state does not change: the event goes from it
		// to it, and says the new verdict
		return &Event{From: string(a.State), To: string(a.State), Reason: "readjudicated",
			Message: fmt.Sprintf("re-adjudicated under amendment %s: %s %s (%s); recorded %s %s kept", rj.Amendment, rj.State, rj.Reason, rj.Detail, a.State, a.Reason)}, nil
	})
}

// Freeze registers a (kind freeze) and freezes the matrix in one
// transaction: every run without a result becomes not-run with a.ID as its
// reason (never deleted, never imputed) and the campaign becomes frozen.
// It refuses while an attempt is live: end the runs in flight first. It
// returns the runs left not-run.
func (s *Store) Freeze(a Amendment) ([]string, error) {
	var notRun []string
	err := s.update("freeze "+a.ID, func(tx *bolt.Tx) error {
		live, err := liveAttempts(tx)
		if err != nil {
			return err
		}
		if len(live) > 0 {
			return fmt.Errorf("%w: run %s attempt %d is %s; stop the campaign first", ErrLiveAttempt, live[0].RunID, live[0].N, live[0].State)
		}
		rb := tx.Bucket(bucketRuns)
		runs, err := records[Run](rb, nil)
		if err != nil {
			return err
		}
		slices.SortFunc(runs, func(x, y Run) int { return x.Order - y.Order })
		for _, r := range runs {
			if r.Done || r.NotRun != "" {
				continue
			}
			before := r
			r.NotRun = a.ID
			if err := updateCounters(tx, before, r); err != nil {
				return err
			}
			if err := put(rb, []byte(r.ID), r); err != nil {
				return err
			}
			notRun = append(notRun, r.ID)
		}
		a.Kind, a.Runs = "freeze", notRun
		c, err := s.addAmendment(tx, a, fmt.Sprintf("amendment %s (freeze): %s; %d runs not run", a.ID, a.Text, len(notRun)))
		if err != nil {
			return err
		}
		if err := checkCampaignTransition(c.State, CampaignFrozen); err != nil {
			return err
		}
		from := c.State
		c.State, c.StateAt = CampaignFrozen, s.stamp()
		c.StopReason, c.StopDetail, c.StopFigures = "", "", nil
		if err := put(tx.Bucket(bucketCampaign), keyCampaign, c); err != nil {
			return err
		}
		_, err = s.appendEvent(tx, Event{From: string(from), To: string(CampaignFrozen), Reason: "frozen",
			Message: fmt.Sprintf("matrix frozen by amendment %s", a.ID)})
		return err
	})
	return notRun, err
}
