package main

import (
	"syscall"
	"testing"
	"time"

	"warden/pkg/state"
)

// SIGTERM to the daemon does what controller stop does: in-flight runs end
// through their API parent, their attempts are interrupted, the campaign is
// left stopped and resumable.
func TestSIGTERMStopsGracefully(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := writeProtocol(t, scenario{patterns: 2, measureS: "3"})
	c.signalWhileMeasuring(proto, syscall.SIGTERM, "the controller to exit", 60*time.Second)
	c.assertNoProcesses()
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignStopped || cp.StopReason != "operator-stop" {
		t.Fatalf("after SIGTERM: %s %s", cp.State, cp.StopReason)
	}
	interrupted := 0
	runs, _ := s.Runs()
	for _, r := range runs {
		for _, a := range c.attempts(s, r.ID) {
			if a.State == state.Interrupted {
				interrupted++
				sent := false
				for _, sg := range a.Signals {
					sent = sent || (sg.Role == "server" && sg.Signal == "SIGTERM" && sg.Target == "pid")
				}
				if !sent {
					t.Fatalf("%s a%d: the server was not stopped through its API parent: %+v", r.ID, a.N, a.Signals)
				}
			}
		}
	}
	if interrupted == 0 {
		t.Fatal("no attempt interrupted")
	}
}
