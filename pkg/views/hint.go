package views

import (
	"fmt"
	"strings"

	"warden/internal/shellquote"
	"warden/pkg/api"
	"warden/pkg/outcome"
	"warden/pkg/state"
)

// Every stop says what to do: ctlq status prints, and gives as the hint
// of -o json, the command that comes next. The commands are spelt one
// way everywhere (ResumeCommand, AmendCommand); a test greps the docs and
// the help for any other spelling.

// ResumeCommand is how a campaign in dir is resumed, as every hint and
// page spells it.
func ResumeCommand(dir string) string { return "controller resume -d " + shellquote.Word(dir) }

// AmendCommand is how an amendment of the campaign in dir is registered,
// its new protocol, id and reason left for the operator to fill in.
func AmendCommand(dir string) string {
	return "controller amend -d " + shellquote.Word(dir) + " -f NEW_PROTOCOL --id ID --reason TEXT --yes"
}

// FreezeCommand is how the matrix of the campaign in dir is frozen.
func FreezeCommand(dir string) string {
	return "controller freeze -d " + shellquote.Word(dir) + " --id ID --reason TEXT"
}

// ControllerDead says whether the status shows no controller while the
// campaign is unfinished: it runs without one, or it stopped with
// attempts still live (the controller died during the stop, say).
func ControllerDead(st api.Status) bool {
	if st.Controller.Alive {
		return false
	}
	switch state.CampaignState(st.Campaign.State) {
	case state.CampaignRunning:
		return true
	case state.CampaignStopped:
		return len(st.Current) > 0
	}
	return false
}

// Storage is how the campaign directory's file system refuses writes,
// as seen from outside the controller; the zero Storage: it does not.
type Storage struct {
	ReadOnly string // how it is read-only ("mounted read-only", ...); "" when it is not
	Full     bool   // too little space left for a record
	Free     uint64 // the bytes free to the user, when Full
}

// Hint is what ctlq status says to do next, "" when nothing is to be
// done (the campaign runs with a live controller, or it is complete or
// frozen). dir is the campaign directory; storage says how its file
// system refuses writes, if it does: then the controller could record
// neither the fault nor a stop, and the file system comes first.
func Hint(st api.Status, dir string, storage Storage) string {
	resume := ResumeCommand(dir)
	if ControllerDead(st) {
		switch {
		case storage.ReadOnly != "":
			return "the campaign directory's file system is " + storage.ReadOnly + " (see the kernel log): the controller could not write its records and ended the work; repair the file system, mount it read-write, then resume: " + resume
		case storage.Full:
			return fmt.Sprintf("the campaign directory's file system is full (%d bytes free): the controller could not write its records and ended the work; free space on it, then resume: %s", storage.Free, resume)
		}
		return "the controller is dead and the campaign is unfinished (its servers and clients may still hold GPUs and ports); resume it: " + resume
	}
	if state.CampaignState(st.Campaign.State) != state.CampaignStopped {
		return ""
	}
	return stopHint(st.Campaign.StopReason, st.Campaign.StopDetail, dir)
}

// stopHint is the next command after a stop for reason, with detail.
func stopHint(reason state.StopReason, detail, dir string) string {
	resume, amend := ResumeCommand(dir), AmendCommand(dir)
	switch reason {
	case state.StopOperator:
		return "stopped by an operator, resumable as it is: " + resume
	case state.StopBudget, state.StopBudgetExhausted:
		return "the GPU-hour cap is reached: raise budget.cap_gpu_hours by an amendment (" + amend + "), then " + resume +
			"; or end the matrix here: " + FreezeCommand(dir)
	case state.StopInputChanged:
		return "an input changed since start (the stop names it and both hashes): restore it and " + resume +
			"; or register the change: " + amend + ", then " + resume
	case state.StopDisk:
		return "free disk space (or raise the protocol's stop limits by an amendment: " + amend + "), then " + resume
	case state.StopQuarantinedFraction, state.StopFailedFraction:
		return "review the runs the threshold counts; amend the protocol (" + amend + ") and " + resume +
			", or end the matrix here: " + FreezeCommand(dir)
	}
	if outcome.RerunAllowed(state.Reason(reason)) {
		// an infrastructure failure past its reruns: another attempt
		// needs no amendment, only a person's look
		return "after review of the failure (ctlq show RUN), another attempt of the run needs no amendment: " + resume
	}
	held := ""
	if outcome.SharedCauseClass(state.Reason(reason)) || reason == state.StopAwaitingAmendment && strings.Contains(detail, outcome.HeldMark) {
		held = "; to try the runs that share its cause unchanged: " + resume + " --retry-shared-cause"
	}
	return "fix the protocol and register the fix (ctlq show RUN shows the failure): " + amend + ", then " + resume + held
}
