package metrics_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warden/pkg/metrics"
	"warden/pkg/state"
)

// TestPromtoolChecksMetrics puts the textfile of a campaign with a live
// attempt, then of the same campaign finished, through `promtool check
// metrics` (Debian's prometheus package), which fails on a lint problem
// (a unit that is not a base unit, a counter without _total, a HELP
// missing) as well as on a malformed exposition.
func TestPromtoolChecksMetrics(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian: apt-get install prometheus): the exposition is not linted")
	}
	s, now := campaign(t)
	check := func(when string) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "warden.prom")
		if err := metrics.WriteTextfile(path, metrics.Registry(s, func() time.Time { return now })); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = f
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "" {
			t.Fatalf("promtool check metrics on the %s campaign: %v\n%s", when, err, out)
		}
	}
	check("stopped, with a live attempt")
	if err := s.SetCampaignState(state.CampaignRunning, "", "", nil); err != nil {
		t.Fatal(err)
	}
	check("running, with a live attempt")
	// the live attempt ends and the campaign completes
	for _, st := range []state.AttemptState{state.Stopping, state.Cleanup, state.Failed} {
		var reason state.Reason
		if st == state.Failed {
			reason = state.ReasonGPUNotIdle
		}
		if _, err := s.Transition("c", 1, st, reason, "", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetCampaignState(state.CampaignComplete, "", "", nil); err != nil {
		t.Fatal(err)
	}
	check("complete")
}
