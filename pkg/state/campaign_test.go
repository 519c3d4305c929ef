package state_test

import (
	"slices"
	"testing"
	"time"

	"warden/pkg/state"
)

// Runs decodes only what changed since it last read the runs: what it
// returns is the stored runs all the same, after every change, and a
// caller that changes what it was given changes nothing read later.
func TestRunsAfterChanges(t *testing.T) {
	s, _ := openStrict(t)
	runs := testRuns(3)
	runs[2].Needs = []string{runs[0].ID}
	if err := s.CreateCampaign(state.Campaign{ID: "c", ProtocolSHA256: "abc"}, runs); err != nil {
		t.Fatal(err)
	}
	byID := func() map[string]state.Run {
		t.Helper()
		got, err := s.Runs()
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]state.Run{}
		for _, r := range got {
			m[r.ID] = r
		}
		return m
	}
	first := byID()
	if len(first) != 3 || first["r001"].Attempts != 0 {
		t.Fatalf("runs before any attempt: %+v", first)
	}
	first["r002"].Needs[0] = "changed by the caller"
	if _, err := s.NewAttempt("r001", "", nil); err != nil {
		t.Fatal(err)
	}
	drive(t, s, "r001", 1, happyPath)
	after := byID()
	if r := after["r001"]; r.Attempts != 1 || !r.Done || r.Result != 1 || r.LastState != state.Complete {
		t.Fatalf("r001 after a complete attempt = %+v", r)
	}
	if r := after["r000"]; r.Attempts != 0 || r.Done {
		t.Fatalf("r000, unchanged, = %+v", r)
	}
	if got := after["r002"].Needs; len(got) != 1 || got[0] != "r000" {
		t.Fatalf("r002's needs = %v, want [r000]: a caller's change reached the store's runs", got)
	}
	if _, err := s.NewAttempt("r000", "", nil); err != nil {
		t.Fatal(err)
	}
	if r := byID()["r000"]; r.Attempts != 1 || r.LastState != state.Planned {
		t.Fatalf("r000 after a new attempt = %+v", r)
	}
}

// A transition that passes through states records an event for each, in
// order, in its one commit; a hop that is not legal from where the
// attempt is, or is not a live state, records nothing.
func TestTransitionThrough(t *testing.T) {
	s, _ := newCampaign(t, 3)
	for _, id := range []string{"r000", "r001", "r002"} {
		if _, err := s.NewAttempt(id, "", nil); err != nil {
			t.Fatal(err)
		}
	}
	before, err := s.LastEventSeq()
	if err != nil {
		t.Fatal(err)
	}
	entered := time.Now().Add(-3 * time.Millisecond).UTC() // the hop's own time, before the commit
	a, err := s.TransitionWith("r000", 1, state.Preflight, "", "checking", nil, nil,
		state.With{Through: []state.Hop{{To: state.Reserved, Message: "reserved", At: entered}}})
	if err != nil {
		t.Fatal(err)
	}
	if a.State != state.Preflight || len(a.EventSeqs) != 3 {
		t.Fatalf("attempt after the transition: state %s, events %v", a.State, a.EventSeqs)
	}
	evs, err := s.Events(before, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		got = append(got, e.From+">"+e.To+":"+e.Message)
	}
	if want := []string{"planned>reserved:reserved", "reserved>preflight:checking"}; !slices.Equal(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	// the hop's event carries its own time; its monotonic time is as far
	// before the transition's
	hop, to := evs[0], evs[1]
	if !hop.Wall.Equal(entered) || !to.Wall.After(entered) {
		t.Errorf("hop at %v, transition at %v; want the hop at %v", hop.Wall, to.Wall, entered)
	}
	if d := time.Duration(to.Mono - hop.Mono); d < to.Wall.Sub(hop.Wall)-time.Millisecond || d > to.Wall.Sub(hop.Wall)+time.Millisecond {
		t.Errorf("monotonic %v apart, wall %v", d, to.Wall.Sub(hop.Wall))
	}
	// a hop's time after the commit's (a clock stepped back) is the commit's
	late, err := s.TransitionWith("r002", 1, state.Preflight, "", "checking", nil, nil,
		state.With{Through: []state.Hop{{To: state.Reserved, At: time.Now().Add(time.Hour)}}})
	if err != nil {
		t.Fatal(err)
	}
	lateEvs, err := s.Events(late.EventSeqs[len(late.EventSeqs)-2]-1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(lateEvs) != 2 || lateEvs[0].Wall.After(lateEvs[1].Wall) || lateEvs[0].Mono > lateEvs[1].Mono {
		t.Fatalf("a hop entered after its commit: %+v", lateEvs)
	}
	for _, c := range []struct {
		name string
		hop  state.AttemptState
		to   state.AttemptState
	}{{"illegal hop", state.Starting, state.Ready}, {"terminal hop", state.Failed, state.Interrupted}, {"illegal after the hop", state.Reserved, state.Ready}} {
		_, err := s.TransitionWith("r001", 1, c.to, state.ReasonInterrupted, "x", nil, nil, state.With{Through: []state.Hop{{To: c.hop}}})
		if err == nil {
			t.Fatalf("%s: planned through %s to %s was recorded", c.name, c.hop, c.to)
		}
		at, err := s.Attempt("r001", 1)
		if err != nil {
			t.Fatal(err)
		}
		if at.State != state.Planned || len(at.EventSeqs) != 1 {
			t.Fatalf("%s: the refused transition left state %s, events %v", c.name, at.State, at.EventSeqs)
		}
	}
}
