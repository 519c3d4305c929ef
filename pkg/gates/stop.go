package gates

import "fmt"

// StopRules are the protocol's fraction thresholds for stopping the
// campaign (A-P3-5 drain quarantine: more than 20% of measured runs
// drain-quarantined; the seed: more than 5% clean-window failures). A nil
// threshold never stops.
type StopRules struct {
	QuarantinedFractionGT *float64 // stop when quarantined/measured is greater than this
	FailedFractionGT      *float64 // stop when failed/measured is greater than this
}

// Counts are the campaign's measured runs as the stop rules see them.
type Counts struct {
	Measured    int // the plan's number of measured runs: the denominator, fixed for the campaign
	Quarantined int // runs quarantined so far
	Failed      int // runs failed so far (clean-window failures)
}

// Evaluate says whether the counts stop the campaign. The denominator is
// the plan's number of measured runs, not the number finished so far: the
// numerators only grow, so a fraction of the final denominator that passes
// the threshold can only stay past it, and the stop comes as soon as the
// outcome is sure (with 52 runs and 0.20, at the eleventh quarantine), never
// earlier on a small sample. Only strictly greater than the threshold stops.
// The failed rule is checked first. Measured <= 0 never stops.
//
// rule is "failed-fraction" or "quarantined-fraction" when stop is true;
// figures always carry measured, quarantined, failed, quarantined_fraction,
// failed_fraction, and the thresholds that are set.
//
// On stop the caller launches nothing new, lets in-flight runs finish, and
// records rule and detail as the campaign's stop reason.
func (r StopRules) Evaluate(c Counts) (stop bool, rule string, detail string, figures map[string]float64) {
	figures = map[string]float64{"measured": float64(c.Measured), "quarantined": float64(c.Quarantined), "failed": float64(c.Failed)}
	if r.QuarantinedFractionGT != nil {
		figures["quarantined_fraction_gt"] = *r.QuarantinedFractionGT
	}
	if r.FailedFractionGT != nil {
		figures["failed_fraction_gt"] = *r.FailedFractionGT
	}
	if c.Measured <= 0 {
		return false, "", "", figures
	}
	qf := float64(c.Quarantined) / float64(c.Measured)
	ff := float64(c.Failed) / float64(c.Measured)
	figures["quarantined_fraction"] = qf
	figures["failed_fraction"] = ff
	if r.FailedFractionGT != nil && ff > *r.FailedFractionGT {
		return true, "failed-fraction", fmt.Sprintf("%d of %d measured runs failed (%.4f), more than %.4f", c.Failed, c.Measured, ff, *r.FailedFractionGT), figures
	}
	if r.QuarantinedFractionGT != nil && qf > *r.QuarantinedFractionGT {
		return true, "quarantined-fraction", fmt.Sprintf("%d of %d measured runs quarantined (%.4f), more than %.4f", c.Quarantined, c.Measured, qf, *r.QuarantinedFractionGT), figures
	}
	return false, "", "", figures
}
