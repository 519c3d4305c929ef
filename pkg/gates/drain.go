package gates

import (
	"fmt"
	"math"
	"time"
)

// DrainOutcome is what a drain means for the run. The zero value is
// DrainUnknown, so an outcome that was never judged is not mistaken for
// DrainOK.
type DrainOutcome int

const (
	// DrainUnknown: the figures were invalid (negative, NaN, an allowance
	// that is not positive, a watchdog below the allowance); the verdict is
	// an error.
	DrainUnknown DrainOutcome = iota
	// DrainOK: the drain ended within the run's class allowance.
	DrainOK
	// DrainQuarantine: the drain passed the allowance but ended before the
	// watchdog. The run is usable and flagged drain-quarantined (A-P3-5
	// drain quarantine); it counts toward the quarantined-fraction stop rule.
	DrainQuarantine
	// DrainWatchdog: the drain reached the hard watchdog. The run is ended
	// and fails with reason drain-watchdog.
	DrainWatchdog
)

// String returns the outcome's name as it appears in records.
func (o DrainOutcome) String() string {
	switch o {
	case DrainOK:
		return "ok"
	case DrainQuarantine:
		return "quarantine"
	case DrainWatchdog:
		return "watchdog"
	default:
		return "unknown"
	}
}

// Drain judges how long a run's drain took (from the end of final admission
// to the client's done) against its class allowance (A-P3-3 and the A-P3-5
// drain quarantine: 600 s for the P10 class, 240 s for P04/P06/P07/P08/P11,
// 120 s otherwise) and the hard watchdog. watchdogS of 0 means no watchdog.
//
// Outcomes: drainS <= allowanceS is DrainOK with a pass. allowanceS <
// drainS < watchdogS is DrainQuarantine with a fail and figures
// quarantine=1: this fail does NOT invalidate the run; the caller marks it
// quarantined (usable, flagged in every table) and feeds the count to
// StopRules. drainS >= watchdogS is DrainWatchdog with a fail and
// watchdog_fired=1: the watchdog fires at that instant, so a drain measured
// equal to it is one the controller ended; the caller fails the run with
// reason drain-watchdog. Invalid figures give DrainUnknown and an error
// verdict; the caller treats it as a harness error.
//
// Figures: drain_s, allowance_s, watchdog_s, quarantine (0 or 1),
// watchdog_fired (0 or 1).
func Drain(drainS, allowanceS, watchdogS float64, now time.Time) (Verdict, DrainOutcome) {
	v := Verdict{Gate: "drain", Verdict: Pass, At: now, Figures: map[string]float64{
		"drain_s": drainS, "allowance_s": allowanceS, "watchdog_s": watchdogS, "quarantine": 0, "watchdog_fired": 0}}
	switch {
	case math.IsNaN(drainS) || math.IsInf(drainS, 0) || drainS < 0:
		v.Verdict, v.Detail = Error, fmt.Sprintf("invalid drain time %v s", drainS)
		return v, DrainUnknown
	case math.IsNaN(allowanceS) || math.IsInf(allowanceS, 0) || allowanceS <= 0:
		v.Verdict, v.Detail = Error, fmt.Sprintf("invalid drain allowance %v s", allowanceS)
		return v, DrainUnknown
	case math.IsNaN(watchdogS) || math.IsInf(watchdogS, 0) || watchdogS < 0 || (watchdogS > 0 && watchdogS < allowanceS):
		v.Verdict, v.Detail = Error, fmt.Sprintf("invalid drain watchdog %v s (allowance %v s)", watchdogS, allowanceS)
		return v, DrainUnknown
	}
	switch {
	case watchdogS > 0 && drainS >= watchdogS:
		v.Verdict = Fail
		v.Figures["watchdog_fired"] = 1
		v.Detail = fmt.Sprintf("drain reached the %.3f s watchdog (allowance %.3f s): the run is ended", watchdogS, allowanceS)
		return v, DrainWatchdog
	case drainS > allowanceS:
		v.Verdict = Fail
		v.Figures["quarantine"] = 1
		v.Detail = fmt.Sprintf("drain %.3f s exceeds the %.3f s allowance: the run is quarantined, not invalid", drainS, allowanceS)
		return v, DrainQuarantine
	default:
		return v, DrainOK
	}
}
