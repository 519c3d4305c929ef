package outcome

import (
	"warden/pkg/gates"
	"warden/pkg/state"
)

// ValidatorReason is the reason a run fails with when one of its
// validators returns a verdict that is not a pass, by the verdict's class
// (gates.Verdict.Class): a profile artifact, a quality gate (the run is
// then quarantined, not failed: ReasonQualityFailed's rule), the clock and
// load check, and, without a known class, the run itself. The attempt and
// a re-adjudication read it alike.
func ValidatorReason(class string) state.Reason {
	switch class {
	case gates.ClassProfileArtifact:
		return state.ReasonProfileArtifact
	case gates.ClassQuality:
		return state.ReasonQualityFailed
	case gates.ClassInfrastructure:
		return state.ReasonClockLoad
	}
	return state.ReasonValidatorFailed
}
