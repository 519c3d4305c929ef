package runner

import (
	"fmt"
	"strings"

	outcomes "warden/pkg/outcome"
)

// The outcome policy lives in pkg/outcome, which the query tool reads
// too; the runner decides with it under these names.
type (
	Action   = outcomes.Action
	Rule     = outcomes.Rule
	Verdict  = outcomes.Verdict
	Awaiting = outcomes.Awaiting
)

const (
	Accept        = outcomes.Accept
	Quarantine    = outcomes.Quarantine
	Retry         = outcomes.Retry
	StopForReview = outcomes.StopForReview
	Restart       = outcomes.Restart
)

// Policy, RuleFor, Next, RerunAllowed and AwaitingAmendment are
// pkg/outcome's.
var (
	Policy            = outcomes.Policy
	RuleFor           = outcomes.RuleFor
	Next              = outcomes.Next
	RerunAllowed      = outcomes.RerunAllowed
	AwaitingAmendment = outcomes.AwaitingAmendment
)

// awaitingText names the runs for a stop's detail and an operator.
func awaitingText(ws []Awaiting) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = fmt.Sprintf("%s (attempt %d, %s)", w.Run, w.Attempt, w.Reason)
	}
	return strings.Join(parts, ", ")
}
