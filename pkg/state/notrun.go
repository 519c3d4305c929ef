package state

import (
	"fmt"
	"maps"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// MarkNotRun records that each run of reasons (run id -> why) will never
// run, in one transaction with one campaign event per run: its
// NotRunReason is set, so it counts as not-run, never pending. A run that
// is done, frozen, already not run or has a live attempt is refused (none
// is changed).
func (s *Store) MarkNotRun(reasons map[string]string) error {
	if len(reasons) == 0 {
		return nil
	}
	return s.update("mark runs not run", func(tx *bolt.Tx) error {
		var c Campaign
		if err := get(tx.Bucket(bucketCampaign), keyCampaign, &c); err != nil {
			return err
		}
		rb := tx.Bucket(bucketRuns)
		for _, id := range slices.Sorted(maps.Keys(reasons)) {
			var r Run
			if err := get(rb, []byte(id), &r); err != nil {
				return fmt.Errorf("run %s: %w", id, err)
			}
			if r.Done || r.Closed() || r.LastState.Live() || reasons[id] == "" {
				return fmt.Errorf("%w: run %s (%s, last attempt %s) cannot be marked not run", ErrInvalid, id, r.State(), r.LastState)
			}
			before := r
			r.NotRunReason = reasons[id]
			if err := updateCounters(tx, before, r); err != nil {
				return err
			}
			if err := put(rb, []byte(id), r); err != nil {
				return err
			}
			if _, err := s.appendEvent(tx, Event{From: string(c.State), To: string(c.State), Reason: "not-run", Message: fmt.Sprintf("run %s will not run: %s", id, r.NotRunReason)}); err != nil {
				return err
			}
		}
		return nil
	})
}

// SetCapacitySearch records where capacity search cs.Search stands in the
// campaign record, replacing what was recorded of it.
func (s *Store) SetCapacitySearch(cs CapacitySearch) error {
	return s.UpdateCampaign(func(c *Campaign) error {
		for i := range c.Capacity {
			if c.Capacity[i].Search == cs.Search {
				c.Capacity[i] = cs
				return nil
			}
		}
		c.Capacity = append(c.Capacity, cs)
		return nil
	})
}
