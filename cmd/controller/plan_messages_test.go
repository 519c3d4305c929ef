package main

import (
	"strings"
	"testing"
)

// plan's over-budget message names the flag that lets start run it
// anyway, as start's refusal does.
func TestPlanOverBudgetNamesTheFlag(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	over := writeProtocol(t, scenario{patterns: 2, capGPUHours: "0.005"})
	out, code := c.controller("plan", "-f", over)
	if code != exitOverBudget || !strings.Contains(out, "over budget") || !strings.Contains(out, "unless --allow-over-budget") {
		t.Fatalf("plan over budget: exit %d:\n%s", code, out)
	}
}
