package runner_test

import (
	"context"
	"maps"
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

// TestReconcileNotesADeadController: a campaign still running when a
// controller resumes it had no controller that ended it: Reconcile records
// one controller-dead event, from the dead controller's last heartbeat to
// the resume, naming its pid. A campaign whose controller never claimed it,
// or that its controller ended (stopped, complete), gets none.
func TestReconcileNotesADeadController(t *testing.T) {
	t0 := time.Unix(1_780_000_000, 0)
	for _, tc := range []struct {
		name      string
		heartbeat bool
		state     state.CampaignState // the campaign's state; running when ""
		dead      bool
	}{
		{"died", true, "", true},
		{"never claimed", false, "", false},
		{"stopped", true, state.CampaignStopped, false},
		{"complete", true, state.CampaignComplete, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCampaign(t, protocol{patterns: 1})
			c.now = func() time.Time { return t0 }
			if tc.heartbeat {
				if err := c.store.UpdateCampaign(func(cp *state.Campaign) error {
					cp.Heartbeat, cp.ControllerPID = t0.Add(-10*time.Second), 1<<22
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.state != "" {
				if err := c.store.SetCampaignState(tc.state, "test", "its controller ended it", nil); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.newRunner().Reconcile(context.Background()); err != nil {
				t.Fatal(err)
			}
			evs, err := c.store.Events(0, 0)
			if err != nil {
				t.Fatal(err)
			}
			var dead []state.Event
			for _, e := range evs {
				if e.Reason == state.EventControllerDead {
					dead = append(dead, e)
				}
			}
			if !tc.dead {
				if len(dead) != 0 {
					t.Fatalf("controller-dead events %+v; want none", dead)
				}
				return
			}
			want := map[string]float64{"dead_from_unix": float64(t0.Unix() - 10), "dead_until_unix": float64(t0.Unix()), "dead_s": 10, "controller_pid": 1 << 22}
			if len(dead) != 1 || dead[0].Run != "" || !maps.Equal(dead[0].Figures, want) {
				t.Fatalf("controller-dead events %+v; want one campaign event with %v", dead, want)
			}
		})
	}
}
