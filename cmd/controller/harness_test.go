package main

// The harness of the package's tests, one for all of them: the binaries
// under test, built once by TestMain; the protocols they run, written
// from a scenario; a campaign directory per test, with the controller
// run, started or signalled there; and waits that poll with a deadline.
// Every test owns its directory and its ports (internal/testutil/testports), so
// tests run in parallel unless they say why not.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"warden/internal/testutil/testbin"
	"warden/internal/testutil/testcampaign"
	"warden/internal/testutil/testports"
	"warden/pkg/api"
	"warden/pkg/dirlayout"
	"warden/pkg/failpoint"
	"warden/pkg/lockfile"
	"warden/pkg/state"
)

// The binaries under test.

// The binaries the tests run, built once per package run by TestMain into
// one temporary directory.
var (
	controllerBin string
	ctlqBin       string
	loadgenBin    string
	standinBin    string
)

func TestMain(m *testing.M) {
	// A campaign test waits on its controller, servers and clients far
	// more than it computes: unless told otherwise, run four at once, not
	// the test binary's default of one per CPU (on two CPUs, 245 s against
	// 113 s for the package).
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		flag.Set("test.parallel", "4")
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	// one go build for all four: each is named after its package's directory
	return testbin.Run("controller-test-", withRace(".", "../ctlq", "../loadgen", "../standin"), func(dir string) int {
		controllerBin = filepath.Join(dir, "controller")
		ctlqBin = filepath.Join(dir, "ctlq")
		loadgenBin = filepath.Join(dir, "loadgen")
		standinBin = filepath.Join(dir, "standin")
		code := m.Run()
		if err := noteSlurmSkips(slurmSkipped.Load(), os.Getenv("WARDEN_SLURM_SKIP_NOTE")); err != nil {
			fmt.Fprintln(os.Stderr, "note the skipped Slurm tests:", err)
		}
		return code
	})
}

// withRace is go build's arguments args, with the race detector when
// this test binary has it.
func withRace(args ...string) []string {
	if raceBuild {
		return append([]string{"-race"}, args...)
	}
	return args
}

var (
	failpointOnce sync.Once
	failpointBin  string
	failpointErr  error
)

// failpointController builds the controller with -tags failpoints, once,
// beside the plain one.
func failpointController(t *testing.T) string {
	t.Helper()
	failpointOnce.Do(func() {
		failpointBin = filepath.Join(filepath.Dir(controllerBin), "controller-failpoints")
		out, err := exec.Command("go", append([]string{"build"}, withRace("-tags", "failpoints", "-o", failpointBin, ".")...)...).CombinedOutput()
		if err != nil {
			failpointErr = fmt.Errorf("build the failpoints controller: %v\n%s", err, out)
		}
	})
	if failpointErr != nil {
		t.Fatal(failpointErr)
	}
	return failpointBin
}

// Protocols.

// defaultClient is the saturation load's client line that writeProtocol
// writes for a scenario with no client and the default measureS and
// clientArgs: the line a test replaces (editProtocol) to run its own.
const defaultClient = `client: ["${STANDIN}", client, --warmup-s, "0.2", --measure-s, "0.5", --drain-s, "2", --concurrency, "2", --result-dir, "${ATTEMPT_DIR}/client", --drain-extra-s, "${DRAIN_EXTRA}" ]`

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

func freePorts(t testing.TB, n int) []int { return testports.Free(t, n) }

func writeProtocol(t *testing.T, sc scenario) string {
	t.Helper()
	def, measure := testcampaign.Or, testcampaign.Or(sc.measureS, "0.5")
	y := testcampaign.Head("e2e", def(sc.capGPUHours, "1.0"), fmt.Sprintf("STANDIN: %q, CONTROLLER: %q", standinBin, controllerBin), freePorts(t, 2)) + testcampaign.Standin{
		DrainS: def(sc.drainS, "5"), WatchdogS: def(sc.watchdogS, "10"), CleanupS: def(sc.cleanupS, "10"),
		Server:         def(sc.server, `["${STANDIN}", server, --port, "${PORT}", --load-s, "0.2", --shutdown-timeout, "1", --gpu-mem-mib, "1024", --effective-config, "effective config: enable_chunked_prefill=True"`+sc.serverArgs+`]`),
		ReadyS:         def(sc.readyS, "10"),
		Expect:         fmt.Sprintf(`[{name: chunked, pattern: 'enable_chunked_prefill=True'}, {name: extra, pattern: %q}]`, def(sc.expect, "chunked")),
		ExpectedS:      "10",
		Client:         def(sc.client, fmt.Sprintf(`["${STANDIN}", client, --warmup-s, "0.2", --measure-s, %q, --drain-s, "2", --concurrency, "2", --result-dir, "${ATTEMPT_DIR}/client", --drain-extra-s, "${DRAIN_EXTRA}" %s]`, measure, sc.clientArgs)),
		ModerateClient: fmt.Sprintf(`["${STANDIN}", client, --warmup-s, "0.2", --measure-s, %q, --drain-s, "2", --concurrency, "1", --result-dir, "${ATTEMPT_DIR}/client" %s %s]`, measure, sc.clientArgs, sc.moderArgs),
		Cells:          sc.patterns,
		Late:           func(i int) bool { return i < sc.drainExtra || slices.Contains(sc.quarantine, i+1) },
		Moderate:       sc.loadsModer, Retries: sc.retries, Quarantined: def(sc.quarantined, "0.9"),
	}.YAML()
	if sc.validators != "" {
		y += "validators:\n" + sc.validators
	}
	return writeTemp(t, "e2e.yaml", y)
}

// oneRegime is the regime of the one-slot test protocols.
const oneRegime = `regimes:
  - {name: one, concurrency: 1}
`

// classAndCleanup is the one class c and the cleanup timeout of the test
// protocols that need nothing else of them.
const classAndCleanup = `classes:
  - {name: c, drain_allowance_s: 5, watchdog_s: 10}
cleanup: {timeout_s: 10}
`

// writeTemp writes content to a file named name in a new temporary
// directory and returns its path.
func writeTemp(t testing.TB, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// appendProtocol adds text at the end of a protocol file.
func appendProtocol(t *testing.T, path, text string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, text...), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A campaign directory and the controller run on it.

// campaign is one test's campaign directory.
type campaign struct {
	t   *testing.T
	dir string
}

func newCampaign(t *testing.T) *campaign {
	c := &campaign{t: t, dir: filepath.Join(t.TempDir(), "camp")}
	t.Cleanup(c.killLeftovers)
	t.Cleanup(func() {
		if t.Failed() {
			c.logTail(40)
		}
	})
	return c
}

// logTail logs the last n lines of the controller's log, for a failed
// test's reader.
func (c *campaign) logTail(n int) {
	b, err := os.ReadFile(dirlayout.Log(c.dir))
	if err != nil {
		c.t.Logf("controller.log: %v", err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	c.t.Logf("the last %d lines of %s:\n%s", min(n, len(lines)), dirlayout.Log(c.dir), strings.Join(lines[max(0, len(lines)-n):], "\n"))
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

// run runs bin with args and extra environment and waits for it; it
// returns the combined output and how the process ended.
func (c *campaign) run(bin string, env []string, args ...string) (string, *os.ProcessState) {
	c.t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(withoutFailpoint(os.Environ()), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		c.t.Fatalf("run %s %v: %v", bin, args, err)
	}
	return out.String(), cmd.ProcessState
}

func withoutFailpoint(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, failpoint.EnvVar+"=") {
			out = append(out, kv)
		}
	}
	return out
}

func killedBySIGKILL(st *os.ProcessState) bool {
	ws, ok := st.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

func (c *campaign) runForeground(protocol string) string {
	out, code := c.controller("start", "-f", protocol, "-d", c.dir, "--gpu-backend", "fake", "--foreground")
	if code != 0 {
		c.t.Fatalf("controller exited %d:\n%s", code, tail(out, 3000))
	}
	return out
}

// startDetached starts the campaign's controller detached with the given
// cgroup mode.
// ranScenario runs a campaign of the scenario's protocol to its end in
// the foreground, which must exit 0, and opens its store.
func ranScenario(t *testing.T, sc scenario) (*campaign, *state.Store) {
	t.Helper()
	c := newCampaign(t)
	c.runForeground(writeProtocol(t, sc))
	return c, c.store()
}

func (c *campaign) startDetached(proto, cgroups string) {
	c.t.Helper()
	c.start(proto, "--cgroups", cgroups)
}

// start runs controller start on proto with the fake GPU backend and the
// extra flags, which must exit 0.
func (c *campaign) start(proto string, extra ...string) {
	c.t.Helper()
	args := append([]string{"start", "-f", proto, "-d", c.dir, "--gpu-backend", "fake"}, extra...)
	if out, code := c.controller(args...); code != 0 {
		c.t.Fatalf("start exited %d:\n%s", code, out)
	}
}

// startForeground starts a foreground controller with args and returns it
// running; the test's cleanup kills it if it is still running then.
func (c *campaign) startForeground(args []string) (*exec.Cmd, *bytes.Buffer) {
	c.t.Helper()
	cmd := exec.Command(controllerBin, append(args, "--foreground")...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd, &out
}

// startBounded runs controller start and waits for it, killing it after a
// minute: a start that blocks (as on a FIFO before) fails the test instead
// of hanging it. The command returning is the assertion, not its time.
func (c *campaign) startBounded(proto string, extra ...string) (string, int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, controllerBin, append([]string{"start", "-f", proto, "-d", c.dir, "--gpu-backend", "fake"}, extra...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		c.t.Fatalf("controller start did not return within a minute (killed):\n%s", out.String())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), ee.ExitCode()
	}
	if err != nil {
		c.t.Fatalf("run controller start: %v", err)
	}
	return out.String(), 0
}

// signalWhileMeasuring starts the daemon on proto, waits until an attempt
// measures, sends the daemon sig and waits (up to within, described as
// what) until it has let go of the campaign lock.
func (c *campaign) signalWhileMeasuring(proto string, sig syscall.Signal, what string, within time.Duration) {
	c.t.Helper()
	c.start(proto)
	pid := lockfile.Owner(dirlayout.Lock(c.dir))
	c.waitMeasuring()
	if err := syscall.Kill(pid, sig); err != nil {
		c.t.Fatal(err)
	}
	c.waitUnlocked(what, within)
}

// killController kills the detached controller with SIGKILL and waits
// until its lock is free; its children live on.
func (c *campaign) killController() {
	c.t.Helper()
	lock := dirlayout.Lock(c.dir)
	if err := syscall.Kill(lockfile.Owner(lock), syscall.SIGKILL); err != nil {
		c.t.Fatal(err)
	}
	c.waitUnlocked("the controller to die", 30*time.Second)
}

func tail(s string, n int) string {
	if i := strings.Index(s, raceWarning); i >= 0 && len(s)-i > n {
		// a race-built binary's report is read from its start: its
		// stacks are what a failure is about
		end := min(len(s), i+raceReportMax)
		if end == len(s) {
			return s[i:]
		}
		return s[i:end] + "\n[...]\n" + s[max(end, len(s)-n):]
	}
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// raceWarning begins each report of the race detector; raceReportMax is
// how much of one tail keeps.
const (
	raceWarning   = "WARNING: DATA RACE"
	raceReportMax = 20000
)

// What the campaign recorded.

func (c *campaign) store() *state.Store {
	c.t.Helper()
	s, err := state.OpenReadOnly(dirlayout.State(c.dir), 5*time.Second)
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

// attemptsIn lists the campaign's attempts in state st, run by run.
func (c *campaign) attemptsIn(s *state.Store, st state.AttemptState) []state.Attempt {
	c.t.Helper()
	runs, err := s.Runs()
	if err != nil {
		c.t.Fatal(err)
	}
	var out []state.Attempt
	for _, r := range runs {
		for _, a := range c.attempts(s, r.ID) {
			if a.State == st {
				out = append(out, a)
			}
		}
	}
	return out
}

// soleAttempt returns run's attempts, failing the test unless there is
// exactly one, in state st (and, where given, for reason).
func (c *campaign) soleAttempt(s *state.Store, run string, st state.AttemptState, reason ...state.Reason) []state.Attempt {
	c.t.Helper()
	as := c.attempts(s, run)
	if len(as) != 1 || as[0].State != st || len(reason) > 0 && as[0].Reason != reason[0] {
		c.t.Fatalf("attempts %+v", as)
	}
	return as
}

func attemptStates(as []state.Attempt) []string {
	var out []string
	for _, a := range as {
		out = append(out, fmt.Sprintf("a%d %s %s", a.N, a.State, a.Reason))
	}
	return out
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

// stoppedFor returns the campaign, failing the test unless it stopped
// for a run that ended for reason.
func (c *campaign) stoppedFor(s *state.Store, reason state.Reason) state.Campaign {
	c.t.Helper()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignStopped || cp.StopReason != state.StopForRun(reason) {
		c.t.Fatalf("campaign %s %s %s", cp.State, cp.StopReason, cp.StopDetail)
	}
	return cp
}

// ctlqStatusExits runs ctlq status on the campaign and fails the test
// unless it exits with want.
func (c *campaign) ctlqStatusExits(want int) {
	c.t.Helper()
	cmd := exec.Command(ctlqBin, "status", "-d", c.dir)
	out, _ := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != want {
		c.t.Fatalf("ctlq status exit %d, want %d:\n%s", cmd.ProcessState.ExitCode(), want, out)
	}
}

// reportPage writes the campaign's ctlq report to a file, which must
// succeed, and returns the page.
func (c *campaign) reportPage() string {
	c.t.Helper()
	page := filepath.Join(c.t.TempDir(), "report.html")
	if out, err := exec.Command(ctlqBin, "report", "-d", c.dir, "-o", page).CombinedOutput(); err != nil {
		c.t.Fatalf("ctlq report: %v\n%s", err, out)
	}
	b, err := os.ReadFile(page)
	if err != nil {
		c.t.Fatal(err)
	}
	return string(b)
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

// Processes.

// campaignPIDs lists live processes that carry this campaign's directory in
// their environment: everything the controller started, and their
// descendants, however they escaped.
func (c *campaign) campaignPIDs() []int { return campaignPIDsIn(c.dir) }

// campaignPIDsIn lists the live processes (not zombies, not this one) that
// carry the campaign directory dir in their environment.
func campaignPIDsIn(dir string) []int {
	marker := []byte("WARDEN_CAMPAIGN_DIR=" + dir + "\x00")
	var pids []int
	for _, pid := range procPIDs() {
		if pid == os.Getpid() {
			continue
		}
		env, err := procFile(pid, "environ")
		if err != nil || !bytes.Contains(env, marker) {
			continue
		}
		if procState(pid) == 'Z' {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// killLeftovers ends what the test's campaign started, if anything is
// left after a failure, and stops a controller that still runs.
func (c *campaign) killLeftovers() {
	lock := dirlayout.Lock(c.dir)
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

// procState is the state letter of /proc/PID/stat ('T' when stopped), 0
// when the process is gone.
func procState(pid int) byte {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(st, ')')
	if i < 0 || i+2 >= len(st) {
		return 0
	}
	return st[i+2]
}

// running reports whether pid is alive and not a zombie.
func running(pid int) bool {
	st := procState(pid)
	return st != 0 && st != 'Z' && st != 'X'
}

// procPIDs lists the processes in /proc.
func procPIDs() []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procFile reads the file name of /proc/PID.
func procFile(pid int, name string) ([]byte, error) {
	return os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + name)
}

// childWithArg finds a direct child of parent whose argv holds arg.
func childWithArg(parent int, arg string) int {
	for _, pid := range procPIDs() {
		st, err := procFile(pid, "stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(st, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(st[i+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(parent) {
			continue
		}
		argv, _ := procFile(pid, "cmdline")
		for _, a := range bytes.Split(argv, []byte{0}) {
			if string(a) == arg {
				return pid
			}
		}
	}
	return 0
}

// unrelated starts a process the test owns that has nothing to do with
// the campaign, and returns it; it is killed and waited for at cleanup.
func unrelated(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// Waits: each polls until its condition holds, and fails the test when
// its deadline passes first.

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

// waitExit waits until the campaign's controller has let go of its lock.
func (c *campaign) waitExit() {
	c.t.Helper()
	c.waitUnlocked("the controller to finish", 120*time.Second)
}

// waitUnlocked waits (up to within, described as what) until no
// controller holds the campaign's lock.
func (c *campaign) waitUnlocked(what string, within time.Duration) {
	c.t.Helper()
	lock := dirlayout.Lock(c.dir)
	waitFor(c.t, what, within, func() bool { return !lockfile.Held(lock) })
}

// A failing controller's output is shown from its race report on, where
// it has one, and its last bytes otherwise.
func TestTailKeepsTheRaceReport(t *testing.T) {
	logs := strings.Repeat("a log line\n", 1000)
	report := "==================\n" + raceWarning + "\nWrite at 0x1 by goroutine 7:\n  main.f()\n"
	for _, after := range []string{logs, strings.Repeat(logs, 3)} { // within raceReportMax and past it
		if got := tail(logs+report+after, 3000); !strings.HasPrefix(got, raceWarning) || !strings.HasSuffix(got, logs[len(logs)-3000:]) || len(got) > raceReportMax+3010 {
			t.Fatalf("tail of a race report and %d bytes of logs after it (%d bytes): %.80q ... %.80q", len(after), len(got), got, got[max(0, len(got)-80):])
		}
	}
	if got := tail(logs, 3000); got != logs[len(logs)-3000:] {
		t.Fatalf("tail without a race report is %d bytes, not the last 3000", len(got))
	}
	if got := tail(logs+report, 3000); !strings.HasSuffix(got, report) {
		t.Fatalf("a report among the last bytes is kept as it is: %q", got)
	}
}
