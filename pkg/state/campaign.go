package state

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// CreateCampaign records the campaign and its plan. It fails with ErrExists
// if a campaign is already recorded. The campaign starts running; a positive
// PriorGPUHours is written to the ledger as a "prior" entry. The runs'
// derived fields (Attempts, Done, Result, LastState) are reset.
func (s *Store) CreateCampaign(c Campaign, runs []Run) error {
	return s.update("create campaign "+c.ID, func(tx *bolt.Tx) error {
		cb := tx.Bucket(bucketCampaign)
		if cb.Get(keyCampaign) != nil {
			return ErrExists
		}
		if c.ID == "" {
			return fmt.Errorf("%w: empty campaign id", ErrInvalid)
		}
		if c.PriorGPUHours < 0 || c.BudgetCapGPUHours < 0 {
			return fmt.Errorf("%w: negative GPU hours", ErrInvalid)
		}
		if c.RegimeConcurrency < 0 {
			return fmt.Errorf("%w: negative regime concurrency %d", ErrInvalid, c.RegimeConcurrency)
		}
		now := s.stamp()
		if c.CreatedAt.IsZero() {
			c.CreatedAt = now
		}
		c.State, c.StateAt = CampaignRunning, now
		c.StopReason, c.StopDetail, c.StopFigures = "", "", nil
		c.ConsumedGPUSeconds, c.ReservedGPUSeconds = 0, 0

		rb := tx.Bucket(bucketRuns)
		n := counters{RunsByState: map[string]int{}}
		for _, r := range runs {
			if r.ID == "" || strings.ContainsRune(r.ID, 0) {
				return fmt.Errorf("%w: run id %q", ErrInvalid, r.ID)
			}
			if rb.Get([]byte(r.ID)) != nil {
				return fmt.Errorf("%w: run %q listed twice", ErrInvalid, r.ID)
			}
			r.Attempts, r.Done, r.Result, r.LastState = 0, false, 0, ""
			if err := put(rb, []byte(r.ID), r); err != nil {
				return err
			}
			n.insert(r)
		}
		if err := put(cb, keyCounters, n); err != nil {
			return err
		}
		if c.PriorGPUHours > 0 {
			e := LedgerEntry{At: now, Kind: LedgerPrior, GPUSeconds: c.PriorGPUHours * 3600,
				Note: "consumed before this campaign"}
			if err := addLedger(tx, &c, &e); err != nil {
				return err
			}
		}
		if err := put(cb, keyCampaign, c); err != nil {
			return err
		}
		_, err := s.appendEvent(tx, Event{From: "", To: string(CampaignRunning),
			Message: fmt.Sprintf("campaign created with %d runs", len(runs))})
		return err
	})
}

// Campaign returns the campaign record, or ErrNotFound.
func (s *Store) Campaign() (Campaign, error) {
	var c Campaign
	err := s.view("read campaign", func(tx *bolt.Tx) error {
		return get(tx.Bucket(bucketCampaign), keyCampaign, &c)
	})
	return c, err
}

// UpdateCampaign applies mutate to the campaign record without appending an
// event: it is for the heartbeat, the controller's identity, the regime and
// its concurrency, and the budget unit. mutate must not change the id, the
// state or the ledger totals (use SetCampaignState and AddLedger), nor set a
// negative RegimeConcurrency; doing so fails with ErrInvalid. mutate runs
// inside the write transaction: keep it quick.
func (s *Store) UpdateCampaign(mutate func(*Campaign) error) error {
	return s.update("update campaign", func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketCampaign)
		var c Campaign
		if err := get(b, keyCampaign, &c); err != nil {
			return err
		}
		before := c
		if err := mutate(&c); err != nil {
			return err
		}
		if c.ID != before.ID || c.State != before.State ||
			c.ConsumedGPUSeconds != before.ConsumedGPUSeconds ||
			c.ReservedGPUSeconds != before.ReservedGPUSeconds {
			return fmt.Errorf("%w: id, state and ledger totals change only through their own methods", ErrInvalid)
		}
		if c.RegimeConcurrency < 0 {
			return fmt.Errorf("%w: negative regime concurrency %d", ErrInvalid, c.RegimeConcurrency)
		}
		return put(b, keyCampaign, c)
	})
}

// SetCampaignState moves the campaign to state and appends an event. Moving
// to stopped records reason, detail and figures as the stop; moving back to
// running clears them. The allowed moves are running -> stopped | complete
// and stopped -> running; others fail with a *TransitionError.
func (s *Store) SetCampaignState(state CampaignState, reason, detail string, figures map[string]float64) error {
	return s.update("set campaign state "+string(state), func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketCampaign)
		var c Campaign
		if err := get(b, keyCampaign, &c); err != nil {
			return err
		}
		if err := checkCampaignTransition(c.State, state); err != nil {
			return err
		}
		from := c.State
		c.State, c.StateAt = state, s.stamp()
		switch state {
		case CampaignStopped:
			c.StopReason, c.StopDetail, c.StopFigures = StopReason(reason), detail, maps.Clone(figures)
		case CampaignRunning:
			c.StopReason, c.StopDetail, c.StopFigures = "", "", nil
		}
		if err := put(b, keyCampaign, c); err != nil {
			return err
		}
		_, err := s.appendEvent(tx, Event{From: string(from), To: string(state),
			Reason: reason, Message: detail, Figures: figures})
		return err
	})
}

// Runs returns every run, sorted by Order.
func (s *Store) Runs() ([]Run, error) {
	var runs []Run
	err := s.view("read runs", func(tx *bolt.Tx) error {
		s.runsMu.Lock()
		defer s.runsMu.Unlock()
		if s.runs == nil {
			s.runs = map[string]decodedRun{}
		}
		runs = make([]Run, 0, len(s.runs))
		return tx.Bucket(bucketRuns).ForEach(func(k, raw []byte) error {
			d, ok := s.runs[string(k)]
			if !ok || !bytes.Equal(d.raw, raw) {
				d = decodedRun{raw: bytes.Clone(raw)}
				if err := decode(k, raw, &d.run); err != nil {
					return err
				}
				s.runs[string(k)] = d
			}
			r := d.run
			r.Needs = slices.Clone(r.Needs)
			runs = append(runs, r)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(runs, func(a, b Run) int { return cmp.Compare(a.Order, b.Order) })
	return runs, nil
}

// decodedRun is a run and the stored bytes it was decoded from: a pass
// that reads every run (the runner reads them all before each decision)
// decodes only those whose bytes changed since.
type decodedRun struct {
	raw []byte
	run Run
}

// Run returns one run, or ErrNotFound.
func (s *Store) Run(id string) (Run, error) {
	var r Run
	err := s.view("read run "+id, func(tx *bolt.Tx) error {
		return get(tx.Bucket(bucketRuns), []byte(id), &r)
	})
	return r, err
}

// AppendEvent appends a campaign-level note, such as "resumed after a
// crash". Run must be empty (attempt events come from the attempt methods);
// From and To are set to the campaign's current state. The stored event is
// returned.
func (s *Store) AppendEvent(e Event) (Event, error) {
	err := s.update("append event", func(tx *bolt.Tx) error {
		if e.Run != "" || e.Attempt != 0 {
			return fmt.Errorf("%w: attempt events come from the attempt methods", ErrInvalid)
		}
		var c Campaign
		if err := get(tx.Bucket(bucketCampaign), keyCampaign, &c); err != nil {
			return err
		}
		e.From, e.To = string(c.State), string(c.State)
		var err error
		e, err = s.appendEvent(tx, e)
		return err
	})
	return e, err
}

// appendEvent assigns the next sequence number and the clocks and stores e.
func (s *Store) appendEvent(tx *bolt.Tx, e Event) (Event, error) {
	return s.appendEventAt(tx, e, time.Time{})
}

// appendEventAt is appendEvent for an event that happened at at, before
// now (zero: now): its wall time is at and its monotonic time is moved
// back by as much.
func (s *Store) appendEventAt(tx *bolt.Tx, e Event, at time.Time) (Event, error) {
	b := tx.Bucket(bucketEvents)
	e.Seq = nextSeq(b)
	e.Mono = monotonic()
	e.Wall = s.stamp()
	if at = at.UTC().Round(0); !at.IsZero() && at.Before(e.Wall) {
		e.Mono -= e.Wall.Sub(at).Nanoseconds()
		e.Wall = at
	}
	e.Figures = maps.Clone(e.Figures)
	return e, put(b, seqKey(e.Seq), e)
}

// Events returns up to limit events with Seq > afterSeq, in order; limit
// <= 0 means all. The last n events are Events(LastEventSeq()-n, n).
func (s *Store) Events(afterSeq uint64, limit int) ([]Event, error) {
	var events []Event
	err := s.view("read events", func(tx *bolt.Tx) (err error) {
		events, err = seekRecords[Event](tx.Bucket(bucketEvents), seqKey(afterSeq+1), nil, limit)
		return err
	})
	return events, err
}

// LastEventSeq returns the sequence number of the last event, 0 if none.
func (s *Store) LastEventSeq() (uint64, error) {
	var seq uint64
	err := s.view("read last event", func(tx *bolt.Tx) error {
		seq = nextSeq(tx.Bucket(bucketEvents)) - 1
		return nil
	})
	return seq, err
}

// AddLedger appends a ledger entry and updates the campaign's totals in the
// same transaction. Seq is assigned; a zero At is set to now. GPUSeconds must
// not be negative, and a release must not exceed what is reserved. The
// stored entry is returned.
func (s *Store) AddLedger(e LedgerEntry) (LedgerEntry, error) {
	err := s.update("add ledger entry "+e.Kind, func(tx *bolt.Tx) error {
		return s.addLedgerTx(tx, &e)
	})
	return e, err
}

// AddLedgerEntries appends entries, in order, as AddLedger does each, in
// one transaction: all of them are recorded or none, and those with a
// zero At carry one time, the commit's. The stored entries are returned.
func (s *Store) AddLedgerEntries(entries []LedgerEntry) ([]LedgerEntry, error) {
	out := slices.Clone(entries)
	err := s.update(fmt.Sprintf("add %d ledger entries", len(out)), func(tx *bolt.Tx) error {
		now := s.stamp()
		for i := range out {
			if out[i].At.IsZero() {
				out[i].At = now
			}
			if err := s.addLedgerTx(tx, &out[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ledgerEpsilon absorbs floating-point rounding when totals are compared.
const ledgerEpsilon = 1e-6

// addLedger stores e with the next sequence number and applies it to c's
// totals; the caller stores c.
func addLedger(tx *bolt.Tx, c *Campaign, e *LedgerEntry) error {
	if e.GPUSeconds < 0 {
		return fmt.Errorf("%w: negative GPU seconds %g", ErrInvalid, e.GPUSeconds)
	}
	switch e.Kind {
	case LedgerPrior, LedgerCharge:
		c.ConsumedGPUSeconds += e.GPUSeconds
	case LedgerReserve:
		c.ReservedGPUSeconds += e.GPUSeconds
	case LedgerOverrun:
	case LedgerRelease:
		if e.GPUSeconds > c.ReservedGPUSeconds+ledgerEpsilon {
			return fmt.Errorf("%w: release of %g GPU seconds exceeds the %g reserved", ErrInvalid, e.GPUSeconds, c.ReservedGPUSeconds)
		}
		c.ReservedGPUSeconds -= e.GPUSeconds
	default:
		return fmt.Errorf("%w: ledger kind %q", ErrInvalid, e.Kind)
	}
	b := tx.Bucket(bucketLedger)
	e.Seq = nextSeq(b)
	return put(b, seqKey(e.Seq), e)
}

// Ledger returns every ledger entry in order.
func (s *Store) Ledger() ([]LedgerEntry, error) {
	return viewRecords[LedgerEntry](s, "read ledger", bucketLedger, nil)
}

// AddGateVerdict records a gate verdict. Seq is assigned; a zero At is set
// to now. The stored verdict is returned.
func (s *Store) AddGateVerdict(g GateVerdict) (GateVerdict, error) {
	err := s.update("add gate verdict "+g.Gate, func(tx *bolt.Tx) error {
		return s.addGate(tx, &g)
	})
	return g, err
}

// addGate validates and appends a gate verdict inside tx.
func (s *Store) addGate(tx *bolt.Tx, g *GateVerdict) error {
	if g.Gate == "" {
		return fmt.Errorf("%w: empty gate name", ErrInvalid)
	}
	switch g.Verdict {
	case VerdictPass, VerdictFail, VerdictError:
	default:
		return fmt.Errorf("%w: verdict %q", ErrInvalid, g.Verdict)
	}
	if g.At.IsZero() {
		g.At = s.stamp()
	}
	b := tx.Bucket(bucketGates)
	g.Seq = nextSeq(b)
	return put(b, seqKey(g.Seq), *g)
}

// addLedgerTx appends a ledger entry inside tx and updates the campaign's
// totals in the same transaction.
func (s *Store) addLedgerTx(tx *bolt.Tx, e *LedgerEntry) error {
	cb := tx.Bucket(bucketCampaign)
	var c Campaign
	if err := get(cb, keyCampaign, &c); err != nil {
		return err
	}
	if e.At.IsZero() {
		e.At = s.stamp()
	}
	if err := addLedger(tx, &c, e); err != nil {
		return err
	}
	return put(cb, keyCampaign, c)
}

// GateVerdicts returns the verdicts recorded for runID in order, or every
// verdict when runID is empty.
func (s *Store) GateVerdicts(runID string) ([]GateVerdict, error) {
	return viewRecords[GateVerdict](s, "read gate verdicts", bucketGates, func(g GateVerdict) bool { return runID == "" || g.Run == runID })
}

// GateIndex is the last verdict of each gate (by name, over the campaign
// and its runs), its detail, and how many error verdicts each gate had,
// as of the verdict numbered Seq; ReadGates brings it up to date.
type GateIndex struct {
	Seq    uint64
	Last   map[string]string
	Detail map[string]string
	Errors map[string]int
}

// ReadGates adds to ix the verdicts recorded after ix.Seq
// (GateVerdictsAfter).
func (s *Store) ReadGates(ix *GateIndex) error {
	vs, err := s.GateVerdictsAfter(ix.Seq)
	if err != nil {
		return err
	}
	if ix.Last == nil {
		ix.Last, ix.Detail, ix.Errors = map[string]string{}, map[string]string{}, map[string]int{}
	}
	for _, v := range vs {
		ix.Last[v.Gate], ix.Detail[v.Gate], ix.Seq = v.Verdict, v.Detail, v.Seq
		if v.Verdict == VerdictError {
			ix.Errors[v.Gate]++
		}
	}
	return nil
}

// GateVerdictsAfter returns the verdicts recorded after the one numbered
// seq (0: all), in order. The gates bucket is append-only, so a reader
// that keeps what it read needs only these: its cost does not grow with
// the verdicts already read.
func (s *Store) GateVerdictsAfter(seq uint64) ([]GateVerdict, error) {
	var out []GateVerdict
	err := s.view("read gate verdicts", func(tx *bolt.Tx) (err error) {
		out, err = seekRecords[GateVerdict](tx.Bucket(bucketGates), seqKey(seq+1), nil, 0)
		return err
	})
	return out, err
}

// AddAmendment registers an amendment and appends a campaign note. It fails
// with ErrExists if the id is already registered. A zero RegisteredAt is set
// to now.
func (s *Store) AddAmendment(a Amendment) error {
	return s.update("add amendment "+a.ID, func(tx *bolt.Tx) error {
		if a.ID == "" {
			return fmt.Errorf("%w: empty amendment id", ErrInvalid)
		}
		var c Campaign
		if err := get(tx.Bucket(bucketCampaign), keyCampaign, &c); err != nil {
			return err
		}
		ids, err := amendmentIDs(tx)
		if err != nil {
			return err
		}
		if slices.Contains(ids, a.ID) {
			return fmt.Errorf("amendment %s: %w", a.ID, ErrExists)
		}
		if a.RegisteredAt.IsZero() {
			a.RegisteredAt = s.stamp()
		}
		b := tx.Bucket(bucketAmendments)
		if err := put(b, seqKey(nextSeq(b)), a); err != nil {
			return err
		}
		_, err = s.appendEvent(tx, Event{From: string(c.State), To: string(c.State),
			Message: fmt.Sprintf("amendment %s registered: %s", a.ID, a.Title)})
		return err
	})
}

// Amendments returns the registered amendments in registration order.
func (s *Store) Amendments() ([]Amendment, error) {
	return viewRecords[Amendment](s, "read amendments", bucketAmendments, nil)
}

// amendmentIDs returns the registered amendment ids in order.
func amendmentIDs(tx *bolt.Tx) ([]string, error) {
	var ids []string
	err := eachRecord(tx.Bucket(bucketAmendments), func(_ []byte, a Amendment) error {
		ids = append(ids, a.ID)
		return nil
	})
	return ids, err
}
