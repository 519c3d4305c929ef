package schedule

import (
	"errors"
	"slices"
	"testing"

	"warden/pkg/state"
)

// stopsDisk is a database for StopKeeper: put refuses every stop while
// full, and refuses those in refuse always; it keeps what it wrote, and
// the campaign runs until something is written.
type stopsDisk struct {
	full    bool
	refuse  map[string]bool
	tried   []string
	written []string
}

func (d *stopsDisk) running() bool { return len(d.written) == 0 }

func (d *stopsDisk) put(s Stop) error {
	d.tried = append(d.tried, s.Detail)
	if d.full || d.refuse[s.Detail] {
		return errNoSpace
	}
	d.written = append(d.written, s.Detail)
	return nil
}

// errNoSpace is the refusal of a full disk.
var errNoSpace = errors.New("no space left on device")

var (
	storageStop = Stop{Reason: state.StopHarnessError, Detail: "the campaign directory ran out of space (ENOSPC)"}
	laterStop   = Stop{Reason: state.StopHarnessError, Detail: "run p1.saturation failed: commit: no space left on device"}
)

// The first stop asked for is the one written, also when the database
// refused it at first: the next stop writes it in its place. Once one is
// written, the campaign no longer runs and nothing more is written.
func TestFirstStopKeptWhenItsWriteFailed(t *testing.T) {
	d := &stopsDisk{full: true}
	var r StopKeeper
	if got, err := r.Record(storageStop, d.running, d.put); !errors.Is(err, errNoSpace) || got.Detail != storageStop.Detail {
		t.Fatalf("first stop: %q, %v; want the storage stop refused", got.Detail, err)
	}
	// still full: both are refused, the first stays held
	if _, err := r.Record(laterStop, d.running, d.put); err == nil {
		t.Fatal("a stop was written on a full disk")
	}
	d.full = false
	if got, err := r.Record(laterStop, d.running, d.put); err != nil || got.Detail != storageStop.Detail {
		t.Fatalf("third stop: %q, %v; want the storage stop written", got.Detail, err)
	}
	if len(d.written) != 1 || d.written[0] != storageStop.Detail {
		t.Fatalf("written %q, want only the storage stop", d.written)
	}
	if got, err := r.Record(laterStop, d.running, d.put); err != nil || got.Detail != "" || len(d.written) != 1 {
		t.Fatalf("a stop after the campaign stopped: %q, %v, written %q", got.Detail, err, d.written)
	}
}

// Where the held stop is refused again but the later one fits, the later
// one is written: the campaign is recorded stopped rather than running on.
func TestLaterStopWrittenWhereTheHeldOneNeverFits(t *testing.T) {
	d := &stopsDisk{refuse: map[string]bool{storageStop.Detail: true}}
	var r StopKeeper
	r.Record(storageStop, d.running, d.put)
	if got, err := r.Record(laterStop, d.running, d.put); err != nil || got.Detail != laterStop.Detail {
		t.Fatalf("later stop: %q, %v; want it written", got.Detail, err)
	}
	want := []string{storageStop.Detail, storageStop.Detail, laterStop.Detail}
	if len(d.tried) != 3 || d.tried[0] != want[0] || d.tried[1] != want[1] || d.tried[2] != want[2] {
		t.Fatalf("tried %q, want %q: the held stop first, then the later one", d.tried, want)
	}
}

// A stop written at once leaves nothing held: a later stop, while the
// campaign runs again, is written as itself.
func TestWrittenStopLeavesNothingPending(t *testing.T) {
	d := &stopsDisk{}
	var r StopKeeper
	always := func() bool { return true }
	r.Record(storageStop, always, d.put)
	r.Record(laterStop, always, d.put)
	if len(d.written) != 2 || d.written[0] != storageStop.Detail || d.written[1] != laterStop.Detail {
		t.Fatalf("written %q, want each stop as itself", d.written)
	}
}

// Flush writes the held stop and nothing else: refused, it stays held
// with the database's error; written, nothing is held; and a campaign
// whose record no longer runs drops it (its record says how it ended).
func TestFlushWritesTheHeldStop(t *testing.T) {
	d := &stopsDisk{full: true}
	var r StopKeeper
	if held, err := r.Flush(d.running, d.put); held != nil || err != nil || len(d.tried) != 0 {
		t.Fatalf("nothing held: %+v, %v, tried %q", held, err, d.tried)
	}
	r.Record(storageStop, d.running, d.put)
	if held, err := r.Flush(d.running, d.put); held == nil || held.Detail != storageStop.Detail || !errors.Is(err, errNoSpace) {
		t.Fatalf("still full: %+v, %v; want the storage stop held and the refusal", held, err)
	}
	d.full = false
	if held, err := r.Flush(d.running, d.put); held != nil || err != nil || r.Held() != nil {
		t.Fatalf("room again: %+v, %v, held %+v; want it written", held, err, r.Held())
	}
	if want := []string{storageStop.Detail, storageStop.Detail, storageStop.Detail}; !slices.Equal(d.tried, want) || len(d.written) != 1 {
		t.Fatalf("tried %q, written %q; want the held stop tried once a call, written once", d.tried, d.written)
	}

	ended := &stopsDisk{full: true}
	var k StopKeeper
	k.Record(storageStop, ended.running, ended.put)
	ended.written = []string{"complete"} // the record no longer runs
	if held, err := k.Flush(ended.running, ended.put); held != nil || err != nil || k.Held() != nil || len(ended.tried) != 1 {
		t.Fatalf("a campaign no longer running: %+v, %v, held %+v, tried %q; want it dropped untried", held, err, k.Held(), ended.tried)
	}
}
