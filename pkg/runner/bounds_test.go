package runner_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warden/pkg/api"
	"warden/pkg/budget"
	"warden/pkg/launch"
	"warden/pkg/state"
)

// Nothing runs unbounded: a client past its measuring deadline is ended,
// a drain nobody can time fails closed, and the budget is a hard stop
// while runs are in flight.

func interrupted(r state.Reason) state.Attempt {
	return state.Attempt{State: state.Interrupted, Reason: r}
}

// A client that never ends is ended at the load's measuring deadline,
// through the graceful path (SIGTERM first, recorded), and the run fails:
// a hang stops the campaign for review.
func TestMeasureDeadlineEndsAHang(t *testing.T) {
	c := newCampaign(t, protocol{client: `{shell: 'exec sleep 3600'}`, saturation: "    deadline_s: 1", retries: 1})
	c.run()
	a := c.wantStoppedBy(state.ReasonMeasureDeadline)
	if a.Figures["measure_deadline_s"] != 1 || a.Figures["client_ran_s"] < 1 {
		t.Errorf("figures %v", a.Figures)
	}
	var term bool
	for _, s := range a.Signals {
		if s.Role == "client" && s.Signal == "SIGTERM" {
			term = true
		}
	}
	if !term {
		t.Errorf("the client was not sent SIGTERM first: %+v", a.Signals)
	}
	c.wantClean()
}

// A client that exits 0 without ever saying when admission stopped fails
// its drain gate: the run is not complete by default.
func TestNoDrainPhaseFailsClosed(t *testing.T) {
	c := newCampaign(t, protocol{client: `{shell: 'exit 0'}`})
	c.run()
	c.wantStoppedBy(state.ReasonDrainUnseen)
	if v := c.gate("p1.saturation", 1, "drain"); v.Verdict != "fail" || !strings.Contains(v.Detail, "never said when admission stopped") {
		t.Errorf("drain gate %+v", v)
	}
	c.wantClean()
}

// A load whose end of admission is in its result file: the drain is timed
// from drain.start_mono_ns and drain.end_mono_ns; over the allowance the
// run is quarantined; a result without them fails closed.
func TestDrainFromResultFile(t *testing.T) {
	cases := []struct {
		name   string
		result string
		want   state.Attempt
	}{
		{"within the allowance", `{"drain":{"start_mono_ns":1000000000,"end_mono_ns":1500000000}}`, ok},
		{"over the allowance", `{"drain":{"start_mono_ns":1000000000,"end_mono_ns":4000000000}}`, state.Attempt{State: state.Quarantined, Reason: state.ReasonDrainQuarantine}},
		{"no drain times", `{"clean":{}}`, failed(state.ReasonDrainUnseen)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client := `{shell: 'mkdir -p "$$WARDEN_ATTEMPT_DIR/client" && printf %s ''` + tc.result + `'' > "$$WARDEN_ATTEMPT_DIR/client/result.json"'}`
			c := newCampaign(t, protocol{client: client, saturation: "    admission_end: result-file", drainS: "1", watchdogS: "20"})
			c.run()
			as := c.wantAttempts("p1.saturation", tc.want)
			switch tc.want.State {
			case state.Complete:
				c.wantComplete()
			case state.Quarantined:
				// the one measured run is quarantined: past the threshold
				c.wantStopped(state.StopQuarantinedFraction)
				if d := as[0].Figures["drain_s"]; d != 3 {
					t.Errorf("drain_s %v, want 3", d)
				}
			}
			c.wantClean()
		})
	}
}

// The budget is a hard stop while runs are in flight: two clients that
// never end pass a cap of 7.2 GPU-s; the status counts their GPU time as
// it accrues; the controller ends both gracefully, stops the campaign as
// budget-exhausted, and charges at most about one tick past the cap.
func TestBudgetHardStopInFlight(t *testing.T) {
	c := newCampaign(t, protocol{patterns: 2, expectedS: "1", capGPUHours: "0.002, reserve: nominal", // nominal: the waves start, and the cap ends them in flight
		client: `{shell: 'exec sleep 3600'}`, saturation: "    deadline_s: 600"})
	r := c.start(c.newRunner())
	c.waitAttempt(r, "an attempt measuring", func(a state.Attempt) bool { return a.State == state.Measuring })
	st, err := api.BuildStatus(c.store, c.dir, api.Controller{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st.Budget.InFlightGPUHours <= 0 || st.Budget.ChargedGPUHours != 0 || st.Budget.ConsumedGPUHours != st.Budget.InFlightGPUHours {
		t.Errorf("status while measuring: in flight %v, charged %v, consumed %v GPU-h; want GPU time in flight, nothing charged yet", st.Budget.InFlightGPUHours, st.Budget.ChargedGPUHours, st.Budget.ConsumedGPUHours)
	}
	r.wait(t)
	cp := c.wantStopped(state.StopBudgetExhausted)
	for _, run := range []string{"p1.saturation", "p2.saturation"} {
		c.wantAttempts(run, interrupted(state.ReasonBudgetExhausted))
	}
	capS := budget.Seconds(0.002)
	over := cp.ConsumedGPUSeconds - capS
	t.Logf("charged %.3f GPU-s against a cap of %.1f: overrun %.3f GPU-s", cp.ConsumedGPUSeconds, capS, over)
	// one tick (1 s) of two GPUs, plus the graceful end of the runs
	if over > 2*1.0+2 {
		t.Errorf("charged %.3f GPU-s, %.3f past the %.1f cap", cp.ConsumedGPUSeconds, over, capS)
	}
	l := c.ledger()
	var noted float64
	for _, e := range l.entries {
		if e.Kind == state.LedgerOverrun {
			noted += e.GPUSeconds
		}
	}
	if over > 0 && (noted < over-1e-6 || noted > over+1e-6) {
		t.Errorf("overrun on the ledger %.6f GPU-s, charged past the cap %.6f", noted, over)
	}
	c.wantLedgerSettled()
	c.wantClean()
}

// The effective configuration is read from the server's own API (vLLM's
// /server_info?config_format=json shape, which the stand-in serves): the
// expected value passes and the answer is kept; a server that reports
// another value stops the campaign as a config mismatch (seed stop
// condition 1), beside a log pattern that still matches.
func TestEffectiveConfigFromTheServer(t *testing.T) {
	expect := `[{name: chunked, pattern: 'enable_chunked_prefill=True'}, {name: max_num_seqs, path: vllm_config.scheduler_config.max_num_seqs, equals: 64}]`
	t.Run("as expected", func(t *testing.T) {
		c := newCampaign(t, protocol{serverArgs: `, --max-num-seqs, "64"`, expect: expect})
		c.run()
		c.wantComplete()
		a := c.wantAttempts("p1.saturation", ok)[0]
		if _, err := os.Stat(filepath.Join(a.Dir, "server-config.json")); err != nil {
			t.Errorf("the server's configuration was not kept: %v", err)
		}
		if v := c.gate("p1.saturation", 1, "effective-config"); v.Verdict != "pass" || v.Figures["max_num_seqs"] != 64 {
			t.Errorf("effective-config gate %+v", v)
		}
		c.wantClean()
	})
	t.Run("reported otherwise", func(t *testing.T) {
		c := newCampaign(t, protocol{serverArgs: `, --max-num-seqs, "64", --report-max-num-seqs, "1024"`, expect: expect, retries: 1})
		c.run()
		c.wantStoppedBy(state.ReasonConfigMismatch)
		if v := c.gate("p1.saturation", 1, "effective-config"); v.Verdict != "fail" || !strings.Contains(v.Detail, "is 1024, want 64") {
			t.Errorf("effective-config gate %+v", v)
		}
		c.wantClean()
	})
}

// The client's counts by the methodology's terminal classes are recorded
// with the attempt.
func TestTerminalClassesRecorded(t *testing.T) {
	result := `{"drain":{"start_mono_ns":1000000000,"end_mono_ns":1100000000},"totals":{"admitted":12,"by_class":{"success":9,"deadline-exceeded":2,"transport-error":1}}}`
	client := `{shell: 'mkdir -p "$$WARDEN_ATTEMPT_DIR/client" && printf %s ''` + result + `'' > "$$WARDEN_ATTEMPT_DIR/client/result.json"'}`
	c := newCampaign(t, protocol{client: client, saturation: "    admission_end: result-file"})
	c.run()
	c.wantComplete()
	a := c.wantAttempts("p1.saturation", ok)[0]
	for k, want := range map[string]float64{"requests_success": 9, "requests_deadline_exceeded": 2, "requests_transport_error": 1} {
		if a.Figures[k] != want {
			t.Errorf("figure %s = %v, want %v (figures %v)", k, a.Figures[k], want, a.Figures)
		}
	}
	c.wantClean()
}

// A left-over already gone at resume is charged until the resume that
// found it gone, not until the last heartbeat (never under-count), with
// both bounds recorded; a server that was never recorded is charged from
// the attempt's creation once the attempt passed preflight.
func TestResumeChargesUntilKnownGone(t *testing.T) {
	c := newCampaign(t, protocol{patterns: 2})
	now, boot := c.controllerDied(50 * time.Second)
	to := func(run string, states ...state.AttemptState) {
		if _, err := c.store.NewAttempt(run, filepath.Join(c.dir, "runs", run, "a1"), func(a *state.Attempt) { a.GPUIDs = []int{0} }); err != nil {
			t.Fatal(err)
		}
		for _, st := range states {
			if _, err := c.store.Transition(run, 1, st, "", "test", nil, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	// p1: a server recorded 60 s ago, gone now (a pid that is no process)
	to("p1.saturation", state.Reserved, state.Preflight, state.Starting)
	if _, err := c.store.UpdateAttempt("p1.saturation", 1, func(a *state.Attempt) error {
		a.Procs = append(a.Procs, state.Proc{Role: "server", PID: 1 << 22, StartTime: 1, BootID: boot, PGID: 1 << 22, StartedAt: now.Add(-60 * time.Second)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// p2: the controller died between the server's start and its record
	to("p2.saturation", state.Reserved, state.Preflight, state.Starting)

	rn := c.newRunner()
	if err := rn.Reconcile(t.Context()); err != nil {
		t.Fatal(err)
	}
	l := c.ledger()
	if got := l.byAttempt["p1.saturation/a1"]; got < 60 {
		t.Errorf("p1 charged %.3f GPU-s for a server started 60 s ago and found gone now; want at least 60", got)
	}
	a := c.attempts("p1.saturation")[0]
	if a.State != state.Interrupted || a.Figures["charged_until_unix"] < float64(now.Unix()) ||
		a.Figures["last_seen_alive_unix"] > a.Figures["charged_until_unix"] || a.Figures["last_seen_alive_unix"] <= 0 {
		t.Errorf("p1: %s, figures %v; want the bounds recorded", a.State, a.Figures)
	}
	if got := l.byAttempt["p2.saturation/a1"]; got <= 0 {
		t.Errorf("p2 (server never recorded, attempt past preflight) charged %.6f GPU-s; want its time since creation", got)
	}
}

// Resume never signals a process that does not carry this campaign's
// directory, even when the records name it with an identity that checks
// out (pid, start time, boot id): a live process the test started,
// recorded as a left-over server, lives on.
func TestReconcileSignalsOnlyThisCampaignsProcesses(t *testing.T) {
	c := newCampaign(t, protocol{})
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	id, err := launch.Lookup(cmd.Process.Pid, nil)
	if err != nil {
		t.Fatal(err)
	}
	boot, _ := launch.ReadBootID()
	if err := c.store.UpdateCampaign(func(cp *state.Campaign) error { cp.ControllerBootID = boot; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := c.store.NewAttempt("p1.saturation", filepath.Join(c.dir, "runs", "p1.saturation", "a1"), func(a *state.Attempt) { a.GPUIDs = []int{0} }); err != nil {
		t.Fatal(err)
	}
	for _, st := range []state.AttemptState{state.Reserved, state.Preflight, state.Starting} {
		if _, err := c.store.Transition("p1.saturation", 1, st, "", "test", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.store.UpdateAttempt("p1.saturation", 1, func(a *state.Attempt) error {
		a.Procs = append(a.Procs, state.Proc{Role: "server", PID: id.PID, StartTime: id.StartTime, BootID: id.BootID, PGID: id.PID, StartedAt: time.Now()})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.newRunner().Reconcile(t.Context()); err != nil {
		t.Fatal(err)
	}
	if alive, _ := id.Alive(nil); !alive {
		t.Fatal("resume signalled a process that is not this campaign's")
	}
	a := c.attempts("p1.saturation")[0]
	if a.State != state.Interrupted || len(a.Signals) != 0 {
		t.Errorf("attempt %s with signals %+v; want interrupted, nothing signalled", a.State, a.Signals)
	}
}

// A client that plants links where the controller writes (its gates.jsonl
// replaced by a link out of the campaign, its run directory replaced by a
// link to a directory outside) makes the controller write nothing outside
// the campaign directory.
func TestPlantedLinksAreNotFollowed(t *testing.T) {
	out := t.TempDir()
	client := `{shell: 'ln -sf ` + out + `/gates.jsonl "$$WARDEN_ATTEMPT_DIR/gates.jsonl"; d="$$WARDEN_RUN_DIR"; mv "$$d" "$$d.moved" && ln -s ` + out + ` "$$d"; exit 0'}`
	c := newCampaign(t, protocol{client: client})
	c.run()
	c.wantStopped(state.StopForRun(state.ReasonDrainUnseen))
	ents, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 0 {
		t.Errorf("the controller wrote outside the campaign directory: %v", names)
	}
	c.wantClean()
}

// A quality-gate validator marks a run quality-failed (seed 000): the run
// is kept, quarantined, and the campaign goes on; the quarantined-fraction
// threshold, which counts drain-quarantined runs as the seed's does, does
// not stop it.
func TestQualityFailedIsKeptNotAStop(t *testing.T) {
	c := newCampaign(t, protocol{patterns: 2, quarantined: "0.1", extra: `validators:
  - name: quality
    command: {shell: 'echo ''{"verdict": "fail", "class": "quality", "detail": "outputs failed the quality check"}'''}`})
	c.run()
	c.wantComplete()
	for _, run := range []string{"p1.saturation", "p2.saturation"} {
		c.wantAttempts(run, state.Attempt{State: state.Quarantined, Reason: state.ReasonQualityFailed})
	}
	c.wantClean()
}
