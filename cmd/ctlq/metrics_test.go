package main

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"warden/pkg/dirlayout"
	"warden/pkg/lockfile"
	"warden/pkg/state"
)

// TestMetricsAfterTheEnd: a finished campaign's final state is scrapeable
// with no controller, in the exposition format promtool accepts.
func TestMetricsAfterTheEnd(t *testing.T) {
	for _, final := range []state.CampaignState{state.CampaignComplete, state.CampaignStopped} {
		t.Run(string(final), func(t *testing.T) {
			dir := campaignDir(t, final)
			out, code := run(t, "metrics", "-d", dir)
			if code != 0 {
				t.Fatalf("ctlq metrics: exit %d\n%s", code, out)
			}
			parser := expfmt.NewTextParser(model.UTF8Validation)
			fams, err := parser.TextToMetricFamilies(strings.NewReader(out))
			if err != nil {
				t.Fatalf("parse: %v\n%s", err, out)
			}
			var got float64 = -1
			for _, m := range fams["warden_campaign_state"].GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "state" && l.GetValue() == string(final) {
						got = m.GetGauge().GetValue()
					}
				}
			}
			if got != 1 {
				t.Fatalf("warden_campaign_state{state=%q} = %g, want 1:\n%s", final, got, out)
			}
			if promtool, err := exec.LookPath("promtool"); err == nil {
				cmd := exec.Command(promtool, "check", "metrics")
				cmd.Stdin = strings.NewReader(out)
				if lint, err := cmd.CombinedOutput(); err != nil || len(strings.TrimSpace(string(lint))) > 0 {
					t.Fatalf("promtool check metrics: %v\n%s", err, lint)
				}
			}
		})
	}
}

// TestMetricsWhileAControllerRuns: the controller holds the database;
// metrics names it and points at its outputs, exit 2.
func TestMetricsWhileAControllerRuns(t *testing.T) {
	dir := campaignDir(t, state.CampaignComplete)
	lock, err := lockfile.Acquire(dirlayout.Lock(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	s, err := state.Open(dirlayout.State(dir), state.Options{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, code := run(t, "metrics", "-d", dir)
	if code != exitOther || !strings.Contains(out, "controller pid "+strconv.Itoa(os.Getpid())) || !strings.Contains(out, "--metrics") {
		t.Fatalf("ctlq metrics with the database held: exit %d, want %d naming pid %d:\n%s", code, exitOther, os.Getpid(), out)
	}
}

func TestMetricsDamagedDatabase(t *testing.T) {
	dir := campaignDir(t, state.CampaignStopped)
	if err := os.Truncate(dirlayout.State(dir), 0); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, "metrics", "-d", dir); code != exitDamaged || !strings.Contains(out, "damaged or empty") {
		t.Fatalf("ctlq metrics of an empty database: exit %d, want %d:\n%s", code, exitDamaged, out)
	}
	if out, code := run(t, "metrics", "-d", t.TempDir()); code != exitOther || !strings.Contains(out, "not a campaign directory") {
		t.Fatalf("ctlq metrics of a directory that is not a campaign: exit %d:\n%s", code, out)
	}
}
