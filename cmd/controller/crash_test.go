package main

import (
	"strings"
	"sync"
	"testing"

	"warden/bench/crashcheck"
	"warden/internal/testutil/testcampaign"
	"warden/pkg/dirlayout"
	"warden/pkg/failpoint"
	"warden/pkg/provenance"
	"warden/pkg/state"
)

// Crash tests: a controller built with failpoints kills itself (SIGKILL)
// at a named point between durable steps; a plain controller resumes the
// campaign to the end; then the promises of crash-consistent resume are
// checked (package crashcheck).

// crashScenario is a campaign the crash test kills and resumes.
type crashScenario struct {
	name     string
	protocol func(t *testing.T) string
	// the state the campaign ends in after every resume, and its stop reason
	want       state.CampaignState
	wantReason state.StopReason
	// awaiting, when set, names the failed run (as a stop detail does) whose
	// failure the resume does not rerun: a final stop awaiting-amendment
	// naming it is the expected end too
	awaiting string
	// results: runs that must end with exactly one complete or quarantined
	// attempt (nil: every run)
	results []string
	// slurm: the campaign runs on the test cluster (--executor slurm), and
	// nothing of it may be left in Slurm's queue at the end
	slurm bool
}

// happyPath: a saturation run and the moderate run that needs its result.
var happyPath = crashScenario{
	name: "happy path",
	protocol: func(t *testing.T) string {
		// a validator, so that validating is a transition of its own
		return writeProtocol(t, scenario{patterns: 1, loadsModer: true, measureS: "0.3",
			validators: "  - {name: client-output, command: {shell: 'test -f \"${ATTEMPT_DIR}/client.out\"'}}\n"})
	},
	want: state.CampaignComplete,
}

// failurePath crosses every failure path of the policy: p1's server is
// never healthy on its first attempt (server-not-ready, an exact retry that
// completes), p2 drains past its allowance (quarantined, the campaign goes
// on), p3's client fails (client-failed: the campaign stops for review).
var failurePath = crashScenario{
	name: "retry, quarantine, stop",
	protocol: func(t *testing.T) string {
		server := `{shell: 'if [ "$$WARDEN_RUN_ID" = p1.saturation ] && [ "$$WARDEN_ATTEMPT" = 1 ]; then h=--never-healthy; fi; ` +
			`exec "${STANDIN}" server --port "${PORT}" --load-s 0.2 --shutdown-timeout 1 --gpu-mem-mib 1024 --effective-config "effective config: enable_chunked_prefill=True" $$h'}`
		client := `{shell: 'if [ "$$WARDEN_RUN_ID" = p3.saturation ]; then f=--fail; fi; ` +
			`exec "${STANDIN}" client --warmup-s 0.2 --measure-s 0.3 --drain-s 0.5 --concurrency 2 --result-dir "${ATTEMPT_DIR}/client" --drain-extra-s "${DRAIN_EXTRA}" $$f'}`
		return writeProtocol(t, scenario{patterns: 3, retries: 1, readyS: "1.5", drainS: "1", watchdogS: "20",
			quarantine: []int{2}, server: server, client: client})
	},
	want:       state.CampaignStopped,
	wantReason: state.StopForRun(state.ReasonClientFailed),
	awaiting:   "p3.saturation (attempt 1, client-failed)",
	results:    []string{"p1.saturation", "p2.saturation"},
}

// crashAndResume runs the scenario's campaign with the failpoint armed,
// resumes it with a plain controller until it ends, and checks every
// promise. With preKill, the controller is first killed at that point
// (another failpoint) and the failpoint is armed in the resume that
// reconciles what it left. It reports whether the failpoint fired.
func crashAndResume(t *testing.T, bin, point string, sc crashScenario, preKill string) bool {
	c := newCampaign(t)
	proto := sc.protocol(t)
	first := point
	if preKill != "" {
		first = preKill
	}
	args := []string{"start", "-f", proto, "-d", c.dir, "--gpu-backend", "fake", "--foreground"}
	if sc.slurm {
		t.Cleanup(c.cancelJobsLeft)
		args = append(slurmArgs(c, proto), "--foreground")
	}
	out, st := c.run(bin, []string{failpoint.EnvVar + "=" + first}, args...)
	if preKill != "" {
		if !killedBySIGKILL(st) {
			t.Fatalf("controller did not die at %s:\n%s", preKill, tail(out, 3000))
		}
		out, st = c.run(bin, []string{failpoint.EnvVar + "=" + point}, "resume", "-d", c.dir, "--foreground")
	}
	fired := killedBySIGKILL(st)
	switch {
	case fired && !strings.Contains(out, "failpoint "+point+": killing the process"):
		t.Fatalf("controller died by SIGKILL, but not at the failpoint:\n%s", tail(out, 3000))
	case !fired && st.ExitCode() != 0:
		t.Fatalf("controller exited %d without reaching the failpoint:\n%s", st.ExitCode(), tail(out, 3000))
	}

	var before *crashcheck.Snapshot
	if fired {
		var vs []string
		var err error
		before, vs, err = crashcheck.Take(c.dir)
		if err != nil {
			t.Fatalf("after the crash: %v", err)
		}
		for _, v := range vs {
			t.Errorf("after the crash: %s", v)
		}
		out, st = c.run(controllerBin, nil, "resume", "-d", c.dir, "--foreground")
		if st.ExitCode() != 0 {
			t.Fatalf("resume exited %d:\n%s", st.ExitCode(), tail(out, 3000))
		}
	}
	after, vs, err := crashcheck.Take(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	if before != nil {
		vs = append(vs, crashcheck.Compare(before, after)...)
	}
	wantReason := sc.wantReason
	if sc.awaiting != "" {
		// killed after the failure was recorded: the resume starts no
		// attempt of the failed run (no amendment covers it) and stops
		// again once nothing else can run
		s := c.store()
		if cp, err := s.Campaign(); err == nil && cp.StopReason == state.StopAwaitingAmendment && strings.Contains(cp.StopDetail, sc.awaiting) {
			wantReason = state.StopAwaitingAmendment
		}
		s.Close()
	}
	final, err := crashcheck.FinalExpect(c.dir, after, crashcheck.Expect{State: sc.want, StopReason: wantReason, Results: sc.results})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range append(vs, final...) {
		t.Errorf("%s", v)
	}
	if t.Failed() {
		t.Logf("resume output:\n%s", tail(out, 4000))
	}
	if sc.slurm {
		c.assertSlurmClean()
	} else {
		c.assertNoProcesses()
	}
	return fired
}

// TestCrashAtEveryFailpoint kills the controller once at each failpoint,
// in the campaign that reaches it, and resumes it: the happy path for the
// points every run meets, the failure path for those of failed, retried,
// quarantined and interrupted attempts. An attempt becomes interrupted
// when a resume finds it live: those points are armed in the resume after
// a first kill while the client measures.
func TestCrashAtEveryFailpoint(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("crash test: a campaign per failpoint")
	}
	bin := failpointController(t)
	onFailurePath := map[string]bool{
		"before-transition:failed": true, "after-transition:failed": true, "retry-decided": true,
		"before-transition:quarantined": true, "after-transition:quarantined": true,
	}
	onResume := map[string]bool{"before-transition:interrupted": true, "after-transition:interrupted": true}
	// the amendment commands' points: TestCrashAmendments
	amendments := map[string]bool{"amend-files-written": true, "amend-recorded": true, "amend-provenance-installed": true,
		"readjudicate-recorded": true, "freeze-recorded": true}
	// the Slurm executor's points: TestSlurmCrashAtFailpoints
	amendments["srun-started"], amendments["step-recorded"] = true, true
	var (
		mu      sync.Mutex
		reached = map[string]bool{} // a point's subtest ended: whether its point fired
	)
	// the group returns when every point's campaign, run in parallel, has ended
	t.Run("points", func(t *testing.T) {
		for _, point := range failpoint.Names {
			if amendments[point] {
				continue
			}
			sc, pre := happyPath, ""
			switch {
			case onFailurePath[point]:
				sc = failurePath
			case onResume[point]:
				pre = "after-transition:measuring"
			}
			t.Run(point, func(t *testing.T) {
				t.Parallel()
				hit := crashAndResume(t, bin, point, sc, pre)
				mu.Lock()
				reached[point] = hit
				mu.Unlock()
			})
		}
	})
	var fired, missed []string
	for _, point := range failpoint.Names {
		if hit, ended := reached[point]; ended && hit {
			fired = append(fired, point)
		} else if ended {
			missed = append(missed, point)
		}
	}
	t.Logf("failpoints fired: %d of %d; not reached: %v", len(fired), len(failpoint.Names), missed)
	for _, p := range missed {
		t.Errorf("failpoint %s was never reached: the crash test does not cover it", p)
	}
}

// TestFailurePathCampaign runs the failure-path campaign once without a
// kill and checks what it must show: the retry, the quarantine, the stop.
func TestFailurePathCampaign(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	out, code := c.controller("start", "-f", failurePath.protocol(t), "-d", c.dir, "--gpu-backend", "fake", "--foreground")
	if code != 0 {
		t.Fatalf("controller exited %d:\n%s", code, tail(out, 3000))
	}
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignStopped || cp.StopReason != state.StopForRun(state.ReasonClientFailed) || !strings.Contains(cp.StopDetail, "p3.saturation") {
		t.Fatalf("campaign %s %s %q", cp.State, cp.StopReason, cp.StopDetail)
	}
	p1 := c.attempts(s, "p1.saturation")
	if len(p1) != 2 || p1[0].State != state.Failed || p1[0].Reason != state.ReasonServerNotReady || p1[1].State != state.Complete {
		t.Errorf("p1: want a server-not-ready attempt and its complete retry, got %+v", p1)
	}
	if p2 := c.attempts(s, "p2.saturation"); len(p2) != 1 || p2[0].State != state.Quarantined || p2[0].Reason != state.ReasonDrainQuarantine {
		t.Errorf("p2: want one quarantined attempt, got %+v", p2)
	}
	if p3 := c.attempts(s, "p3.saturation"); len(p3) != 1 || p3[0].State != state.Failed || p3[0].Reason != state.ReasonClientFailed {
		t.Errorf("p3: want one client-failed attempt and no retry, got %+v", p3)
	}
	c.assertNoProcesses()
}

// TestCrashAmendments kills controller amend, readjudicate and freeze at
// each of their durable steps, runs the command again with a plain
// controller, and checks that the records hold: the store's invariants,
// the amendment recorded once and installed (plan.json, the provenance
// index and the database agree, so resume accepts the amended inputs),
// the re-adjudication applied, the campaign frozen.
func TestCrashAmendments(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("crash test")
	}
	bin := failpointController(t)
	setup := func(t *testing.T) (*campaign, string, string) {
		c := newCampaign(t)
		v0 := testcampaign.Edit(t, writeProtocol(t, scenario{patterns: 2, drainExtra: 1, drainS: "1", watchdogS: "20", quarantined: "0", measureS: "0.2"}),
			"concurrency: 2", "concurrency: 1")
		c.start(v0, "--foreground")
		v1 := testcampaign.Edit(t, v0, "drain_allowance_s: 1,", "drain_allowance_s: 5,", "stop: {quarantined_fraction_gt: 0}", "stop: {quarantined_fraction_gt: 0.2}")
		return c, v0, v1
	}
	crash := func(t *testing.T, c *campaign, point string, args ...string) {
		t.Helper()
		out, st := c.run(bin, []string{failpoint.EnvVar + "=" + point}, args...)
		if !killedBySIGKILL(st) || !strings.Contains(out, "failpoint "+point) {
			t.Fatalf("%v did not die at %s (exit %d):\n%s", args, point, st.ExitCode(), tail(out, 2000))
		}
		s := c.store()
		s.Close()
	}
	amend := func(c *campaign, v1 string) []string {
		return []string{"amend", "-d", c.dir, "-f", v1, "--id", "A", "--reason", "r", "--readjudicate", "--yes"}
	}
	accepted := func(t *testing.T, c *campaign) {
		t.Helper()
		s := c.store()
		cp, _ := s.Campaign()
		as, _ := s.Amendments()
		s.Close()
		n := 0
		for _, a := range as {
			if a.ID == "A" {
				n++
			}
		}
		plan, err := dirlayout.ReadPlan(c.dir)
		if err != nil || n != 1 || plan.Protocol.SHA256 != cp.ProtocolSHA256 {
			t.Fatalf("amendment A recorded %d times; plan %v, campaign %s", n, err, cp.ProtocolSHA256)
		}
		if err := provenance.Verify(c.dir); err != nil {
			t.Fatalf("provenance after the amendment: %v", err)
		}
	}
	for _, point := range []string{"amend-files-written", "amend-recorded", "amend-provenance-installed"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			c, _, v1 := setup(t)
			crash(t, c, point, amend(c, v1)...)
			if out, code := c.controller(amend(c, v1)...); code != 0 {
				t.Fatalf("amend again after the crash: exit %d\n%s", code, out)
			}
			accepted(t, c)
		})
	}
	t.Run("amend-recorded, then resume", func(t *testing.T) {
		t.Parallel()
		c, _, v1 := setup(t)
		crash(t, c, "amend-recorded", amend(c, v1)...)
		// resume finishes the install the crash cut, then runs
		if out, code := c.controller("resume", "-d", c.dir, "--foreground"); code != 0 {
			t.Fatalf("resume: exit %d\n%s", code, out)
		}
		accepted(t, c)
		c.assertNoProcesses()
	})
	t.Run("readjudicate-recorded", func(t *testing.T) {
		t.Parallel()
		c, _, v1 := setup(t)
		if out, code := c.controller(amend(c, v1)...); code != 0 {
			t.Fatalf("amend: exit %d\n%s", code, out)
		}
		crash(t, c, "readjudicate-recorded", "readjudicate", "-d", c.dir, "--amendment", "A")
		if out, code := c.controller("readjudicate", "-d", c.dir, "--amendment", "A"); code != 0 || !strings.Contains(out, "p1.saturation attempt 1") {
			t.Fatalf("readjudicate again after the crash: exit %d\n%s", code, out)
		}
		s := c.store()
		defer s.Close()
		if r, _ := s.Run("p1.saturation"); r.State() != state.RunComplete {
			t.Errorf("p1 is %s after the re-adjudication", r.State())
		}
	})
	t.Run("freeze-recorded", func(t *testing.T) {
		t.Parallel()
		c, _, _ := setup(t)
		crash(t, c, "freeze-recorded", "freeze", "-d", c.dir, "--id", "F", "--reason", "r")
		s := c.store()
		defer s.Close()
		cp, _ := s.Campaign()
		r, _ := s.Run("p2.saturation")
		if cp.State != state.CampaignFrozen || r.State() != state.RunNotRun {
			t.Errorf("after a kill right after the freeze: campaign %s, p2 %s", cp.State, r.State())
		}
	})
}
