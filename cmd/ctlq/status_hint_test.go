package main

import (
	"encoding/json"
	"strings"
	"testing"

	"warden/pkg/state"
)

// A campaign left running by a dead controller: ctlq status exits 4, says
// the controller is dead and how to resume, in text and in -o json's
// hint, and shows no ETA (null in -o json). A stop for review gives the
// next command, the amendment, as its hint in text and JSON (issue 39,
// friction 1); a complete campaign gets no hint.
func TestStatusCrashHint(t *testing.T) {
	dir := campaignDir(t, state.CampaignRunning)
	out, code := run(t, "status", "-d", dir)
	if code != exitControllerX || !strings.Contains(out, "hint       the controller is dead") ||
		!strings.Contains(out, "controller resume -d "+dir) || strings.Contains(out, "eta ") {
		t.Fatalf("status of a crashed campaign: exit %d:\n%s", code, out)
	}
	out, code = run(t, "status", "-d", dir, "-o", "json")
	var doc struct {
		Schema int      `json:"schema"`
		Hint   string   `json:"hint"`
		ETA    *float64 `json:"eta_s"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != exitControllerX || doc.Schema != 2 ||
		!strings.HasSuffix(doc.Hint, "controller resume -d "+dir) || doc.ETA != nil || !strings.Contains(out, `"eta_s": null`) {
		t.Fatalf("status -o json of a crashed campaign: exit %d, %v:\n%s", code, err, out)
	}

	stopped := campaignDir(t, state.CampaignStopped) // gpu-not-idle: a failure that needs an amendment
	want := "controller amend -d " + stopped + " -f NEW_PROTOCOL --id ID --reason TEXT --yes, then controller resume -d " + stopped
	out, code = run(t, "status", "-d", stopped)
	if code != exitStopped || !strings.Contains(out, "hint       fix the protocol and register the fix") || !strings.Contains(out, want) {
		t.Fatalf("status of a stop for review: exit %d:\n%s", code, out)
	}
	out, _ = run(t, "status", "-d", stopped, "-o", "json")
	doc.Hint = ""
	if err := json.Unmarshal([]byte(out), &doc); err != nil || !strings.Contains(doc.Hint, want) {
		t.Fatalf("status -o json of a stop for review (%v):\n%s", err, out)
	}

	out, _ = run(t, "status", "-d", campaignDir(t, state.CampaignComplete), "-o", "json")
	if strings.Contains(out, `"hint"`) {
		t.Errorf("complete campaign has a hint:\n%s", out)
	}
}

// TestWatchEndsWithTheResumeHint (issue 39, friction 9): ctlq watch that
// ends on a dead controller repeats the hint ctlq status gives, and exits
// as status does.
func TestWatchEndsWithTheResumeHint(t *testing.T) {
	dir := campaignDir(t, state.CampaignRunning)
	out, code := run(t, "watch", "-d", dir)
	if code != exitControllerX || !strings.Contains(out, "hint       the controller is dead") || !strings.HasSuffix(strings.TrimSpace(out), "controller resume -d "+dir) {
		t.Fatalf("watch of a crashed campaign: exit %d:\n%s", code, out)
	}
	out, code = run(t, "watch", "-d", campaignDir(t, state.CampaignComplete))
	if code != 0 || strings.Contains(out, "hint") {
		t.Fatalf("watch of a complete campaign: exit %d:\n%s", code, out)
	}
}
