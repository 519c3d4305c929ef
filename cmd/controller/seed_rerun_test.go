package main

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"warden/internal/testutil/testcampaign"
	"warden/pkg/state"
)

// Seed 002: "One exact rerun is allowed only for an infrastructure/
// profile-artifact failure ... A semantic workload/config failure requires
// a reviewed protocol amendment." A run that failed its validator is not
// rerun by a bare resume: the resume names it, the campaign stops again
// (awaiting-amendment) with no new attempt, ctlq status lists it; an
// amendment that changes the run lets the next resume run it again.
func TestResumeKeepsTheRerunRule(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := writeProtocol(t, scenario{validators: "  - {name: check, command: [sh, -c, \"exit 1\"]}\n"})
	c.runForeground(proto)
	s := c.store()
	cp := c.stoppedFor(s, state.ReasonValidatorFailed)
	s.Close()

	out, code := c.controller("resume", "-d", c.dir, "--foreground")
	if code != 0 || !strings.Contains(out, "waiting for an amendment, no further attempt without one: p1.saturation (attempt 1 failed: validator-failed)") {
		t.Fatalf("resume: exit %d\n%s", code, tail(out, 2000))
	}
	s = c.store()
	if as := c.attempts(s, "p1.saturation"); len(as) != 1 {
		t.Fatalf("a bare resume started another attempt: %d attempts", len(as))
	}
	cp, _ = s.Campaign()
	if cp.State != state.CampaignStopped || cp.StopReason != state.StopAwaitingAmendment || !strings.Contains(cp.StopDetail, "p1.saturation (attempt 1, validator-failed)") {
		t.Fatalf("campaign %s %s: %s", cp.State, cp.StopReason, cp.StopDetail)
	}
	s.Close()

	st, err := exec.Command(ctlqBin, "status", "-d", c.dir, "-o", "json").Output()
	var doc struct {
		Schema   int `json:"schema"`
		Awaiting []struct {
			Run     string `json:"run"`
			Attempt int    `json:"attempt"`
			Reason  string `json:"reason"`
		} `json:"awaiting_amendment"`
	}
	if jerr := json.Unmarshal(st, &doc); jerr != nil || doc.Schema == 0 || len(doc.Awaiting) != 1 || doc.Awaiting[0].Run != "p1.saturation" ||
		doc.Awaiting[0].Attempt != 1 || doc.Awaiting[0].Reason != "validator-failed" {
		t.Fatalf("ctlq status -o json (%v): %s", err, st)
	}
	text, _ := exec.Command(ctlqBin, "status", "-d", c.dir).Output()
	if !strings.Contains(string(text), "awaiting   p1.saturation: attempt 1 failed (validator-failed); no further attempt without an amendment") {
		t.Fatalf("ctlq status:\n%s", text)
	}

	// an amendment that changes the run covers it
	v1 := testcampaign.Edit(t, proto, `"exit 1"`, `"exit 0"`)
	if out, code := c.controller("amend", "-d", c.dir, "-f", v1, "--id", "A1", "--reason", "the check was wrong", "--yes"); code != 0 {
		t.Fatalf("amend: exit %d\n%s", code, out)
	}
	out, code = c.controller("resume", "-d", c.dir, "--foreground")
	if code != 0 || strings.Contains(out, "waiting for an amendment") {
		t.Fatalf("resume after the amendment: exit %d\n%s", code, tail(out, 2000))
	}
	s = c.store()
	as := c.attempts(s, "p1.saturation")
	if len(as) != 2 || as[1].State != state.Complete {
		t.Fatalf("attempts after the amendment %+v", as)
	}
	if cp, _ = s.Campaign(); cp.State != state.CampaignComplete {
		t.Fatalf("campaign %s %s", cp.State, cp.StopDetail)
	}
}
