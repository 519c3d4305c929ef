package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warden/pkg/campaigndir"
)

// TestResumeKeepsMetricsOutputs: the metrics outputs controller start was
// given are recorded with the campaign, and a resume without the flags
// serves them again: the textfile, removed while the campaign was
// stopped, is written by the resumed controller, to its final state.
func TestResumeKeepsMetricsOutputs(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := writeProtocol(t, scenario{patterns: 3, measureS: "1.5"})
	textfile := filepath.Join(t.TempDir(), "warden.prom")
	if out, code := c.controller("start", "-f", proto, "-d", c.dir, "--gpu-backend", "fake", "--metrics-textfile", textfile); code != 0 {
		t.Fatalf("start exited %d:\n%s", code, out)
	}
	c.waitMeasuring()
	if out, code := c.controller("stop", "-d", c.dir); code != 0 {
		t.Fatalf("stop exited %d:\n%s", code, out)
	}
	c.waitUnlocked("the stopped controller to exit", 60*time.Second)
	set, err := campaigndir.ReadSettings(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	if set.Metrics == nil || set.Metrics.Textfile != textfile {
		t.Fatalf("controller.json records metrics %+v, want the textfile %s", set.Metrics, textfile)
	}
	if err := os.Remove(textfile); err != nil {
		t.Fatal(err)
	}
	if out, code := c.controller("resume", "-d", c.dir, "--foreground"); code != 0 {
		t.Fatalf("resume exited %d:\n%s", code, tail(out, 3000))
	}
	b, err := os.ReadFile(textfile)
	if err != nil {
		t.Fatalf("the resumed controller wrote no textfile: %v", err)
	}
	if !strings.Contains(string(b), `warden_campaign_state{state="complete"} 1`) {
		t.Fatalf("the textfile does not hold the final state:\n%s", b)
	}
	c.assertNoProcesses()
}
