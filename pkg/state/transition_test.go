package state_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"warden/pkg/state"
)

// spec is the transition table as the design states it, written out
// independently of the package's table.
var spec = map[state.AttemptState][]state.AttemptState{
	state.Planned:    {state.Reserved, state.Failed, state.Interrupted},
	state.Reserved:   {state.Preflight, state.Failed, state.Interrupted},
	state.Preflight:  {state.Starting, state.Failed, state.Interrupted},
	state.Starting:   {state.Ready, state.Stopping, state.Interrupted},
	state.Ready:      {state.Measuring, state.Stopping, state.Interrupted},
	state.Measuring:  {state.Stopping, state.Interrupted},
	state.Stopping:   {state.Cleanup, state.Interrupted},
	state.Cleanup:    {state.Validating, state.Failed, state.Interrupted},
	state.Validating: {state.Complete, state.Quarantined, state.Failed, state.Interrupted},
}

func legal(from, to state.AttemptState) bool {
	for _, s := range spec[from] {
		if s == to {
			return true
		}
	}
	return false
}

// pathTo returns the steps that take a new attempt to s.
func pathTo(s state.AttemptState) []step {
	switch s {
	case state.Planned:
		return nil
	case state.Failed:
		return []step{{state.Failed, state.ReasonGPUNotIdle}}
	case state.Interrupted:
		return []step{{state.Interrupted, ""}}
	case state.Quarantined:
		return append(pathTo(state.Validating), step{state.Quarantined, state.ReasonDrainQuarantine})
	}
	for i, st := range happyPath {
		if st.to == s {
			return slices.Clone(happyPath[:i+1])
		}
	}
	panic("no path to " + s)
}

// reasonFor is a reason that fits a transition to s.
func reasonFor(s state.AttemptState) state.Reason {
	switch s {
	case state.Failed:
		return state.ReasonHarnessError
	case state.Quarantined:
		return state.ReasonDrainQuarantine
	}
	return ""
}

func TestAttemptStates(t *testing.T) {
	all := state.AttemptStates()
	if len(all) != 13 {
		t.Fatalf("AttemptStates() has %d states, want 13", len(all))
	}
	for _, s := range all {
		_, hasNext := spec[s]
		if !s.Valid() || s.Terminal() == hasNext {
			t.Errorf("%s: valid %t, terminal %t; the table gives it next states: %t", s, s.Valid(), s.Terminal(), hasNext)
		}
	}
	if state.AttemptState("running").Valid() {
		t.Error(`"running" is not an attempt state`)
	}
}

// TestTransitionTable drives a real attempt into every state and tries every
// target state from there: the legal ones must commit, the others must fail
// with a *TransitionError naming both states and leave the attempt as it was.
func TestTransitionTable(t *testing.T) {
	all := state.AttemptStates()
	s, _ := newCampaign(t, len(all)*(1+len(all)))
	next := 0
	newAttemptIn := func(from state.AttemptState) string {
		run := fmt.Sprintf("r%03d", next)
		next++
		if _, err := s.NewAttempt(run, "", nil); err != nil {
			t.Fatal(err)
		}
		drive(t, s, run, 1, pathTo(from))
		return run
	}
	accepted := 0
	for _, from := range all {
		stuck := newAttemptIn(from) // receives every illegal transition
		for _, to := range all {
			if legal(from, to) {
				run := newAttemptIn(from)
				a, err := s.Transition(run, 1, to, reasonFor(to), "", nil, nil)
				if err != nil {
					t.Errorf("%s -> %s refused: %v", from, to, err)
					continue
				}
				if a.State != to {
					t.Errorf("%s -> %s: attempt is %s", from, to, a.State)
				}
				accepted++
				continue
			}
			_, err := s.Transition(stuck, 1, to, reasonFor(to), "", nil, nil)
			var te *state.TransitionError
			if !errors.As(err, &te) || te.From != string(from) || te.To != string(to) {
				t.Errorf("%s -> %s: got %v, want a *TransitionError", from, to, err)
				continue
			}
			msg := err.Error()
			if !strings.Contains(msg, `"`+string(from)+`"`) || !strings.Contains(msg, `"`+string(to)+`"`) {
				t.Errorf("%s -> %s: message %q does not name both states", from, to, msg)
			}
		}
		if a, err := s.Attempt(stuck, 1); err != nil || a.State != from {
			t.Errorf("after refused transitions the attempt is %s (%v), want %s", a.State, err, from)
		}
	}
	if accepted != 26 {
		t.Errorf("accepted %d transitions, the table has 26", accepted)
	}
	if err := s.Check(); err != nil {
		t.Error(err)
	}
}

func TestTransitionReasons(t *testing.T) {
	tests := []struct {
		name    string
		path    []step
		to      state.AttemptState
		reason  state.Reason
		wantErr error
		want    state.Reason // attempt's Reason after success
	}{
		{"failed needs a reason", nil, state.Failed, "", state.ErrInvalid, ""},
		{"failed with a reason", nil, state.Failed, state.ReasonServerNotReady, nil, state.ReasonServerNotReady},
		{"unknown reason", nil, state.Failed, "bad-luck", state.ErrInvalid, ""},
		{"interrupted defaults", nil, state.Interrupted, "", nil, state.ReasonInterrupted},
		{"interrupted by a stop", nil, state.Interrupted, state.ReasonInterrupted, nil, state.ReasonInterrupted},
		{"no reason on a happy step", nil, state.Reserved, state.ReasonOOM, state.ErrInvalid, ""},
		{"quarantined needs a reason", pathTo(state.Validating), state.Quarantined, "", state.ErrInvalid, ""},
		{"complete takes none", pathTo(state.Validating), state.Complete, state.ReasonOOM, state.ErrInvalid, ""},
		{"pending reason applied by failed", []step{{state.Reserved, ""}, {state.Preflight, ""},
			{state.Starting, ""}, {state.Stopping, state.ReasonServerNotReady}, {state.Cleanup, ""}},
			state.Failed, "", nil, state.ReasonServerNotReady},
		{"pending reason blocks complete", []step{{state.Reserved, ""}, {state.Preflight, ""},
			{state.Starting, ""}, {state.Ready, ""}, {state.Measuring, ""},
			{state.Stopping, state.ReasonClientFailed}, {state.Cleanup, ""}, {state.Validating, ""}},
			state.Complete, "", state.ErrInvalid, ""},
	}
	s, _ := newCampaign(t, len(tests))
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := fmt.Sprintf("r%03d", i)
			if _, err := s.NewAttempt(run, "", nil); err != nil {
				t.Fatal(err)
			}
			drive(t, s, run, 1, tt.path)
			a, err := s.Transition(run, 1, tt.to, tt.reason, "", nil, nil)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("got %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.Reason != tt.want {
				t.Errorf("reason %q, want %q", a.Reason, tt.want)
			}
			events, err := s.Events(a.EventSeqs[len(a.EventSeqs)-1]-1, 1)
			if err != nil || len(events) != 1 || events[0].Reason != string(tt.want) {
				t.Errorf("last event %+v (%v), want reason %q", events, err, tt.want)
			}
		})
	}
}
