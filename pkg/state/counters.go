package state

import (
	"errors"
	"fmt"
	"maps"
	"math"

	bolt "go.etcd.io/bbolt"
)

// counters is the record stored under "counters" in the campaign bucket:
// totals derived from the runs, changed in the same transaction as every
// run they count, so that a status query reads one record instead of every
// run. Check recomputes them from the runs (RuleCounters).
type counters struct {
	// RunsByState counts the runs by Run.State; a state with no runs has no
	// key.
	RunsByState map[string]int `json:"runs_by_state"`
	// RemainingExpectedS is the sum of Run.ExpectedS over the runs not done.
	RemainingExpectedS float64 `json:"remaining_expected_s"`
}

// remainingS is what r contributes to counters.RemainingExpectedS.
func remainingS(r Run) float64 {
	if r.Done || r.Closed() {
		return 0
	}
	return r.ExpectedS
}

// count adds delta runs in state st.
func (c *counters) count(st RunState, delta int) {
	if c.RunsByState == nil {
		c.RunsByState = map[string]int{}
	}
	c.RunsByState[string(st)] += delta
	if c.RunsByState[string(st)] == 0 {
		delete(c.RunsByState, string(st))
	}
}

// insert counts r.
func (c *counters) insert(r Run) {
	c.count(r.State(), 1)
	c.RemainingExpectedS += remainingS(r)
}

// countersEpsilon is the tolerance of Check when it compares
// RemainingExpectedS with the sum over the runs: the counter adds and
// subtracts one run at a time, so its rounding differs from a fresh sum's.
func countersEpsilon(sum float64) float64 { return 1e-6 + 1e-9*math.Abs(sum) }

// equal reports whether c and d count the same runs and agree on the
// remaining seconds within countersEpsilon.
func (c counters) equal(d counters) bool {
	return maps.Equal(c.RunsByState, d.RunsByState) &&
		math.Abs(c.RemainingExpectedS-d.RemainingExpectedS) <= countersEpsilon(d.RemainingExpectedS)
}

// getCounters reads the counters record. Its absence, with a campaign
// recorded, is a *Violation of RuleCounters.
func getCounters(tx *bolt.Tx) (counters, error) {
	var c counters
	err := get(tx.Bucket(bucketCampaign), keyCounters, &c)
	if errors.Is(err, ErrNotFound) {
		return c, &Violation{Rule: RuleCounters, Detail: "the counters record is missing"}
	}
	return c, err
}

// updateCounters moves run r from before to after in the counters, in tx.
// It writes nothing when neither the run's state nor its remaining seconds
// change.
func updateCounters(tx *bolt.Tx, before, after Run) error {
	bs, as := before.State(), after.State()
	delta := remainingS(after) - remainingS(before)
	if bs == as && delta == 0 {
		return nil
	}
	c, err := getCounters(tx)
	if err != nil {
		return err
	}
	if bs != as {
		c.count(bs, -1)
		c.count(as, 1)
	}
	c.RemainingExpectedS += delta
	return put(tx.Bucket(bucketCampaign), keyCounters, c)
}

// setLive adds attempt n of runID to the live index when live, and removes
// it otherwise.
func setLive(tx *bolt.Tx, runID string, n int, live bool) error {
	b := tx.Bucket(bucketLive)
	if live {
		return b.Put(attemptKey(runID, n), []byte{})
	}
	return b.Delete(attemptKey(runID, n))
}

// liveAttempts reads the attempts the live index names, in key order (by
// run id). A key naming no attempt is a *Violation of RuleLiveIndex.
func liveAttempts(tx *bolt.Tx) ([]Attempt, error) {
	var out []Attempt
	ab := tx.Bucket(bucketAttempts)
	err := tx.Bucket(bucketLive).ForEach(func(k, _ []byte) error {
		var a Attempt
		err := get(ab, k, &a)
		if errors.Is(err, ErrNotFound) {
			return &Violation{Rule: RuleLiveIndex, Detail: fmt.Sprintf("the live index names attempt %q, which is not recorded", k)}
		}
		if err != nil {
			return err
		}
		out = append(out, a)
		return nil
	})
	return out, err
}

// upgradeCounters upgrades schema 1 to 2: it creates the live index from
// the attempts in a live state and, when a campaign is recorded, the
// counters record from the runs.
func upgradeCounters(tx *bolt.Tx) error {
	live, err := tx.CreateBucketIfNotExists(bucketLive)
	if err != nil {
		return err
	}
	type attemptState struct {
		State AttemptState `json:"state"`
	}
	err = eachRecord(tx.Bucket(bucketAttempts), func(k []byte, a attemptState) error {
		if a.State.Live() {
			return live.Put(k, []byte{})
		}
		return nil
	})
	if err != nil {
		return err
	}
	cb := tx.Bucket(bucketCampaign)
	if cb.Get(keyCampaign) == nil {
		return nil // no campaign, no runs: CreateCampaign writes the counters
	}
	c := counters{RunsByState: map[string]int{}}
	err = eachRecord(tx.Bucket(bucketRuns), func(_ []byte, r Run) error {
		c.insert(r)
		return nil
	})
	if err != nil {
		return err
	}
	return put(cb, keyCounters, c)
}
