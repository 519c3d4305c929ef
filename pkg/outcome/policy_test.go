package outcome

import (
	"os"
	"strings"
	"testing"

	"warden/pkg/state"
)

// Every reason has a rule, and the rule is what Next does.
func TestPolicyWalksEveryReason(t *testing.T) {
	want := map[state.Reason]Action{
		state.ReasonServerExit:        StopForReview,
		state.ReasonServerNotReady:    Retry,
		state.ReasonClientFailed:      StopForReview,
		state.ReasonOOM:               StopForReview,
		state.ReasonGPUNotIdle:        StopForReview,
		state.ReasonForeignGPUProcess: StopForReview,
		state.ReasonCleanupTimeout:    StopForReview,
		state.ReasonCleanupFailed:     StopForReview,
		state.ReasonDrainWatchdog:     StopForReview,
		state.ReasonDrainQuarantine:   Quarantine,
		state.ReasonConfigMismatch:    StopForReview,
		state.ReasonValidatorFailed:   StopForReview,
		state.ReasonPrivacyViolation:  StopForReview,
		state.ReasonInterrupted:       Restart,
		state.ReasonHarnessError:      Retry,
		state.ReasonProfileArtifact:   Retry,
		state.ReasonStepLost:          Retry,
		state.ReasonBudgetExhausted:   Restart,
		state.ReasonMeasureDeadline:   StopForReview,
		state.ReasonDrainUnseen:       StopForReview,
		state.ReasonQualityFailed:     Quarantine,
		state.ReasonDrainAbandoned:    StopForReview,
		state.ReasonInputChanged:      StopForReview,
		state.ReasonClockLoad:         Retry,
	}
	if len(Policy) != len(state.Reasons) {
		t.Errorf("the policy has %d rules for %d reasons", len(Policy), len(state.Reasons))
	}
	for _, r := range state.Reasons {
		rule, ok := Policy[r]
		if !ok {
			t.Errorf("reason %s has no rule", r)
			continue
		}
		if rule.Action != want[r] {
			t.Errorf("reason %s: %s, want %s", r, rule.Action, want[r])
		}
		if rule.Seed == "" {
			t.Errorf("reason %s: the rule cites no seed section", r)
		}
		// what an attempt that ended with the reason leads to
		st := state.Failed
		switch rule.Action {
		case Quarantine:
			st = state.Quarantined
		case Restart:
			st = state.Interrupted
		}
		first, last := Next(st, r, 0, 1), Next(st, r, 1, 1)
		switch rule.Action {
		case Retry:
			if first.Next != Retry || last.Next != StopForReview || last.Stop != state.StopForRun(r) {
				t.Errorf("reason %s: first failure %+v, after the retry %+v; want one exact rerun, then a stop", r, first, last)
			}
			if none := Next(st, r, 0, 0); none.Next != StopForReview {
				t.Errorf("reason %s with no retries allowed: %+v, want a stop", r, none)
			}
		case StopForReview:
			if first.Next != StopForReview || first.Stop != state.StopForRun(r) {
				t.Errorf("reason %s: %+v, want a stop for review naming it", r, first)
			}
		default:
			if first.Next != rule.Action {
				t.Errorf("reason %s: %+v, want %s", r, first, rule.Action)
			}
		}
	}
	if v := Next(state.Complete, "", 0, 1); v.Next != Accept {
		t.Errorf("a complete attempt: %+v", v)
	}
	// fail closed: a reason without a rule stops
	if v := Next(state.Failed, "made-up", 0, 5); v.Next != StopForReview || v.Stop != "made-up" {
		t.Errorf("an unknown reason: %+v, want a stop", v)
	}
	// a failed attempt is never accepted, even with a reason that quarantines
	if v := Next(state.Failed, state.ReasonDrainQuarantine, 0, 1); v.Next != StopForReview {
		t.Errorf("a failed attempt with a quarantine reason: %+v, want a stop", v)
	}
}

// docs/outcomes.md lists every reason with its action, and every stop
// reason.
func TestDocsListEveryReason(t *testing.T) {
	b, err := os.ReadFile("../../docs/outcomes.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	words := map[Action]string{Retry: "retry", StopForReview: "stop for review", Quarantine: "quarantine", Restart: "restart"}
	for _, r := range state.Reasons {
		found := false
		reasons, _, _ := strings.Cut(doc, "## Why a campaign stops")
		for _, line := range strings.Split(reasons, "\n") {
			if strings.HasPrefix(line, "| `"+string(r)+"`") {
				found = true
				if !strings.Contains(line, words[Policy[r].Action]) {
					t.Errorf("docs/outcomes.md says %q for %s; the policy says %s", line, r, Policy[r].Action)
				}
			}
		}
		if !found {
			t.Errorf("docs/outcomes.md has no row for reason %s", r)
		}
	}
	for _, s := range state.StopReasons {
		if !strings.Contains(doc, "| `"+string(s)+"` |") {
			t.Errorf("docs/outcomes.md has no row for stop reason %s", s)
		}
	}
}
