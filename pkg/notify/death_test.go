package notify_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warden/pkg/notify"
	"warden/pkg/state"
)

// TestDeathOf: the controller is dead when none holds a campaign that
// runs, or that stopped with attempts still live; a finished or stopped
// campaign, or one a controller holds, has no death.
func TestDeathOf(t *testing.T) {
	hb := time.Date(2026, 12, 3, 15, 0, 0, 0, time.UTC)
	cp := state.Campaign{ControllerPID: 7, ControllerBootID: "b", Heartbeat: hb}
	for _, tt := range []struct {
		st   state.CampaignState
		live int
		held bool
		dead bool
	}{
		{state.CampaignRunning, 0, false, true},
		{state.CampaignRunning, 1, true, false},
		{state.CampaignStopped, 1, false, true},
		{state.CampaignStopped, 0, false, false},
		{state.CampaignComplete, 0, false, false},
		{state.CampaignFrozen, 0, false, false},
	} {
		cp.State = tt.st
		d, dead := notify.DeathOf(cp, tt.live, tt.held)
		if dead != tt.dead || d.PID != 7 || d.BootID != "b" || !d.Heartbeat.Equal(hb) {
			t.Errorf("%s, %d live, held %v: %+v dead %v, want %v", tt.st, tt.live, tt.held, d, dead, tt.dead)
		}
	}
}

// TestCheckDeathFiresOncePerDeath (issue 39, friction 9): a dead
// controller found by a check fires the notification once; a second
// check of the same death fires nothing and says when it was notified; a
// later death (another heartbeat) fires again. The death is recorded
// durably in the campaign directory.
func TestCheckDeathFiresOncePerDeath(t *testing.T) {
	n, st, dir := notifier(t, "cat >> events.jsonl", 10)
	cp := state.Campaign{ID: "c-1", ProtocolName: "p", State: state.CampaignRunning, ControllerPID: 7, ControllerBootID: "b",
		Heartbeat: time.Date(2026, 12, 3, 15, 0, 0, 0, time.UTC)}
	d, _ := notify.DeathOf(cp, 0, false)
	now := time.Date(2026, 12, 3, 15, 2, 0, 0, time.UTC)
	c, err := n.CheckDeath(dir, cp, d, "controller pid 7 is dead", now)
	if err != nil || !c.Fired || c.Result.Code != 0 || c.Notified != nil {
		t.Fatalf("first check: %+v, %v", c, err)
	}
	c, err = n.CheckDeath(dir, cp, d, "controller pid 7 is dead", now.Add(time.Minute))
	if err != nil || c.Fired || c.Notified == nil || !c.Notified.At.Equal(now) || c.Notified.By != "controller check" {
		t.Fatalf("second check: %+v, %v", c, err)
	}
	rec, ok, err := notify.ReadNotified(dir)
	if err != nil || !ok || !rec.Same(d) {
		t.Fatalf("recorded %+v %v %v", rec, ok, err)
	}
	cp.Heartbeat = cp.Heartbeat.Add(time.Hour) // resumed, and dead again
	d2, _ := notify.DeathOf(cp, 0, false)
	if c, err = n.CheckDeath(dir, cp, d2, "controller pid 7 is dead again", now.Add(2*time.Hour)); err != nil || !c.Fired {
		t.Fatalf("a second death: %+v, %v", c, err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "events.jsonl"))
	if lines := strings.Count(string(b), "\n"); lines != 2 || !strings.Contains(string(b), `"event":"controller-dead"`) || !strings.Contains(string(b), "dead again") {
		t.Fatalf("the command ran %d times:\n%s", lines, b)
	}
	if len(st.got) != 2 || st.got[0].Reason != "notify" {
		t.Fatalf("recorded results %+v", st.got)
	}
	// no command: nothing fired, nothing recorded
	var none *notify.Notifier
	other := t.TempDir()
	if c, err := none.CheckDeath(other, cp, d, "x", now); err != nil || c.Fired {
		t.Fatalf("no command: %+v %v", c, err)
	}
	if _, ok, _ := notify.ReadNotified(other); ok {
		t.Fatal("a death recorded with no command to notify it")
	}
}
