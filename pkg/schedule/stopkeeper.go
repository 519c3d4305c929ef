package schedule

import "sync"

// StopKeeper records the campaign's stop for review so that the first
// stop asked for is the one kept where the database allows. A stop whose
// write the database refused (the campaign directory's disk full, say) is
// held, and the next stop asked for writes the held one first: the later
// stop is mostly a consequence (an attempt that failed because its
// transition could not be written) and would otherwise hide the cause.
// Where the held stop is refused again, the later one is written if it
// can be: a write of another size can fit where the first did not, and a
// campaign recorded stopped for a consequence is better than one that
// runs on. The zero StopKeeper holds nothing.
type StopKeeper struct {
	mu      sync.Mutex // serializes Record: one stop is read, decided and written at a time
	pending *Stop      // the first stop not yet written; guarded by mu
}

// Record writes a stop through put when running says the campaign still
// runs: the held stop if one is and put takes it, else s. A refused s is
// held unless a stop is held already. It returns the stop written, or the
// last one tried and put's error; a zero Stop when the campaign no longer
// runs.
func (r *StopKeeper) Record(s Stop, running func() bool, put func(Stop) error) (Stop, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !running() {
		r.pending = nil // the record says how the campaign ended: nothing is held
		return Stop{}, nil
	}
	if held := r.pending; held != nil {
		if put(*held) == nil {
			r.pending = nil
			return *held, nil
		}
	}
	if err := put(s); err != nil {
		if r.pending == nil {
			r.pending = &s
		}
		return s, err
	}
	r.pending = nil
	return s, nil
}

// Held is the stop whose write the database refused and that no later
// write has taken yet: in force although unrecorded (nothing new may
// start while one is held); nil when none is.
func (r *StopKeeper) Held() *Stop {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending == nil {
		return nil
	}
	s := *r.pending
	return &s
}

// Flush writes the held stop through put when running says the campaign
// still runs (one that no longer runs drops it, as Record does). It
// returns the stop still held, with put's error, or nil.
func (r *StopKeeper) Flush(running func() bool, put func(Stop) error) (*Stop, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending == nil {
		return nil, nil
	}
	if !running() {
		r.pending = nil
		return nil, nil
	}
	if err := put(*r.pending); err != nil {
		s := *r.pending
		return &s, err
	}
	r.pending = nil
	return nil, nil
}
