package outcome

import (
	"strings"
	"testing"
	"time"

	"warden/pkg/state"
)

type fakeRecords struct {
	runs     []state.Run
	attempts map[string]state.Attempt
	ams      []state.Amendment
}

func (f fakeRecords) Runs() ([]state.Run, error) { return f.runs, nil }
func (f fakeRecords) Attempt(run string, n int) (state.Attempt, error) {
	return f.attempts[run], nil
}
func (f fakeRecords) Amendments() ([]state.Amendment, error) { return f.ams, nil }

// Which failed runs wait for an amendment: not an infrastructure or
// profile-artifact failure, and no amend registered after the failure
// that changes the run (a re-adjudication or an earlier amend does not).
func TestAwaitingAmendment(t *testing.T) {
	t0 := time.Date(2026, 7, 12, 10, 0, 0, 0, time.UTC)
	failed := func(id string) state.Run { return state.Run{ID: id, Attempts: 1, LastState: state.Failed} }
	f := fakeRecords{
		runs: []state.Run{failed("semantic"), failed("infra"), failed("profile"), failed("amended"), failed("readjudicated"),
			failed("amended-before"), failed("other-run-amended"),
			{ID: "done", Attempts: 1, LastState: state.Complete, Done: true}},
		attempts: map[string]state.Attempt{},
	}
	for _, r := range f.runs {
		reason := state.ReasonValidatorFailed
		switch r.ID {
		case "infra":
			reason = state.ReasonServerNotReady
		case "profile":
			reason = state.ReasonProfileArtifact
		}
		f.attempts[r.ID] = state.Attempt{RunID: r.ID, N: 1, State: state.Failed, Reason: reason, UpdatedAt: t0}
	}
	f.ams = []state.Amendment{
		{ID: "A1", RegisteredAt: t0.Add(time.Minute), Runs: []string{"amended"}},
		{ID: "R1", Kind: "readjudicate", RegisteredAt: t0.Add(time.Minute), Runs: []string{"readjudicated"}},
		{ID: "A0", RegisteredAt: t0.Add(-time.Minute), Runs: []string{"amended-before"}},
		{ID: "A2", Kind: "amend", RegisteredAt: t0.Add(time.Minute), Runs: []string{"semantic-not-this"}},
	}
	got, err := AwaitingAmendment(f)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, w := range got {
		ids = append(ids, w.Run)
		if w.Attempt != 1 || w.Reason != state.ReasonValidatorFailed {
			t.Errorf("%+v", w)
		}
	}
	want := "semantic readjudicated amended-before other-run-amended"
	if g := strings.Join(ids, " "); g != want {
		t.Fatalf("awaiting %s, want %s", g, want)
	}
}
