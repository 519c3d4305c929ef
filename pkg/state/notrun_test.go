package state_test

import (
	"errors"
	"strings"
	"testing"

	"warden/pkg/state"
)

// TestMarkNotRun: runs a capacity search ended before are not run, for
// good, with their reason and an event each; counted so, and never
// pending. A run that is done, already not run or live is refused whole.
func TestMarkNotRun(t *testing.T) {
	s, _ := newCampaign(t, 4)
	if _, err := s.NewAttempt("r000", "", nil); err != nil {
		t.Fatal(err)
	}
	drive(t, s, "r000", 1, happyPath)
	if _, err := s.NewAttempt("r003", "", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Transition("r003", 1, state.Reserved, "", "", nil, nil); err != nil {
		t.Fatal(err)
	}
	for name, reasons := range map[string]map[string]string{
		"a done run":     {"r001": "x", "r000": "x"},
		"a live run":     {"r003": "x"},
		"no reason":      {"r001": ""},
		"an unknown run": {"nope": "x"},
	} {
		if err := s.MarkNotRun(reasons); err == nil {
			t.Fatalf("%s: marked", name)
		}
	}
	if err := s.MarkNotRun(map[string]string{"r001": "capacity search s/A ended below range", "r002": "the same"}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Run("r001")
	if err != nil || r.State() != state.RunNotRun || r.NotRunReason != "capacity search s/A ended below range" || !r.Closed() {
		t.Fatalf("r001 %+v (%v), want not-run with its reason", r, err)
	}
	if err := s.MarkNotRun(map[string]string{"r001": "again"}); !errors.Is(err, state.ErrInvalid) {
		t.Fatalf("marked twice: %v", err)
	}
	assertSummaryMatchesScan(t, s, "after MarkNotRun")
	sum, err := s.Summary()
	if err != nil || sum.RunsByState["not-run"] != 2 || sum.RunsByState["pending"] != 0 {
		t.Fatalf("runs by state %v (%v), want 2 not run and none pending", sum.RunsByState, err)
	}
	evs, err := s.Events(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		if e.Reason == "not-run" && strings.HasPrefix(e.Message, "run r00") {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d not-run events, want one per run", n)
	}
}

// TestSetCapacitySearch: where each search stands is kept in the campaign
// record, replaced search by search.
func TestSetCapacitySearch(t *testing.T) {
	s, _ := newCampaign(t, 1)
	for _, cs := range []state.CapacitySearch{{Search: "a", Judged: 1}, {Search: "b", Judged: 1}, {Search: "a", Judged: 2, FoundRPS: 6, NotMonotonic: "x"}} {
		if err := s.SetCapacitySearch(cs); err != nil {
			t.Fatal(err)
		}
	}
	c, err := s.Campaign()
	if err != nil || len(c.Capacity) != 2 || c.Capacity[0] != (state.CapacitySearch{Search: "a", Judged: 2, FoundRPS: 6, NotMonotonic: "x"}) || c.Capacity[1].Search != "b" {
		t.Fatalf("recorded %+v (%v)", c.Capacity, err)
	}
}

// TestAmendUnstarted: an amendment whose runs must not have started is
// refused in its own transaction when one has (a capacity point started
// between the amendment's check and its record).
func TestAmendUnstarted(t *testing.T) {
	s, _ := newCampaign(t, 2)
	if _, err := s.NewAttempt("r001", "", nil); err != nil {
		t.Fatal(err)
	}
	err := s.Amend(state.Amendment{ID: "A-1", Text: "x", Unstarted: []string{"r000", "r001"}}, nil)
	if !errors.Is(err, state.ErrStarted) || !strings.Contains(err.Error(), "run r001") {
		t.Fatalf("amend with r001 started: %v", err)
	}
	if as, _ := s.Amendments(); len(as) != 0 {
		t.Fatalf("recorded %v", as)
	}
	if err := s.Amend(state.Amendment{ID: "A-1", Text: "x", Unstarted: []string{"r000"}}, nil); err != nil {
		t.Fatal(err)
	}
}
