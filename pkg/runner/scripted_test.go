package runner_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"warden/pkg/attempt"
	"warden/pkg/budget"
	"warden/pkg/gates"
	"warden/pkg/record"
	"warden/pkg/runner"
	"warden/pkg/state"
	"warden/protocols"
)

// The campaign loop tested through its executor seam: a scripted
// executor (runner.SetExecutor) runs no process. Each attempt it is asked
// to run takes the next step of its run's script (complete when the
// script is spent) and is recorded through the recorder the local
// executor gives a real attempt, so the loop reads a real bbolt store
// (strict mode) of a real plan (testdata/*.yaml) on fake GPUs; what the
// executor was asked to run is kept, in order, for the tests to read.
// These tests take milliseconds and run in parallel: each owns its
// campaign directory and store. By rule: the outcome policy's verdicts
// and the retries (scripted_retry_test.go), the thresholds and the checks
// before a wave (scripted_stop_test.go), the budget in flight
// (scripted_budget_test.go), co-location judging (scripted_coloc_test.go),
// the capacity search's next point (scripted_capacity_test.go), the power
// check (scripted_power_test.go) and resume (scripted_resume_test.go).
// Campaigns of stand-in processes (harness_test.go) are kept for what only
// real processes show.

// step is how one scripted attempt goes. The zero step completes.
type step struct {
	// State is the terminal state (Complete when ""); Reason and Detail
	// its reason. An attempt that holds (Hold) or is a background ends
	// as its context or its target says instead.
	State  state.AttemptState
	Reason state.Reason
	Detail string
	// GPUSeconds is the charge; 0: the time the server held its GPUs.
	GPUSeconds float64
	// HeldS is how long the server has held its GPUs when the attempt
	// starts measuring: its flight starts that long before now.
	HeldS float64
	// Hold keeps the attempt measuring until its context ends; it then
	// ends interrupted (budget-exhausted when the cause says the cap).
	Hold bool
	// AfterStart and AfterEnd keep the attempt measuring (a background
	// serving) until the executor was asked to run the named run, or ended
	// an attempt of it.
	AfterStart, AfterEnd string
	// Early ends a background load before its target is done: its client
	// failed (client-failed, EarlyBackground), once AfterStart allows.
	Early bool
	// Files are written into the attempt directory before the end (by
	// path relative to it); FIFOs are made there instead of files.
	Files map[string]string
	FIFOs []string
	// Gates are verdicts recorded with the end, as a validator's are.
	Gates []state.GateVerdict
	// Do runs just before the end.
	Do func()
}

// call is what the executor was asked to run.
type call struct {
	Run        string
	N          int
	Slots      []string
	Regime     string
	Wave       int     // the wave whose reservation holds the run: 1, 2, ... in ledger order
	Rate       float64 // a capacity point's rate
	Background bool
	PlanSHA    string // the protocol sha256 of the plan the attempt was given
}

// scripted is the executor. Its methods are safe for concurrent use.
type scripted struct {
	store *state.Store

	mu     sync.Mutex               // guards what follows
	steps  map[string][]step        // run id -> the steps of its attempts, in turn
	fn     func(call) step          // the step of an attempt past its run's steps, when set
	calls  []call                   // in the order asked
	events []string                 // "start RUN", "end RUN", "measuring RUN", "until RUN", "alloc UNIT", "release UNIT"
	seen   map[string]chan struct{} // "start RUN" / "end RUN" -> closed when it happened
	// allocErr fails the next co-location allocation.
	allocErr error
}

func newScripted(store *state.Store, steps map[string][]step) *scripted {
	if steps == nil {
		steps = map[string][]step{}
	}
	return &scripted{store: store, steps: steps, seen: map[string]chan struct{}{}}
}

// note records an event and wakes whoever waits for it.
func (x *scripted) note(ev string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.events = append(x.events, ev)
	ch := x.seenLocked(ev)
	if !isClosed(ch) {
		close(ch)
	}
}

func (x *scripted) seenLocked(ev string) chan struct{} {
	ch, ok := x.seen[ev]
	if !ok {
		ch = make(chan struct{})
		x.seen[ev] = ch
	}
	return ch
}

// happened is closed once ev happened.
func (x *scripted) happened(ev string) <-chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.seenLocked(ev)
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// take records the call and returns its step.
func (x *scripted) take(s attempt.Spec) (call, step) {
	cl := call{Run: s.Run.ID, N: s.N, Slots: protocols.SlotNames(s.Slots), Regime: s.Options.Regime, Wave: x.wave(s.Run.ID),
		Background: s.Options.Measuring != nil, PlanSHA: s.Plan.Protocol.SHA256}
	if s.Run.Capacity != nil {
		cl.Rate = s.Run.Capacity.Rate
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.calls = append(x.calls, cl)
	var st step
	switch {
	case len(x.steps[cl.Run]) > 0:
		st = x.steps[cl.Run][0]
		x.steps[cl.Run] = x.steps[cl.Run][1:]
	case x.fn != nil:
		st = x.fn(cl)
	}
	return cl, st
}

// wave is the wave whose reservation holds run: the entries of one
// commit carry one time, so the reservations' distinct times, in ledger
// order, number the waves.
func (x *scripted) wave(run string) int {
	es, err := x.store.Ledger()
	if err != nil {
		return -1
	}
	wave, n := 0, 0
	var last time.Time
	for _, e := range es {
		if e.Kind != state.LedgerReserve {
			continue
		}
		if n == 0 || !e.At.Equal(last) {
			n++
			last = e.At
		}
		if e.Run == run {
			wave = n
		}
	}
	return wave
}

// Run is the executor's: the attempt passes through the lifecycle's
// states in two commits (to measuring, then to its end), holds its GPUs
// in flight between them, and is charged with its end.
func (x *scripted) Run(ctx context.Context, env *attempt.Env, rec record.Recorder, s attempt.Spec) attempt.Outcome {
	cl, st := x.take(s)
	x.note("start " + cl.Run)
	defer x.note("end " + cl.Run)
	r := record.New(record.Config{Recorder: rec, Dir: env.Dir, Log: env.Log, Now: env.Now}, s.Run.ID, s.N, s.Dir)
	harness := func(err error) attempt.Outcome {
		return attempt.Outcome{State: state.Failed, Reason: state.ReasonHarnessError, Detail: "scripted: " + err.Error()}
	}
	for _, to := range []state.AttemptState{state.Reserved, state.Preflight, state.Starting, state.Ready} {
		r.Pass(to, "scripted", nil)
	}
	if err := r.Transition(state.Measuring, "", "scripted", nil); err != nil {
		return harness(err)
	}
	since := env.Now().Add(-time.Duration(st.HeldS * float64(time.Second)))
	env.InFlight.Add(r.Key(), len(s.GPUIDs), since)
	defer env.InFlight.Remove(r.Key())

	out := attempt.Outcome{State: st.State, Reason: st.Reason, Detail: st.Detail}
	if out.State == "" {
		out.State = state.Complete
	}
	interrupted := func() {
		out = attempt.Outcome{State: state.Interrupted, Reason: state.ReasonInterrupted, Detail: "scripted: stopped", Interrupted: true}
		if context.Cause(ctx) == attempt.ErrBudgetExhausted {
			out.Reason = state.ReasonBudgetExhausted
		}
	}
	wait := func(ev string) bool {
		select {
		case <-x.happened(ev):
			return true
		case <-ctx.Done():
			interrupted()
			return false
		}
	}
	if s.Options.Measuring != nil {
		// a background load: serving once its client runs, until its
		// target is done (Until) or it ends early
		s.Options.Measuring <- cl.Run
		x.note("measuring " + cl.Run)
	}
	ok := true
	if st.AfterStart != "" {
		ok = wait("start " + st.AfterStart)
	}
	if ok && st.AfterEnd != "" {
		ok = wait("end " + st.AfterEnd)
	}
	switch {
	case !ok:
	case s.Options.Measuring != nil:
		if st.Early {
			r.SetEarlyBackground()
			out = attempt.Outcome{State: state.Failed, Reason: state.ReasonClientFailed, Detail: "scripted: the background's client ended", EarlyBackground: true}
			break
		}
		select {
		case <-s.Options.Until:
			x.note("until " + cl.Run)
			out = attempt.Outcome{State: state.Complete}
		case <-ctx.Done():
			interrupted()
		}
	case st.Hold:
		<-ctx.Done()
		interrupted()
	}

	for name, body := range st.Files {
		path := filepath.Join(s.Dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return harness(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			return harness(err)
		}
	}
	for _, name := range st.FIFOs {
		path := filepath.Join(s.Dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return harness(err)
		}
		if err := syscall.Mkfifo(path, 0o644); err != nil {
			return harness(err)
		}
	}
	for _, g := range st.Gates {
		r.Gate(gates.Verdict{Gate: g.Gate, Verdict: g.Verdict, Figures: g.Figures, Detail: g.Detail})
	}
	if st.Do != nil {
		st.Do()
	}
	charge := st.GPUSeconds
	if charge == 0 {
		charge = budget.Charge(len(s.GPUIDs), since, env.Now())
	}
	r.NoteCharge(charge, "scripted")
	r.SetFigure("gpu_seconds", charge)
	hops := []state.AttemptState{state.Stopping, state.Cleanup}
	if out.State != state.Failed {
		hops = append(hops, state.Validating)
	}
	if out.State != state.Interrupted {
		for _, to := range hops {
			r.Pass(to, "scripted", nil)
		}
	}
	if err := r.Transition(out.State, out.Reason, out.Detail, nil); err != nil {
		return harness(err)
	}
	return out
}

// Colocation is the executor's: it notes the allocation and its release.
func (x *scripted) Colocation(_ context.Context, unit int, slots []protocols.SlotInfo) (func(), error) {
	x.mu.Lock()
	err := x.allocErr
	x.allocErr = nil
	x.mu.Unlock()
	x.note(fmt.Sprintf("alloc %d %s", unit, strings.Join(protocols.SlotNames(slots), "+")))
	if err != nil {
		return nil, err
	}
	return func() { x.note(fmt.Sprintf("release %d", unit)) }, nil
}

// await waits until ev happened; it fails the test when Run returns
// first or after runWait.
func (x *scripted) await(t *testing.T, r *running, ev string) {
	t.Helper()
	select {
	case <-x.happened(ev):
	case <-r.finished:
		t.Fatalf("Run returned (%v) before %s", r.err, ev)
	case <-time.After(runWait):
		t.Fatalf("no %s within %v", ev, runWait)
	}
}

// asked is a copy of the calls so far.
func (x *scripted) asked() []call {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Clone(x.calls)
}

// callsOf are the calls for run, in order.
func (x *scripted) callsOf(run string) []call {
	var out []call
	for _, c := range x.asked() {
		if c.Run == run {
			out = append(out, c)
		}
	}
	return out
}

// seq is a copy of the events so far.
func (x *scripted) seq() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Clone(x.events)
}

// eventIndex is where ev is among the events, -1 when it is not.
func eventIndex(evs []string, ev string) int { return slices.Index(evs, ev) }

// loopCampaign is a campaign of a testdata protocol, edited by the pairs
// of old and new text in edits (each must be found), with a strict store
// and a Runner that runs its attempts with a scripted executor.
type loopCampaign struct {
	*campaign
	x  *scripted
	rn *runner.Runner
}

func newLoopCampaign(t *testing.T, file string, steps map[string][]step, edits ...string) *loopCampaign {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	y := string(b)
	for i := 0; i+1 < len(edits); i += 2 {
		if !strings.Contains(y, edits[i]) {
			t.Fatalf("test bug: %s has no %q", file, edits[i])
		}
		y = strings.ReplaceAll(y, edits[i], edits[i+1])
	}
	tmp := t.TempDir()
	path := filepath.Join(tmp, file)
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	c := newCampaignOf(t, tmp, path)
	// strict: every commit checks the store's invariants
	c.store.Close()
	if c.store, err = state.Open(filepath.Join(c.dir, "state.db"), state.Options{Timeout: 2 * time.Second, Strict: true}); err != nil {
		t.Fatal(err)
	}
	lc := &loopCampaign{campaign: c, x: newScripted(c.store, steps)}
	lc.rn = lc.newScriptedRunner()
	return lc
}

// newScriptedRunner is a Runner on the campaign with the campaign's
// scripted executor, as a resumed controller builds one.
func (c *loopCampaign) newScriptedRunner() *runner.Runner {
	rn := c.newRunner()
	rn.SetExecutor(c.x)
	return rn
}

// run runs the campaign with its Runner until Run returns.
func (c *loopCampaign) run() { c.start(c.rn).wait(c.t) }

// resume runs the campaign again with a new Runner, as controller resume
// does, until Run returns.
func (c *loopCampaign) resume() {
	c.rn = c.newScriptedRunner()
	c.run()
}

// wantCalls fails the test unless the executor was asked to run
// exactly these runs, each attempt in turn, in any order between runs.
func (c *loopCampaign) wantCalls(want ...string) {
	c.t.Helper()
	var got []string
	for _, cl := range c.x.asked() {
		got = append(got, fmt.Sprintf("%s/a%d", cl.Run, cl.N))
	}
	slices.Sort(got)
	w := slices.Clone(want)
	slices.Sort(w)
	if !slices.Equal(got, w) {
		c.t.Fatalf("the executor ran %v, want %v", got, w)
	}
}

// stoppedAt fails the test unless the campaign stopped with reason and
// returns it.
func (c *loopCampaign) stoppedAt(reason state.StopReason, detail ...string) state.Campaign {
	c.t.Helper()
	cp := c.wantStopped(reason)
	for _, d := range detail {
		if !strings.Contains(cp.StopDetail, d) {
			c.t.Fatalf("stop detail %q lacks %q", cp.StopDetail, d)
		}
	}
	return cp
}

// record is the campaign's record.
func (c *loopCampaign) record() state.Campaign { return c.campaign.campaign() }

// planRun is the plan's run id.
func (c *loopCampaign) planRun(id string) protocols.Run {
	c.t.Helper()
	for _, r := range c.plan.Runs {
		if r.ID == id {
			return r
		}
	}
	c.t.Fatalf("the plan has no run %s", id)
	return protocols.Run{}
}
