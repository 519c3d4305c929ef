package state

import "fmt"

// AttemptState is the state of an attempt. The values are stored as strings.
type AttemptState string

// Attempt states, in lifecycle order. The last four are terminal.
const (
	Planned     AttemptState = "planned"     // created, nothing reserved yet
	Reserved    AttemptState = "reserved"    // budget reserved, slot assigned
	Preflight   AttemptState = "preflight"   // checking GPUs, CPUs, port
	Starting    AttemptState = "starting"    // server started, not healthy yet
	Ready       AttemptState = "ready"       // server healthy
	Measuring   AttemptState = "measuring"   // load client running
	Stopping    AttemptState = "stopping"    // server being shut down
	Cleanup     AttemptState = "cleanup"     // waiting for processes and GPU memory to go
	Validating  AttemptState = "validating"  // validators and built-in checks
	Complete    AttemptState = "complete"    // usable result
	Quarantined AttemptState = "quarantined" // usable result, flagged (Reason says why)
	Failed      AttemptState = "failed"      // no result (Reason says why)
	Interrupted AttemptState = "interrupted" // the controller died or was stopped mid-attempt
)

// attemptTransitions is the transition table: the only place that says which
// state may follow which. Terminal states have no entry.
var attemptTransitions = map[AttemptState][]AttemptState{
	Planned:    {Reserved, Failed, Interrupted},
	Reserved:   {Preflight, Failed, Interrupted},
	Preflight:  {Starting, Failed, Interrupted},
	Starting:   {Ready, Stopping, Interrupted},
	Ready:      {Measuring, Stopping, Interrupted},
	Measuring:  {Stopping, Interrupted},
	Stopping:   {Cleanup, Interrupted},
	Cleanup:    {Validating, Failed, Interrupted},
	Validating: {Complete, Quarantined, Failed, Interrupted},
}

// AttemptStates returns every attempt state in lifecycle order.
func AttemptStates() []AttemptState {
	return []AttemptState{Planned, Reserved, Preflight, Starting, Ready, Measuring,
		Stopping, Cleanup, Validating, Complete, Quarantined, Failed, Interrupted}
}

// Valid reports whether s is a known state.
func (s AttemptState) Valid() bool {
	switch s {
	case Planned, Reserved, Preflight, Starting, Ready, Measuring, Stopping, Cleanup,
		Validating, Complete, Quarantined, Failed, Interrupted:
		return true
	}
	return false
}

// Terminal reports whether s is a terminal state.
func (s AttemptState) Terminal() bool {
	return s == Complete || s == Quarantined || s == Failed || s == Interrupted
}

// Live reports whether s is a known, non-terminal state.
func (s AttemptState) Live() bool { return s.Valid() && !s.Terminal() }

// result reports whether an attempt in state s is the run's usable result.
func (s AttemptState) result() bool { return s == Complete || s == Quarantined }

// TransitionError is returned for a transition the table does not allow.
type TransitionError struct {
	From, To string
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("illegal transition from %q to %q", e.From, e.To)
}

// checkTransition returns a *TransitionError unless the table allows from -> to.
func checkTransition(from, to AttemptState) error {
	for _, next := range attemptTransitions[from] {
		if next == to {
			return nil
		}
	}
	return &TransitionError{From: string(from), To: string(to)}
}

// campaignTransitions says which campaign state may follow which.
var campaignTransitions = map[CampaignState][]CampaignState{
	CampaignRunning: {CampaignStopped, CampaignComplete, CampaignFrozen},
	CampaignStopped: {CampaignRunning, CampaignFrozen},
}

func checkCampaignTransition(from, to CampaignState) error {
	for _, next := range campaignTransitions[from] {
		if next == to {
			return nil
		}
	}
	return &TransitionError{From: string(from), To: string(to)}
}

// Reason says why an attempt ended in failed, quarantined or interrupted.
// The values are stored as strings: never rename or remove one that has
// ever been produced. What each reason does to the run and the campaign
// is the outcome policy's (pkg/runner, policy.go).
type Reason string

// Terminal reasons.
const (
	// ReasonServerExit: the server exited before the attempt was done with it.
	ReasonServerExit Reason = "server-exit"
	// ReasonServerNotReady: the server did not become healthy within its timeout.
	ReasonServerNotReady Reason = "server-not-ready"
	// ReasonClientFailed: the load client exited non-zero or reported failure.
	ReasonClientFailed Reason = "client-failed"
	// ReasonOOM: the server ran out of GPU memory (its output says so).
	ReasonOOM Reason = "oom"
	// ReasonGPUNotIdle: preflight found an assigned GPU busy or above its memory baseline.
	ReasonGPUNotIdle Reason = "gpu-not-idle"
	// ReasonForeignGPUProcess: another user's process appeared on an assigned GPU.
	ReasonForeignGPUProcess Reason = "foreign-gpu-process"
	// ReasonCleanupTimeout: processes or GPU memory were still there after the cleanup timeout.
	ReasonCleanupTimeout Reason = "cleanup-timeout"
	// ReasonCleanupFailed: cleanup could not be carried out (a signal or
	// cgroup operation failed) and the attempt's processes or GPU memory
	// were still there after the cleanup timeout.
	ReasonCleanupFailed Reason = "cleanup-failed"
	// ReasonDrainWatchdog: the drain ran past the hard watchdog and the attempt was ended.
	ReasonDrainWatchdog Reason = "drain-watchdog"
	// ReasonDrainQuarantine: the drain ran past the class allowance (quarantined, usable).
	ReasonDrainQuarantine Reason = "drain-quarantine"
	// ReasonConfigMismatch: the server's startup log did not show the expected effective values.
	ReasonConfigMismatch Reason = "config-mismatch"
	// ReasonValidatorFailed: a protocol validator failed or returned a failing verdict.
	ReasonValidatorFailed Reason = "validator-failed"
	// ReasonProfileArtifact: a validator found a profiler artifact missing
	// or broken (a Layer-2 trace window): an exact rerun may cure it.
	ReasonProfileArtifact Reason = "profile-artifact"
	// ReasonPrivacyViolation: the privacy scan found a forbidden field in the run directory.
	ReasonPrivacyViolation Reason = "privacy-violation"
	// ReasonInterrupted: the controller died, stopped, or the host rebooted during the attempt.
	ReasonInterrupted Reason = "interrupted"
	// ReasonQualityFailed: a quality-gate validator found the run's outputs
	// failing its check (seed 000's quality-failed): the run is kept,
	// quarantined, and excluded from rankings.
	ReasonQualityFailed Reason = "quality-failed"
	// ReasonBudgetExhausted: the campaign's GPU time passed its cap while
	// the attempt ran; it was ended gracefully and restarts after review.
	ReasonBudgetExhausted Reason = "budget-exhausted"
	// ReasonMeasureDeadline: the client ran past the load's measuring
	// deadline and was ended.
	ReasonMeasureDeadline Reason = "measure-deadline"
	// ReasonDrainUnseen: the load's source never said when admission
	// stopped (no drain line in the phase file, no drain times in the
	// result file): the drain cannot be judged, and the gate fails closed.
	ReasonDrainUnseen Reason = "drain-unseen"
	// ReasonHarnessError: the controller itself failed (a bug or an I/O error).
	ReasonHarnessError Reason = "harness-error"
	// ReasonStepLost: the attempt ran as a Slurm step, and the step ended
	// (srun refused or failed, the step was cancelled, its node or its
	// node-side runner died) without the attempt's end being reported; the
	// node's GPUs were not proven free by the attempt (the next attempt's
	// preflight proves them).
	ReasonStepLost Reason = "step-lost"
	// ReasonDrainAbandoned: the load client exited with ExitDrainAbandoned:
	// it gave up on requests still outstanding at its own drain bound.
	ReasonDrainAbandoned Reason = "drain-abandoned"
	// ReasonInputChanged: an input the run read is not the one frozen at
	// start (the manifest hash the client reports differs from the
	// recorded one).
	ReasonInputChanged Reason = "input-changed"
	// ReasonClockLoad: the clock and load check found the GPUs' clocks
	// held down (a thermal, power-brake or hardware slowdown) or the host
	// loaded past the protocol's bound during the measured interval: the
	// host, not the server, was measured (an infrastructure failure).
	ReasonClockLoad Reason = "clock-load"
)

// ExitDrainAbandoned is the exit code of Warden's load client when it
// abandoned requests at its drain bound (docs/loadgen.md).
const ExitDrainAbandoned = 4

// Reasons lists every reason, in the order above.
var Reasons = []Reason{
	ReasonServerExit, ReasonServerNotReady, ReasonClientFailed, ReasonOOM,
	ReasonGPUNotIdle, ReasonForeignGPUProcess, ReasonCleanupTimeout, ReasonCleanupFailed,
	ReasonDrainWatchdog, ReasonDrainQuarantine, ReasonConfigMismatch, ReasonValidatorFailed,
	ReasonPrivacyViolation, ReasonInterrupted, ReasonHarnessError, ReasonProfileArtifact,
	ReasonBudgetExhausted, ReasonMeasureDeadline, ReasonDrainUnseen, ReasonQualityFailed,
	ReasonStepLost, ReasonDrainAbandoned, ReasonInputChanged, ReasonClockLoad,
}

// Valid reports whether r is a known reason.
func (r Reason) Valid() bool {
	for _, k := range Reasons {
		if r == k {
			return true
		}
	}
	return false
}
