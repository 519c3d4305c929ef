package campaigndir

import (
	"errors"
	"strings"
	"testing"

	"warden/pkg/dirlayout"
	"warden/pkg/state"
)

// records makes a campaign directory whose database holds campaign c1 with
// two runs, moved by setup; the store is closed before the test reads it.
func records(t *testing.T, setup func(*state.Store)) string {
	t.Helper()
	dir := t.TempDir()
	s, err := state.Open(dirlayout.State(dir), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateCampaign(state.Campaign{ID: "c1"}, []state.Run{{ID: "r0"}, {ID: "r1", Order: 1}}); err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(s)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func stopped(t *testing.T) func(*state.Store) {
	return func(s *state.Store) {
		must(t, s.SetCampaignState(state.CampaignStopped, string(state.StopOperator), "", nil))
	}
}

func live(t *testing.T) func(*state.Store) {
	return func(s *state.Store) {
		_, err := s.NewAttempt("r1", "", func(a *state.Attempt) { a.Slot = "s0" })
		must(t, err)
		_, err = s.Transition("r1", 1, state.Reserved, "", "", nil, nil)
		must(t, err)
	}
}

func TestFinished(t *testing.T) {
	complete := records(t, func(s *state.Store) { must(t, s.SetCampaignState(state.CampaignComplete, "", "", nil)) })
	frozen := records(t, func(s *state.Store) {
		_, err := s.Freeze(state.Amendment{ID: "A-7", Title: "freeze", Text: "freeze"})
		must(t, err)
	})
	for dir, want := range map[string]string{
		complete: "campaign c1 in " + complete + " is complete (2 runs); nothing to resume",
		frozen:   "campaign c1 in " + frozen + " is frozen; nothing to resume",
	} {
		if done, msg := Finished(dir); !done || msg != want {
			t.Errorf("Finished = %v %q, want %q", done, msg, want)
		}
	}
	for _, dir := range []string{records(t, nil), records(t, stopped(t)), t.TempDir()} {
		if done, msg := Finished(dir); done || msg != "" {
			t.Errorf("%s: Finished = %v %q; want not finished", dir, done, msg)
		}
	}
}

func TestAfterStop(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(*state.Store)
		pid   int
		note  string // "" when the controller died
		died  string
	}{
		{name: "stopped", setup: stopped(t), pid: 77,
			note: "controller exited; the campaign is stopped (operator-stop) and resumable: controller resume -d DIR"},
		{name: "none ran", setup: stopped(t),
			note: "no controller runs in DIR; the campaign is stopped (operator-stop); resume with: controller resume -d DIR"},
		{name: "complete", setup: func(s *state.Store) { must(t, s.SetCampaignState(state.CampaignComplete, "", "", nil)) }, pid: 77,
			note: "no controller runs in DIR; the campaign is complete"},
		{name: "died running", pid: 77,
			died: "controller pid 77 is not alive and the campaign is unfinished (it died); resume continues it: controller resume -d DIR"},
		{name: "died with live attempts", setup: func(s *state.Store) { live(t)(s); stopped(t)(s) },
			died: "the controller is not alive, but it left 1 attempt(s) live: r1 attempt 1 (reserved); their processes may still hold GPUs. Resume reclaims them: controller resume -d DIR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := records(t, tc.setup)
			note, err := AfterStop(dir, tc.pid)
			var died *DiedError
			if tc.died != "" {
				if !errors.As(err, &died) || err.Error() != strings.ReplaceAll(tc.died, "DIR", dir) || note != "" {
					t.Fatalf("AfterStop = %q, %v; want the controller died: %s", note, err, tc.died)
				}
				return
			}
			if err != nil || note != strings.ReplaceAll(tc.note, "DIR", dir) {
				t.Fatalf("AfterStop = %q, %v; want %q", note, err, tc.note)
			}
		})
	}
	missing := t.TempDir()
	if _, err := AfterStop(missing, 0); err == nil || errors.As(err, new(*DiedError)) || !strings.Contains(err.Error(), "read the campaign in "+missing) {
		t.Fatalf("no records: %v", err)
	}
}
