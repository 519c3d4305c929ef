package runner_test

import (
	"context"
	"testing"
	"time"

	"warden/pkg/launch"
	"warden/pkg/state"
)

// TestClaim: the controller that claims a campaign is recorded with its
// pid, the host's boot id and a fresh heartbeat; a campaign stopped for
// review runs again, with an event that says an operator resumed it, and
// one running already is left as it is.
func TestClaim(t *testing.T) {
	c := newCampaign(t, protocol{client: `{shell: 'exit 0'}`})
	if err := c.store.SetCampaignState(state.CampaignStopped, string(state.StopBudget), "cap", nil); err != nil {
		t.Fatal(err)
	}
	rn := c.newRunner()
	if err := rn.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if err := rn.Claim(4242); err != nil {
		t.Fatal(err)
	}
	boot, err := launch.ReadBootID()
	if err != nil {
		t.Fatal(err)
	}
	cp := c.campaign()
	if cp.ControllerPID != 4242 || cp.ControllerBootID != boot || cp.Heartbeat.Before(before) || cp.State != state.CampaignRunning || cp.StopReason != "" {
		t.Fatalf("after claim: pid %d boot %q heartbeat %v state %s stop %q", cp.ControllerPID, cp.ControllerBootID, cp.Heartbeat, cp.State, cp.StopReason)
	}
	evs, err := c.store.Events(0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if last.From != "stopped" || last.To != "running" || last.Reason != "resume" || last.Message != "resumed by an operator after review" {
		t.Fatalf("last event %+v", last)
	}
	if err := rn.Claim(4343); err != nil {
		t.Fatal(err)
	}
	again, err := c.store.Events(last.Seq, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if cp := c.campaign(); cp.ControllerPID != 4343 || cp.State != state.CampaignRunning || len(again) != 0 {
		t.Fatalf("a second claim: pid %d state %s, events %+v", cp.ControllerPID, cp.State, again)
	}
}
