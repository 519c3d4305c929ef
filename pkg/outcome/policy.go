// Package outcome is the outcome policy of seed 002: for every reason an
// attempt can end with, what happens to the run and to the campaign, and
// which runs wait for an amendment. It reads records and decides; it
// starts nothing, so the controller and the query tool share it.
package outcome

import (
	"fmt"
	"time"

	"warden/pkg/state"
)

// This file is the outcome policy: for every reason an attempt can end
// with, what happens to the run and to the campaign. It is the one place
// that says so; the attempt lifecycle only reports how an attempt ended,
// and the scheduler only asks Next.
//
// Seed 002 ("Budget and hard stop conditions"): "No failed cell is
// silently replaced, retuned, filtered, or omitted. One exact rerun is
// allowed only for an infrastructure/profile-artifact failure; both
// attempts remain in the report. A semantic workload/config failure
// requires a reviewed protocol amendment." Every attempt is kept whatever
// the action.

// Action is what the end of an attempt means.
type Action string

const (
	// Accept: the run is done; the campaign goes on.
	Accept Action = "accept"
	// Quarantine: the run is done and usable, flagged; the campaign goes on
	// (the protocol's quarantined-fraction threshold may stop it).
	Quarantine Action = "quarantine"
	// Retry: an exact rerun from a fresh server, up to the protocol's
	// retries.infrastructure; past that, the campaign stops for review.
	Retry Action = "retry"
	// StopForReview: the run failed; nothing new is launched and the
	// campaign waits for a person (StopForRun of the reason).
	StopForReview Action = "stop"
	// Restart: the attempt was interrupted (the controller died or was
	// stopped); the run starts again from a fresh server on resume. This is
	// not a retry and counts against nothing.
	Restart Action = "restart"
)

// Rule is the policy for one reason.
type Rule struct {
	// Action is what the reason does.
	Action Action
	// Seed cites the rule of seed 002 that decides it, when one does.
	Seed string
}

// Policy maps every state.Reason to its rule. A test walks state.Reasons
// and fails on a reason that has no rule.
var Policy = map[state.Reason]Rule{
	// Infrastructure failures: one exact rerun (seed 002, "One exact rerun
	// is allowed only for an infrastructure/profile-artifact failure").
	state.ReasonServerNotReady:  {Retry, "002 Budget and hard stop conditions: one exact rerun for an infrastructure failure"},
	state.ReasonHarnessError:    {Retry, "002 Budget and hard stop conditions: one exact rerun for an infrastructure failure"},
	state.ReasonProfileArtifact: {Retry, "002 Budget and hard stop conditions: one exact rerun for a profile-artifact failure"},
	// A Slurm step lost (its node, its node-side runner, srun) is the
	// cluster's failure, not the workload's.
	state.ReasonStepLost: {Retry, "002 Budget and hard stop conditions: one exact rerun for an infrastructure failure"},
	// A throttled GPU or a loaded host measured the host (A-P3-2's
	// clock/load check).
	state.ReasonClockLoad: {Retry, "002 Budget and hard stop conditions: one exact rerun for an infrastructure failure; A-P3-2: clock/load"},

	// Stop list item 1: "effective config mismatch".
	state.ReasonConfigMismatch: {StopForReview, "002 stop condition 1: effective config mismatch"},
	// Stop list item 2: "selected GPU not idle, another user's GPU process
	// appears, GPU OOM, server error, or final GPU cleanup does not return
	// to zero".
	state.ReasonGPUNotIdle:        {StopForReview, "002 stop condition 2: selected GPU not idle"},
	state.ReasonForeignGPUProcess: {StopForReview, "002 stop condition 2: another user's GPU process appears"},
	state.ReasonOOM:               {StopForReview, "002 stop condition 2: GPU OOM"},
	state.ReasonServerExit:        {StopForReview, "002 stop condition 2: server error"},
	state.ReasonCleanupTimeout:    {StopForReview, "002 stop condition 2: final GPU cleanup does not return to zero"},
	state.ReasonCleanupFailed:     {StopForReview, "002 stop condition 2: final GPU cleanup does not return to zero"},
	// Stop list item 3: "any clean-segment request fails" — a client that
	// fails is a semantic workload failure, never rerun.
	state.ReasonClientFailed: {StopForReview, "002 stop condition 3: a clean-segment request fails"},
	// A hang past the watchdog ends the client and fails the run (A-P3-5,
	// drain quarantine: "Drain is post-measurement and serves as a hang
	// watchdog").
	state.ReasonDrainWatchdog: {StopForReview, "002 A-P3-5 (drain quarantine): drain serves as a hang watchdog"},
	// A client that gave up on requests at its own drain bound cut the
	// drain the watchdog exists for: a failure, never complete (A-P3-3:
	// exceeding the budget "does not authorize cancellation, truncation").
	state.ReasonDrainAbandoned: {StopForReview, "002 A-P3-3: no cancellation or truncation; A-P3-5 (drain quarantine): drain serves as a hang watchdog"},
	// Stop list item 1: "source/patch/helper/manifest hash mismatch".
	state.ReasonInputChanged: {StopForReview, "002 stop condition 1: manifest hash mismatch"},
	// Drain over the class allowance quarantines; the matrix goes on.
	state.ReasonDrainQuarantine: {Quarantine, "002 A-P3-5 (drain quarantine): exceeding the allowance marks the run drain-quarantined but no longer stops the matrix"},
	// Seed 000's terminal taxonomy: a run that fails a quality gate is kept
	// and shown, excluded from rankings, and is not a campaign stop.
	state.ReasonQualityFailed: {Quarantine, "000 terminal taxonomy: quality-failed is kept, shown and excluded from rankings, not a stop"},
	// Stop list items 4-7 and 10: the artifacts' validators.
	state.ReasonValidatorFailed: {StopForReview, "002 stop conditions 4-7, 10: artifact and data-sanity checks"},
	// Stop list item 8: a prompt or generated text outside the private directory.
	state.ReasonPrivacyViolation: {StopForReview, "002 stop condition 8: a prompt or generated-text field appears"},

	// A run that passes its measuring deadline hangs: a failure, as a hang
	// past the drain watchdog is.
	state.ReasonMeasureDeadline: {StopForReview, "002 A-P3-5 (drain quarantine): drain serves as a hang watchdog; nothing runs unbounded"},
	// Fail closed: a drain nobody can time is not a drain within budget
	// (stop condition 3, "drain exceeds" its allowance, cannot be judged).
	state.ReasonDrainUnseen: {StopForReview, "002 stop condition 3: the drain cannot be judged"},
	// The cap is a hard stop (A-P3-4); the runs it ended restart from a
	// fresh server once a person raised the cap or froze the matrix.
	state.ReasonBudgetExhausted: {Restart, "002 A-P3-4: a hard stop at the cumulative cap"},

	// A-P3-2: resumption "cleans up controller-owned PIDs before restarting
	// the incomplete run from its fresh-server boundary".
	state.ReasonInterrupted: {Restart, "002 A-P3-2: restart the incomplete run from its fresh-server boundary"},
}

// PortBackoff is how the exact rerun of an attempt whose slot's port was
// taken waits for the port (a server of the attempt before still letting
// it go, say), rather than milliseconds later: it looks again after each
// wait in turn, 15 s in all, and reruns as soon as the port is free or
// after the last (the rerun's own port gate then judges it).
var PortBackoff = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}

// RuleFor is the rule for reason r. A reason without a rule (a bug: the
// policy test walks every reason) stops the campaign: failing closed.
func RuleFor(r state.Reason) Rule {
	if rule, ok := Policy[r]; ok {
		return rule
	}
	return Rule{Action: StopForReview, Seed: fmt.Sprintf("no rule for reason %q: stop for review", r)}
}

// Verdict is what to do after an attempt ended.
type Verdict struct {
	// Next is Accept, Quarantine, Retry, StopForReview or Restart.
	Next Action
	// Stop is the campaign's stop reason when Next is StopForReview.
	Stop state.StopReason
}

// Next decides what follows an attempt that ended in st with reason r,
// after retries exact reruns of the same run already, when the protocol
// allows maxRetries of them for infrastructure failures.
func Next(st state.AttemptState, r state.Reason, retries, maxRetries int) Verdict {
	switch st {
	case state.Complete:
		return Verdict{Next: Accept}
	case state.Quarantined:
		return Verdict{Next: Quarantine}
	case state.Interrupted:
		return Verdict{Next: Restart}
	}
	rule := RuleFor(r)
	switch rule.Action {
	case Retry:
		if retries < maxRetries {
			return Verdict{Next: Retry}
		}
		return Verdict{Next: StopForReview, Stop: state.StopForRun(r)}
	case Quarantine, Accept, Restart:
		// A failed attempt is never accepted: a reason whose rule accepts
		// or quarantines applies only to an attempt that ended so.
		return Verdict{Next: StopForReview, Stop: state.StopForRun(r)}
	}
	return Verdict{Next: StopForReview, Stop: state.StopForRun(r)}
}
