package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"warden/internal/testports"
	"warden/pkg/api"
	"warden/pkg/lockfile"
	"warden/pkg/state"
)

// End-to-end tests: the real controller binary runs campaigns of real
// stand-in servers and clients on fake GPUs. Each test reads the outcome
// from the campaign's state database and directory, checks the store's
// invariants, and makes sure no process of the campaign is left.

// The binaries the tests run, built once per package run by TestMain into
// one temporary directory.
var (
	controllerBin string
	ctlqBin       string
	loadgenBin    string
	standinBin    string
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "controller-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// one go build for all four: each is named after its package's directory
	if out, err := exec.Command("go", "build", "-o", dir+string(filepath.Separator), ".", "../ctlq", "../loadgen", "../standin").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build the binaries: %v\n%s", err, out)
		return 1
	}
	controllerBin = filepath.Join(dir, "controller")
	ctlqBin = filepath.Join(dir, "ctlq")
	loadgenBin = filepath.Join(dir, "loadgen")
	standinBin = filepath.Join(dir, "standin")
	code := m.Run()
	if err := noteSlurmSkips(slurmSkipped.Load(), os.Getenv("WARDEN_SLURM_SKIP_NOTE")); err != nil {
		fmt.Fprintln(os.Stderr, "note the skipped Slurm tests:", err)
	}
	return code
}

// scenario shapes the test protocol.
type scenario struct {
	serverArgs  string // extra stand-in server flags
	clientArgs  string // extra stand-in client flags
	measureS    string
	readyS      string
	drainS      string
	watchdogS   string
	patterns    int
	retries     int
	loadsModer  bool
	quarantined string // stop threshold
	drainExtra  int    // patterns whose client drains 2 s longer than needed
	cleanupS    string
	capGPUHours string
	expect      string // a pattern the server's log must show
	server      string // replaces the server command
	client      string // replaces the saturation load's client command
	quarantine  []int  // patterns (1-based) whose client drains 2 s longer, beside the first drainExtra
	validators  string // YAML list items of the protocol's validators; ${CONTROLLER} is the controller binary
	moderArgs   string // extra stand-in client flags of the moderate load only
}

func freePorts(t *testing.T, n int) []int { return testports.Free(t, n) }

func patternIDs(n int) string {
	var ids []string
	for i := range n {
		ids = append(ids, fmt.Sprintf("p%d", i+1))
	}
	return strings.Join(ids, ", ")
}

func writeProtocol(t *testing.T, sc scenario) string {
	t.Helper()
	def := func(v, d string) string {
		if v == "" {
			return d
		}
		return v
	}
	if sc.patterns == 0 {
		sc.patterns = 1
	}
	ports := freePorts(t, 2)
	var vals []string
	for i := range sc.patterns {
		extra := "0"
		if i < sc.drainExtra || slices.Contains(sc.quarantine, i+1) {
			extra = "2"
		}
		vals = append(vals, fmt.Sprintf("{id: p%d, vars: {DRAIN_EXTRA: %q}}", i+1, extra))
	}
	loads := "[saturation]"
	if sc.loadsModer {
		loads = "[saturation, moderate]"
	}
	y := fmt.Sprintf(`warden: 1
name: e2e
host: {gpus: 2, cpus: 2}
budget: {cap_gpu_hours: %s}
vars: {STANDIN: %q, CONTROLLER: %q}
slots:
  - {name: s0, gpus: [0], cpus: "0", port: %d}
  - {name: s1, gpus: [1], cpus: "1", port: %d}
regimes:
  - {name: two, concurrency: 2}
classes:
  - {name: c, drain_allowance_s: %s, watchdog_s: %s}
cleanup: {timeout_s: %s}
servers:
  - name: standin
    kind: standin
    command: %s
    ready_timeout_s: %s
    shutdown_grace_s: 2
    group_grace_s: 1
    expect: [{name: chunked, pattern: 'enable_chunked_prefill=True'}, {name: extra, pattern: %q}]
loads:
  - name: saturation
    kind: saturation
    expected_s: 10
    client: %s
  - name: moderate
    kind: moderate
    needs: [saturation]
    expected_s: 10
    env: {SATURATION: "${NEED_SATURATION_DIR}"}
    client: ["${STANDIN}", client, --warmup-s, "0.2", --measure-s, %q, --drain-s, "2", --concurrency, "1", --result-dir, "${ATTEMPT_DIR}/client" %s %s]
axes:
  - name: pattern
    values: [%s]
phases:
  - name: matrix
    kind: primary
    matrix: {pattern: [%s]}
    loads: %s
retries: {infrastructure: %d}
stop: {quarantined_fraction_gt: %s}
`, def(sc.capGPUHours, "1.0"), standinBin, controllerBin, ports[0], ports[1], def(sc.drainS, "5"), def(sc.watchdogS, "10"), def(sc.cleanupS, "10"),
		def(sc.server, `["${STANDIN}", server, --port, "${PORT}", --load-s, "0.2", --shutdown-timeout, "1", --gpu-mem-mib, "1024", --effective-config, "effective config: enable_chunked_prefill=True"`+sc.serverArgs+`]`),
		def(sc.readyS, "10"), def(sc.expect, "chunked"),
		def(sc.client, fmt.Sprintf(`["${STANDIN}", client, --warmup-s, "0.2", --measure-s, %q, --drain-s, "2", --concurrency, "2", --result-dir, "${ATTEMPT_DIR}/client", --drain-extra-s, "${DRAIN_EXTRA}" %s]`, def(sc.measureS, "0.5"), sc.clientArgs)),
		def(sc.measureS, "0.5"), sc.clientArgs, sc.moderArgs,
		strings.Join(vals, ", "), patternIDs(sc.patterns),
		loads, sc.retries, def(sc.quarantined, "0.9"))
	if sc.validators != "" {
		y += "validators:\n" + sc.validators
	}
	path := filepath.Join(t.TempDir(), "e2e.yaml")
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// campaign is one test's campaign directory.
type campaign struct {
	t   *testing.T
	dir string
}

func newCampaign(t *testing.T) *campaign {
	c := &campaign{t: t, dir: filepath.Join(t.TempDir(), "camp")}
	t.Cleanup(c.killLeftovers)
	return c
}

// controller runs the controller binary and waits for it.
func (c *campaign) controller(args ...string) (string, int) {
	c.t.Helper()
	cmd := exec.Command(controllerBin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatalf("run controller %v: %v", args, err)
	}
	return out.String(), code
}

func (c *campaign) runForeground(protocol string) string {
	out, code := c.controller("start", "-f", protocol, "-d", c.dir, "--gpu-backend", "fake", "--foreground")
	if code != 0 {
		c.t.Fatalf("controller exited %d:\n%s", code, tail(out, 3000))
	}
	return out
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func (c *campaign) store() *state.Store {
	c.t.Helper()
	s, err := state.OpenReadOnly(filepath.Join(c.dir, api.StateFile), 5*time.Second)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { s.Close() })
	if err := s.Check(); err != nil {
		c.t.Fatalf("invariants: %v", err)
	}
	return s
}

func (c *campaign) attempts(s *state.Store, run string) []state.Attempt {
	c.t.Helper()
	as, err := s.Attempts(run)
	if err != nil {
		c.t.Fatal(err)
	}
	return as
}

// campaignPIDs lists live processes that carry this campaign's directory in
// their environment: everything the controller started, and their
// descendants, however they escaped.
func (c *campaign) campaignPIDs() []int {
	marker := []byte("WARDEN_CAMPAIGN_DIR=" + c.dir + "\x00")
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(env, marker) {
			continue
		}
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if i := bytes.LastIndexByte(st, ')'); i > 0 && i+2 < len(st) && st[i+2] == 'Z' {
				continue
			}
		}
		pids = append(pids, pid)
	}
	return pids
}

// killLeftovers ends what the test's campaign started, if anything is
// left after a failure, and stops a controller that still runs.
func (c *campaign) killLeftovers() {
	lock := filepath.Join(c.dir, api.LockFile)
	if lockfile.Held(lock) {
		if pid := lockfile.Owner(lock); pid > 0 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	for _, pid := range c.campaignPIDs() {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

func (c *campaign) assertNoProcesses() {
	c.t.Helper()
	if pids := c.campaignPIDs(); len(pids) > 0 {
		c.t.Fatalf("processes of the campaign still alive: %v", pids)
	}
}

func (c *campaign) gateVerdict(s *state.Store, run, gate string) state.GateVerdict {
	c.t.Helper()
	vs, err := s.GateVerdicts(run)
	if err != nil {
		c.t.Fatal(err)
	}
	var last state.GateVerdict
	for _, v := range vs {
		if v.Gate == gate {
			last = v
		}
	}
	return last
}

func TestFullCampaign(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	c.runForeground(writeProtocol(t, scenario{patterns: 2, loadsModer: true}))
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignComplete {
		t.Fatalf("campaign %s (%s: %s)", cp.State, cp.StopReason, cp.StopDetail)
	}
	runs, _ := s.Runs()
	if len(runs) != 4 {
		t.Fatalf("%d runs", len(runs))
	}
	for _, r := range runs {
		as := c.attempts(s, r.ID)
		if !r.Done || len(as) != 1 || as[0].State != state.Complete {
			t.Fatalf("run %s: done %v, attempts %+v", r.ID, r.Done, as)
		}
		a := as[0]
		// the moderate run received its saturation run's result directory
		if r.Load == "moderate" {
			env, _ := os.ReadFile(filepath.Join(a.Dir, "environment.json"))
			want := filepath.Join(c.dir, "runs", strings.Replace(r.ID, "moderate", "saturation", 1), "a1")
			if !bytes.Contains(env, []byte(want)) {
				t.Fatalf("%s environment lacks NEED_SATURATION_DIR=%s:\n%s", r.ID, want, env)
			}
		}
		for _, f := range []string{"state.json", "commands.log", "environment.json", "server.out", "client.out", "phases.jsonl", "client/result.json"} {
			if _, err := os.Stat(filepath.Join(a.Dir, f)); err != nil {
				t.Fatalf("%s: %v", r.ID, err)
			}
		}
		if v := c.gateVerdict(s, r.ID, "cleanup"); v.Verdict != "pass" {
			t.Fatalf("%s cleanup gate %+v", r.ID, v)
		}
		if a.Figures["gpu_seconds"] <= 0 {
			t.Fatalf("%s charged no GPU time: %v", r.ID, a.Figures)
		}
		if len(a.Procs) != 2 || a.Procs[0].StartTime == 0 || a.Procs[0].BootID == "" {
			t.Fatalf("%s process identities %+v", r.ID, a.Procs)
		}
	}
	// the ledger charged every attempt, and nothing stays reserved
	if cp.ConsumedGPUSeconds <= 0 || cp.ReservedGPUSeconds > 1e-9 {
		t.Fatalf("consumed %v reserved %v", cp.ConsumedGPUSeconds, cp.ReservedGPUSeconds)
	}
	c.assertNoProcesses()

	// ctlq reads the finished campaign from the database
	out, err := exec.Command(filepath.Join(filepath.Dir(controllerBin), "controller"), "plan", "-f", cp.ProtocolPath).CombinedOutput()
	if err != nil {
		t.Fatalf("plan: %v\n%s", err, out)
	}
}

func TestServerNeverHealthy(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	c.runForeground(writeProtocol(t, scenario{serverArgs: `, --never-healthy`, readyS: "1.5", retries: 1}))
	s := c.store()
	as := c.attempts(s, "p1.saturation")
	if len(as) != 2 {
		t.Fatalf("want the attempt and its exact retry, got %d", len(as))
	}
	for _, a := range as {
		if a.State != state.Failed || a.Reason != state.ReasonServerNotReady {
			t.Fatalf("attempt %d: %s %s", a.N, a.State, a.Reason)
		}
	}
	cp, _ := s.Campaign()
	if cp.State != state.CampaignStopped || cp.StopReason != state.StopForRun(state.ReasonServerNotReady) || !strings.Contains(cp.StopDetail, "p1.saturation") {
		t.Fatalf("campaign %s %s %q", cp.State, cp.StopReason, cp.StopDetail)
	}
	c.assertNoProcesses()
}

func TestServerCrashesMidRun(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	c.runForeground(writeProtocol(t, scenario{serverArgs: `, --crash-after, "1"`, measureS: "5"}))
	s := c.store()
	as := c.attempts(s, "p1.saturation")
	if len(as) != 1 || as[0].State != state.Failed || as[0].Reason != state.ReasonServerExit {
		t.Fatalf("attempts %+v", as)
	}
	exited := false
	for _, x := range as[0].Exits {
		exited = exited || (x.Role == "server" && x.Code == 1)
	}
	if !exited {
		t.Fatalf("server exit not recorded: %+v", as[0].Exits)
	}
	c.assertNoProcesses()
}

func TestServerIgnoresSIGTERM(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	c.runForeground(writeProtocol(t, scenario{serverArgs: `, --ignore-sigterm`}))
	s := c.store()
	as := c.attempts(s, "p1.saturation")
	if len(as) != 1 || as[0].State != state.Complete {
		t.Fatalf("attempts %+v", as)
	}
	var seq []string
	for _, sg := range as[0].Signals {
		if sg.Role == "server" {
			seq = append(seq, sg.Signal+"/"+sg.Target)
		}
	}
	got := strings.Join(seq, " ")
	if !strings.HasPrefix(got, "SIGTERM/pid SIGTERM/group") || !strings.Contains(got, "SIGKILL/group") {
		t.Fatalf("server signals %q: want SIGTERM to the API parent, then the group, then SIGKILL", got)
	}
	for i := 1; i < len(as[0].Signals); i++ {
		if as[0].Signals[i].At.Before(as[0].Signals[i-1].At) {
			t.Fatalf("signal times go back: %+v", as[0].Signals)
		}
	}
	c.assertNoProcesses()
}

func TestEscapedGrandchildIsCleanedUp(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	c.runForeground(writeProtocol(t, scenario{serverArgs: `, --setsid-grandchild`}))
	s := c.store()
	as := c.attempts(s, "p1.saturation")
	if len(as) != 1 || as[0].State != state.Complete {
		t.Fatalf("attempts %+v", as)
	}
	if v := c.gateVerdict(s, "p1.saturation", "cleanup"); v.Verdict != "pass" || v.Figures["gpu0_used_mib"] != 0 {
		t.Fatalf("cleanup gate %+v", v)
	}
	c.assertNoProcesses()
}

func TestClientHangsWatchdog(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	c.runForeground(writeProtocol(t, scenario{clientArgs: `, --hang`, drainS: "1", watchdogS: "2"}))
	s := c.store()
	as := c.attempts(s, "p1.saturation")
	if len(as) != 1 || as[0].State != state.Failed || as[0].Reason != state.ReasonDrainWatchdog {
		t.Fatalf("attempts %+v", as)
	}
	cp, _ := s.Campaign()
	if cp.State != state.CampaignStopped {
		t.Fatalf("campaign %s", cp.State)
	}
	c.assertNoProcesses()
}

func TestDrainOverAllowanceQuarantines(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	c.runForeground(writeProtocol(t, scenario{drainExtra: 1, drainS: "1", watchdogS: "20", patterns: 4, quarantined: "0.3"}))
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignComplete {
		t.Fatalf("campaign %s %s", cp.State, cp.StopDetail)
	}
	as := c.attempts(s, "p1.saturation")
	if len(as) != 1 || as[0].State != state.Quarantined || as[0].Reason != state.ReasonDrainQuarantine {
		t.Fatalf("p1 attempts %+v", as)
	}
	for _, run := range []string{"p2.saturation", "p3.saturation", "p4.saturation"} {
		if as := c.attempts(s, run); len(as) != 1 || as[0].State != state.Complete {
			t.Fatalf("%s attempts %+v", run, as)
		}
	}
}

func TestQuarantineThresholdStops(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	// the first wave (two runs, both slots) drains too long: the first of
	// them to end makes 1 of 4 measured runs quarantined, 25% > 20%
	c.runForeground(writeProtocol(t, scenario{drainExtra: 2, drainS: "1", watchdogS: "20", patterns: 4, quarantined: "0.2"}))
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignStopped || cp.StopReason != "quarantined-fraction" || cp.StopFigures["quarantined"] < 1 || cp.StopFigures["measured"] != 4 {
		t.Fatalf("campaign %s %s %v", cp.State, cp.StopReason, cp.StopFigures)
	}
	// the run in flight finished; nothing new was launched after the stop
	for _, run := range []string{"p1.saturation", "p2.saturation"} {
		if as := c.attempts(s, run); len(as) != 1 || as[0].State != state.Quarantined {
			t.Fatalf("%s attempts %+v", run, as)
		}
	}
	for _, run := range []string{"p3.saturation", "p4.saturation"} {
		if as := c.attempts(s, run); len(as) != 0 {
			t.Fatalf("%s was launched after the stop: %+v", run, as)
		}
	}
	c.assertNoProcesses()
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitMeasuring waits until a run of the campaign measures and returns it.
// signalWhileMeasuring starts the daemon on proto, waits until an attempt
// measures, sends the daemon sig and waits (up to within, described as
// what) until it has let go of the campaign lock, which it returns.
func (c *campaign) signalWhileMeasuring(proto string, sig syscall.Signal, what string, within time.Duration) string {
	c.t.Helper()
	if out, code := c.controller("start", "-f", proto, "-d", c.dir, "--gpu-backend", "fake"); code != 0 {
		c.t.Fatalf("start exited %d:\n%s", code, out)
	}
	lock := filepath.Join(c.dir, api.LockFile)
	pid := lockfile.Owner(lock)
	c.waitMeasuring()
	if err := syscall.Kill(pid, sig); err != nil {
		c.t.Fatal(err)
	}
	waitFor(c.t, what, within, func() bool { return !lockfile.Held(lock) })
	return lock
}

func (c *campaign) waitMeasuring() api.Current {
	c.t.Helper()
	var found api.Current
	waitFor(c.t, "a run measuring", 60*time.Second, func() bool {
		for _, cur := range c.liveStatus().Current {
			if cur.State == string(state.Measuring) {
				found = cur
				return true
			}
		}
		return false
	})
	return found
}

func (c *campaign) liveStatus() api.Status {
	c.t.Helper()
	cl := api.NewClient(c.dir, 5*time.Second)
	st, err := cl.Status(c.t.Context())
	if err != nil {
		return api.Status{}
	}
	return st
}

func TestSecondControllerRefusedAndStopResume(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := writeProtocol(t, scenario{patterns: 3, measureS: "3"})
	out, code := c.controller("start", "-f", proto, "-d", c.dir, "--gpu-backend", "fake")
	if code != 0 || !strings.Contains(out, "controller running, pid") {
		t.Fatalf("start exited %d:\n%s", code, out)
	}
	lock := filepath.Join(c.dir, api.LockFile)
	pid := lockfile.Owner(lock)

	// a second controller on the same directory is refused with the first's pid
	out, code = c.controller("resume", "-d", c.dir, "--foreground")
	if code == 0 || !strings.Contains(out, fmt.Sprintf("controller pid %d already runs campaign", pid)) {
		t.Fatalf("second controller: exit %d:\n%s", code, out)
	}
	out, code = c.controller("--resume", "-d", c.dir)
	if code == 0 || !strings.Contains(out, fmt.Sprintf("pid %d", pid)) {
		t.Fatalf("second detached controller: exit %d:\n%s", code, out)
	}

	// stop while a run measures
	c.waitMeasuring()
	out, code = c.controller("stop", "-d", c.dir)
	if code != 0 || !strings.Contains(out, "controller exited") {
		t.Fatalf("stop exited %d:\n%s", code, out)
	}
	if lockfile.Held(lock) {
		t.Fatal("controller still holds the lock after stop returned")
	}
	c.assertNoProcesses()
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignStopped || cp.StopReason != "operator-stop" {
		t.Fatalf("after stop: %s %s", cp.State, cp.StopReason)
	}
	interrupted := 0
	runs, _ := s.Runs()
	for _, r := range runs {
		for _, a := range c.attempts(s, r.ID) {
			if a.State == state.Interrupted {
				interrupted++
			}
		}
	}
	if interrupted == 0 {
		t.Fatal("no attempt was interrupted by the stop")
	}
	s.Close()

	// resume finishes the campaign; interrupted attempts stay beside the new ones
	out, code = c.controller("--resume", "-d", c.dir)
	if code != 0 {
		t.Fatalf("resume exited %d:\n%s", code, out)
	}
	waitFor(t, "the controller to finish", 120*time.Second, func() bool { return !lockfile.Held(lock) })
	s2 := c.store()
	cp, _ = s2.Campaign()
	if cp.State != state.CampaignComplete {
		t.Fatalf("after resume: %s %s %s", cp.State, cp.StopReason, cp.StopDetail)
	}
	runs, _ = s2.Runs()
	after := 0
	for _, r := range runs {
		as := c.attempts(s2, r.ID)
		if !r.Done || as[len(as)-1].State != state.Complete {
			t.Fatalf("run %s not complete after resume: %+v", r.ID, as)
		}
		for _, a := range as {
			if a.State == state.Interrupted {
				after++
			}
		}
	}
	if after != interrupted {
		t.Fatalf("interrupted attempts: %d before resume, %d after", interrupted, after)
	}
	c.assertNoProcesses()
}

func TestKilledControllerResumes(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := writeProtocol(t, scenario{patterns: 2, measureS: "3"})
	// the controller dies without a chance to clean up; its children live on
	lock := c.signalWhileMeasuring(proto, syscall.SIGKILL, "the controller to die", 30*time.Second)
	orphans := c.campaignPIDs()
	if len(orphans) == 0 {
		t.Fatal("no server or client outlived the killed controller; the test shows nothing")
	}
	// ctlq says the controller is gone while the campaign is unfinished
	cmd := exec.Command(ctlqBin, "status", "-d", c.dir)
	out, _ := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 4 {
		t.Fatalf("ctlq status exit %d, want 4:\n%s", cmd.ProcessState.ExitCode(), out)
	}

	if out, code := c.controller("--resume", "-d", c.dir); code != 0 {
		t.Fatalf("resume exited %d:\n%s", code, out)
	}
	waitFor(t, "the campaign to finish", 120*time.Second, func() bool { return !lockfile.Held(lock) })
	for _, p := range orphans {
		if err := syscall.Kill(p, 0); err == nil {
			if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p)); !bytes.Contains(st, []byte(") Z")) {
				t.Fatalf("left-over pid %d still alive after resume", p)
			}
		}
	}
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignComplete {
		t.Fatalf("campaign %s %s", cp.State, cp.StopDetail)
	}
	interrupted := 0
	runs, _ := s.Runs()
	for _, r := range runs {
		for _, a := range c.attempts(s, r.ID) {
			if a.State == state.Interrupted {
				interrupted++
				if a.Figures["gpu_seconds"] <= 0 {
					t.Fatalf("interrupted attempt %s a%d charged nothing", r.ID, a.N)
				}
				kills := 0
				for _, sg := range a.Signals {
					if sg.Signal == "SIGTERM" || sg.Signal == "SIGKILL" {
						kills++
					}
				}
				if kills == 0 {
					t.Fatalf("left-overs of %s a%d were not signalled", r.ID, a.N)
				}
			}
		}
		if !r.Done {
			t.Fatalf("run %s not done", r.ID)
		}
	}
	if interrupted == 0 {
		t.Fatal("no attempt marked interrupted after the crash")
	}
	c.assertNoProcesses()
}

func TestStartRefusesAnotherCampaign(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	c.runForeground(writeProtocol(t, scenario{}))
	// the same protocol again: told to resume instead
	out, code := c.controller("start", "-f", writeProtocol(t, scenario{}), "-d", c.dir, "--gpu-backend", "fake", "--foreground")
	if code == 0 || !strings.Contains(out, "holds") {
		t.Fatalf("second start in the same directory: exit %d:\n%s", code, out)
	}
	// a different protocol: refused, naming the campaign there
	out, code = c.controller("start", "-f", writeProtocol(t, scenario{measureS: "0.7"}), "-d", c.dir, "--gpu-backend", "fake", "--foreground")
	if code == 0 || !strings.Contains(out, "holds another campaign (e2e-") {
		t.Fatalf("other protocol: exit %d:\n%s", code, out)
	}
	// a directory with other files
	other := t.TempDir()
	os.WriteFile(filepath.Join(other, "notes.txt"), []byte("x"), 0o644)
	out, code = c.controller("start", "-f", writeProtocol(t, scenario{}), "-d", other, "--gpu-backend", "fake", "--foreground")
	if code == 0 || !strings.Contains(out, "is not empty and holds no campaign") {
		t.Fatalf("non-empty directory: exit %d:\n%s", code, out)
	}
	// an invalid protocol: exit 2 with the problems, nothing created
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("warden: 1\nname: x\nbogus: 1\n"), 0o644)
	fresh := filepath.Join(t.TempDir(), "fresh")
	out, code = c.controller("start", "-f", bad, "-d", fresh, "--gpu-backend", "fake")
	if code != 2 || !strings.Contains(out, `bad.yaml:3:1: bogus: unknown field "bogus"`) {
		t.Fatalf("invalid protocol: exit %d:\n%s", code, out)
	}
	if _, err := os.Stat(fresh); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an invalid protocol created %s", fresh)
	}
}
