package main

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"warden/internal/testutil/testcampaign"
	"warden/pkg/state"
)

// TestSeedAmendmentHistory replays, on a stand-in campaign, how seed 002's
// protocol changed while it ran (docs/amendments.md walks through it):
//
//  1. the protocol as frozen before the amendments: one drain allowance for
//     all, and a drain over it stops the matrix (quarantined_fraction_gt 0);
//     p1 drains over it and the campaign stops for review;
//  2. A-P3-5 (drain quarantine): a longer allowance and the 20% threshold;
//     refused while it would change p1, which has a result, unless it
//     re-adjudicates it; then recorded;
//  3. the preserved p1 is re-adjudicated against the new allowance without
//     a rerun: usable, the old verdict kept;
//  4. A-P3-4 raises the cap;
//  5. A-P3-7 freezes the matrix with p2, p3 and p4 missing: not-run, never
//     imputed.
func TestSeedAmendmentHistory(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	base := scenario{patterns: 4, drainExtra: 1, drainS: "1", watchdogS: "20", quarantined: "0", capGPUHours: "0.007, reserve: nominal", measureS: "0.2"} // the cap fits the waves nominally only
	// one run at a time, so that p1's drain stops the campaign before
	// another run starts
	v0 := testcampaign.Edit(t, writeProtocol(t, base), "concurrency: 2", "concurrency: 1")
	// the estimate (4 runs) passes the 0.007 cap until A-P3-4 raises it: as
	// in the seed, the campaign starts under the old cap on purpose
	out, code := c.controller("start", "-f", v0, "-d", c.dir, "--gpu-backend", "fake", "--foreground", "--allow-over-budget")
	if code != 0 {
		t.Fatalf("start: exit %d\n%s", code, out)
	}
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignStopped || cp.StopReason != state.StopQuarantinedFraction {
		t.Fatalf("v0: campaign %s (%s: %s); want the drain to stop it", cp.State, cp.StopReason, cp.StopDetail)
	}
	s.Close()

	// 2. A-P3-5: the same protocol file, amended in place
	v1 := testcampaign.Edit(t, v0, "drain_allowance_s: 1,", "drain_allowance_s: 5,", "stop: {quarantined_fraction_gt: 0}", "stop: {quarantined_fraction_gt: 0.2}")
	out, code = c.controller("amend", "-d", c.dir, "-f", v1, "--id", "A-P3-5", "--reason", "drain quarantine by class", "--yes")
	if code != 1 || !strings.Contains(out, "would change runs that already have a result: [p1.saturation") {
		t.Fatalf("an amendment changing a finished run without re-adjudicating it: exit %d\n%s", code, out)
	}
	// with the file changed and no amendment recorded, resume refuses
	out, code = c.controller("resume", "-d", c.dir, "--foreground")
	if code == 0 || !strings.Contains(out, "register an amendment") {
		t.Fatalf("resume with a changed protocol and no amendment: exit %d\n%s", code, out)
	}
	out, code = c.controller("amend", "-d", c.dir, "-f", v1, "--id", "A-P3-5", "--reason", "drain quarantine by class", "--readjudicate", "--yes", "-o", "json")
	var doc struct {
		Schema int `json:"schema"`
		Diff   struct {
			Changed []struct {
				Run    string `json:"run"`
				Fields []struct {
					Field string `json:"field"`
				} `json:"fields"`
			} `json:"runs_changed"`
		} `json:"diff"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &doc) != nil || doc.Schema == 0 || len(doc.Diff.Changed) != 4 || doc.Diff.Changed[0].Fields[0].Field != "drain_allowance_s" {
		t.Fatalf("amend A-P3-5: exit %d\n%s", code, out)
	}

	// 3. re-adjudicate the preserved run
	out, code = c.controller("readjudicate", "-d", c.dir, "--amendment", "A-P3-5")
	if code != 0 || !strings.Contains(out, "p1.saturation attempt 1: quarantined drain-quarantine -> complete") {
		t.Fatalf("readjudicate: exit %d\n%s", code, out)
	}
	s = c.store()
	p1 := c.attempts(s, "p1.saturation")
	if len(p1) != 1 || p1[0].State != state.Quarantined || p1[0].Readjudicated == nil || p1[0].Readjudicated.State != state.Complete {
		t.Fatalf("p1 after re-adjudication: %+v", p1)
	}
	if r, _ := s.Run("p1.saturation"); r.State() != state.RunComplete {
		t.Errorf("p1 counts as %s, want complete", r.State())
	}
	s.Close()

	// 4. A-P3-4 raises the cap
	v2 := testcampaign.Edit(t, v1, "cap_gpu_hours: 0.007", "cap_gpu_hours: 0.1")
	if out, code = c.controller("amend", "-d", c.dir, "-f", v2, "--id", "A-P3-4", "--reason", "a cumulative cap of 0.1 replacing 0.007", "--yes"); code != 0 || !strings.Contains(out, "totals.budget_cap_gpu_hours") {
		t.Fatalf("amend A-P3-4: exit %d\n%s", code, out)
	}
	s = c.store()
	if cp, _ := s.Campaign(); cp.BudgetCapGPUHours != 0.1 {
		t.Errorf("cap after A-P3-4: %v", cp.BudgetCapGPUHours)
	}
	s.Close()

	// resume accepts the amended inputs (it refused the changed file before
	// the amendment); stopped again at once, the run it started is kept
	// interrupted
	if out, code = c.controller("resume", "-d", c.dir); code != 0 {
		t.Fatalf("resume after the amendments: exit %d\n%s", code, out)
	}
	if out, code = c.controller("stop", "-d", c.dir); code != 0 {
		t.Fatalf("stop: exit %d\n%s", code, out)
	}

	// 5. A-P3-7: freeze with p3 and p4 missing
	out, code = c.controller("freeze", "-d", c.dir, "--id", "A-P3-7", "--reason", "frozen partial matrix")
	if code != 0 || !strings.Contains(out, "3 runs not run: [p2.saturation p3.saturation p4.saturation]") {
		t.Fatalf("freeze: exit %d\n%s", code, out)
	}
	out, code = c.controller("resume", "-d", c.dir)
	if code != 0 || !strings.Contains(out, "is frozen; nothing to resume") {
		t.Fatalf("resume of a frozen campaign: exit %d\n%s", code, out)
	}

	// what ctlq shows
	ctlq := ctlqBin
	st, err := exec.Command(ctlq, "status", "-d", c.dir, "-o", "json").Output()
	if err != nil {
		t.Fatalf("ctlq status: %v", err)
	}
	var status struct {
		Campaign struct {
			State string `json:"state"`
		} `json:"campaign"`
		Runs struct {
			ByState map[string]int `json:"by_state"`
		} `json:"runs"`
		Amendments []struct {
			ID   string `json:"id"`
			Kind string `json:"kind"`
		} `json:"amendments"`
	}
	if err := json.Unmarshal(st, &status); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, a := range status.Amendments {
		ids = append(ids, a.ID+"/"+a.Kind)
	}
	if status.Campaign.State != "frozen" || status.Runs.ByState["not-run"] != 3 || status.Runs.ByState["complete"] != 1 ||
		len(ids) != 4 || ids[0] != "A-P3-5/amend" || !strings.HasSuffix(ids[1], "/readjudicate") || ids[2] != "A-P3-4/amend" || ids[3] != "A-P3-7/freeze" {
		t.Fatalf("ctlq status: %s", st)
	}
	show, _ := exec.Command(ctlq, "show", "-d", c.dir, "p1.saturation").CombinedOutput()
	if !strings.Contains(string(show), "re-adjudicated under amendment A-P3-5: complete") || !strings.Contains(string(show), "recorded verdict quarantined kept") {
		t.Fatalf("ctlq show p1:\n%s", show)
	}
	s = c.store()
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	c.assertNoProcesses()
}

// A running controller takes an amendment at its next scheduling decision:
// the attempt in flight keeps the protocol it started under, the next
// records the amended one; a freeze sent to it ends the run in flight
// through the graceful path, leaves the rest not-run and the campaign
// frozen.
func TestAmendAndFreezeARunningCampaign(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	v0 := testcampaign.Edit(t, writeProtocol(t, scenario{patterns: 4, measureS: "1.5"}), "concurrency: 2", "concurrency: 1")
	c.start(v0)
	first := c.waitMeasuring()
	v1 := testcampaign.Edit(t, v0, "drain_allowance_s: 5,", "drain_allowance_s: 6,")
	out, code := c.controller("amend", "-d", c.dir, "-f", v1, "--id", "A-1", "--reason", "a longer allowance", "--yes")
	if code != 0 || !strings.Contains(out, "recorded") {
		t.Fatalf("amend a running campaign: exit %d\n%s", code, out)
	}
	waitFor(t, "a run started under the amendment", 60*time.Second, func() bool {
		for _, cur := range c.liveStatus().Current {
			if cur.Run != first.Run {
				return true
			}
		}
		return false
	})
	out, code = c.controller("freeze", "-d", c.dir, "--id", "A-2", "--reason", "frozen while running")
	if code != 0 || !strings.Contains(out, "campaign frozen by A-2") {
		t.Fatalf("freeze a running campaign: exit %d\n%s", code, out)
	}
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignFrozen {
		t.Fatalf("campaign %s, want frozen", cp.State)
	}
	old := c.attempts(s, first.Run)
	if len(old) != 1 || old[0].ProtocolSHA256 == cp.ProtocolSHA256 || len(old[0].Amendments) != 0 {
		t.Errorf("the attempt in flight at the amendment: %+v; want the old protocol and no amendment", old)
	}
	runs, _ := s.Runs()
	var next *state.Attempt
	notRun := 0
	for _, r := range runs {
		if r.NotRun == "A-2" {
			notRun++
		}
		if r.ID != first.Run && r.Attempts > 0 && next == nil {
			as := c.attempts(s, r.ID)
			next = &as[0]
		}
	}
	if next == nil || next.ProtocolSHA256 != cp.ProtocolSHA256 || len(next.Amendments) != 1 || next.Amendments[0] != "A-1" {
		t.Errorf("the attempt started after the amendment: %+v; want the amended protocol %s and A-1", next, cp.ProtocolSHA256)
	}
	if notRun == 0 {
		t.Errorf("no run left not-run by the freeze")
	}
	c.assertNoProcesses()
}

// failedValidatorP1 fails the test unless p1 has one attempt, failed by a
// validator.
func (c *campaign) failedValidatorP1(s *state.Store) {
	c.t.Helper()
	if a := c.attempts(s, "p1.saturation"); len(a) != 1 || a[0].Reason != state.ReasonValidatorFailed {
		c.t.Fatalf("v0: %+v", a)
	}
}

// readjudicateP1 re-adjudicates the campaign under amendment id and fails
// the test unless p1's failed attempt became complete, validator passing;
// it returns the store after, where p1 must be complete.
func (c *campaign) readjudicateP1(id, validator string) *state.Store {
	c.t.Helper()
	out, code := c.controller("readjudicate", "-d", c.dir, "--amendment", id)
	if code != 0 || !strings.Contains(out, "p1.saturation attempt 1: failed validator-failed -> complete") || !strings.Contains(out, "validator:"+validator+" pass") {
		c.t.Fatalf("readjudicate: exit %d\n%s", code, out)
	}
	s := c.store()
	if r, _ := s.Run("p1.saturation"); r.State() != state.RunComplete {
		c.t.Errorf("p1 is %s", r.State())
	}
	return s
}

// readjudicate runs the amended validators again over a recorded
// attempt's artifacts (no server, no GPU): a run a validator failed is
// usable once the amended validator passes, the old verdict kept.
func TestReadjudicateRerunsValidators(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	v0 := testcampaign.Edit(t, writeProtocol(t, scenario{patterns: 1, measureS: "0.2"}),
		"stop: {quarantined_fraction_gt: 0.9}", "stop: {quarantined_fraction_gt: 0.9}\nvalidators: [{name: check, command: {shell: 'test -f \"${ATTEMPT_DIR}/client.out\" && exit 1'}}]")
	c.controller("start", "-f", v0, "-d", c.dir, "--gpu-backend", "fake", "--foreground")
	s := c.store()
	c.failedValidatorP1(s)
	s.Close()
	v1 := testcampaign.Edit(t, v0, "&& exit 1", "&& exit 0")
	if out, code := c.controller("amend", "-d", c.dir, "-f", v1, "--id", "V", "--reason", "the check was wrong", "--yes"); code != 0 {
		t.Fatalf("amend: exit %d\n%s", code, out)
	}
	s = c.readjudicateP1("V", "check")
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}
