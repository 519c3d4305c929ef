package main

import (
	"encoding/json"
	"strings"
	"testing"

	"warden/pkg/state"
)

// A campaign left running by a dead controller: ctlq status exits 4, says
// the controller is dead and how to resume, in text and in -o json's
// hint, and shows no ETA; a stopped or complete campaign gets no hint.
func TestStatusCrashHint(t *testing.T) {
	dir := campaignDir(t, state.CampaignRunning)
	out, code := run(t, "status", "-d", dir)
	if code != exitControllerX || !strings.Contains(out, "hint       the controller is dead") ||
		!strings.Contains(out, "controller --resume -d "+dir) || strings.Contains(out, "eta ") {
		t.Fatalf("status of a crashed campaign: exit %d:\n%s", code, out)
	}
	out, code = run(t, "status", "-d", dir, "-o", "json")
	var doc struct {
		Schema int    `json:"schema"`
		Hint   string `json:"hint"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != exitControllerX || doc.Schema == 0 ||
		!strings.HasSuffix(doc.Hint, "controller --resume -d "+dir) {
		t.Fatalf("status -o json of a crashed campaign: exit %d, %v:\n%s", code, err, out)
	}
	for _, final := range []state.CampaignState{state.CampaignStopped, state.CampaignComplete} {
		out, _ := run(t, "status", "-d", campaignDir(t, final), "-o", "json")
		if strings.Contains(out, `"hint"`) {
			t.Errorf("%s campaign has a hint:\n%s", final, out)
		}
	}
}
