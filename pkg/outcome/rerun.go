package outcome

import (
	"slices"

	"warden/pkg/state"
)

// Seed 002 ("Budget and hard stop conditions"): "One exact rerun is
// allowed only for an infrastructure/profile-artifact failure ... A
// semantic workload/config failure requires a reviewed protocol
// amendment." A resume after a stop for review is an operator's decision
// to go on, not an amendment: a run whose last attempt failed for any
// other reason gets no further attempt until an amendment covers it.

// Awaiting is a run that waits for an amendment: its last attempt failed
// for a reason that allows no rerun.
type Awaiting struct {
	Run     string       `json:"run"`
	Attempt int          `json:"attempt"`
	Reason  state.Reason `json:"reason"`
}

// RerunAllowed says whether a failure of reason r may be followed by
// another attempt of the same run without an amendment: an infrastructure
// or profile-artifact failure (the policy's Retry).
func RerunAllowed(r state.Reason) bool { return RuleFor(r).Action == Retry }

// records is what AwaitingAmendment reads of a campaign's store.
type records interface {
	Runs() ([]state.Run, error)
	Attempt(runID string, n int) (state.Attempt, error)
	Amendments() ([]state.Amendment, error)
}

// AwaitingAmendment lists, in plan order, the runs whose last attempt
// failed for a reason that allows no rerun and that no amendment covers.
// An amendment covers a run when it was registered after the failed
// attempt ended, is an amend (not a re-adjudication, which gives an attempt
// a new verdict but no new attempt, nor a freeze) and names the run among
// the runs it changed.
func AwaitingAmendment(s records) ([]Awaiting, error) {
	runs, err := s.Runs()
	if err != nil {
		return nil, err
	}
	var ams []state.Amendment
	var out []Awaiting
	for _, r := range runs {
		if r.Done || r.Closed() || r.LastState != state.Failed || r.Attempts == 0 {
			continue
		}
		a, err := s.Attempt(r.ID, r.Attempts)
		if err != nil {
			return nil, err
		}
		if RerunAllowed(a.Reason) {
			continue
		}
		if ams == nil {
			if ams, err = s.Amendments(); err != nil {
				return nil, err
			}
		}
		if !covered(r.ID, a, ams) {
			out = append(out, Awaiting{Run: r.ID, Attempt: a.N, Reason: a.Reason})
		}
	}
	return out, nil
}

func covered(run string, a state.Attempt, ams []state.Amendment) bool {
	for _, am := range ams {
		if (am.Kind == "" || am.Kind == "amend") && am.RegisteredAt.After(a.UpdatedAt) && slices.Contains(am.Runs, run) {
			return true
		}
	}
	return false
}
