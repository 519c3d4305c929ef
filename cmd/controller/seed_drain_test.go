package main

import (
	"strings"
	"testing"
)

// The plan refuses a client whose own drain bound is shorter than its
// class's allowance, naming the file, line and argument.
func TestPlanRefusesShortClientDrain(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := writeProtocol(t, scenario{drainS: "5", watchdogS: "10",
		client: `["${STANDIN}", client, --drain-timeout-seconds, "3", --result-dir, "${ATTEMPT_DIR}/client"]`})
	out, code := c.controller("plan", "-f", proto)
	if code != exitInvalid || !strings.Contains(out, "e2e.yaml:") || !strings.Contains(out, "loads.saturation.client[3]") ||
		!strings.Contains(out, "--drain-timeout-seconds 3 is shorter than the 5 s drain allowance of class c") {
		t.Fatalf("plan exit %d:\n%s", code, out)
	}
}
