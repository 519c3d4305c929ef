package outcome

import (
	"encoding/json"
	"fmt"
	"strings"

	"warden/pkg/state"
	"warden/protocols"
)

// A stop for review whose cause is the server (one bad flag shared by
// every run that starts it) would be met again by every run that starts
// the same server: on GPUs each such attempt is a model load that fails
// the same way. A resume with nothing fixed therefore holds the runs not
// tried yet that share the cause, until an amendment covers the failed run
// or the operator asks for them (controller resume --retry-shared-cause).
//
// Shared, precisely: run H shares the cause of run F when
//   - F's last attempt failed for a reason of SharedCauseClass (the
//     server exited, ran out of GPU memory, never got ready, or ran with
//     another configuration than the protocol's),
//   - no amendment covers F since (registered after that attempt ended,
//     naming F among the runs it changed),
//   - H has no attempt yet, is not done and not closed, and is not of the
//     unit of a run so failed (it runs after that run, on its slots, and
//     only if that run's next attempt goes through: holding it would hold
//     the failed run's own rerun, an infrastructure failure's), and
//   - H's planned server is F's: the same ServerSpec as the plan records
//     it (name, kind, command with its plan-time variables substituted and
//     its launch-time ones, such as ${PORT} and ${GPU_IDS}, as written;
//     environment, health check, ready timeout, configuration endpoint,
//     shutdown graces and expectations), which is all that differs
//     between the servers of two runs but their slot.

// SharedCauseClass says whether a failure of reason r is the server's
// own, shared by every run that starts the same server the same way.
func SharedCauseClass(r state.Reason) bool {
	switch r {
	case state.ReasonServerExit, state.ReasonOOM, state.ReasonServerNotReady, state.ReasonConfigMismatch:
		return true
	}
	return false
}

// Held is a run not tried yet that shares the cause of a failed run:
// resume launches no attempt of it without an amendment or
// --retry-shared-cause.
type Held struct {
	Run string `json:"run"`
	// Cause is the failed run, Attempt its failed attempt and Reason why.
	Cause   string       `json:"cause_run"`
	Attempt int          `json:"cause_attempt"`
	Reason  state.Reason `json:"reason"`
	// Server is the name of the server both runs start.
	Server string `json:"server"`
}

// SharedCause lists, in plan order, the runs that share the cause of a
// failed run (see above). The records are read as AwaitingAmendment reads
// them; plan is the campaign's plan in force.
func SharedCause(plan *protocols.Plan, s records) ([]Held, error) {
	runs, err := s.Runs()
	if err != nil {
		return nil, err
	}
	specs := make(map[string]string, len(plan.Runs))
	servers := make(map[string]string, len(plan.Runs))
	units := make(map[string]int, len(plan.Runs))
	for _, r := range plan.Runs {
		b, err := json.Marshal(r.Server)
		if err != nil {
			return nil, fmt.Errorf("run %s's server: %w", r.ID, err)
		}
		specs[r.ID], servers[r.ID], units[r.ID] = string(b), r.Server.Name, r.Unit
	}
	causeUnits := map[int]bool{} // the units of the failed runs that are causes
	type cause struct {
		run     string
		attempt int
		reason  state.Reason
	}
	causes := map[string]cause{} // by server spec: the first failed run in plan order
	var ams []state.Amendment
	for _, r := range runs {
		if r.Done || r.Closed() || r.LastState != state.Failed || r.Attempts == 0 {
			continue
		}
		spec, ok := specs[r.ID]
		if !ok {
			continue
		}
		a, err := s.Attempt(r.ID, r.Attempts)
		if err != nil {
			return nil, err
		}
		if !SharedCauseClass(a.Reason) {
			continue
		}
		if ams == nil {
			if ams, err = s.Amendments(); err != nil {
				return nil, err
			}
		}
		if covered(r.ID, a, ams) {
			continue
		}
		if _, seen := causes[spec]; !seen {
			causes[spec] = cause{r.ID, a.N, a.Reason}
		}
		causeUnits[units[r.ID]] = true
	}
	if len(causes) == 0 {
		return nil, nil
	}
	var out []Held
	for _, r := range runs {
		if r.Done || r.Closed() || r.Attempts > 0 || causeUnits[units[r.ID]] {
			continue
		}
		if c, ok := causes[specs[r.ID]]; ok {
			out = append(out, Held{Run: r.ID, Cause: c.run, Attempt: c.attempt, Reason: c.reason, Server: servers[r.ID]})
		}
	}
	return out, nil
}

// HeldMark begins, in the detail of the stop when nothing else can run
// (awaiting-amendment), the runs held for a cause they share.
const HeldMark = "held, not tried: "

// HeldText names held runs for an operator: each cause once, with the
// runs it holds.
func HeldText(hs []Held) string {
	var order []string
	by := map[string][]string{}
	what := map[string]string{}
	for _, h := range hs {
		k := fmt.Sprintf("%s attempt %d", h.Cause, h.Attempt)
		if _, ok := by[k]; !ok {
			order = append(order, k)
			what[k] = fmt.Sprintf("%s (%s, server %s)", k, h.Reason, h.Server)
		}
		by[k] = append(by[k], h.Run)
	}
	parts := make([]string, len(order))
	for i, k := range order {
		parts[i] = fmt.Sprintf("%s share the cause of %s", strings.Join(by[k], ", "), what[k])
	}
	return strings.Join(parts, "; ")
}
