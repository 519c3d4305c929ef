package attempt_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"warden/internal/cpulist"
	"warden/internal/testutil/testbin"
	"warden/internal/testutil/testports"
	"warden/internal/testutil/testreaper"
	"warden/pkg/attempt"
	"warden/pkg/dirlayout"
	"warden/pkg/endlog"
	"warden/pkg/gates"
	"warden/pkg/gpu"
	"warden/pkg/gpu/fakegpu"
	"warden/pkg/launch"
	"warden/pkg/record"
	"warden/pkg/state"
	"warden/protocols"
)

// The phase harness: one attempt, run by attempt.Execute in the test
// process as the campaign loop runs it, with the real launcher (the test
// binary is the subreaper of everything it starts), the fake GPU backend,
// a temporary campaign directory and a strict store behind a recorder
// that keeps every transition, gate, figure, process, exit and signal as
// a slice a test compares. The children are the stand-in server
// (cmd/standin) and phaseclient (testdata/phaseclient), a client that
// writes the phase lines, result and exit status a test scripts; both
// are built once per test binary, in TestMain.

var (
	// standinBin and phaseClientBin are built in TestMain.
	standinBin, phaseClientBin string
	// testReaper is the one reaper of the test process: it owns every
	// child's exit status, so nothing else may wait for children once it
	// runs (see launch.Reaper).
	testReaper *launch.Reaper
)

func TestMain(m *testing.M) {
	// The phase tests wait on their children and timers far more than
	// they compute: unless told otherwise, run more of them at once than
	// the test binary's default of one per CPU.
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		flag.Set("test.parallel", "8")
	}
	// built before the reaper starts: os/exec waits for the go command
	os.Exit(testbin.Run("attempt-test-", []string{"../../cmd/standin", "./testdata/phaseclient"}, func(dir string) int {
		standinBin, phaseClientBin = filepath.Join(dir, "standin"), filepath.Join(dir, "phaseclient")
		return testreaper.Run(m, &testReaper)
	}))
}

// runID is the run every harness attempt belongs to.
const runID = "p1.saturation"

// harness is one attempt's world. newHarness fills it with a run that
// completes; a test changes what it needs (run, plan, env, the
// recorder's hooks) before execute.
type harness struct {
	t       *testing.T
	dir     string // the campaign directory
	adir    string // the attempt's directory
	gpuDir  string
	gpus    *fakegpu.Backend
	store   *state.Store
	rec     *recorder
	flights *flights
	env     *attempt.Env
	plan    *protocols.Plan
	run     protocols.Run
	port    int
	cpus    []int
	// opts are the attempt's Options; faults and boot stand between the
	// attempt and the fake GPUs and the boot id.
	opts   attempt.Options
	faults *gpuFaults
	boot   *bootSwitch
	// ctx is Execute's; cancel ends it with a cause (nil: an operator's
	// stop).
	ctx    context.Context
	cancel context.CancelCauseFunc
	log    *syncBuffer
	// out is Execute's outcome, once it returned.
	out attempt.Outcome
}

// syncBuffer is the attempt's log, shown when the test fails.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// allowedCPUs are the CPUs the test process may run on: the slot's, so
// that the children pinned to them are not crowded onto one.
func allowedCPUs(t *testing.T) []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	var cpus []int
	for c := range 1024 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus
}

// newHarness makes the campaign directory, two fake GPUs whose CPUs are
// the test's own, a free port and the run: the stand-in server on GPU 0,
// ready at once, and a client that drains within its class's allowance
// and exits 0.
func newHarness(t *testing.T) *harness {
	t.Helper()
	tmp := t.TempDir()
	h := &harness{t: t, dir: filepath.Join(tmp, "camp"), gpuDir: filepath.Join(tmp, "gpus"), log: &syncBuffer{}}
	h.cpus = allowedCPUs(t)
	local := cpulist.Format(h.cpus)
	if err := fakegpu.InitWith(h.gpuDir, []fakegpu.Device{{TotalMiB: 143771, CPUs: local, NUMANode: -1}, {TotalMiB: 143771, CPUs: local, NUMANode: -1}}); err != nil {
		t.Fatal(err)
	}
	var err error
	if h.gpus, err = fakegpu.Open(h.gpuDir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(h.dir, dirlayout.RunsDir), 0o755); err != nil {
		t.Fatal(err)
	}
	h.port = testports.Free(t, 1)[0]
	h.adir = dirlayout.AttemptDir(h.dir, runID, 1)
	h.plan = &protocols.Plan{
		Protocol: protocols.ProtocolInfo{Name: "attempt-test", SHA256: strings.Repeat("ab", 32)},
		CleanupS: 5, SampleS: 0.05, Privacy: protocols.DefaultForbiddenFields,
	}
	h.run = protocols.Run{
		ID: runID, Phase: "matrix", Kind: "saturation", Cell: "p1", Load: "saturation", GPUs: 1, Class: "c",
		DrainS: 5, WatchdogS: 20, ExpectedS: 10, AdmissionEnd: "phase-file", ResultFile: "client/result.json",
		ClientStart: "after-ready", Measured: true,
		Server: protocols.ServerSpec{
			Name: "standin", Kind: "standin", Command: standinServer(),
			HealthPath: "/health", HealthStatus: 200, ReadyTimeoutS: 10,
			ConfigEndpoint: "/server_info?config_format=json", ShutdownGraceS: 2, GroupGraceS: 1,
			Expect: []protocols.ExpectSpec{{Name: "chunked", Pattern: "enable_chunked_prefill=True"}},
		},
		Client: phaseClient(nil, "warmup", "clean", "drain", "drained", "done"),
	}
	h.rec = &recorder{t: t, on: map[state.AttemptState]func(record.Report){}}
	h.flights = &flights{}
	h.faults, h.boot = &gpuFaults{Backend: h.gpus}, &bootSwitch{}
	h.ctx, h.cancel = context.WithCancelCause(context.Background())
	t.Cleanup(func() { h.cancel(nil) })
	h.env = &attempt.Env{
		Dir: h.dir, Workdir: tmp, ProtocolPath: filepath.Join(tmp, "protocol.yaml"), FakeGPUDir: h.gpuDir,
		GPUs: h.faults, Launcher: &launch.Launcher{Reaper: testReaper, Boot: h.boot.read}, Boot: h.boot.read, UID: os.Getuid(), Now: time.Now,
		Log: zerolog.New(h.log).With().Timestamp().Logger(), PrivCache: &gates.ScanCache{}, InFlight: h.flights,
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the attempt's log:\n%s", h.log.String())
		}
	})
	return h
}

// standinServer is the stand-in server's command: ready at once, its
// engine holding 256 MiB of each GPU, its startup log naming the
// expected effective value; extra are more of its flags.
func standinServer(extra ...string) protocols.CommandSpec {
	return protocols.CommandSpec{Argv: append([]string{standinBin, "server", "--port", "${PORT}", "--load-s", "0",
		"--shutdown-timeout", "1", "--gpu-mem-mib", "256", "--effective-config", "enable_chunked_prefill=True"}, extra...)}
}

// phaseClient is phaseclient's command with flags and then its steps.
func phaseClient(flags []string, steps ...string) protocols.CommandSpec {
	return protocols.CommandSpec{Argv: append(append([]string{phaseClientBin}, flags...), steps...)}
}

// shell is a shell command.
func shell(line string) protocols.CommandSpec { return protocols.CommandSpec{Shell: line} }

// execute records the campaign and the attempt in the store, as the
// campaign loop does before it runs one, runs the attempt to its end and
// returns its outcome; the test fails if the strict store refused a
// record the attempt wrote.
func (h *harness) execute() attempt.Outcome {
	h.t.Helper()
	var err error
	h.store, err = state.Open(filepath.Join(h.dir, dirlayout.StateFile), state.Options{Strict: true, Timeout: 2 * time.Second})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { h.store.Close() })
	if err := h.store.CreateCampaign(state.Campaign{ID: "attempt-test", ProtocolName: h.plan.Protocol.Name,
		ProtocolSHA256: h.plan.Protocol.SHA256, Dir: h.dir, BudgetCapGPUHours: 1},
		[]state.Run{{ID: h.run.ID, Phase: h.run.Phase, Kind: h.run.Kind, Cell: h.run.Cell, Load: h.run.Load,
			GPUs: h.run.GPUs, ExpectedS: h.run.ExpectedS, Class: h.run.Class}}); err != nil {
		h.t.Fatal(err)
	}
	gpuIDs := []int{0}
	if _, err := h.store.NewAttempt(h.run.ID, h.adir, func(a *state.Attempt) { a.GPUIDs = gpuIDs }); err != nil {
		h.t.Fatal(err)
	}
	if err := h.env.MkdirBeneath(h.adir); err != nil {
		h.t.Fatal(err)
	}
	h.rec.store = h.store
	slot := protocols.SlotInfo{Name: "s0", GPUs: gpuIDs, CPUs: cpulist.Format(h.cpus), Port: h.port}
	a := attempt.New(h.env, h.rec, attempt.Spec{Plan: h.plan, Run: h.run, N: 1, Dir: h.adir,
		Slots: []protocols.SlotInfo{slot}, GPUIDs: gpuIDs, CPUs: h.cpus, Port: h.port, Options: h.opts})
	h.out = a.Execute(h.ctx)
	for _, err := range h.rec.storeErrs {
		h.t.Errorf("the strict store refused a record: %v", err)
	}
	return h.out
}

// attempt is the attempt as the store holds it.
func (h *harness) attempt() state.Attempt {
	h.t.Helper()
	a, err := h.store.Attempt(h.run.ID, 1)
	if err != nil {
		h.t.Fatal(err)
	}
	return a
}

// wantPath fails the test unless the attempt passed through exactly the
// states of want (recorder.path) and its outcome and the store agree with
// the last: the terminal state recorded, or, after a refused record, a
// harness-error outcome with the attempt left live in the store at the
// last state recorded (resume charges it).
func (h *harness) wantPath(want string) {
	h.t.Helper()
	if got := h.rec.path(); got != want {
		h.t.Fatalf("path\n got %s\nwant %s\n(outcome %s %s: %q)", got, want, h.out.State, h.out.Reason, h.out.Detail)
	}
	last := h.rec.last()
	if h.rec.refused() != "" {
		if h.out.State != state.Failed || h.out.Reason != state.ReasonHarnessError {
			h.t.Fatalf("outcome %s %s after a refused record, want failed harness-error", h.out.State, h.out.Reason)
		}
		live := state.Planned
		if last.To != "" {
			live = last.To
		}
		if a := h.attempt(); a.State != live {
			h.t.Fatalf("the store holds %s after the refused record, want %s (live)", a.State, live)
		}
		return
	}
	if h.out.State != last.To || h.out.Reason != last.Reason {
		h.t.Fatalf("outcome %s %s, the last transition %s %s", h.out.State, h.out.Reason, last.To, last.Reason)
	}
	if a := h.attempt(); a.State != last.To || a.Reason != last.Reason {
		h.t.Fatalf("the store holds %s %s, the last transition %s %s", a.State, a.Reason, last.To, last.Reason)
	}
}

// wantGates fails the test unless the gate verdicts recorded are, in
// order, want ("gate:verdict", space-separated).
func (h *harness) wantGates(want string) {
	h.t.Helper()
	var got []string
	for _, g := range h.rec.gates() {
		got = append(got, g.Gate+":"+g.Verdict)
	}
	if strings.Join(got, " ") != want {
		h.t.Fatalf("gates\n got %s\nwant %s", strings.Join(got, " "), want)
	}
}

// gate is the last verdict of the gate named name; the test fails if
// there is none.
func (h *harness) gate(name string) state.GateVerdict {
	h.t.Helper()
	gs := h.rec.gates()
	for i := len(gs) - 1; i >= 0; i-- {
		if gs[i].Gate == name {
			return gs[i]
		}
	}
	h.t.Fatalf("no %s gate among %+v", name, gs)
	return state.GateVerdict{}
}

// wantDetail fails the test unless the outcome's detail holds each of
// parts.
func (h *harness) wantDetail(parts ...string) {
	h.t.Helper()
	for _, p := range parts {
		if !strings.Contains(h.out.Detail, p) {
			h.t.Fatalf("detail %q does not say %q", h.out.Detail, p)
		}
	}
}

// wantClean fails the test if a process the attempt started is alive,
// if a process carrying its marker is, or if a GPU holds memory of any
// process but the test's own (its stand-ins for other users).
func (h *harness) wantClean() {
	h.t.Helper()
	for _, p := range h.rec.procs() {
		id := launch.Identity{PID: p.PID, StartTime: p.StartTime, BootID: p.BootID}
		if alive, err := id.Alive(nil); alive || err != nil {
			h.t.Errorf("the attempt's %s (pid %d) is alive after its end (%v)", p.Role, p.PID, err)
		}
	}
	if ids, err := launch.Marked(nil, "WARDEN_ATTEMPT_DIR="+h.adir, launch.AllProcesses); err != nil || len(ids) > 0 {
		h.t.Errorf("processes of the attempt alive after its end: %v (%v)", ids, err)
	}
	for i := range h.gpus.Count() {
		procs, err := h.gpus.Processes(i)
		if err != nil {
			h.t.Fatal(err)
		}
		for _, p := range procs {
			if p.PID != os.Getpid() {
				h.t.Errorf("GPU %d: pid %d holds %d MiB after the attempt's end", i, p.PID, p.UsedMiB)
			}
		}
	}
}

// claim makes the test process hold mib MiB of GPU gpu as user uid (0
// MiB: let go); the claim ends with the test's fake host.
func (h *harness) claim(gpu, uid, mib int) {
	h.t.Helper()
	st, err := fakegpu.StartTime(os.Getpid())
	if err != nil {
		h.t.Fatal(err)
	}
	if err := fakegpu.ClaimFor(h.gpuDir, gpu, os.Getpid(), st, uid, mib); err != nil {
		h.t.Fatal(err)
	}
}

// proc is the attempt's recorded process of role; the test fails if none
// was recorded.
func (h *harness) proc(role string) state.Proc {
	h.t.Helper()
	for _, p := range h.rec.procs() {
		if p.Role == role {
			return p
		}
	}
	h.t.Fatalf("no %s recorded among %+v", role, h.rec.procs())
	return state.Proc{}
}

// killGroup ends what is left of the process group the attempt's role
// started (a test whose attempt could not end it) and waits until it is
// gone.
func (h *harness) killGroup(role string) {
	h.t.Helper()
	p := h.proc(role)
	syscall.Kill(-p.PGID, syscall.SIGKILL)
	waitUntil(h.t, "the "+role+"'s group to end", func() bool {
		ps, err := launch.GroupPIDs(p.PGID)
		return err == nil && len(ps) == 0
	})
}

// waitUntil polls cond until it holds, failing the test after a minute.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, with a deadline
	}
}

// gpuFaults is the fake GPUs as the attempt reads them, with the faults
// a test sets: a snapshot or a sample that cannot be read, and another
// user's process the samples show. It counts the samples taken.
type gpuFaults struct {
	*fakegpu.Backend
	mu          sync.Mutex
	snapshotErr error
	sampleErr   error
	samples     int
}

func (g *gpuFaults) set(f func(g *gpuFaults)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f(g)
}

func (g *gpuFaults) Snapshot(indices []int) ([]gpu.State, error) {
	g.mu.Lock()
	err := g.snapshotErr
	g.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return g.Backend.Snapshot(indices)
}

func (g *gpuFaults) Sample(indices []int) ([]gpu.Reading, error) {
	g.mu.Lock()
	err := g.sampleErr
	g.mu.Unlock()
	rs, rerr := g.Backend.Sample(indices)
	g.mu.Lock()
	g.samples++
	g.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return rs, rerr
}

// sampled is how many samples were taken so far.
func (g *gpuFaults) sampled() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.samples
}

// bootSwitch is the boot id source of the attempt and its launcher: the
// kernel's, until break makes every read fail.
type bootSwitch struct {
	mu     sync.Mutex
	broken bool
}

func (b *bootSwitch) read() (string, error) {
	b.mu.Lock()
	broken := b.broken
	b.mu.Unlock()
	if broken {
		return "", errors.New("the boot id cannot be read (the test broke it)")
	}
	return launch.ReadBootID()
}

func (b *bootSwitch) set(broken bool) {
	b.mu.Lock()
	b.broken = broken
	b.mu.Unlock()
}

// step is one state the attempt entered, as its recorder saw it.
type step struct {
	From, To state.AttemptState
	Reason   state.Reason
	Detail   string
	Figures  map[string]float64 // the event's own
}

// recorder is the attempt's Recorder: it writes every record to the
// strict store as the campaign loop's does, and keeps what each one held.
// on[state] runs when the attempt asks to enter state, before the record
// is written (a test acts on the world there); refuse, when it returns an
// error for a state, refuses that record as a database that cannot write
// does.
type recorder struct {
	t      *testing.T
	store  *state.Store
	on     map[state.AttemptState]func(rep record.Report)
	refuse func(to state.AttemptState) error

	mu        sync.Mutex
	steps     []step
	gateList  []state.GateVerdict
	figures   map[string]float64
	procList  []state.Proc
	exits     []state.Exit
	signals   []state.Signal
	ledger    []state.LedgerEntry
	evidence  []state.EvidenceFile
	refusedTo state.AttemptState // the record refused, if one was
	storeErrs []error
}

func (r *recorder) Transition(run string, n int, rep record.Report) error {
	if hook := r.on[rep.To]; hook != nil {
		hook(rep)
	}
	if r.refuse != nil {
		if err := r.refuse(rep.To); err != nil {
			r.mu.Lock()
			r.refusedTo = rep.To
			r.mu.Unlock()
			return err
		}
	}
	err := record.Store(r.store, run, n, rep)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil && !errors.Is(err, state.ErrStateFile) {
		r.storeErrs = append(r.storeErrs, fmt.Errorf("to %s: %w", rep.To, err))
		return err
	}
	from := state.Planned
	if len(r.steps) > 0 {
		from = r.steps[len(r.steps)-1].To
	}
	for _, hop := range rep.Through {
		r.steps = append(r.steps, step{From: from, To: hop.To, Detail: hop.Message, Figures: hop.Figures})
		from = hop.To
	}
	r.steps = append(r.steps, step{From: from, To: rep.To, Reason: rep.Reason, Detail: rep.Message, Figures: rep.Figures})
	r.gateList = append(r.gateList, rep.Gates...)
	if rep.AttemptFigures != nil {
		r.figures = maps.Clone(rep.AttemptFigures)
	}
	r.procList = append(r.procList, rep.Procs...)
	r.exits = append(r.exits, rep.Exits...)
	r.signals = append(r.signals, rep.Signals...)
	r.ledger = append(r.ledger, rep.Ledger...)
	r.evidence = append(r.evidence, rep.Evidence...)
	return nil
}

func (r *recorder) ProcStarted(run string, n int, p state.Proc) error {
	err := record.StoreProc(r.store, run, n, p)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil && !errors.Is(err, state.ErrStateFile) {
		r.storeErrs = append(r.storeErrs, fmt.Errorf("process %s: %w", p.Role, err))
		return err
	}
	r.procList = append(r.procList, p)
	return nil
}

func (r *recorder) Signals(run string, n int) ([]state.Signal, error) {
	a, err := r.store.Attempt(run, n)
	return a.Signals, err
}

// path is the states entered, "state" or "state:reason", space-separated,
// then "state!" for a record that refuse refused.
func (r *recorder) path() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, s := range r.steps {
		if s.Reason != "" {
			out = append(out, string(s.To)+":"+string(s.Reason))
		} else {
			out = append(out, string(s.To))
		}
	}
	if r.refusedTo != "" {
		out = append(out, string(r.refusedTo)+"!")
	}
	return strings.Join(out, " ")
}

func (r *recorder) last() step {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.steps) == 0 {
		return step{}
	}
	return r.steps[len(r.steps)-1]
}

// entered is the recorded step into state st; ok false when it was never
// entered.
func (r *recorder) entered(st state.AttemptState) (step, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.steps {
		if s.To == st {
			return s, true
		}
	}
	return step{}, false
}

// refused is the state whose record refuse refused ("" when none).
func (r *recorder) refused() state.AttemptState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refusedTo
}

func (r *recorder) gates() []state.GateVerdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.gateList)
}

func (r *recorder) procs() []state.Proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.procList)
}

// figure is the attempt's figure k as last recorded, and whether it was.
func (r *recorder) figure(k string) (float64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.figures[k]
	return v, ok
}

// signalsTo is the signals sent to role's processes, "SIGNAL/target",
// space-separated.
func (r *recorder) signalsTo(role string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, s := range r.signals {
		if s.Role == role {
			out = append(out, s.Signal+"/"+s.Target)
		}
	}
	return strings.Join(out, " ")
}

// exitOf is role's recorded exit; ok false when none was.
func (r *recorder) exitOf(role string) (state.Exit, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.exits {
		if e.Role == role {
			return e, true
		}
	}
	return state.Exit{}, false
}

// charges are the GPU time charged on the ledger.
func (r *recorder) charges() []state.LedgerEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []state.LedgerEntry
	for _, e := range r.ledger {
		if e.Kind == state.LedgerCharge {
			out = append(out, e)
		}
	}
	return out
}

// flights are the in-flight hooks' calls, as "add KEY GPUS" and
// "remove KEY".
type flights struct {
	mu    sync.Mutex
	calls []string
}

func (f *flights) Add(key string, gpus int, since time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "add "+strconv.Quote(key)+" "+strconv.Itoa(gpus))
}

func (f *flights) Remove(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "remove "+strconv.Quote(key))
}

func (f *flights) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.calls, "; ")
}

// A controller whose transition cannot be recorded (harness) ends the
// attempt's processes and writes when they were proven gone to the end
// log: after the server's exit, before harness returned.
func TestHarnessRecordsProvenEnd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	before := time.Now()
	after, err := attempt.HarnessEndOf(&launch.Launcher{Reaper: testReaper}, dir, "p1.saturation", []string{"sleep", "1000"})
	if err != nil {
		t.Fatal(err)
	}
	ends, err := endlog.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ends) != 1 {
		t.Fatalf("end records %v, want one", ends)
	}
	for _, at := range ends {
		if at.Before(before) || at.After(after) {
			t.Fatalf("end recorded at %v, not between the start %v and harness's return %v", at, before, after)
		}
	}
}

// phaseCase is one outcome of a phase: what the test changes in a
// harness before the attempt runs (prep), the path it must take
// (wantPath), the gate verdicts in order when gates is set (wantGates),
// and what else must hold (check). Every case ends with nothing of the
// attempt left (wantClean).
type phaseCase struct {
	name  string
	prep  func(h *harness)
	path  string
	gates string
	check func(h *harness)
}

// runCases runs each case as a parallel subtest in a harness of its own.
func runCases(t *testing.T, cases []phaseCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			if tc.prep != nil {
				tc.prep(h)
			}
			h.execute()
			h.wantPath(tc.path)
			if tc.gates != "" {
				h.wantGates(tc.gates)
			}
			if tc.check != nil {
				tc.check(h)
			}
			h.wantClean()
		})
	}
}

// refuseAt makes the recorder refuse the record of the move to st, as a
// database that cannot write does.
func (h *harness) refuseAt(st state.AttemptState) {
	h.rec.refuse = func(to state.AttemptState) error {
		if to == st {
			return errors.New("record transition: no space left on device")
		}
		return nil
	}
}

// at runs f when the attempt asks to enter st.
func (h *harness) at(st state.AttemptState, f func(rep record.Report)) { h.rec.on[st] = f }

// stopAt ends Execute's context with cause (nil: an operator's stop) when
// the attempt asks to enter st.
func (h *harness) stopAt(st state.AttemptState, cause error) {
	h.at(st, func(record.Report) { h.cancel(cause) })
}

// nothingStarted fails the test if the attempt recorded a process, held
// GPU time or charged any.
func (h *harness) nothingStarted() {
	h.t.Helper()
	if ps := h.rec.procs(); len(ps) != 0 {
		h.t.Fatalf("processes recorded: %+v", ps)
	}
	if f := h.flights.String(); strings.Contains(f, "add ") {
		h.t.Fatalf("GPU time held: %s", f)
	}
	if c := h.rec.charges(); len(c) != 0 {
		h.t.Fatalf("charged: %+v", c)
	}
}

// chargedOnce fails the test unless the attempt's GPU time was charged
// exactly once, held from its server's start until that charge, and
// recorded as its gpu_seconds figure.
func (h *harness) chargedOnce() {
	h.t.Helper()
	c := h.rec.charges()
	if len(c) != 1 || c[0].GPUSeconds <= 0 || c[0].Run != h.run.ID || c[0].Attempt != 1 {
		h.t.Fatalf("charges %+v, want one of the attempt's GPU time", c)
	}
	if g, ok := h.rec.figure("gpu_seconds"); !ok || g != c[0].GPUSeconds {
		h.t.Fatalf("gpu_seconds %v (%v), charged %v", g, ok, c[0].GPUSeconds)
	}
	key := strconv.Quote(record.Key(h.run.ID, 1))
	if got, want := h.flights.String(), "add "+key+" 1; remove "+key; got != want {
		h.t.Fatalf("in flight: %s, want %s", got, want)
	}
}

// evidenceList is the evidence files' digests recorded.
func (r *recorder) evidenceList() []state.EvidenceFile {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.evidence)
}

// signalList is the signals recorded, in order.
func (r *recorder) signalList() []state.Signal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.signals)
}
