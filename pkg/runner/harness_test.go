package runner_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"warden/internal/testutil/testbin"
	"warden/internal/testutil/testcampaign"
	"warden/internal/testutil/testports"
	"warden/internal/testutil/testreaper"
	"warden/pkg/gpu/fakegpu"
	"warden/pkg/launch"
	"warden/pkg/provenance"
	"warden/pkg/runner"
	"warden/pkg/state"
	"warden/protocols"
)

// In-process tests of the driver: each test writes a protocol, creates a
// campaign directory and its store as controller start does, builds a
// Runner from a Config in the test process and runs a real campaign of
// stand-in servers and clients (cmd/standin) on fake GPUs. The outcome is
// read from the store; every test then checks the store's invariants and
// that nothing of the campaign is left: no process, no fake GPU memory.

var (
	// standinBin is the stand-in server and client, controllerBin the
	// controller (its validators) and loadgenBin the load client, built in
	// TestMain.
	standinBin, controllerBin, loadgenBin string
	// testReaper is the one reaper of the test process: it owns every
	// child's exit status, so nothing else may wait for children once it
	// runs (see launch.Reaper).
	testReaper *launch.Reaper
)

// runWait bounds how long a test lets Run go before it stops the runner
// and fails: generous, so that a loaded machine never fails a test, yet
// finite.
const runWait = 90 * time.Second

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	// Built before the reaper starts: os/exec waits for the go command
	// itself, which it must not do beside a reaper.
	return testbin.Run("runner-test-", []string{"../../cmd/standin", "../../cmd/controller", "../../cmd/loadgen"}, func(dir string) int {
		standinBin = filepath.Join(dir, "standin")
		controllerBin, loadgenBin = filepath.Join(dir, "controller"), filepath.Join(dir, "loadgen")
		// the power-check campaign's manifest, by loadgen, before the
		// reaper too
		powerManifest = filepath.Join(dir, "power-manifest.jsonl")
		if out, err := exec.Command(loadgenBin, "materialize", "--id", "p1", "--input-uniform", "4:16", "--output-fixed", "4", "--arrival", "steady",
			"--num-requests", "60000", "--workload-seed", "20260712", "--out", powerManifest).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "materialize the power-check manifest: %v\n%s", err, out)
			return 1
		}
		return testreaper.Run(m, &testReaper)
	})
}

// protocol shapes a test's protocol: two slots of one GPU each under a
// regime of two, cells p1..pN of saturation (and moderate, which needs
// its saturation run), the stand-in server and client.
type protocol struct {
	patterns int  // cells; 1 when 0
	moderate bool // each cell runs saturation then moderate
	// server replaces the server command (a YAML flow value); serverArgs
	// are extra stand-in server flags (YAML flow items, each after ", ").
	server     string
	serverArgs string
	// clientArgs are extra flags of the saturation client.
	clientArgs string
	measureS   string // clean interval of both clients; "0.3" when ""
	readyS     string // server ready timeout; "10" when ""
	// drainS and watchdogS are the class's drain allowance and watchdog
	drainS, watchdogS string
	// drainLate is how many cells, from p1, whose saturation client drains
	// 2 s longer than needed
	drainLate   int
	retries     int
	quarantined string // stop.quarantined_fraction_gt; "0.9" when ""
	capGPUHours string // budget cap; "1.0" when ""
	// client replaces the saturation client (a YAML flow value); saturation
	// holds extra YAML lines of the saturation load (indented by four).
	client     string
	saturation string
	expectedS  string // both loads' expected_s; "10" when ""
	// expect replaces the server's expectations (a YAML flow list)
	expect string
	// extra holds top-level YAML lines appended to the protocol
	extra string
}

// standinServer is the stand-in server's argument vector (YAML flow)
// with extra flags.
func standinServer(extra string) string {
	return `["${STANDIN}", server, --port, "${PORT}", --load-s, "0.1", --shutdown-timeout, "1", --gpu-mem-mib, "1024", --effective-config, "enable_chunked_prefill=True"` + extra + `]`
}

// standinServerShell is the stand-in server's command line for a shell
// command: prefix runs first and may set flags with `set --`.
func standinServerShell(prefix string) string {
	return `{shell: '` + prefix + ` exec ${STANDIN} server --port ${PORT} --load-s 0.1 --shutdown-timeout 1 --gpu-mem-mib 1024 --effective-config enable_chunked_prefill=True "$$@"'}`
}

// freePorts returns n loopback ports free now.
func freePorts(t *testing.T, n int) []int { return testports.Free(t, n) }

// write writes the protocol into dir and returns its path.
func (p protocol) write(t *testing.T, dir string) string {
	t.Helper()
	def, measure := testcampaign.Or, testcampaign.Or(p.measureS, "0.3")
	y := testcampaign.Head("runner-test", def(p.capGPUHours, "1.0"), fmt.Sprintf("STANDIN: %q", standinBin), freePorts(t, 2)) + testcampaign.Standin{
		DrainS: def(p.drainS, "5"), WatchdogS: def(p.watchdogS, "20"), CleanupS: "10",
		Server:         def(p.server, standinServer(p.serverArgs)),
		ReadyS:         def(p.readyS, "10"),
		Expect:         def(p.expect, `[{name: chunked, pattern: 'enable_chunked_prefill=True'}]`),
		ExpectedS:      def(p.expectedS, "10"),
		Client:         def(p.client, fmt.Sprintf(`["${STANDIN}", client, --warmup-s, "0.1", --measure-s, %q, --drain-s, "2", --concurrency, "2", --result-dir, "${ATTEMPT_DIR}/client", --drain-extra-s, "${DRAIN_EXTRA}"%s]`, measure, p.clientArgs)),
		Saturation:     p.saturation,
		ModerateClient: fmt.Sprintf(`["${STANDIN}", client, --warmup-s, "0.1", --measure-s, %q, --drain-s, "2", --concurrency, "1", --result-dir, "${ATTEMPT_DIR}/client"]`, measure),
		Cells:          p.patterns,
		Late:           func(i int) bool { return i < p.drainLate },
		Moderate:       p.moderate, Retries: p.retries, Quarantined: def(p.quarantined, "0.9"),
	}.YAML() + p.extra + "\n"
	path := filepath.Join(dir, "protocol.yaml")
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// campaign is one test's campaign: its directory and store as controller
// start leaves them, and the fake GPUs.
type campaign struct {
	t        *testing.T
	dir      string // the campaign directory
	protocol string // the protocol file
	plan     *protocols.Plan
	store    *state.Store
	gpuDir   string
	gpus     *fakegpu.Backend
	logPath  string           // the runners' log
	now      func() time.Time // the runners' clock; nil: time.Now
}

// newCampaign writes p and creates its campaign as createCampaign in
// cmd/controller does. When the test ends, whatever process of the
// campaign is left is killed and the runners' log is shown if it failed.
func newCampaign(t *testing.T, p protocol) *campaign {
	t.Helper()
	tmp := t.TempDir()
	return newCampaignOf(t, tmp, p.write(t, tmp))
}

// newCampaignOf is newCampaign of the protocol file at path, in tmp.
func newCampaignOf(t *testing.T, tmp, path string) *campaign {
	t.Helper()
	c := &campaign{
		t: t, dir: filepath.Join(tmp, "camp"), gpuDir: filepath.Join(tmp, "fake-gpus"),
		logPath: filepath.Join(tmp, "controller.log"), protocol: path,
	}
	plan, err := protocols.PlanFile(c.protocol, protocols.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c.plan = plan
	if err := os.MkdirAll(filepath.Join(c.dir, "runs"), 0o755); err != nil {
		t.Fatal(err)
	}
	// the protocol recorded as controller start records it: the runner
	// re-hashes the recorded inputs before every wave
	if _, err := provenance.Record(c.dir, []provenance.Entry{{Path: c.protocol, Role: "protocol"}}, provenance.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := fakegpu.Init(c.gpuDir, 2, 143771); err != nil {
		t.Fatal(err)
	}
	if c.gpus, err = fakegpu.Open(c.gpuDir); err != nil {
		t.Fatal(err)
	}
	c.store, err = state.Open(filepath.Join(c.dir, "state.db"), state.Options{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.store.Close() })
	t.Cleanup(c.killLeftovers)
	t.Cleanup(c.showLog)
	runs := make([]state.Run, len(plan.Runs))
	for i, r := range plan.Runs {
		runs[i] = state.Run{
			ID: r.ID, Order: i, Phase: r.Phase, Kind: r.Kind, Cell: r.Cell, Load: r.Load,
			Needs: r.Needs, GPUs: r.GPUs, ExpectedS: r.ExpectedS, Class: r.Class,
		}
	}
	err = c.store.CreateCampaign(state.Campaign{
		ID: "runner-test", ProtocolName: plan.Protocol.Name, ProtocolSHA256: plan.Protocol.SHA256,
		ProtocolPath: c.protocol, Dir: c.dir, CreatedAt: time.Now(), State: state.CampaignRunning,
		BudgetCapGPUHours: plan.Totals.BudgetCapGPUHours, PriorGPUHours: plan.Totals.BudgetConsumedGPUHours,
		BudgetUnit: plan.Totals.Unit, Regime: plan.Regime, RegimeConcurrency: 2,
	}, runs)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newRunner builds a Runner on the campaign, with no cgroups, as the
// daemon wires one.
func (c *campaign) newRunner() *runner.Runner {
	c.t.Helper()
	logf, err := os.OpenFile(c.logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { logf.Close() })
	rn, err := runner.New(runner.Config{
		Dir: c.dir, Plan: c.plan, Store: c.store, GPUs: c.gpus,
		Launcher: &launch.Launcher{Reaper: testReaper},
		Log:      zerolog.New(logf).With().Timestamp().Logger(),
		UID:      os.Getuid(), Workdir: filepath.Dir(c.protocol), ProtocolPath: c.protocol,
		FakeGPUDir: c.gpuDir, Now: c.now,
	})
	if err != nil {
		c.t.Fatal(err)
	}
	return rn
}

// running is a Runner's Run in progress.
type running struct {
	rn       *runner.Runner
	cancel   context.CancelFunc // cancels Run's context
	finished chan struct{}      // closed when Run returned
	err      error              // Run's error, once finished
}

// start does what the daemon does before Run (Reconcile, record the
// controller, resume a stopped campaign) and starts Run. Should the test
// end first, the runner is stopped and waited for.
func (c *campaign) start(rn *runner.Runner) *running {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	if err := rn.Reconcile(ctx); err != nil {
		cancel()
		c.t.Fatalf("reconcile: %v", err)
	}
	if err := rn.Claim(os.Getpid()); err != nil {
		cancel()
		c.t.Fatal(err)
	}
	r := &running{rn: rn, cancel: cancel, finished: make(chan struct{})}
	go func() {
		defer close(r.finished)
		r.err = rn.Run(ctx)
	}()
	c.t.Cleanup(func() {
		rn.Stop()
		select {
		case <-r.finished:
		case <-time.After(runWait):
			c.t.Errorf("Run did not return within %v of Stop", runWait)
		}
		cancel()
	})
	return r
}

// wait waits for Run to return. Past runWait it stops the runner (the
// test's cleanup waits for it) and fails the test.
func (r *running) wait(t *testing.T) {
	t.Helper()
	if err := r.end(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// end waits for Run to return and returns its error. Past runWait it
// stops the runner (the test's cleanup waits for it) and fails the test.
func (r *running) end(t *testing.T) error {
	t.Helper()
	select {
	case <-r.finished:
		return r.err
	case <-time.After(runWait):
		r.rn.Stop()
		t.Fatalf("Run did not return within %v; stopped it", runWait)
		return nil
	}
}

// run runs the campaign with a new Runner until Run returns.
func (c *campaign) run() {
	c.t.Helper()
	c.start(c.newRunner()).wait(c.t)
}

// waitAttempt polls the live attempts until one satisfies cond and
// returns it. It fails the test when Run returns first or after runWait.
func (c *campaign) waitAttempt(r *running, what string, cond func(state.Attempt) bool) state.Attempt {
	c.t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(runWait)
	for {
		live, err := c.store.LiveAttempts()
		if err != nil {
			c.t.Fatal(err)
		}
		for _, a := range live {
			if cond(a) {
				return a
			}
		}
		select {
		case <-r.finished:
			c.t.Fatalf("Run returned (%v) before %s", r.err, what)
		case <-deadline:
			r.rn.Stop()
			c.t.Fatalf("no %s within %v", what, runWait)
		case <-tick.C:
		}
	}
}

// controllerDied records the campaign's controller as one of this boot
// whose last heartbeat was ago before now, as a controller that died then
// leaves it; it returns now and the boot id.
func (c *campaign) controllerDied(ago time.Duration) (time.Time, string) {
	c.t.Helper()
	boot, err := launch.ReadBootID()
	if err != nil {
		c.t.Fatal(err)
	}
	now := time.Now()
	if err := c.store.UpdateCampaign(func(cp *state.Campaign) error {
		cp.Heartbeat, cp.ControllerBootID = now.Add(-ago), boot
		return nil
	}); err != nil {
		c.t.Fatal(err)
	}
	return now, boot
}

func (c *campaign) campaign() state.Campaign {
	c.t.Helper()
	cp, err := c.store.Campaign()
	if err != nil {
		c.t.Fatal(err)
	}
	return cp
}

func (c *campaign) attempts(run string) []state.Attempt {
	c.t.Helper()
	as, err := c.store.Attempts(run)
	if err != nil {
		c.t.Fatal(err)
	}
	return as
}

// allAttempts is every attempt of every run, in plan order.
func (c *campaign) allAttempts() []state.Attempt {
	c.t.Helper()
	runs, err := c.store.Runs()
	if err != nil {
		c.t.Fatal(err)
	}
	var out []state.Attempt
	for _, r := range runs {
		out = append(out, c.attempts(r.ID)...)
	}
	return out
}

// wantStopped fails the test unless the campaign stopped with reason.
func (c *campaign) wantStopped(reason state.StopReason) state.Campaign {
	c.t.Helper()
	cp := c.campaign()
	if cp.State != state.CampaignStopped || cp.StopReason != reason {
		c.t.Fatalf("campaign %s, stop reason %q (%s); want stopped, %q", cp.State, cp.StopReason, cp.StopDetail, reason)
	}
	return cp
}

// wantStoppedBy fails the test unless the campaign stopped for run
// p1.saturation, whose one attempt failed for reason, and returns that
// attempt.
func (c *campaign) wantStoppedBy(reason state.Reason) state.Attempt {
	c.t.Helper()
	c.wantStopped(state.StopForRun(reason))
	return c.wantAttempts("p1.saturation", failed(reason))[0]
}

// wantComplete fails the test unless the campaign is complete and every
// run is done.
func (c *campaign) wantComplete() state.Campaign {
	c.t.Helper()
	cp := c.campaign()
	if cp.State != state.CampaignComplete {
		c.t.Fatalf("campaign %s, stop reason %q (%s); want complete", cp.State, cp.StopReason, cp.StopDetail)
	}
	runs, err := c.store.Runs()
	if err != nil {
		c.t.Fatal(err)
	}
	for _, r := range runs {
		if !r.Done {
			c.t.Fatalf("campaign complete but run %s is not done (%s)", r.ID, r.LastState)
		}
	}
	return cp
}

// wantAttempts fails the test unless run's attempts ended in want, in
// order: state and reason of each.
func (c *campaign) wantAttempts(run string, want ...state.Attempt) []state.Attempt {
	c.t.Helper()
	as := c.attempts(run)
	if len(as) != len(want) {
		c.t.Fatalf("%s has %d attempts, want %d: %s", run, len(as), len(want), describe(as))
	}
	for i, w := range want {
		if as[i].State != w.State || as[i].Reason != w.Reason {
			c.t.Fatalf("%s attempt %d: %s/%s, want %s/%s: %s", run, i+1, as[i].State, as[i].Reason, w.State, w.Reason, describe(as))
		}
	}
	return as
}

func describe(as []state.Attempt) string {
	var b strings.Builder
	for _, a := range as {
		fmt.Fprintf(&b, "[a%d %s %s slot %s]", a.N, a.State, a.Reason, a.Slot)
	}
	return b.String()
}

// ledger sums the budget ledger by kind, and the charges by attempt
// ("run/aN").
type ledger struct {
	prior, charged, reserved, released float64
	byAttempt                          map[string]float64
	entries                            []state.LedgerEntry
}

func (c *campaign) ledger() ledger {
	c.t.Helper()
	es, err := c.store.Ledger()
	if err != nil {
		c.t.Fatal(err)
	}
	l := ledger{byAttempt: map[string]float64{}, entries: es}
	for _, e := range es {
		switch e.Kind {
		case state.LedgerPrior:
			l.prior += e.GPUSeconds
		case state.LedgerCharge:
			l.charged += e.GPUSeconds
			l.byAttempt[fmt.Sprintf("%s/a%d", e.Run, e.Attempt)] += e.GPUSeconds
		case state.LedgerReserve:
			l.reserved += e.GPUSeconds
		case state.LedgerRelease:
			l.released += e.GPUSeconds
		}
	}
	return l
}

// wantLedgerSettled checks the ledger against the campaign's totals:
// every charge (and the hours consumed before the campaign) counted, and
// every reservation released.
func (c *campaign) wantLedgerSettled() ledger {
	c.t.Helper()
	cp, l := c.campaign(), c.ledger()
	if cp.ReservedGPUSeconds > 1e-6 || l.reserved-l.released > 1e-6 {
		c.t.Errorf("reservations not released: campaign reserves %v GPU-s; ledger reserved %v, released %v", cp.ReservedGPUSeconds, l.reserved, l.released)
	}
	if d := cp.ConsumedGPUSeconds - l.prior - l.charged; d > 1e-6 || d < -1e-6 {
		c.t.Errorf("campaign consumed %v GPU-s, ledger prior %v and charges %v", cp.ConsumedGPUSeconds, l.prior, l.charged)
	}
	return l
}

// wantClean checks the store's invariants and that nothing of the
// campaign is left: no live attempt, no recorded process alive, no
// process carrying the campaign's directory, no fake GPU memory held.
func (c *campaign) wantClean() {
	c.t.Helper()
	if err := c.store.Check(); err != nil {
		c.t.Errorf("store invariants: %v", err)
	}
	live, err := c.store.LiveAttempts()
	if err != nil {
		c.t.Fatal(err)
	}
	if len(live) > 0 {
		c.t.Errorf("attempts still live after Run returned: %s", describe(live))
	}
	for _, a := range c.allAttempts() {
		for _, p := range a.Procs {
			id := launch.Identity{PID: p.PID, StartTime: p.StartTime, BootID: p.BootID}
			if alive, err := id.Alive(nil); err != nil || alive {
				c.t.Errorf("%s a%d %s (%v) alive %v after Run returned (%v)", a.RunID, a.N, p.Role, id, alive, err)
			}
		}
	}
	if ids := c.leftovers(); len(ids) > 0 {
		c.t.Errorf("processes of the campaign alive after Run returned: %v", ids)
	}
	snap, err := c.gpus.Snapshot([]int{0, 1})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, g := range snap {
		if g.UsedMiB != 0 || len(g.Procs) != 0 {
			c.t.Errorf("fake GPU %d holds %d MiB, processes %+v", g.Index, g.UsedMiB, g.Procs)
		}
	}
}

// leftovers are the live processes that carry the campaign's directory in
// their environment: only processes this test's runners started, and
// their descendants.
func (c *campaign) leftovers() []launch.Identity {
	ids, err := launch.Marked(nil, "WARDEN_CAMPAIGN_DIR="+c.dir, launch.AllProcesses)
	if err != nil {
		c.t.Errorf("look for processes of the campaign: %v", err)
	}
	return ids
}

// killLeftovers kills what a failed test left; the reaper collects them.
func (c *campaign) killLeftovers() {
	for _, id := range c.leftovers() {
		if _, err := launch.Signal(nil, id, "leftover", syscall.SIGKILL); err != nil && !errors.Is(err, launch.ErrGone) {
			c.t.Errorf("kill left-over %v: %v", id, err)
		}
	}
}

// showLog prints the end of the runners' log when the test failed.
func (c *campaign) showLog() {
	if !c.t.Failed() {
		return
	}
	f, err := os.Open(c.logPath)
	if err != nil {
		return
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	c.t.Logf("runner log (end):\n%s", b)
}
