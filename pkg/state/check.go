package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"

	bolt "go.etcd.io/bbolt"
)

// Rule names an invariant that Check verifies.
type Rule string

// The invariants. The package doc explains each.
const (
	RuleSchema         Rule = "schema"          // version current, buckets present
	RuleRecord         Rule = "record"          // records decode and match their keys
	RuleAttemptState   Rule = "attempt-state"   // known states and reasons
	RuleAttemptNumbers Rule = "attempt-numbers" // 1..N per run, N == Run.Attempts
	RuleOneResult      Rule = "one-result"      // at most one complete/quarantined attempt, and it is the last
	RuleOneLive        Rule = "one-live"        // only the latest attempt may be live
	RuleRunFields      Rule = "run-fields"      // Done, Result, LastState agree with the attempts
	RuleEventSeq       Rule = "event-seq"       // event keys 1..N without gaps
	RuleEventChain     Rule = "event-chain"     // each attempt's events chain to its state
	RuleLedger         Rule = "ledger"          // ledger sums equal the campaign totals
	RuleCounters       Rule = "counters"        // the counters record equals a count of the runs
	RuleLiveIndex      Rule = "live-index"      // the live index names exactly the live attempts
)

// Violation is one broken invariant found by Check. errors.Is(v, ErrInvariant)
// holds for every Violation.
type Violation struct {
	Rule   Rule
	Detail string // what was found, naming the records
}

func (v *Violation) Error() string { return string(v.Rule) + ": " + v.Detail }

// Is makes every Violation match ErrInvariant.
func (v *Violation) Is(target error) bool { return target == ErrInvariant }

// Check verifies every invariant in one read transaction. It returns nil, or
// all the violations joined (errors.Join); each is a *Violation matching
// ErrInvariant. It reads the whole database.
func (s *Store) Check() error {
	var violations error
	err := s.view("check", func(tx *bolt.Tx) error {
		violations = check(tx)
		return nil
	})
	if err != nil {
		return err
	}
	if violations != nil {
		return fmt.Errorf("check %s: %w", s.path, violations)
	}
	return nil
}

// check collects the violations in tx.
func check(tx *bolt.Tx) error {
	var vs []error
	add := func(rule Rule, format string, args ...any) {
		vs = append(vs, &Violation{Rule: rule, Detail: fmt.Sprintf(format, args...)})
	}

	if v, err := schemaVersion(tx); err != nil || v != SchemaVersion {
		add(RuleSchema, "schema version %d (%v), want %d", v, err, SchemaVersion)
	}
	for _, name := range allBuckets {
		if tx.Bucket(name) == nil {
			add(RuleSchema, "bucket %q is missing", name)
		}
	}
	if len(vs) > 0 {
		return errors.Join(vs...)
	}

	var c Campaign
	hasCampaign := false
	if err := get(tx.Bucket(bucketCampaign), keyCampaign, &c); err == nil {
		hasCampaign = true
	} else if !errors.Is(err, ErrNotFound) {
		add(RuleRecord, "campaign: %v", err)
	}

	runs := map[string]Run{}
	var runIDs []string
	_ = tx.Bucket(bucketRuns).ForEach(func(k, v []byte) error {
		var r Run
		if err := decode(k, v, &r); err != nil {
			add(RuleRecord, "run: %v", err)
		} else if r.ID != string(k) {
			add(RuleRecord, "run under key %q has id %q", k, r.ID)
		} else {
			runs[r.ID] = r
			runIDs = append(runIDs, r.ID)
		}
		return nil
	})

	// Attempts, grouped by run; keys sort by number within a run.
	byRun := map[string][]Attempt{}
	liveKeys := map[string]bool{} // keys of the attempts in a live state
	_ = tx.Bucket(bucketAttempts).ForEach(func(k, v []byte) error {
		i := bytes.IndexByte(k, 0)
		n, err := strconv.Atoi(string(k[i+1:]))
		if i < 0 || err != nil {
			add(RuleRecord, "attempt key %q is not run id, NUL, number", k)
			return nil
		}
		var a Attempt
		if err := decode(k, v, &a); err != nil {
			add(RuleRecord, "attempt: %v", err)
			return nil
		}
		if a.RunID != string(k[:i]) || a.N != n {
			add(RuleRecord, "attempt under key %q is run %q attempt %d", k, a.RunID, a.N)
			return nil
		}
		name := fmt.Sprintf("run %s attempt %d", a.RunID, a.N)
		if !a.State.Valid() {
			add(RuleAttemptState, "%s has unknown state %q", name, a.State)
		}
		for _, r := range []Reason{a.Reason, a.PendingReason} {
			if r != "" && !r.Valid() {
				add(RuleAttemptState, "%s has unknown reason %q", name, r)
			}
		}
		if (a.State == Failed || a.State == Quarantined || a.State == Interrupted) && a.Reason == "" {
			add(RuleAttemptState, "%s is %s without a reason", name, a.State)
		}
		if a.State.Live() {
			liveKeys[string(k)] = true
		}
		if _, ok := runs[a.RunID]; !ok {
			add(RuleRecord, "%s belongs to no run", name)
		}
		byRun[a.RunID] = append(byRun[a.RunID], a)
		return nil
	})

	for _, id := range runIDs {
		r, list := runs[id], byRun[id]
		result, last := 0, AttemptState("")
		for i, a := range list {
			if a.N != i+1 {
				add(RuleAttemptNumbers, "run %s: attempt %d found where %d was expected", id, a.N, i+1)
			}
			if a.State.result() {
				if result != 0 {
					add(RuleOneResult, "run %s: attempts %d and %d are both results", id, result, a.N)
				}
				result = a.N
			} else if result != 0 {
				add(RuleOneResult, "run %s: attempt %d follows the result %d", id, a.N, result)
			}
			if a.State.Live() && i != len(list)-1 {
				add(RuleOneLive, "run %s: attempt %d is %s but is not the latest", id, a.N, a.State)
			}
			last = a.State
		}
		if r.Attempts != len(list) {
			add(RuleAttemptNumbers, "run %s: attempts = %d, %d recorded", id, r.Attempts, len(list))
		}
		if r.Done != (result != 0) || r.Result != result {
			add(RuleRunFields, "run %s: done = %t, result = %d; the attempts say result %d", id, r.Done, r.Result, result)
		}
		if r.LastState != last {
			add(RuleRunFields, "run %s: last_state = %q, latest attempt is %q", id, r.LastState, last)
		}
	}

	// Counters: a count of the runs as recorded. A run's own fields are
	// checked against its attempts above (run-fields).
	scanned := counters{RunsByState: map[string]int{}}
	for _, id := range runIDs {
		scanned.insert(runs[id])
	}
	var stored counters
	campaignRecorded := tx.Bucket(bucketCampaign).Get(keyCampaign) != nil
	switch err := get(tx.Bucket(bucketCampaign), keyCounters, &stored); {
	case errors.Is(err, ErrNotFound):
		if campaignRecorded {
			add(RuleCounters, "the counters record is missing")
		}
	case err != nil:
		add(RuleCounters, "counters: %v", err)
	case !campaignRecorded:
		add(RuleCounters, "a counters record without a campaign")
	case !stored.equal(scanned):
		add(RuleCounters, "counters say %v runs by state and %g s remaining; the runs say %v and %g s",
			stored.RunsByState, stored.RemainingExpectedS, scanned.RunsByState, scanned.RemainingExpectedS)
	}

	// Live index: exactly the keys of the attempts in a live state.
	_ = tx.Bucket(bucketLive).ForEach(func(k, v []byte) error {
		switch {
		case !liveKeys[string(k)]:
			add(RuleLiveIndex, "the live index names %q, which is not a live attempt", k)
		case len(v) != 0:
			add(RuleLiveIndex, "the live index entry %q has a value", k)
		}
		delete(liveKeys, string(k))
		return nil
	})
	for _, k := range slices.Sorted(maps.Keys(liveKeys)) {
		add(RuleLiveIndex, "live attempt %q is missing from the live index", k)
	}

	// Events: contiguous keys, and per attempt a chain from "" to its state.
	type chain struct {
		last string
		seqs []uint64
	}
	type attemptID struct {
		run string
		n   int
	}
	chains := map[attemptID]*chain{}
	campaignLast := ""
	want := uint64(1)
	_ = tx.Bucket(bucketEvents).ForEach(func(k, v []byte) error {
		if len(k) != 8 {
			add(RuleRecord, "event key %x is not 8 bytes", k)
			return nil
		}
		seq := binary.BigEndian.Uint64(k)
		if seq != want {
			add(RuleEventSeq, "event %d found where %d was expected", seq, want)
		}
		want = seq + 1
		var e Event
		if err := decode(k, v, &e); err != nil {
			add(RuleRecord, "event: %v", err)
			return nil
		}
		if e.Seq != seq {
			add(RuleRecord, "event under key %d has seq %d", seq, e.Seq)
		}
		if e.Run == "" {
			if e.From != campaignLast {
				add(RuleEventChain, "campaign event %d goes from %q, the previous went to %q", seq, e.From, campaignLast)
			}
			campaignLast = e.To
			return nil
		}
		id := attemptID{e.Run, e.Attempt}
		ch := chains[id]
		if ch == nil {
			ch = &chain{}
			chains[id] = ch
		}
		if e.From != ch.last {
			add(RuleEventChain, "event %d of run %s attempt %d goes from %q, the previous went to %q", seq, e.Run, e.Attempt, e.From, ch.last)
		}
		ch.last = e.To
		ch.seqs = append(ch.seqs, seq)
		return nil
	})
	for _, id := range runIDs {
		for _, a := range byRun[id] {
			ch := chains[attemptID{a.RunID, a.N}]
			delete(chains, attemptID{a.RunID, a.N})
			switch {
			case ch == nil:
				add(RuleEventChain, "run %s attempt %d has no events", a.RunID, a.N)
			case ch.last != string(a.State):
				add(RuleEventChain, "run %s attempt %d is %s but its last event goes to %q", a.RunID, a.N, a.State, ch.last)
			case !slices.Equal(ch.seqs, a.EventSeqs):
				add(RuleEventChain, "run %s attempt %d lists events %v, the log has %v", a.RunID, a.N, a.EventSeqs, ch.seqs)
			}
		}
	}
	for id := range chains {
		add(RuleEventChain, "events of run %s attempt %d, which is not recorded", id.run, id.n)
	}
	if hasCampaign && campaignLast != string(c.State) {
		add(RuleEventChain, "campaign is %s but its last event goes to %q", c.State, campaignLast)
	}

	// Ledger: contiguous keys; totals equal the campaign's.
	var consumed, reserved float64
	entries := 0
	want = 1
	_ = tx.Bucket(bucketLedger).ForEach(func(k, v []byte) error {
		entries++
		var e LedgerEntry
		if err := decode(k, v, &e); err != nil {
			add(RuleRecord, "ledger: %v", err)
			return nil
		}
		if len(k) != 8 || binary.BigEndian.Uint64(k) != want || e.Seq != want {
			add(RuleLedger, "ledger entry %x (seq %d) found where %d was expected", k, e.Seq, want)
		}
		want++
		switch e.Kind {
		case LedgerPrior, LedgerCharge:
			consumed += e.GPUSeconds
		case LedgerReserve:
			reserved += e.GPUSeconds
		case LedgerRelease:
			reserved -= e.GPUSeconds
		case LedgerOverrun:
		default:
			add(RuleLedger, "ledger entry %d has unknown kind %q", e.Seq, e.Kind)
		}
		if e.GPUSeconds < 0 {
			add(RuleLedger, "ledger entry %d is negative", e.Seq)
		}
		if reserved < -ledgerEpsilon {
			add(RuleLedger, "reserved GPU seconds fall to %g at entry %d", reserved, e.Seq)
		}
		return nil
	})
	switch {
	case !hasCampaign && entries > 0:
		add(RuleLedger, "%d ledger entries without a campaign", entries)
	case hasCampaign:
		if math.Abs(consumed-c.ConsumedGPUSeconds) > ledgerEpsilon {
			add(RuleLedger, "campaign consumed %g GPU seconds, the ledger sums to %g", c.ConsumedGPUSeconds, consumed)
		}
		if math.Abs(reserved-c.ReservedGPUSeconds) > ledgerEpsilon {
			add(RuleLedger, "campaign reserved %g GPU seconds, the ledger sums to %g", c.ReservedGPUSeconds, reserved)
		}
		if c.ReservedGPUSeconds < -ledgerEpsilon {
			add(RuleLedger, "campaign reserved %g GPU seconds", c.ReservedGPUSeconds)
		}
	}

	for _, name := range [][]byte{bucketGates, bucketAmendments} {
		_ = tx.Bucket(name).ForEach(func(k, v []byte) error {
			var m map[string]any
			if err := decode(k, v, &m); err != nil {
				add(RuleRecord, "%s: %v", name, err)
			}
			return nil
		})
	}
	return errors.Join(vs...)
}
