package runner_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"warden/pkg/state"
)

// Each test runs one campaign of stand-in processes end to end, for what
// only real processes show: a whole campaign's files, gates and process
// identities; an attempt's reason read from a real server or client (not
// ready, exited, OOM, drained too long) and what the loop then does; an
// operator's stop ending real processes. The loop's own rules are tested
// through the scripted executor (scripted_test.go). The harness is in
// harness_test.go.

// ok is an attempt that completed.
var ok = state.Attempt{State: state.Complete}

func failed(r state.Reason) state.Attempt { return state.Attempt{State: state.Failed, Reason: r} }

// gate is the last verdict of gate on run's attempt n.
func (c *campaign) gate(run string, n int, gate string) state.GateVerdict {
	c.t.Helper()
	vs, err := c.store.GateVerdicts(run)
	if err != nil {
		c.t.Fatal(err)
	}
	var last state.GateVerdict
	for _, v := range vs {
		if v.Gate == gate && v.Attempt == n {
			last = v
		}
	}
	return last
}

// wantExit fails the test unless a recorded an exit of its process role
// with code.
func wantExit(t *testing.T, a state.Attempt, role string, code int) {
	t.Helper()
	for _, x := range a.Exits {
		if x.Role == role && x.Code == code {
			return
		}
	}
	t.Errorf("%s exit %d not recorded: %+v", role, code, a.Exits)
}

// TestCompleteCampaign runs two cells of saturation then moderate under a
// regime of two slots: the cells run side by side, each on its own slot,
// the moderate run after its saturation run on the same slot and with
// its result directory; the wave's reservation precedes every charge;
// every attempt is charged and every reservation released.
func TestCompleteCampaign(t *testing.T) {
	c := newCampaign(t, protocol{patterns: 2, moderate: true})
	c.run()
	cp := c.wantComplete()
	if cp.Regime != "two" || cp.RegimeConcurrency != 2 {
		t.Errorf("regime %q concurrency %d, want two, 2", cp.Regime, cp.RegimeConcurrency)
	}
	slots := map[string]string{} // cell -> slot
	for _, cell := range []string{"p1", "p2"} {
		sat := c.wantAttempts(cell+".saturation", ok)[0]
		mod := c.wantAttempts(cell+".moderate", ok)[0]
		if sat.Slot == "" || mod.Slot != sat.Slot {
			t.Errorf("%s: saturation on slot %q, moderate on %q; want one slot", cell, sat.Slot, mod.Slot)
		}
		slots[cell] = sat.Slot
		if mod.CreatedAt.Before(sat.UpdatedAt) {
			t.Errorf("%s: moderate created at %v, before its saturation run ended at %v", cell, mod.CreatedAt, sat.UpdatedAt)
		}
		// the moderate run received its saturation run's result directory
		var env struct {
			Variables map[string]string `json:"variables"`
		}
		b, err := os.ReadFile(filepath.Join(mod.Dir, "environment.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &env); err != nil {
			t.Fatal(err)
		}
		if got, want := env.Variables["NEED_SATURATION_DIR"], sat.Dir; got != want {
			t.Errorf("%s.moderate NEED_SATURATION_DIR = %q, want %q", cell, got, want)
		}
		for _, a := range []state.Attempt{sat, mod} {
			for _, f := range []string{"state.json", "commands.log", "environment.json", "server.out", "client.out", "phases.jsonl", "client/result.json"} {
				if _, err := os.Stat(filepath.Join(a.Dir, f)); err != nil {
					t.Errorf("%s a%d: %v", a.RunID, a.N, err)
				}
			}
			for _, g := range []string{"preflight", "cleanup", "drain"} {
				if v := c.gate(a.RunID, a.N, g); v.Verdict != state.VerdictPass {
					t.Errorf("%s a%d gate %s: %+v", a.RunID, a.N, g, v)
				}
			}
			if len(a.Procs) != 2 || a.Figures["gpu_seconds"] <= 0 {
				t.Errorf("%s a%d: procs %+v, figures %v", a.RunID, a.N, a.Procs, a.Figures)
			}
			for _, p := range a.Procs {
				if p.StartTime == 0 || p.BootID == "" {
					t.Errorf("%s a%d: %s recorded without its identity: %+v", a.RunID, a.N, p.Role, p)
				}
			}
		}
	}
	if slots["p1"] == slots["p2"] {
		t.Errorf("both cells ran on slot %s under a regime of two", slots["p1"])
	}

	l := c.wantLedgerSettled()
	if cp.ConsumedGPUSeconds <= 0 {
		t.Errorf("consumed %v GPU-s", cp.ConsumedGPUSeconds)
	}
	for _, a := range c.allAttempts() {
		if l.byAttempt[fmt.Sprintf("%s/a%d", a.RunID, a.N)] <= 0 {
			t.Errorf("%s a%d was not charged", a.RunID, a.N)
		}
	}
	// one wave: all four runs reserved before the first charge
	reserves := 0
	for _, e := range l.entries {
		if e.Kind == state.LedgerCharge {
			break
		}
		if e.Kind == state.LedgerReserve {
			reserves++
		}
	}
	if reserves != 4 {
		t.Errorf("%d reservations before the first charge, want the wave's 4: %+v", reserves, l.entries)
	}
	c.wantClean()
}

// TestRetryAfterServerNotReady: a server that is never healthy on the
// first attempt only is an infrastructure failure, retried once exactly;
// the retry completes and so does the campaign; both attempts stay and
// both are charged.
func TestRetryAfterServerNotReady(t *testing.T) {
	c := newCampaign(t, protocol{
		server:  standinServerShell(`if [ ${ATTEMPT} = 1 ]; then set -- --never-healthy; fi;`),
		readyS:  "2",
		retries: 1,
	})
	c.run()
	c.wantComplete()
	as := c.wantAttempts("p1.saturation", failed(state.ReasonServerNotReady), ok)
	if as[0].Dir == as[1].Dir {
		t.Errorf("both attempts in %s", as[0].Dir)
	}
	l := c.wantLedgerSettled()
	for _, k := range []string{"p1.saturation/a1", "p1.saturation/a2"} {
		if l.byAttempt[k] <= 0 {
			t.Errorf("%s was not charged: %v", k, l.byAttempt)
		}
	}
	c.wantClean()
}

// TestDrainQuarantine: a client that drains past its class allowance
// quarantines its run (done, flagged, not retried); the campaign goes on
// and completes under a high threshold.
func TestDrainQuarantine(t *testing.T) {
	c := newCampaign(t, protocol{patterns: 2, drainLate: 1, drainS: "1", retries: 1})
	c.run()
	c.wantComplete()
	a := c.wantAttempts("p1.saturation", state.Attempt{State: state.Quarantined, Reason: state.ReasonDrainQuarantine})[0]
	if a.Figures["drain_s"] <= 1 {
		t.Errorf("quarantined with drain_s %v, allowance 1", a.Figures["drain_s"])
	}
	if v := c.gate("p1.saturation", 1, "drain"); v.Verdict != state.VerdictFail || v.Figures["quarantine"] != 1 {
		t.Errorf("drain gate %+v", v)
	}
	run, err := c.store.Run("p1.saturation")
	if err != nil {
		t.Fatal(err)
	}
	if run.State() != state.RunQuarantined {
		t.Errorf("p1.saturation is %s, want quarantined", run.State())
	}
	c.wantAttempts("p2.saturation", ok)
	c.wantLedgerSettled()
	c.wantClean()
}

// TestProcessFailureStops: a server that crashes while the client runs
// is a server error, a client that fails a semantic failure: either stops
// the campaign for review, never retried, with the exit recorded.
func TestProcessFailureStops(t *testing.T) {
	for _, tc := range []struct {
		name   string
		p      protocol
		reason state.Reason
		role   string
		code   int
	}{
		{"server exit", protocol{serverArgs: `, --crash-after, "1"`, measureS: "5", retries: 1}, state.ReasonServerExit, "server", 1},
		{"client failure", protocol{clientArgs: `, --fail`, retries: 1}, state.ReasonClientFailed, "client", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCampaign(t, tc.p)
			c.run()
			wantExit(t, c.wantStoppedBy(tc.reason), tc.role, tc.code)
			c.wantLedgerSettled()
			c.wantClean()
		})
	}
}

// TestOOMStops: a server whose output says it ran out of GPU memory
// before it exits fails with oom: stop for review, never retried.
func TestOOMStops(t *testing.T) {
	c := newCampaign(t, protocol{
		server:  `{shell: 'echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB" >&2; exit 1'}`,
		retries: 1,
	})
	c.run()
	c.wantStoppedBy(state.ReasonOOM)
	c.wantLedgerSettled()
	c.wantClean()
}

// TestOperatorStopThenResume: Stop while a run measures interrupts the
// attempts in flight (charged, processes ended) and stops the campaign as
// the operator's; a second Runner on the same store reconciles and
// completes the campaign, keeping the interrupted attempts. An
// interrupted attempt is not a retry: the protocol allows none.
func TestOperatorStopThenResume(t *testing.T) {
	c := newCampaign(t, protocol{patterns: 2, measureS: "2"})
	r := c.start(c.newRunner())
	m := c.waitAttempt(r, "an attempt measuring", func(a state.Attempt) bool { return a.State == state.Measuring })
	r.rn.Stop()
	r.wait(t)

	c.wantStopped(state.StopOperator)
	interrupted := map[string]bool{}
	for _, a := range c.allAttempts() {
		if a.State != state.Interrupted {
			continue
		}
		if a.Reason != state.ReasonInterrupted {
			t.Errorf("%s a%d interrupted with reason %q", a.RunID, a.N, a.Reason)
		}
		interrupted[a.RunID] = true
	}
	if !interrupted[m.RunID] {
		t.Fatalf("%s was measuring at the stop but is not interrupted: %s", m.RunID, describe(c.attempts(m.RunID)))
	}
	if l := c.wantLedgerSettled(); l.byAttempt[m.RunID+"/a1"] <= 0 {
		t.Errorf("interrupted %s a1 was not charged: %v", m.RunID, l.byAttempt)
	}
	c.wantClean()

	c.start(c.newRunner()).wait(t)
	c.wantComplete()
	for _, run := range []string{"p1.saturation", "p2.saturation"} {
		if interrupted[run] {
			c.wantAttempts(run, state.Attempt{State: state.Interrupted, Reason: state.ReasonInterrupted}, ok)
		} else {
			c.wantAttempts(run, ok)
		}
	}
	c.wantLedgerSettled()
	c.wantClean()
}
