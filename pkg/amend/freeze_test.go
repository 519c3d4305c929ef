package amend

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"warden/pkg/dirlayout"
	"warden/pkg/state"
)

// campaignDir makes a campaign directory whose database holds three runs,
// r0 done; the store is closed when it returns.
func campaignDir(t *testing.T, setup func(*state.Store)) string {
	t.Helper()
	dir := t.TempDir()
	s, err := state.Open(dirlayout.State(dir), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CreateCampaign(state.Campaign{ID: "c1", ProtocolSHA256: "sha-1"}, []state.Run{{ID: "r0"}, {ID: "r1", Order: 1}, {ID: "r2", Order: 2}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewAttempt("r0", "", nil); err != nil {
		t.Fatal(err)
	}
	for _, st := range []state.AttemptState{state.Reserved, state.Preflight, state.Starting, state.Ready, state.Measuring, state.Stopping, state.Cleanup, state.Validating, state.Complete} {
		if _, err := s.Transition("r0", 1, st, "", "", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if setup != nil {
		setup(s)
	}
	return dir
}

func TestFreezeAmendment(t *testing.T) {
	now := time.Date(2026, 7, 13, 23, 30, 0, 0, time.FixedZone("x", -3*3600))
	a := FreezeAmendment("A-P3-7", "matrix frozen", 1000, "sha-1", now)
	want := state.Amendment{ID: "A-P3-7", Date: "2026-07-14", Title: "matrix frozen", Text: "matrix frozen", OperatorUID: 1000, OldSHA256: "sha-1", ProtocolSHA256: "sha-1"}
	if a.ID != want.ID || a.Date != want.Date || a.Title != want.Title || a.Text != want.Text || a.OperatorUID != want.OperatorUID ||
		a.OldSHA256 != want.OldSHA256 || a.ProtocolSHA256 != want.ProtocolSHA256 {
		t.Errorf("FreezeAmendment = %+v, want %+v", a, want)
	}
}

// TestFreezeAndReadFrozen: a freeze leaves the runs without a result
// not-run and reads back the same; its JSON document is the one freeze
// has always printed.
func TestFreezeAndReadFrozen(t *testing.T) {
	dir := campaignDir(t, nil)
	if _, err := ReadFrozen(dir, "A-7"); err == nil || !strings.Contains(err.Error(), "the controller exited without freezing the campaign (it is running); see "+dirlayout.Log(dir)) {
		t.Fatalf("ReadFrozen of a running campaign: %v", err)
	}
	fr, err := Freeze(dir, "A-7", "frozen for review", 1000, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	want := Frozen{Amendment: "A-7", NotRun: []string{"r1", "r2"}, Schema: Schema, State: "frozen"}
	if fr.Amendment != want.Amendment || strings.Join(fr.NotRun, ",") != "r1,r2" || fr.Schema != want.Schema || fr.State != want.State {
		t.Fatalf("Freeze = %+v, want %+v", fr, want)
	}
	read, err := ReadFrozen(dir, "A-7")
	if err != nil || strings.Join(read.NotRun, ",") != "r1,r2" || read.State != "frozen" || read.Amendment != "A-7" {
		t.Fatalf("ReadFrozen = %+v, %v", read, err)
	}
	got, _ := json.Marshal(fr)
	old, _ := json.Marshal(map[string]any{"schema": Schema, "amendment": "A-7", "state": "frozen", "not_run": []string{"r1", "r2"}})
	if !bytes.Equal(got, old) {
		t.Errorf("JSON %s, want %s", got, old)
	}
	var buf bytes.Buffer
	fr.WriteText(&buf)
	if want := "campaign frozen by A-7; 2 runs not run: [r1 r2]\n"; buf.String() != want {
		t.Errorf("text %q, want %q", buf.String(), want)
	}
	if _, err := Freeze(dir, "A-8", "again", 1000, time.Now()); err == nil || !strings.HasPrefix(err.Error(), "freeze "+dir+": ") {
		t.Fatalf("a second freeze: %v", err)
	}
}

func TestCheckRecorded(t *testing.T) {
	dir := campaignDir(t, nil)
	s, err := state.Open(dirlayout.State(dir), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, a := range []state.Amendment{{ID: "A-1", Kind: "amend", ProtocolSHA256: "sha-2"}, {ID: "A-0", ProtocolSHA256: "sha-1"}, {ID: "R-1", Kind: "readjudicate", Cites: "A-1", ProtocolSHA256: "sha-2"}} {
		if err := s.Amend(a, nil); err != nil {
			t.Fatal(err)
		}
	}
	for id, ok := range map[string]bool{"A-1": true, "A-0": true, "R-1": false, "A-9": false} {
		err := CheckRecorded(s, id)
		if (err == nil) != ok {
			t.Errorf("%s: %v", id, err)
		} else if !ok && err.Error() != "readjudicate: no amendment "+id+" of the protocol is recorded" {
			t.Errorf("%s: %v", id, err)
		}
	}
}
