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

// checker holds what one Check has read so far, for the rules that
// compare records of several buckets.
type checker struct {
	tx *bolt.Tx
	vs []error

	campaign    Campaign
	hasCampaign bool
	runs        map[string]Run
	runIDs      []string             // in key order
	byRun       map[string][]Attempt // attempts by run, in number order
	liveKeys    map[string]bool      // keys of the attempts in a live state
}

func (k *checker) add(rule Rule, format string, args ...any) {
	k.vs = append(k.vs, &Violation{Rule: rule, Detail: fmt.Sprintf(format, args...)})
}

// check collects the violations in tx. Each rule has its own function;
// they run in this order because the later ones compare against the
// records the earlier ones read.
func check(tx *bolt.Tx) error {
	k := &checker{tx: tx, runs: map[string]Run{}, byRun: map[string][]Attempt{}, liveKeys: map[string]bool{}}
	if !k.checkSchema() {
		return errors.Join(k.vs...)
	}
	k.readCampaign()
	k.readRuns()
	k.readAttempts()
	for _, id := range k.runIDs {
		k.checkRun(id)
	}
	k.checkCounters()
	k.checkLiveIndex()
	k.checkEvents()
	k.checkLedger()
	for _, name := range [][]byte{bucketGates, bucketAmendments} {
		scan(k, name, string(name), nil, func([]byte, map[string]any) {})
	}
	return errors.Join(k.vs...)
}

// scan walks the bucket name in key order. before, when not nil, sees
// each key first and says whether to decode its record; a record that
// does not decode is a RuleRecord violation (what names it), and fn gets
// every other.
func scan[T any](k *checker, name []byte, what string, before func(key []byte) bool, fn func(key []byte, v T)) {
	_ = k.tx.Bucket(name).ForEach(func(key, raw []byte) error {
		if before != nil && !before(key) {
			return nil
		}
		var v T
		if err := decode(key, raw, &v); err != nil {
			k.add(RuleRecord, "%s: %v", what, err)
			return nil
		}
		fn(key, v)
		return nil
	})
}

// checkSchema is RuleSchema; the other rules need the buckets, so false
// ends the check.
func (k *checker) checkSchema() bool {
	n := len(k.vs)
	if v, err := schemaVersion(k.tx); err != nil || v != SchemaVersion {
		k.add(RuleSchema, "schema version %d (%v), want %d", v, err, SchemaVersion)
	}
	for _, name := range allBuckets {
		if k.tx.Bucket(name) == nil {
			k.add(RuleSchema, "bucket %q is missing", name)
		}
	}
	return len(k.vs) == n
}

func (k *checker) readCampaign() {
	if err := get(k.tx.Bucket(bucketCampaign), keyCampaign, &k.campaign); err == nil {
		k.hasCampaign = true
	} else if !errors.Is(err, ErrNotFound) {
		k.add(RuleRecord, "campaign: %v", err)
	}
}

func (k *checker) readRuns() {
	scan(k, bucketRuns, "run", nil, func(key []byte, r Run) {
		if r.ID != string(key) {
			k.add(RuleRecord, "run under key %q has id %q", key, r.ID)
			return
		}
		k.runs[r.ID] = r
		k.runIDs = append(k.runIDs, r.ID)
	})
}

// readAttempts reads the attempts, grouped by run (keys sort by number
// within a run), checking each record's key (RuleRecord) and state
// (RuleAttemptState).
func (k *checker) readAttempts() {
	var run string
	var n int
	keyOK := func(key []byte) bool {
		i := bytes.IndexByte(key, 0)
		var err error
		n, err = strconv.Atoi(string(key[i+1:]))
		if i < 0 || err != nil {
			k.add(RuleRecord, "attempt key %q is not run id, NUL, number", key)
			return false
		}
		run = string(key[:i])
		return true
	}
	scan(k, bucketAttempts, "attempt", keyOK, func(key []byte, a Attempt) {
		if a.RunID != run || a.N != n {
			k.add(RuleRecord, "attempt under key %q is run %q attempt %d", key, a.RunID, a.N)
			return
		}
		name := fmt.Sprintf("run %s attempt %d", a.RunID, a.N)
		k.checkAttemptState(name, a)
		if a.State.Live() {
			k.liveKeys[string(key)] = true
		}
		if _, ok := k.runs[a.RunID]; !ok {
			k.add(RuleRecord, "%s belongs to no run", name)
		}
		k.byRun[a.RunID] = append(k.byRun[a.RunID], a)
	})
}

// checkAttemptState is RuleAttemptState for the attempt called name.
func (k *checker) checkAttemptState(name string, a Attempt) {
	if !a.State.Valid() {
		k.add(RuleAttemptState, "%s has unknown state %q", name, a.State)
	}
	for _, r := range []Reason{a.Reason, a.PendingReason} {
		if r != "" && !r.Valid() {
			k.add(RuleAttemptState, "%s has unknown reason %q", name, r)
		}
	}
	if (a.State == Failed || a.State == Quarantined || a.State == Interrupted) && a.Reason == "" {
		k.add(RuleAttemptState, "%s is %s without a reason", name, a.State)
	}
}

// checkRun checks run id against its attempts: RuleAttemptNumbers,
// RuleOneResult and RuleOneLive attempt by attempt, then RuleRunFields.
func (k *checker) checkRun(id string) {
	r, list := k.runs[id], k.byRun[id]
	result := 0
	for i, a := range list {
		if a.N != i+1 {
			k.add(RuleAttemptNumbers, "run %s: attempt %d found where %d was expected", id, a.N, i+1)
		}
		result = k.checkOneResult(id, result, a)
		if a.State.Live() && i != len(list)-1 {
			k.add(RuleOneLive, "run %s: attempt %d is %s but is not the latest", id, a.N, a.State)
		}
	}
	if r.Attempts != len(list) {
		k.add(RuleAttemptNumbers, "run %s: attempts = %d, %d recorded", id, r.Attempts, len(list))
	}
	k.checkRunFields(r, list, result)
}

// checkOneResult is RuleOneResult for attempt a of run id, given the
// result found among the attempts before it (0: none); it returns the
// result so far.
func (k *checker) checkOneResult(id string, result int, a Attempt) int {
	if a.usable() {
		if result != 0 {
			k.add(RuleOneResult, "run %s: attempts %d and %d are both results", id, result, a.N)
		}
		return a.N
	}
	if result != 0 {
		k.add(RuleOneResult, "run %s: attempt %d follows the result %d", id, a.N, result)
	}
	return result
}

// checkRunFields is RuleRunFields: run r's summary fields against its
// attempts and their result.
func (k *checker) checkRunFields(r Run, list []Attempt, result int) {
	id := r.ID
	last := AttemptState("")
	if len(list) > 0 {
		last = list[len(list)-1].State
	}
	if r.Done != (result != 0) || r.Result != result {
		k.add(RuleRunFields, "run %s: done = %t, result = %d; the attempts say result %d", id, r.Done, r.Result, result)
	}
	wantResultState := AttemptState("")
	if result != 0 && list[result-1].Readjudicated != nil {
		wantResultState = list[result-1].Readjudicated.State
	}
	if r.ResultState != wantResultState {
		k.add(RuleRunFields, "run %s: result_state = %q, the result's re-adjudication says %q", id, r.ResultState, wantResultState)
	}
	if r.LastState != last {
		k.add(RuleRunFields, "run %s: last_state = %q, latest attempt is %q", id, r.LastState, last)
	}
}

// checkCounters is RuleCounters: the counters record is a count of the
// runs as recorded. A run's own fields are checked against its attempts
// by checkRunFields.
func (k *checker) checkCounters() {
	scanned := counters{RunsByState: map[string]int{}}
	for _, id := range k.runIDs {
		scanned.insert(k.runs[id])
	}
	var stored counters
	cb := k.tx.Bucket(bucketCampaign)
	campaignRecorded := cb.Get(keyCampaign) != nil
	switch err := get(cb, keyCounters, &stored); {
	case errors.Is(err, ErrNotFound):
		if campaignRecorded {
			k.add(RuleCounters, "the counters record is missing")
		}
	case err != nil:
		k.add(RuleCounters, "counters: %v", err)
	case !campaignRecorded:
		k.add(RuleCounters, "a counters record without a campaign")
	case !stored.equal(scanned):
		k.add(RuleCounters, "counters say %v runs by state and %g s remaining; the runs say %v and %g s",
			stored.RunsByState, stored.RemainingExpectedS, scanned.RunsByState, scanned.RemainingExpectedS)
	}
}

// checkLiveIndex is RuleLiveIndex: the index holds exactly the keys of
// the attempts in a live state.
func (k *checker) checkLiveIndex() {
	live := maps.Clone(k.liveKeys)
	_ = k.tx.Bucket(bucketLive).ForEach(func(key, v []byte) error {
		switch {
		case !live[string(key)]:
			k.add(RuleLiveIndex, "the live index names %q, which is not a live attempt", key)
		case len(v) != 0:
			k.add(RuleLiveIndex, "the live index entry %q has a value", key)
		}
		delete(live, string(key))
		return nil
	})
	for _, key := range slices.Sorted(maps.Keys(live)) {
		k.add(RuleLiveIndex, "live attempt %q is missing from the live index", key)
	}
}

// eventChain is what the event log says of one attempt.
type eventChain struct {
	last string   // the state its latest event goes to
	seqs []uint64 // its events
}

type attemptID struct {
	run string
	n   int
}

// checkEvents is RuleEventSeq (contiguous keys) and RuleEventChain (per
// attempt, and for the campaign, a chain from "" to its state).
func (k *checker) checkEvents() {
	chains := map[attemptID]*eventChain{}
	campaignLast := ""
	var seq uint64
	want := uint64(1)
	keyOK := func(key []byte) bool {
		if len(key) != 8 {
			k.add(RuleRecord, "event key %x is not 8 bytes", key)
			return false
		}
		seq = binary.BigEndian.Uint64(key)
		if seq != want {
			k.add(RuleEventSeq, "event %d found where %d was expected", seq, want)
		}
		want = seq + 1
		return true
	}
	scan(k, bucketEvents, "event", keyOK, func(_ []byte, e Event) {
		if e.Seq != seq {
			k.add(RuleRecord, "event under key %d has seq %d", seq, e.Seq)
		}
		if e.Run == "" {
			if e.From != campaignLast {
				k.add(RuleEventChain, "campaign event %d goes from %q, the previous went to %q", seq, e.From, campaignLast)
			}
			campaignLast = e.To
			return
		}
		id := attemptID{e.Run, e.Attempt}
		ch := chains[id]
		if ch == nil {
			ch = &eventChain{}
			chains[id] = ch
		}
		if e.From != ch.last {
			k.add(RuleEventChain, "event %d of run %s attempt %d goes from %q, the previous went to %q", seq, e.Run, e.Attempt, e.From, ch.last)
		}
		ch.last = e.To
		ch.seqs = append(ch.seqs, seq)
	})
	k.checkEventChains(chains)
	if k.hasCampaign && campaignLast != string(k.campaign.State) {
		k.add(RuleEventChain, "campaign is %s but its last event goes to %q", k.campaign.State, campaignLast)
	}
}

// checkEventChains is RuleEventChain for the attempts: each recorded
// attempt's chain ends at its state and lists the events it names.
func (k *checker) checkEventChains(chains map[attemptID]*eventChain) {
	for _, id := range k.runIDs {
		for _, a := range k.byRun[id] {
			ch := chains[attemptID{a.RunID, a.N}]
			delete(chains, attemptID{a.RunID, a.N})
			switch {
			case ch == nil:
				k.add(RuleEventChain, "run %s attempt %d has no events", a.RunID, a.N)
			case ch.last != string(a.State):
				k.add(RuleEventChain, "run %s attempt %d is %s but its last event goes to %q", a.RunID, a.N, a.State, ch.last)
			case !slices.Equal(ch.seqs, a.EventSeqs):
				k.add(RuleEventChain, "run %s attempt %d lists events %v, the log has %v", a.RunID, a.N, a.EventSeqs, ch.seqs)
			}
		}
	}
	for id := range chains {
		k.add(RuleEventChain, "events of run %s attempt %d, which is not recorded", id.run, id.n)
	}
}

// checkLedger is RuleLedger: contiguous keys, known kinds, and totals
// equal to the campaign's.
func (k *checker) checkLedger() {
	var consumed, reserved float64
	entries := 0
	want := uint64(1)
	count := func([]byte) bool { entries++; return true }
	scan(k, bucketLedger, "ledger", count, func(key []byte, e LedgerEntry) {
		if len(key) != 8 || binary.BigEndian.Uint64(key) != want || e.Seq != want {
			k.add(RuleLedger, "ledger entry %x (seq %d) found where %d was expected", key, e.Seq, want)
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
			k.add(RuleLedger, "ledger entry %d has unknown kind %q", e.Seq, e.Kind)
		}
		if e.GPUSeconds < 0 {
			k.add(RuleLedger, "ledger entry %d is negative", e.Seq)
		}
		if reserved < -ledgerEpsilon {
			k.add(RuleLedger, "reserved GPU seconds fall to %g at entry %d", reserved, e.Seq)
		}
	})
	k.checkLedgerTotals(entries, consumed, reserved)
}

func (k *checker) checkLedgerTotals(entries int, consumed, reserved float64) {
	c := &k.campaign
	switch {
	case !k.hasCampaign && entries > 0:
		k.add(RuleLedger, "%d ledger entries without a campaign", entries)
	case k.hasCampaign:
		if math.Abs(consumed-c.ConsumedGPUSeconds) > ledgerEpsilon {
			k.add(RuleLedger, "campaign consumed %g GPU seconds, the ledger sums to %g", c.ConsumedGPUSeconds, consumed)
		}
		if math.Abs(reserved-c.ReservedGPUSeconds) > ledgerEpsilon {
			k.add(RuleLedger, "campaign reserved %g GPU seconds, the ledger sums to %g", c.ReservedGPUSeconds, reserved)
		}
		if c.ReservedGPUSeconds < -ledgerEpsilon {
			k.add(RuleLedger, "campaign reserved %g GPU seconds", c.ReservedGPUSeconds)
		}
	}
}
