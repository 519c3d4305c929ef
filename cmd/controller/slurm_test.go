package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"warden/bench/crashcheck"
	"warden/internal/testutil/testcampaign"
	"warden/pkg/campaigndir"
	"warden/pkg/record"
	"warden/pkg/slurm"
	"warden/pkg/state"
)

// End-to-end tests of the Slurm executor, against the real cluster that
// scripts/slurm-cluster.sh brings up (two nodes, n1 and n2, on this host,
// four fake GPUs each). CI brings it up and sets WARDEN_SLURM=1: there a
// missing cluster fails the tests instead of skipping them.

// The Slurm tests are serial: they share the one cluster's nodes, GPUs
// and queue, and read the queue for their campaign's jobs.

// sinfoProbes holds what sinfo said, for each PATH it was looked up on:
// without a controller to answer, sinfo takes seconds to give up, and
// every Slurm test asks.
var (
	sinfoMu     sync.Mutex
	sinfoProbes = map[string]sinfoProbe{}
)

type sinfoProbe struct {
	out []byte
	err error
}

// probeSinfo runs sinfo once per PATH and returns what it said.
func probeSinfo() ([]byte, error) {
	sinfoMu.Lock()
	defer sinfoMu.Unlock()
	path := os.Getenv("PATH")
	p, ok := sinfoProbes[path]
	if !ok {
		p.out, p.err = exec.Command("sinfo", "--Node", "--noheader", "--format=%N %t").CombinedOutput()
		sinfoProbes[path] = p
	}
	return p.out, p.err
}

// requireSlurm skips the test where no Slurm cluster answers, and fails
// it where one is expected.
func requireSlurm(t *testing.T) {
	t.Helper()
	out, err := probeSinfo()
	if err == nil && bytes.Contains(out, []byte("n1")) && bytes.Contains(out, []byte("n2")) {
		return
	}
	if os.Getenv("WARDEN_SLURM") == "1" {
		t.Fatalf("WARDEN_SLURM=1 but the two-node cluster does not answer (sinfo: %v):\n%s", err, out)
	}
	slurmSkipped.Add(1)
	t.Skip("no Slurm cluster with nodes n1 and n2 here (scripts/slurm-cluster.sh up makes one; CI runs these tests)")
}

// slurmProtocol is the e2e protocol with four one-GPU, one-CPU slots and
// a regime of four: each node of the test cluster has two CPUs, so four
// steps at once need both nodes.
//
// No Slurm test is about the drain gate, so its allowance (and the
// watchdog above it) is one no client of these tests reaches: four steps
// pinned two to a CPU of a 2-core machine, beside the rest of make test,
// took 6.5 s between the stand-in client's drain and done lines once in
// CI (its 2 s drain and its result's write and fsyncs), which the
// e2e default of 5 s quarantined.
func slurmProtocol(t *testing.T, sc scenario) string {
	t.Helper()
	sc.drainS, sc.watchdogS = testcampaign.Or(sc.drainS, "60"), testcampaign.Or(sc.watchdogS, "120")
	path := writeProtocol(t, sc)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 4)
	var slots strings.Builder
	slots.WriteString("slots:\n")
	for i, p := range ports {
		fmt.Fprintf(&slots, "  - {name: s%d, gpus: [%d], cpus: \"%d\", port: %d}\n", i, i, i, p)
	}
	y := regexp.MustCompile(`(?s)slots:\n.*?regimes:\n  - \{name: two, concurrency: 2\}\n`).
		ReplaceAllLiteralString(string(b), slots.String()+"regimes:\n  - {name: four, concurrency: 4}\n")
	y = strings.Replace(y, "host: {gpus: 2, cpus: 2}", "host: {gpus: 4, cpus: 4}", 1)
	if !strings.Contains(y, "concurrency: 4") || !strings.Contains(y, "name: s3") {
		t.Fatalf("the protocol's slots were not replaced:\n%s", y)
	}
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// slurmArgs are start's arguments for a campaign on the test cluster.
func slurmArgs(c *campaign, proto string) []string {
	return []string{"start", "-f", proto, "-d", c.dir, "--gpu-backend", "fake", "--executor", "slurm", "--slurm-queue-timeout", "60"}
}

// jobsLeft lists the campaign's jobs still in Slurm's queue.
func (c *campaign) jobsLeft() []string {
	c.t.Helper()
	set, err := campaigndir.ReadSettings(c.dir)
	if err != nil {
		c.t.Fatal(err)
	}
	out, err := exec.Command("squeue", "--noheader", "--format=%i|%j|%T").Output()
	if err != nil {
		c.t.Fatalf("squeue: %v", err)
	}
	var left []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Split(line, "|"); len(f) == 3 && strings.HasPrefix(f[1], slurm.CampaignPrefix(set.CampaignID)) {
			left = append(left, line)
		}
	}
	return left
}

// cancelJobsLeft is a test's cleanup: whatever of its campaign is still in
// Slurm is cancelled, through Slurm.
func (c *campaign) cancelJobsLeft() {
	if _, err := os.Stat(filepath.Join(c.dir, campaigndir.SettingsFile)); err != nil {
		return
	}
	for _, j := range c.jobsLeft() {
		exec.Command("scancel", strings.Split(j, "|")[0]).Run()
	}
}

func newSlurmCampaign(t *testing.T) *campaign {
	requireSlurm(t)
	c := newCampaign(t)
	t.Cleanup(c.cancelJobsLeft)
	return c
}

// slurmLeaveDeadline bounds how long a job that has ended may stay in
// Slurm's queue: after its last step a job is COMPLETING while slurmd runs
// its epilog and reports back, which on a loaded machine takes seconds.
const slurmLeaveDeadline = 90 * time.Second

// assertSlurmClean: nothing of the campaign left in Slurm's queue within
// slurmLeaveDeadline (a job may still be COMPLETING when the controller
// exits), no process of it alive.
func (c *campaign) assertSlurmClean() {
	c.t.Helper()
	deadline := time.Now().Add(slurmLeaveDeadline)
	for {
		left := c.jobsLeft()
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			c.t.Errorf("jobs of the campaign still in Slurm %s after the controller exited: %v", slurmLeaveDeadline, left)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.assertNoProcesses()
}

// A campaign of eight runs on the two-node cluster: every attempt ran as a
// Slurm step and recorded where (job, step, node, the node's GPU indices
// and UUIDs, its CPUs); both nodes ran attempts; nothing is left in Slurm.
func TestSlurmCampaignAcrossNodes(t *testing.T) {
	c := newSlurmCampaign(t)
	proto := slurmProtocol(t, scenario{patterns: 4, loadsModer: true, measureS: "1.5"})
	out, code := c.controller(append(slurmArgs(c, proto), "--foreground")...)
	if code != 0 {
		t.Fatalf("controller exited %d:\n%s", code, tail(out, 3000))
	}
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignComplete {
		t.Fatalf("campaign %s (%s): %s", cp.State, cp.StopReason, cp.StopDetail)
	}
	runs, _ := s.Runs()
	nodes := map[string]int{}
	var gaps []float64
	for _, r := range runs {
		for _, a := range c.attempts(s, r.ID) {
			sl := a.Slurm
			if sl == nil || sl.JobID == "" || sl.StepID == "" || sl.Node == "" || sl.StepGPUs == "" || len(sl.GPUUUIDs) != 1 || sl.CPUs == "" {
				t.Fatalf("%s a%d: Slurm record %+v, want job, step, node, GPUs, one UUID, CPUs", r.ID, a.N, sl)
			}
			if !strings.HasPrefix(sl.GPUUUIDs[0], "GPU-fake-"+sl.Node+"-") || fmt.Sprint(a.GPUIDs[0]) != sl.StepGPUs {
				t.Errorf("%s a%d: UUID %s, GPUs %v for node %s's SLURM_STEP_GPUS %s", r.ID, a.N, sl.GPUUUIDs[0], a.GPUIDs, sl.Node, sl.StepGPUs)
			}
			nodes[sl.Node]++
			if srv := serverProcOf(a); srv != nil {
				gaps = append(gaps, srv.StartedAt.Sub(a.CreatedAt).Seconds()*1000)
			}
		}
	}
	if nodes["n1"] == 0 || nodes["n2"] == 0 {
		t.Errorf("attempts per node %v: want both nodes used", nodes)
	}
	sort.Float64s(gaps)
	t.Logf("attempts per node %v; attempt created to server exec on the node: median %.0f ms (min %.0f, max %.0f)",
		nodes, gaps[len(gaps)/2], gaps[0], gaps[len(gaps)-1])

	// ctlq shows where each attempt ran
	show, err := exec.Command(ctlqBin, "show", "-d", c.dir, "p1.saturation").CombinedOutput()
	if err != nil || !regexp.MustCompile(`slurm job \d+ \(warden\.[^)]+\), step 0, node n[12], SLURM_STEP_GPUS \d, GPU UUIDs GPU-fake-n[12]-\d, CPUs \d`).Match(show) {
		t.Errorf("ctlq show (%v) does not say where the attempt ran:\n%s", err, show)
	}
	c.assertSlurmClean()
}

func serverProcOf(a state.Attempt) *state.Proc {
	for i := range a.Procs {
		if a.Procs[i].Role == "server" {
			return &a.Procs[i]
		}
	}
	return nil
}

// startSlurmForeground starts a foreground controller on the cluster and
// returns it running once an attempt measures.
func (c *campaign) startSlurmForeground(args []string) (*exec.Cmd, *bytes.Buffer) {
	c.t.Helper()
	cmd, out := c.startForeground(args)
	c.waitMeasuring()
	return cmd, out
}

// The controller is SIGKILLed while steps run: Slurm ends them (srun dies
// with the controller), and a resume cancels whatever is left through
// Slurm, charges each live attempt from Slurm's own times, and completes
// the campaign with every promise of the crash test kept.
func TestSlurmHeadKilledAndResumed(t *testing.T) {
	c := newSlurmCampaign(t)
	proto := slurmProtocol(t, scenario{patterns: 4, measureS: "3"})
	cmd, _ := c.startSlurmForeground(slurmArgs(c, proto))
	live := c.liveStatus().Current
	for _, cur := range live {
		if cur.Slurm == nil || cur.Slurm.JobName == "" {
			t.Errorf("status: attempt %s a%d without its Slurm job: %+v", cur.Run, cur.Attempt, cur)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	// srun died with the controller: Slurm ends the steps on its own
	waitFor(t, "Slurm to end the dead controller's steps", 60*time.Second, func() bool { return len(c.jobsLeft()) == 0 })
	waitFor(t, "the steps' processes to go", 30*time.Second, func() bool { return len(c.campaignPIDs()) == 0 })

	before, vs, err := crashcheck.Take(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		t.Errorf("after the kill: %s", v)
	}
	out, code := c.controller("resume", "-d", c.dir, "--foreground")
	if code != 0 {
		t.Fatalf("resume exited %d:\n%s", code, tail(out, 3000))
	}
	after, vs, err := crashcheck.Take(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	vs = append(vs, crashcheck.Compare(before, after)...)
	final, err := crashcheck.FinalExpect(c.dir, after, crashcheck.Expect{State: state.CampaignComplete})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range append(vs, final...) {
		t.Errorf("%s", v)
	}
	s := c.store()
	interrupted := 0
	for _, cur := range live {
		a, err := s.Attempt(cur.Run, cur.Attempt)
		if err != nil {
			t.Fatal(err)
		}
		if a.State != state.Interrupted {
			continue // it ended between the status and the kill
		}
		interrupted++
		if a.Slurm == nil || a.Slurm.Start.IsZero() || a.Slurm.End.Before(a.Slurm.Start) {
			t.Errorf("%s a%d: Slurm's times not recorded: %+v", a.RunID, a.N, a.Slurm)
		}
		slurmS := a.Slurm.End.Sub(a.Slurm.Start).Seconds() * float64(len(a.GPUIDs))
		if a.Figures["gpu_seconds"] < slurmS-1e-6 {
			t.Errorf("%s a%d charged %.3f GPU-s, less than Slurm's %.3f", a.RunID, a.N, a.Figures["gpu_seconds"], slurmS)
		}
	}
	if interrupted == 0 {
		var all []string
		runs, _ := s.Runs()
		for _, r := range runs {
			all = append(all, r.ID+": "+strings.Join(attemptStates(c.attempts(s, r.ID)), ", "))
		}
		t.Fatalf("no attempt was interrupted by the kill (live then: %+v); attempts now: %s\n%s", live, strings.Join(all, "; "), tail(out, 3000))
	}
	c.assertSlurmClean()
}

// The node-side runner of a step dies (SIGKILL) while its client measures:
// Slurm ends the step and everything in it, the attempt fails step-lost
// (an infrastructure failure), and its exact rerun completes.
func TestSlurmNodeRunnerDies(t *testing.T) {
	c := newSlurmCampaign(t)
	proto := slurmProtocol(t, scenario{patterns: 1, measureS: "3", retries: 1})
	cmd, out := c.startSlurmForeground(slurmArgs(c, proto))
	runner := nodeRunnerPID(t, c.dir)
	if err := syscall.Kill(runner, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(out.String(), 3000))
	}
	s := c.store()
	as := c.attempts(s, "p1.saturation")
	if len(as) != 2 || as[0].State != state.Failed || as[0].Reason != state.ReasonStepLost || as[1].State != state.Complete {
		t.Fatalf("attempts %v, want step-lost then complete", attemptStates(as))
	}
	if v := c.gateVerdict(s, "p1.saturation", "cleanup"); v.Attempt == 1 && v.Verdict == state.VerdictPass {
		t.Errorf("the lost step's cleanup passed without reading the node's GPUs: %+v", v)
	}
	cp, _ := s.Campaign()
	if cp.State != state.CampaignComplete {
		t.Fatalf("campaign %s: %s", cp.State, cp.StopDetail)
	}
	c.assertSlurmClean()
}

// nodeRunnerPID finds the node-side runner of the campaign's measuring
// attempt: the controller binary run as node-attempt with a spec under
// the campaign directory.
func nodeRunnerPID(t *testing.T, dir string) int {
	t.Helper()
	var pid int
	waitFor(t, "the node-side runner", 30*time.Second, func() bool {
		for _, p := range procPIDs() {
			cl, err := procFile(p, "cmdline")
			if err != nil {
				continue
			}
			args := strings.Split(string(cl), "\x00")
			if slices.Contains(args, "node-attempt") && slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, dir+"/") }) {
				pid = p
				return true
			}
		}
		return false
	})
	return pid
}

// controller stop while steps run: each node-side runner ends its attempt
// gracefully (signals recorded), the attempts are interrupted, the
// campaign stops for the operator, and nothing is left in Slurm.
func TestSlurmStop(t *testing.T) {
	c := newSlurmCampaign(t)
	proto := slurmProtocol(t, scenario{patterns: 4, measureS: "5"})
	cmd, out := c.startSlurmForeground(slurmArgs(c, proto))
	if o, code := c.controller("stop", "-d", c.dir); code != 0 {
		t.Fatalf("stop exited %d:\n%s", code, o)
	}
	cmd.Wait()
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignStopped || cp.StopReason != state.StopOperator {
		t.Fatalf("campaign %s (%s), want stopped by the operator\n%s", cp.State, cp.StopReason, tail(out.String(), 2000))
	}
	runs, _ := s.Runs()
	// an attempt whose step had not started its server when the stop came
	// (a step still pending, a node-side runner starting) has no server
	// to end; one that had, ended it gracefully
	withServer := 0
	for _, r := range runs {
		for _, a := range c.attempts(s, r.ID) {
			if a.State != state.Interrupted || !slices.ContainsFunc(a.Procs, func(p state.Proc) bool { return p.Role == "server" }) {
				continue
			}
			withServer++
			if !slices.ContainsFunc(a.Signals, func(sg state.Signal) bool { return sg.Role == "server" && sg.Signal == "SIGTERM" }) {
				t.Errorf("%s a%d: no SIGTERM to the server recorded: %+v", r.ID, a.N, a.Signals)
			}
		}
	}
	if withServer == 0 {
		t.Fatal("no attempt with a server interrupted by the stop")
	}
	c.assertSlurmClean()
}

// The budget's cap is reached while steps run: they are ended (interrupted,
// budget-exhausted) and the campaign stops budget-exhausted.
func TestSlurmBudgetStop(t *testing.T) {
	c := newSlurmCampaign(t)
	proto := slurmProtocol(t, scenario{patterns: 2, capGPUHours: "0.006, reserve: nominal", client: `{shell: 'exec sleep 3600'}`})
	out, code := c.controller(append(slurmArgs(c, proto), "--foreground", "--allow-over-budget")...)
	if code != 0 {
		t.Fatalf("controller exited %d:\n%s", code, tail(out, 3000))
	}
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignStopped || cp.StopReason != state.StopBudgetExhausted {
		t.Fatalf("campaign %s (%s): %s, want stopped budget-exhausted", cp.State, cp.StopReason, cp.StopDetail)
	}
	for _, run := range []string{"p1.saturation", "p2.saturation"} {
		as := c.attempts(s, run)
		if len(as) != 1 || as[0].State != state.Interrupted || as[0].Reason != state.ReasonBudgetExhausted {
			t.Errorf("%s: %v, want one attempt interrupted budget-exhausted", run, attemptStates(as))
		}
	}
	t.Logf("charged %.3f GPU-s against a cap of 21.6", cp.ConsumedGPUSeconds)
	c.assertSlurmClean()
}

// slurmHappyPath is the crash test's happy path on the cluster.
var slurmHappyPath = crashScenario{
	name: "happy path on Slurm",
	protocol: func(t *testing.T) string {
		return slurmProtocol(t, scenario{patterns: 1, loadsModer: true, measureS: "0.3"})
	},
	want:  state.CampaignComplete,
	slurm: true,
}

// TestSlurmCrashAtFailpoints kills the controller at the Slurm executor's
// own points and at the transitions it records from a node's reports,
// resumes it, and checks every promise of the crash test, and that
// nothing of the campaign is left in Slurm.
func TestSlurmCrashAtFailpoints(t *testing.T) {
	requireSlurm(t)
	if testing.Short() {
		t.Skip("crash test: a campaign per failpoint")
	}
	bin := failpointController(t)
	points := []struct{ point, pre string }{
		{"attempt-created", ""}, {"srun-started", ""}, {"step-recorded", ""},
		{"after-transition:starting", ""}, {"after-transition:measuring", ""},
		{"before-transition:cleanup", ""}, {"after-transition:complete", ""},
		{"after-transition:interrupted", "after-transition:measuring"},
	}
	for _, p := range points {
		t.Run(p.point, func(t *testing.T) {
			if !crashAndResume(t, bin, p.point, slurmHappyPath, p.pre) {
				t.Errorf("failpoint %s was never reached", p.point)
			}
		})
	}
}

// A co-location check on Slurm runs its target and its background in one
// allocation on one node, each its own step; the regime falls back as on
// one host, and the allocation is gone afterwards.
func TestSlurmColocationInOneAllocation(t *testing.T) {
	c := newSlurmCampaign(t)
	proto := colocProtocol(t, true, false)
	out, code := c.controller(append(slurmArgs(c, proto), "--foreground")...)
	if code != 0 {
		t.Fatalf("controller exited %d:\n%s", code, tail(out, 3000))
	}
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignComplete || cp.Regime != "pair-b" {
		t.Fatalf("campaign %s (%s) regime %q", cp.State, cp.StopDetail, cp.Regime)
	}
	for _, regime := range []string{"pair-a", "pair-b"} {
		bg := c.attempts(s, "coloc."+regime+".bg.p2")
		tg := c.attempts(s, "coloc."+regime+".p1.saturation")
		if len(bg) != 1 || len(tg) != 1 || bg[0].Slurm == nil || tg[0].Slurm == nil {
			t.Fatalf("%s: background %v target %v", regime, attemptStates(bg), attemptStates(tg))
		}
		b, g := bg[0].Slurm, tg[0].Slurm
		if !b.Shared || b.JobID == "" || b.JobID != g.JobID || b.Node != g.Node || b.StepID == g.StepID || b.StepGPUs == g.StepGPUs || b.CPUs == g.CPUs {
			t.Errorf("%s: background step %+v and target step %+v: want one allocation, one node, distinct steps, GPUs and CPUs", regime, b, g)
		}
	}
	c.assertSlurmClean()
}

// controller stop while the campaign's steps wait in Slurm's queue (the
// nodes are taken by another job): the requests are withdrawn at once,
// the attempts are interrupted, nothing of the campaign is left queued.
func TestSlurmStopWhileQueued(t *testing.T) {
	c := newSlurmCampaign(t)
	hold, err := exec.Command("salloc", "--no-shell", "--nodes=2", "--exclusive", "--job-name=warden-test-hold", "--immediate=30").CombinedOutput()
	if err != nil {
		t.Fatalf("salloc to take the nodes: %v\n%s", err, hold)
	}
	holdID, err := slurm.AllocationGranted(hold)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exec.Command("scancel", holdID).Run() })
	proto := slurmProtocol(t, scenario{patterns: 2})
	cmd, out := c.startForeground(slurmArgs(c, proto))
	waitFor(t, "the campaign's jobs to queue", 60*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(c.dir, campaigndir.SettingsFile))
		return err == nil && len(c.jobsLeft()) > 0
	})
	if o, code := c.controller("stop", "-d", c.dir); code != 0 {
		t.Fatalf("stop exited %d:\n%s", code, o)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("the controller did not end within 60 s of the stop while its steps were queued:\n%s", tail(out.String(), 3000))
	}
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignStopped || cp.StopReason != state.StopOperator {
		t.Fatalf("campaign %s (%s): %s", cp.State, cp.StopReason, cp.StopDetail)
	}
	for _, run := range []string{"p1.saturation", "p2.saturation"} {
		as := c.attempts(s, run)
		if len(as) != 1 || as[0].State != state.Interrupted || serverProcOf(as[0]) != nil {
			t.Errorf("%s: %v, want one attempt interrupted before its server started", run, attemptStates(as))
			continue
		}
		// srun's request was withdrawn by a signal to srun alone: its
		// process group holds its helper, and killing that orphans a step
		srunSigs := 0
		for _, sg := range as[0].Signals {
			if sg.Role == "srun" {
				srunSigs++
				if sg.Target != "pid" {
					t.Errorf("%s: srun signalled as a %s: %+v", run, sg.Target, sg)
				}
			}
		}
		if srunSigs == 0 {
			t.Errorf("%s: no signal to srun recorded: %+v", run, as[0].Signals)
		}
	}
	c.assertSlurmClean()
}

// The node-side runner's failures as the controller sees them: the binary
// is not on the node (srun cannot exec it), or what runs there does not
// speak the report protocol (lines that are not reports; a report the
// records refuse; a report of another schema, another build's). Each
// attempt fails, its one exact rerun fails the same way, the campaign
// stops for review, and nothing is left in Slurm.
func TestSlurmNodeRunnerFailures(t *testing.T) {
	requireSlurm(t)
	script := func(t *testing.T, body string) string {
		path := filepath.Join(t.TempDir(), "node-runner")
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, tc := range []struct {
		name       string
		controller func(t *testing.T) string
		reason     state.Reason
		detail     string
	}{
		{"not on the node", func(t *testing.T) string { return filepath.Join(t.TempDir(), "no-such-controller") }, state.ReasonStepLost, "srun exit code"},
		{"not reports", func(*testing.T) string { return "/bin/echo" }, state.ReasonStepLost, "its output: invalid character"},
		{"a report the records refuse", func(t *testing.T) string {
			return script(t, fmt.Sprintf(`echo '{"schema":%d,"kind":"transition","to":"complete"}'; exec sleep 600`, record.ReportSchema))
		}, state.ReasonHarnessError, "illegal transition"},
		{"another build's reports", func(t *testing.T) string {
			return script(t, fmt.Sprintf(`echo '{"schema":%d,"kind":"step","step":{"job_id":"1"}}'; exec sleep 600`, record.ReportSchema+1))
		}, state.ReasonHarnessError, fmt.Sprintf("a report of schema %d, where this controller reads schema %d", record.ReportSchema+1, record.ReportSchema)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newSlurmCampaign(t)
			proto := slurmProtocol(t, scenario{patterns: 1, retries: 1})
			out, code := c.controller(append(slurmArgs(c, proto), "--foreground", "--slurm-node-controller", tc.controller(t))...)
			if code != 0 {
				t.Fatalf("controller exited %d:\n%s", code, tail(out, 3000))
			}
			s := c.store()
			cp, _ := s.Campaign()
			if cp.State != state.CampaignStopped || cp.StopReason != state.StopForRun(tc.reason) {
				t.Fatalf("campaign %s (%s): %s; want stopped for %s", cp.State, cp.StopReason, cp.StopDetail, tc.reason)
			}
			if !strings.Contains(cp.StopDetail, tc.detail) {
				t.Errorf("stop detail %q does not say %q", cp.StopDetail, tc.detail)
			}
			if as := c.attempts(s, "p1.saturation"); len(as) != 2 {
				t.Errorf("attempts %v, want the failure and its one rerun", attemptStates(as))
			}
			waitFor(t, "the campaign's jobs to leave Slurm", 30*time.Second, func() bool { return len(c.jobsLeft()) == 0 })
			c.assertSlurmClean()
		})
	}
}

// A resume that cannot read Slurm's accounting (slurmdbd down: sacct
// fails) fails closed: each interrupted attempt is charged from its
// creation to the resume, at least, and says the accounting was not read.
func TestSlurmResumeWithoutAccounting(t *testing.T) {
	c := newSlurmCampaign(t)
	proto := slurmProtocol(t, scenario{patterns: 2, measureS: "3"})
	cmd, _ := c.startSlurmForeground(slurmArgs(c, proto))
	killed := time.Now()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	waitFor(t, "Slurm to end the dead controller's steps", 60*time.Second, func() bool { return len(c.jobsLeft()) == 0 })
	shim := t.TempDir()
	if err := os.WriteFile(filepath.Join(shim, "sacct"), []byte("#!/bin/sh\necho 'sacct: error: Problem talking to the database: Connection refused' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, st := c.run(controllerBin, []string{"PATH=" + shim + ":" + os.Getenv("PATH")}, "resume", "-d", c.dir, "--foreground")
	if st.ExitCode() != 0 {
		t.Fatalf("resume exited %d:\n%s", st.ExitCode(), tail(out, 3000))
	}
	s := c.store()
	interrupted := 0
	for _, run := range []string{"p1.saturation", "p2.saturation"} {
		for _, a := range c.attempts(s, run) {
			if a.State != state.Interrupted {
				continue
			}
			interrupted++
			floor := float64(len(a.GPUIDs)) * killed.Sub(a.CreatedAt).Seconds()
			if a.Figures["slurm_accounting_unread"] != 1 || a.Figures["gpu_seconds"] < floor {
				t.Errorf("%s a%d: figures %v; want the accounting marked unread and at least %.3f GPU-s (creation to the kill)", run, a.N, a.Figures, floor)
			}
		}
	}
	if interrupted == 0 {
		t.Fatal("no attempt was interrupted by the kill")
	}
	c.assertSlurmClean()
}
