package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"warden/pkg/atomicfile"
	"warden/pkg/failpoint"
	"warden/pkg/gpu/sample"
	"warden/pkg/safefile"

	"warden/pkg/budget"
	"warden/pkg/gates"
	"warden/pkg/gpu/fakegpu"
	"warden/pkg/launch"
	"warden/pkg/state"
	"warden/protocols"
)

// outcome is how one attempt ended.
type outcome struct {
	state       state.AttemptState
	reason      state.Reason
	detail      string
	interrupted bool
	// earlyBackground: a background load whose client ended before its
	// target was done
	earlyBackground bool
}

// runUnit executes the unit's runs back to back. After each attempt the
// outcome policy (Next) says what follows: the next run, an exact retry,
// or the end of the unit with a failure that stops the campaign.
func (c *Runner) runUnit(ctx context.Context, u *unitRun) unitResult {
	res := unitResult{unit: u.Unit}
	for _, r := range u.Runs {
		retries := 0
		for {
			out := c.runAttempt(ctx, r, u.Slots, attemptOpts{regime: u.Regime})
			v := Next(out.state, out.reason, retries, c.currentPlan().Retries)
			switch v.Next {
			case Restart:
				res.interrupted = true
				return res
			case Quarantine:
				res.quarantined++
			case Retry:
				if ctx.Err() != nil {
					res.interrupted = true
					return res
				}
				retries++
				c.log.Warn().Str("run", r.ID).Str("reason", string(out.reason)).Int("retry", retries).Msg("exact retry after an infrastructure failure")
				failpoint.Hit("retry-decided")
				continue
			case StopForReview:
				res.failedRun, res.reason, res.detail, res.verdict = r.ID, out.reason, out.detail, v
				return res
			}
			break
		}
	}
	return res
}

// attempt is the working state of one attempt.
type attempt struct {
	c   *Runner
	rec recorder // where its records go
	// diskFullSeen is the runner's count of ENOSPC writes when the attempt
	// was created.
	diskFullSeen int64
	// needDirs, when set, are the needed runs' result directories as the
	// controller resolved them (a node-side runner has no database)
	needDirs map[string]string
	plan     *protocols.Plan // the plan the attempt started under, kept through an amendment
	run      protocols.Run
	n        int
	dir      string
	slots    []protocols.SlotInfo
	gpuIDs   []int
	cpus     []int
	port     int
	vars     map[string]string
	env      []string
	server   *launch.Proc
	client   *launch.Proc
	started  time.Time // server start, for the GPU charge
	phases   *phaseWatcher
	quarant  bool

	// exits and signals not yet recorded: they are written with the next
	// transition, in its transaction, rather than one transaction each
	pendExits []state.Exit
	pendSigs  []state.Signal
	exited    map[int]bool // pids whose exit is noted
	// gate verdicts and ledger entries written with the next transition
	pendGates  []state.GateVerdict
	pendLedger []state.LedgerEntry
	state      state.AttemptState
	figures    map[string]float64 // the attempt's own figures, written with each transition
	opts       attemptOpts
	// drainVerdict is the drain gate once the client reported done
	drainVerdict *gates.Verdict
	sampler      *sample.Sampler
	post         chan map[string]float64 // the post-measure record's figures, when taken
	// own judges the processes the sampler sees on the GPUs (nil when
	// nothing samples); foreign is its verdict once taken, to fail the
	// attempt with.
	own     *ownProcs
	foreign *gates.Verdict
	// earlyBackground: this background load's client ended before its
	// target was done
	earlyBackground bool
	// ctx is the attempt's context; its cause says why it ended early
	// (errBudgetExhausted, or an operator's stop).
	ctx context.Context
	// stopErr holds what went wrong ending the attempt's processes (a
	// signal or cgroup operation that failed): a cleanup gate that then
	// fails is cleanup-failed, not a timeout.
	stopErr error
}

func (a *attempt) transition(to state.AttemptState, reason state.Reason, msg string, figures map[string]float64) error {
	err := a.rec.transition(a.run.ID, a.n, Report{To: to, Reason: reason, Message: msg, Figures: figures, EarlyBackground: a.earlyBackground,
		Exits: a.pendExits, Signals: a.pendSigs, AttemptFigures: a.figures, Gates: a.pendGates, Ledger: a.pendLedger})
	if err != nil {
		return err
	}
	a.pendExits, a.pendSigs, a.pendGates, a.pendLedger = nil, nil, nil, nil
	a.state = to
	a.c.log.Info().Str("run", a.run.ID).Int("attempt", a.n).Str("to", string(to)).Str("reason", string(reason)).Msg(msg)
	return nil
}

// gate notes a gate's verdict: gates.jsonl at once, the database with the
// attempt's next transition (in its transaction).
func (a *attempt) gate(v gates.Verdict) {
	if v.At.IsZero() {
		v.At = a.c.now()
	}
	a.pendGates = append(a.pendGates, state.GateVerdict{Gate: v.Gate, Run: a.run.ID, Attempt: a.n, Verdict: v.Verdict, Figures: v.Figures, Detail: v.Detail, At: v.At})
	a.c.appendJSONLine(filepath.Join(a.dir, "gates.jsonl"), v)
}

// runAttempt executes one attempt of a run from a fresh server to a
// terminal state. Every step is a recorded transition; nothing slow
// happens inside a database transaction.
// attemptOpts shape an attempt beyond its run.
type attemptOpts struct {
	regime string // the regime in force, exported as ${REGIME}
	// For a background load of a co-location check: measuring receives the
	// run id once its client runs, and closing until ends the client (the
	// target is done); the run then completes normally.
	measuring chan<- string
	until     <-chan struct{}
	// allocation, on the Slurm executor, is the job whose allocation the
	// attempt's step runs in (a co-location check's); zero: a job of its own.
	allocation allocation
}

// allocation is a Slurm job allocated for several attempts' steps.
type allocation struct {
	ID, Name string
}

func (c *Runner) runAttempt(ctx context.Context, r protocols.Run, slots []protocols.SlotInfo, opts attemptOpts) outcome {
	run, err := c.store.Run(r.ID)
	if err != nil {
		return outcome{state: state.Failed, reason: state.ReasonHarnessError, detail: err.Error()}
	}
	a := &attempt{c: c, rec: storeRecorder{c}, plan: c.currentPlan(), run: r, n: run.Attempts + 1, slots: slots, opts: opts,
		diskFullSeen: c.diskFull.Load()}
	a.dir = filepath.Join(c.dir, "runs", r.ID, "a"+strconv.Itoa(a.n))
	for _, s := range slots {
		a.gpuIDs = append(a.gpuIDs, s.GPUs...)
		cpus, _ := protocols.ParseCPUList(s.CPUs)
		a.cpus = append(a.cpus, cpus...)
	}
	a.port = slots[0].Port
	if err := c.mkdirBeneath(a.dir); err != nil {
		return outcome{state: state.Failed, reason: state.ReasonHarnessError, detail: err.Error()}
	}
	slotNames := make([]string, len(slots))
	for i, s := range slots {
		slotNames[i] = s.Name
	}
	cp, _ := c.store.Campaign()
	amends, _ := c.store.Amendments()
	_, err = c.store.NewAttempt(r.ID, a.dir, func(at *state.Attempt) {
		at.Slot = strings.Join(slotNames, "+")
		at.GPUIDs = a.gpuIDs
		at.CPUs = protocols.FormatCPUList(a.cpus)
		at.Port = a.port
		at.ProtocolSHA256 = cp.ProtocolSHA256
		for _, am := range amends {
			at.Amendments = append(at.Amendments, am.ID)
		}
	})
	if err != nil && !errors.Is(err, state.ErrStateFile) {
		return outcome{state: state.Failed, reason: state.ReasonHarnessError, detail: err.Error()}
	}
	failpoint.Hit("attempt-created")
	if c.slurm != nil {
		return a.executeOnSlurm(ctx)
	}
	return a.execute(ctx)
}

func (a *attempt) execute(ctx context.Context) outcome {
	c := a.c
	a.ctx = ctx
	if err := a.transition(state.Reserved, "", "budget reserved for the wave", nil); err != nil {
		return a.harness(err)
	}
	if ctx.Err() != nil {
		return a.interrupt("stopped before preflight")
	}

	// preflight
	if err := a.transition(state.Preflight, "", "checking GPUs and port", nil); err != nil {
		return a.harness(err)
	}
	snap, err := c.gpus.Snapshot(a.gpuIDs)
	if err != nil {
		return a.fail(state.ReasonHarnessError, "read GPUs: "+err.Error())
	}
	pv := gates.Preflight(snap, 0, c.uid, c.now())
	a.gate(pv)
	if !pv.Passed() {
		reason := state.ReasonGPUNotIdle
		if pv.Foreign() {
			reason = state.ReasonForeignGPUProcess
		}
		return a.fail(reason, pv.Detail)
	}
	readings := a.recordHost("preflight")
	if cl := a.checkCPULocal(readings); cl.Verdict == gates.Fail {
		a.gate(cl)
		return a.fail(state.ReasonHarnessError, "slot "+strings.Join(slotNamesOf(a.slots), "+")+": "+cl.Detail)
	} else {
		a.gate(cl)
	}
	if pp := gates.PortFree(a.port, c.now()); !pp.Passed() {
		a.gate(pp)
		return a.fail(state.ReasonHarnessError, pp.Detail)
	} else {
		a.gate(pp)
	}

	// starting
	if err := a.prepareCommands(); err != nil {
		return a.fail(state.ReasonHarnessError, err.Error())
	}
	if err := a.transition(state.Starting, "", "starting server", nil); err != nil {
		return a.harness(err)
	}
	a.startSampler(readings)
	srv, err := a.start("server", a.run.Server.Command, a.run.Server.Env)
	if err != nil {
		return a.fail(state.ReasonHarnessError, "start server: "+err.Error())
	}
	a.server, a.started = srv, srv.Started
	c.flights.add(a.key(), len(a.gpuIDs), srv.Started)
	if a.run.ClientStart == "at-start" {
		if cl, err := a.start("client", a.run.Client, a.run.Env); err != nil {
			return a.stopThenFail(state.ReasonHarnessError, "start client: "+err.Error())
		} else {
			a.client = cl
		}
	}
	err = a.probeReady(ctx, srv)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return a.stopThenInterrupt("stopped while the server was starting")
	case errors.Is(err, launch.ErrExited):
		return a.stopThenFail(a.serverExitReason(), fmt.Sprintf("server exited before it was ready (%s)%s", exitText(srv.Exit()), a.oomNote()))
	default:
		return a.stopThenFail(state.ReasonServerNotReady, fmt.Sprintf("server not ready within %.0f s: %v", a.run.Server.ReadyTimeoutS, err))
	}
	if err := a.transition(state.Ready, "", "server healthy", map[string]float64{"startup_s": c.now().Sub(a.started).Seconds()}); err != nil {
		return a.harness(err)
	}
	for _, cv := range a.effectiveConfig(ctx) {
		a.gate(cv)
		if !cv.Passed() {
			return a.stopThenFail(state.ReasonConfigMismatch, cv.Detail)
		}
	}

	// measuring
	if a.client == nil {
		cl, err := a.start("client", a.run.Client, a.run.Env)
		if err != nil {
			return a.stopThenFail(state.ReasonHarnessError, "start client: "+err.Error())
		}
		a.client = cl
	}
	a.phases = newPhaseWatcher(a.vars["PHASE_FILE"])
	defer a.phases.close()
	if err := a.transition(state.Measuring, "", "client running", nil); err != nil {
		return a.harness(err)
	}
	if a.opts.measuring != nil {
		a.opts.measuring <- a.run.ID
	}
	reason, detail := a.supervise(ctx)
	a.recordPostMeasure()
	if reason == state.ReasonInterrupted {
		return a.stopThenInterrupt(detail)
	}
	if reason != "" {
		return a.stopThenFail(reason, detail)
	}
	return a.stopThenValidate()
}

// probeReady polls the server's health until it answers the expected
// status, the server exits, or the protocol's ready timeout passes. It
// polls every 5 ms for the first second (a stand-in or a warm server is
// ready at once) and every 250 ms after that (a real one loads for minutes).
func (a *attempt) probeReady(ctx context.Context, srv *launch.Proc) error {
	readyCtx, cancel := context.WithTimeout(ctx, time.Duration(a.run.Server.ReadyTimeoutS*float64(time.Second)))
	defer cancel()
	url := fmt.Sprintf("http://127.0.0.1:%d%s", a.port, a.run.Server.HealthPath)
	fast, cancelFast := context.WithTimeout(readyCtx, time.Second)
	err := launch.Probe(fast, url, a.run.Server.HealthStatus, 5*time.Millisecond, srv.Done())
	cancelFast()
	if err == nil || errors.Is(err, launch.ErrExited) || readyCtx.Err() != nil {
		return err
	}
	return launch.Probe(readyCtx, url, a.run.Server.HealthStatus, 250*time.Millisecond, srv.Done())
}

// supervise waits for the client while watching the server and the
// client's drain. It wakes once a second to read what the client appended
// to its phase file; nothing else runs while a benchmark measures.
func (a *attempt) supervise(ctx context.Context) (state.Reason, string) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	// The measuring deadline, from the client's start. A background load
	// has none of its own: it ends when its target is done, and the
	// target's deadline bounds it.
	var deadline <-chan time.Time
	if a.opts.until == nil && a.run.DeadlineS > 0 {
		t := time.NewTimer(time.Until(a.client.Started.Add(seconds(a.run.DeadlineS))))
		defer t.Stop()
		deadline = t.C
	}
	for {
		select {
		case <-a.client.Done():
			return a.clientEnded()
		case <-a.server.Done():
			a.recordExit(a.server)
			return a.serverExitReason(), "server exited while the client ran (" + exitText(a.server.Exit()) + ")" + a.oomNote()
		case <-ctx.Done():
			return state.ReasonInterrupted, "stopped while measuring"
		case <-a.opts.until:
			// a background load: its target is done; end the client
			// gracefully, which is this run's normal end
			a.stopClient()
			return "", ""
		case <-deadline:
			if a.clientGone() {
				return a.clientEnded()
			}
			ran := a.c.now().Sub(a.client.Started).Seconds()
			a.setFigure("measure_deadline_s", a.run.DeadlineS)
			a.setFigure("client_ran_s", ran)
			a.stopClient()
			return state.ReasonMeasureDeadline, fmt.Sprintf("the client ran %.1f s, past the %.0f s measuring deadline of load %s; ended", ran, a.run.DeadlineS, a.run.Load)
		case v := <-a.ownFound():
			return a.foreignProcess(v)
		case <-tick.C:
			if a.clientGone() {
				return a.clientEnded()
			}
			if a.run.AdmissionEnd == "phase-file" {
				if r, d := a.checkDrain(time.Time{}); r != "" {
					return r, d
				}
			}
		}
	}
}

// clientGone collects any exit that has already happened and says whether
// the client is gone. The measuring deadline and the drain watchdog judge a
// client still running: one found exited when either timer fires ended on
// its own, and is judged on its exit. After the controller itself was
// stopped the timers fire at once on resuming, before the reaper's goroutine
// has read the pending SIGCHLD; without this the exited client would be
// failed measure-deadline and its (empty) group signalled.
func (a *attempt) clientGone() bool {
	a.c.starter.Reaper.Collect()
	select {
	case <-a.client.Done():
		return true
	default:
		return false
	}
}

// clientEnded judges the client's own exit.
func (a *attempt) clientEnded() (state.Reason, string) {
	a.recordExit(a.client)
	ex := a.client.Exit()
	if a.opts.until != nil {
		a.earlyBackground = true
		return state.ReasonClientFailed, "background load ended before its target (" + exitText(ex) + ")"
	}
	if ex.Code == state.ExitDrainAbandoned && ex.Signal == "" {
		return state.ReasonDrainAbandoned, fmt.Sprintf("client exit code %d: it abandoned requests still outstanding at its drain bound", ex.Code)
	}
	if ex.Code != 0 || ex.Signal != "" {
		return state.ReasonClientFailed, "client " + exitText(ex)
	}
	return a.finalDrain(ex.At)
}

// seconds converts protocol seconds to a Duration.
func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// checkDrain reads the client's phases: past the class allowance the run
// is quarantined; past the watchdog the client is ended and the run fails.
// end, when set, is when the client exited: the drain ended then at the
// latest.
func (a *attempt) checkDrain(end time.Time) (state.Reason, string) {
	a.phases.poll()
	drainAt := a.phases.at("drain")
	if drainAt.IsZero() {
		return "", ""
	}
	if t := a.phases.at("done"); !t.IsZero() {
		end = t
	} else if end.IsZero() {
		end = a.c.now()
	}
	return a.judgeDrain(end.Sub(drainAt).Seconds(), !a.phases.at("done").IsZero() || !end.IsZero())
}

// judgeDrain applies the class's allowance and watchdog to a drain of
// drained seconds; final says the drain is over (its verdict is kept).
func (a *attempt) judgeDrain(drained float64, final bool) (state.Reason, string) {
	a.setFigure("drain_s", drained)
	v, outcome := gates.Drain(drained, a.run.DrainS, a.run.WatchdogS, a.c.now())
	switch outcome {
	case gates.DrainWatchdog:
		a.gate(v)
		return state.ReasonDrainWatchdog, fmt.Sprintf("drain ran %.1f s, past the %.0f s watchdog of class %s", drained, a.run.WatchdogS, a.run.Class)
	case gates.DrainQuarantine:
		if !a.quarant {
			a.quarant = true
			a.c.log.Warn().Str("run", a.run.ID).Float64("drain_s", drained).Float64("allowance_s", a.run.DrainS).Msg("drain over allowance: run quarantined")
		}
	case gates.DrainUnknown:
		a.gate(v)
		return state.ReasonHarnessError, "drain gate: " + v.Detail
	}
	if final {
		a.drainVerdict = &v
	}
	return "", ""
}

// finalDrain judges the drain once the client exited 0, from the source
// the load declares. A source that never says when admission stopped
// fails the drain gate (fail closed): the run fails with drain-unseen.
func (a *attempt) finalDrain(exited time.Time) (state.Reason, string) {
	switch a.run.AdmissionEnd {
	case "result-file":
		path := filepath.Join(a.dir, a.run.ResultFile)
		start, end, err := readDrainTimes(path)
		if err != nil {
			return a.drainUnseen(fmt.Sprintf("no drain times in the client's result %s: %v", a.run.ResultFile, err))
		}
		return a.judgeDrain(float64(end-start)/1e9, true)
	default:
		if r, d := a.checkDrain(exited); r != "" {
			return r, d
		}
		if a.phases.at("drain").IsZero() {
			return a.drainUnseen("the client never said when admission stopped: no drain line in its phase file " + filepath.Base(a.vars["PHASE_FILE"]))
		}
		return "", ""
	}
}

func (a *attempt) drainUnseen(detail string) (state.Reason, string) {
	a.gate(gates.Verdict{Gate: "drain", Verdict: gates.Fail, Detail: detail, At: a.c.now(),
		Figures: map[string]float64{"allowance_s": a.run.DrainS, "watchdog_s": a.run.WatchdogS}})
	return state.ReasonDrainUnseen, "drain gate: " + detail
}

// stopThenValidate ends the server gracefully, proves cleanup, runs the
// validators and records the terminal state.
func (a *attempt) stopThenValidate() outcome {
	if err := a.transition(state.Stopping, "", "stopping server through its API parent", nil); err != nil {
		return a.harness(err)
	}
	a.shutdown()
	if out, ok := a.cleanup(); !ok {
		return out
	}
	if err := a.transition(state.Validating, "", "validating artifacts", nil); err != nil {
		return a.harness(err)
	}
	if a.drainVerdict != nil {
		a.gate(*a.drainVerdict)
	}
	if r, d := a.validate(); r == state.ReasonQualityFailed {
		return a.terminal(state.Quarantined, r, d)
	} else if r == state.ReasonInterrupted {
		return a.stopThenInterrupt(d)
	} else if r != "" {
		return a.terminal(state.Failed, r, d)
	}
	if a.quarant {
		drained := a.figures["drain_s"]
		return a.terminalFig(state.Quarantined, state.ReasonDrainQuarantine,
			fmt.Sprintf("drain %.1f s over the %.0f s allowance of class %s", drained, a.run.DrainS, a.run.Class),
			map[string]float64{"drain_s": drained, "drain_allowance_s": a.run.DrainS})
	}
	return a.terminal(state.Complete, "", "run complete")
}

// stopThenFail leaves the happy path: note the reason, stop everything,
// prove cleanup, then fail.
func (a *attempt) stopThenFail(reason state.Reason, detail string) outcome {
	if err := a.transition(state.Stopping, reason, detail, nil); err != nil {
		return a.harness(err)
	}
	a.shutdown()
	if out, ok := a.cleanup(); !ok {
		return out
	}
	return a.terminal(state.Failed, reason, detail)
}

// stopThenInterrupt ends the attempt's processes for an operator stop;
// the run restarts from a fresh server on resume.
func (a *attempt) stopThenInterrupt(detail string) outcome {
	if a.server != nil || a.client != nil {
		a.shutdown()
		a.charge(a.c.now())
	}
	a.stopSampler()
	a.joinPostMeasure()
	reason := state.ReasonInterrupted
	if a.ctx != nil && errors.Is(context.Cause(a.ctx), errBudgetExhausted) {
		reason, detail = state.ReasonBudgetExhausted, "the campaign's GPU time reached its cap: "+detail
	}
	if err := a.transition(state.Interrupted, reason, detail, nil); err != nil {
		return a.harness(err)
	}
	return outcome{state: state.Interrupted, reason: reason, detail: detail, interrupted: true}
}

// key names the attempt in the runner's registries.
func (a *attempt) key() string { return attemptKey(a.run.ID, a.n) }

func (a *attempt) interrupt(detail string) outcome { return a.stopThenInterrupt(detail) }

// fail ends an attempt with a failure, by the legal path from where it
// is: directly before any process started, through stopping and cleanup
// after.
func (a *attempt) fail(reason state.Reason, detail string) outcome {
	if a.server != nil || a.client != nil || a.state == state.Starting {
		return a.stopThenFail(reason, detail)
	}
	return a.terminal(state.Failed, reason, detail)
}

func (a *attempt) harness(err error) outcome {
	a.c.log.Error().Err(err).Str("run", a.run.ID).Msg("record transition")
	if a.server != nil || a.client != nil {
		a.shutdown()
		if a.stopErr == nil {
			// its processes are proven gone now: resume charges it to here
			if err := a.c.ends.Record(a.run.ID, a.n, a.c.now()); err != nil {
				a.c.log.Warn().Err(err).Str("run", a.run.ID).Msg("record the attempt's end in the end log")
			}
		}
	}
	a.stopSampler()
	// the attempt stays live in the records: resume charges it
	a.c.flights.remove(a.key())
	return outcome{state: state.Failed, reason: state.ReasonHarnessError, detail: err.Error()}
}

func (a *attempt) terminal(to state.AttemptState, reason state.Reason, detail string) outcome {
	return a.terminalFig(to, reason, detail, nil)
}

func (a *attempt) terminalFig(to state.AttemptState, reason state.Reason, detail string, figures map[string]float64) outcome {
	if to == state.Failed {
		reason, detail = a.diskFullClass(reason, detail)
	}
	if err := a.transition(to, reason, detail, figures); err != nil {
		return a.harness(err)
	}
	return outcome{state: to, reason: reason, detail: detail, earlyBackground: a.earlyBackground}
}

// Grace periods of the processes an attempt starts, set once on their
// launch specs (the server's come from the protocol). The client gets time
// to write its results after SIGTERM; a validator is a short check.
const (
	clientGrace      = 10 * time.Second
	clientGroupGrace = 2 * time.Second
	validatorGrace   = 5 * time.Second
	// stopSlack is how much longer than its graces a shutdown may take
	// before it is abandoned (SIGKILL and the wait for the group).
	stopSlack = 30 * time.Second
)

// stopProc ends p with its spec's grace periods and notes the signals
// for the next transition.
func (a *attempt) stopProc(p *launch.Proc) {
	ctx, cancel := context.WithTimeout(context.Background(), p.Stop.Grace+p.Stop.GroupGrace+stopSlack)
	defer cancel()
	recs, err := p.Shutdown(ctx)
	a.pendSigs = append(a.pendSigs, toSignals(recs)...)
	if err != nil {
		a.stopErr = errors.Join(a.stopErr, err)
		a.c.log.Warn().Err(err).Str("run", a.run.ID).Str("role", p.Role).Msg("stop")
	}
	a.recordExit(p)
}

// stopClient ends the client gracefully: SIGTERM, its grace, the group.
func (a *attempt) stopClient() { a.stopProc(a.client) }

// shutdown stops the client (if still running) and the server: SIGTERM to
// the API parent, its grace, then the group and the cgroup. Every signal
// is recorded with its time.
func (a *attempt) shutdown() {
	if a.own != nil {
		a.own.end() // from here the cleanup gate judges what holds the GPUs
	}
	n := len(a.pendSigs)
	if a.client != nil {
		a.stopProc(a.client)
	}
	if a.server != nil {
		a.stopProc(a.server)
	}
	if len(a.pendSigs) > n {
		failpoint.Hit("signals-sent-unrecorded")
	}
}

// cleanup proves the attempt's processes are gone and its GPUs back to
// baseline within the protocol's timeout, then charges the GPU time.
func (a *attempt) cleanup() (outcome, bool) {
	a.joinPostMeasure()
	if err := a.transition(state.Cleanup, "", "proving cleanup", nil); err != nil {
		return a.harness(err), false
	}
	start := a.c.now()
	deadline := start.Add(time.Duration(a.plan.CleanupS * float64(time.Second)))
	var v gates.Verdict
	for {
		a.killAdopted()
		pids := a.livePIDs()
		snap, err := a.c.gpus.Snapshot(a.gpuIDs)
		now := a.c.now()
		if err != nil {
			v = gates.Verdict{Gate: "cleanup", Verdict: gates.Error, Detail: err.Error(), At: now}
		} else {
			v = gates.Cleanup(pids, snap, 0, now.Sub(start), now)
		}
		if v.Passed() || now.After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling the world, not waiting for a test condition
	}
	a.gate(v)
	a.charge(a.c.now())
	a.stopSampler()
	if !v.Passed() {
		reason := state.ReasonCleanupTimeout
		if a.stopErr != nil {
			reason = state.ReasonCleanupFailed
		}
		if snap, err := a.c.gpus.Snapshot(a.gpuIDs); err == nil {
			for _, g := range snap {
				for _, p := range g.Procs {
					if p.UID != a.c.uid {
						reason = state.ReasonForeignGPUProcess // another user's process holds the GPU
					}
				}
			}
		}
		return a.terminal(state.Failed, reason, "cleanup gate: "+v.Detail), false
	}
	return outcome{}, true
}

func (a *attempt) setFigure(k string, v float64) {
	if a.figures == nil {
		a.figures = map[string]float64{}
	}
	a.figures[k] = v
}

// charge records the attempt's GPU time from server start to now, once.
func (a *attempt) charge(end time.Time) {
	if a.started.IsZero() {
		return
	}
	amt := budget.Charge(len(a.gpuIDs), a.started, end)
	a.started = time.Time{}
	a.c.flights.remove(a.key())
	a.setFigure("gpu_seconds", amt)
	// recorded with the next transition; a crash before it is charged at
	// resume, from the server's start to the attempt's last record
	a.pendLedger = append(a.pendLedger, state.LedgerEntry{Kind: "charge", Run: a.run.ID, Attempt: a.n, GPUSeconds: amt, Note: "server start to cleanup"})
	failpoint.Hit("charged")
}

// killAdopted ends descendants of the attempt that escaped its process
// groups (setsid, double fork) and were reparented to the controller:
// without a cgroup nothing else reaches them. Each is identified by the
// attempt's directory in its inherited environment and by being our child.
func (a *attempt) killAdopted() {
	if a.c.cgroups.Available() {
		return // the attempt's cgroups hold its escapees; they were killed with them
	}
	ids, err := launch.Adopted(a.c.boot, "WARDEN_ATTEMPT_DIR="+a.dir)
	if err != nil {
		a.c.log.Warn().Err(err).Str("run", a.run.ID).Msg("look for adopted descendants")
		return
	}
	for _, id := range ids {
		rec, err := launch.Signal(a.c.boot, id, "adopted", syscall.SIGKILL)
		if err != nil {
			continue // gone already, or no longer ours
		}
		a.pendSigs = append(a.pendSigs, toSignals([]launch.SignalRecord{rec})...)
		a.c.log.Warn().Str("run", a.run.ID).Int("pid", id.PID).Msg("killed a descendant that escaped its process group")
	}
}

// livePIDs lists processes of the attempt still alive: in its cgroups and
// process groups.
func (a *attempt) livePIDs() []int {
	var pids []int
	for _, p := range []*launch.Proc{a.server, a.client} {
		if p == nil {
			continue
		}
		if l := p.Leaf(); !l.IsZero() {
			// the leaf holds the whole group and every escapee: no scan of /proc
			if ps, err := l.Procs(); err == nil {
				pids = append(pids, ps...)
				continue
			}
		}
		if ps, err := launch.GroupPIDs(p.PGID); err == nil {
			for _, pid := range ps {
				if !contains(pids, pid) {
					pids = append(pids, pid)
				}
			}
		}
	}
	return pids
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// validate runs the protocol's validators (exit code and JSON verdict)
// and the built-in privacy scan of the attempt directory.
func (a *attempt) validate() (state.Reason, string) {
	if a.foreign != nil {
		if a.foreign.Verdict == gates.Error {
			return state.ReasonHarnessError, "gpu-processes: " + a.foreign.Detail
		}
		// seen after the client ended, before the shutdown
		return state.ReasonForeignGPUProcess, a.foreign.Detail
	}
	a.recordTerminalClasses()
	if r, d := a.checkManifest(); r != "" {
		return r, d
	}
	env := a.env
	if len(a.run.Validators) > 0 {
		path, err := a.writeSignals()
		if err != nil {
			return state.ReasonHarnessError, err.Error()
		}
		env = append(append([]string(nil), a.env...), EnvSignalsFile+"="+path)
	}
	for _, v := range a.run.Validators {
		argv, err := a.expandCommand(v.Command)
		if err != nil {
			return state.ReasonHarnessError, err.Error()
		}
		if argv, err = boundedArgv(argv, v.MemoryMiB); err != nil {
			return state.ReasonHarnessError, err.Error()
		}
		out := filepath.Join(a.dir, "validator-"+v.Name+".out")
		p, err := a.c.starter.Start(launch.Spec{
			Role: "validator:" + v.Name, Argv: argv, Env: env, Dir: a.c.workdir,
			StdoutPath: out, StderrPath: filepath.Join(a.dir, "validator-"+v.Name+".err"),
			Stop: launch.StopOptions{Grace: validatorGrace, GroupGrace: validatorGrace},
		})
		if err != nil {
			return state.ReasonValidatorFailed, fmt.Sprintf("validator %s: %v", v.Name, err)
		}
		switch a.waitValidator(p, v) {
		case validatorTimedOut:
			bound := validatorTimeout(v).Seconds()
			a.setFigure("validator_timeout_s", bound)
			return state.ReasonHarnessError, fmt.Sprintf("validator %s ran past its %g s bound (timeout_s); ended", v.Name, bound)
		case validatorStopped:
			return state.ReasonInterrupted, fmt.Sprintf("stopped while validator %s ran; ended", v.Name)
		}
		ex := p.Exit()
		stdout, _ := safefile.ReadFile(out, maxChildFile)
		vd := gates.ValidatorResult(v.Name, ex.Code, ex.Signal, stdout, a.c.now())
		a.gate(vd)
		if !vd.Passed() {
			reason := state.ReasonValidatorFailed
			switch vd.Class {
			case gates.ClassProfileArtifact:
				reason = state.ReasonProfileArtifact
			case gates.ClassQuality:
				reason = state.ReasonQualityFailed
			}
			return reason, fmt.Sprintf("validator %s: %s", v.Name, vd.Detail)
		}
	}
	pv := gates.PrivacyScan(a.dir, a.plan.Privacy, a.c.private, func(rel string) bool {
		return rel == "state.json" || rel == "gates.jsonl" // the controller's own records
	}, 64<<20, a.c.now())
	a.gate(pv)
	if !pv.Passed() {
		return state.ReasonPrivacyViolation, "privacy scan: " + pv.Detail
	}
	cv := a.c.campaignPrivacy(a.plan.Privacy)
	a.gate(cv)
	if !cv.Passed() {
		return state.ReasonPrivacyViolation, "privacy scan of the campaign's own files: " + cv.Detail
	}
	return "", ""
}

// EnvSignalsFile names, in a validator's environment, the attempt's
// signals.json: every signal the controller sent to the attempt's
// processes, with its time (A-P3-5: the Layer-1 checkpoint is judged
// against the signal to the server's API parent).
const EnvSignalsFile = "WARDEN_SIGNALS_FILE"

// writeSignals writes the attempt's recorded signals, a JSON array of
// state.Signal, to signals.json in the attempt directory, atomically, and
// returns its path. The signals are those already recorded in the store
// and those still pending for the next transition.
func (a *attempt) writeSignals() (string, error) {
	recorded, err := a.rec.signals(a.run.ID, a.n)
	if err != nil {
		return "", fmt.Errorf("read the attempt's signals: %w", err)
	}
	sigs := append(append([]state.Signal{}, recorded...), a.pendSigs...)
	path := filepath.Join(a.dir, "signals.json")
	if err := atomicfile.WriteJSON(path, sigs, 0o644, atomicfile.Beneath(a.c.dir)); err != nil {
		return "", fmt.Errorf("write signals.json: %w", err)
	}
	return path, nil
}

// configTimeout bounds the request for the server's configuration.
const configTimeout = 30 * time.Second

// effectiveConfig checks the protocol's expected values: the log patterns
// against the server's startup output, the paths against the
// configuration the server reports at its config endpoint (kept as
// server-config.json in the attempt). It returns a verdict for each kind
// the run expects.
func (a *attempt) effectiveConfig(ctx context.Context) []gates.Verdict {
	var logs []gates.Expect
	var paths []gates.ConfigExpect
	for _, e := range a.run.Server.Expect {
		if e.Path != "" {
			paths = append(paths, gates.ConfigExpect{Name: e.Name, Path: e.Path, Equals: e.Equals})
		} else {
			logs = append(logs, gates.Expect{Name: e.Name, Pattern: e.Pattern})
		}
	}
	var out []gates.Verdict
	if len(logs) > 0 {
		out = append(out, gates.EffectiveConfigDir(a.dir, logs, a.c.now()))
	}
	if len(paths) > 0 {
		doc, err := a.fetchConfig(ctx)
		if err != nil {
			out = append(out, gates.Verdict{Gate: "effective-config", Verdict: gates.Error, At: a.c.now(),
				Detail: "the server's configuration could not be read: " + err.Error()})
		} else {
			out = append(out, gates.ServerConfig(doc, paths, a.c.now()))
		}
	}
	return out
}

// fetchConfig asks the server for its effective configuration and keeps
// the answer in the attempt directory.
func (a *attempt) fetchConfig(ctx context.Context) ([]byte, error) {
	if a.run.Server.ConfigEndpoint == "" {
		return nil, fmt.Errorf("server %s has no config endpoint", a.run.Server.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, configTimeout)
	defer cancel()
	url := fmt.Sprintf("http://127.0.0.1:%d%s", a.port, a.run.Server.ConfigEndpoint)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxChildFile))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := atomicfile.WriteFile(filepath.Join(a.dir, "server-config.json"), body, 0o644, atomicfile.NoSync(), atomicfile.Beneath(a.c.dir)); err != nil {
		a.c.log.Warn().Err(err).Str("run", a.run.ID).Msg("keep the server's configuration")
	}
	return body, nil
}

// prepareCommands fixes the attempt's launch variables and environment
// and writes commands.log and environment.json.
func (a *attempt) prepareCommands() error {
	c := a.c
	gpuStrs := make([]string, len(a.gpuIDs))
	for i, g := range a.gpuIDs {
		gpuStrs[i] = strconv.Itoa(g)
	}
	numa := ""
	if a.slots[0].NUMA != nil {
		numa = strconv.Itoa(*a.slots[0].NUMA)
	}
	slotNames := make([]string, len(a.slots))
	for i, s := range a.slots {
		slotNames[i] = s.Name
	}
	a.vars = map[string]string{
		"CAMPAIGN_DIR": c.dir,
		"RUN_DIR":      filepath.Dir(a.dir),
		"ATTEMPT_DIR":  a.dir,
		"ATTEMPT":      strconv.Itoa(a.n),
		"GPU_IDS":      strings.Join(gpuStrs, ","),
		"GPU_COUNT":    strconv.Itoa(len(a.gpuIDs)),
		"CPUS":         protocols.FormatCPUList(a.cpus),
		"NUMA_NODE":    numa,
		"PORT":         strconv.Itoa(a.port),
		"SLOT":         strings.Join(slotNames, "+"),
		"REGIME":       a.opts.regime,
		"PHASE_FILE":   filepath.Join(a.dir, "phases.jsonl"),
		"PROTOCOL_DIR": filepath.Dir(c.protocolPath),
		"WORKDIR":      c.workdir,
	}
	if a.needDirs == nil {
		var err error
		if a.needDirs, err = c.needDirs(a.run); err != nil {
			return err
		}
	}
	for as, run := range a.run.NeedVars {
		res, ok := a.needDirs[as]
		if !ok {
			return fmt.Errorf("run %s needs %s: no result directory given", a.run.ID, run)
		}
		a.vars[as] = res
	}
	cuda := a.vars["GPU_IDS"]
	if c.stepCUDA != "" {
		cuda = c.stepCUDA
	}
	env := append(os.Environ(),
		"CUDA_VISIBLE_DEVICES="+cuda,
		"WARDEN_RUN_ID="+a.run.ID,
		"WARDEN_ATTEMPT="+a.vars["ATTEMPT"],
		"WARDEN_RUN_DIR="+a.vars["RUN_DIR"],
		"WARDEN_ATTEMPT_DIR="+a.dir,
		"WARDEN_CAMPAIGN_DIR="+c.dir,
		"WARDEN_PORT="+a.vars["PORT"],
		"WARDEN_GPU_IDS="+a.vars["GPU_IDS"],
		"WARDEN_CPUS="+a.vars["CPUS"],
		"WARDEN_PHASE_FILE="+a.vars["PHASE_FILE"],
		"WARDEN_DRAIN_ALLOWANCE_S="+strconv.FormatFloat(a.run.DrainS, 'f', -1, 64),
		"WARDEN_DRAIN_WATCHDOG_S="+strconv.FormatFloat(a.run.WatchdogS, 'f', -1, 64),
	)
	if c.fakeGPUDir != "" {
		env = append(env, fakegpu.EnvDir+"="+c.fakeGPUDir)
	}
	a.env = env
	return atomicfile.WriteJSON(filepath.Join(a.dir, "environment.json"), map[string]any{
		"variables": a.vars, "gpu_backend": c.gpus.Name(), "workdir": c.workdir,
		"protocol_sha256": a.plan.Protocol.SHA256, "run": a.run.ID, "attempt": a.n,
	}, 0o644, atomicfile.Beneath(c.dir))
}

// needDirs resolves the result directories of the runs r needs, by the
// variable each is exported as.
func (c *Runner) needDirs(r protocols.Run) (map[string]string, error) {
	dirs := map[string]string{}
	for as, run := range r.NeedVars {
		res, err := c.resultDir(run)
		if err != nil {
			return nil, fmt.Errorf("run %s needs %s: %w", r.ID, run, err)
		}
		dirs[as] = res
	}
	return dirs, nil
}

// resultDir is the directory of a needed run's result: its complete (or
// quarantined) attempt.
func (c *Runner) resultDir(run string) (string, error) {
	r, err := c.store.Run(run)
	if err != nil {
		return "", err
	}
	if !r.Done {
		return "", fmt.Errorf("run %s is not done", run)
	}
	return filepath.Join(c.dir, "runs", run, "a"+strconv.Itoa(r.Result)), nil
}

func (a *attempt) expandCommand(cmd protocols.CommandSpec) ([]string, error) {
	return expandCommand(cmd, a.vars)
}

// start launches the server or the client in its own process group and
// cgroup, pinned to the slot's CPUs from its first instruction, and
// records its identity before anything else happens.
func (a *attempt) start(role string, cmd protocols.CommandSpec, extraEnv map[string]string) (*launch.Proc, error) {
	argv, err := a.expandCommand(cmd)
	if err != nil {
		return nil, err
	}
	env := append([]string(nil), a.env...)
	for _, k := range sortedKeys(extraEnv) {
		v, err := protocols.Expand(extraEnv[k], a.vars)
		if err != nil {
			return nil, err
		}
		env = append(env, k+"="+v)
	}
	a.c.appendLine(filepath.Join(a.dir, "commands.log"), fmt.Sprintf("%s %s: %s", a.c.now().UTC().Format(time.RFC3339Nano), role, shellQuote(argv)))
	if a.own != nil {
		a.own.lockStart() // a sample that sees it waits until it is known
	}
	p, err := a.c.starter.Start(launch.Spec{
		Role: role, Argv: argv, Env: env, Dir: a.c.workdir,
		StdoutPath: filepath.Join(a.dir, role+".out"), StderrPath: filepath.Join(a.dir, role+".err"),
		CPUs:   a.cpus,
		Cgroup: leafName(a.run.ID, a.n, role),
		Stop:   a.stopOptions(role),
	})
	if a.own != nil {
		if err == nil {
			a.own.register(p)
		}
		a.own.unlockStart()
	}
	if err != nil {
		return nil, err
	}
	failpoint.Hit(role + "-started-unrecorded")
	err = a.rec.procStarted(a.run.ID, a.n, state.Proc{
		Role: role, PID: p.PID, StartTime: p.StartTime, BootID: p.BootID, PGID: p.PGID,
		Cgroup: p.Cgroup, Argv: argv, StartedAt: p.Started,
	})
	if err != nil {
		a.c.log.Error().Err(err).Str("run", a.run.ID).Str("role", role).Msg("record a process started")
	}
	return p, nil
}

// stopOptions are the grace periods of the server (the protocol's) and
// of the client.
func (a *attempt) stopOptions(role string) launch.StopOptions {
	if role == "server" {
		return launch.StopOptions{
			Grace:      time.Duration(a.run.Server.ShutdownGraceS * float64(time.Second)),
			GroupGrace: time.Duration(a.run.Server.GroupGraceS * float64(time.Second)),
		}
	}
	return launch.StopOptions{Grace: clientGrace, GroupGrace: clientGroupGrace}
}

// recordExit notes a process's exit, once; the next transition records it.
func (a *attempt) recordExit(p *launch.Proc) {
	select {
	case <-p.Done():
	default:
		return
	}
	if a.exited == nil {
		a.exited = map[int]bool{}
	}
	if a.exited[p.PID] {
		return
	}
	a.exited[p.PID] = true
	ex := p.Exit()
	a.pendExits = append(a.pendExits, state.Exit{Role: p.Role, PID: p.PID, Code: ex.Code, Signal: ex.Signal, At: ex.At})
}

func exitText(ex launch.ExitStatus) string {
	if ex.Signal != "" {
		return "killed by " + ex.Signal
	}
	return "exit code " + strconv.Itoa(ex.Code)
}

func shellQuote(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`|&;<>(){}*?[]#~") {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		} else {
			out[i] = a
		}
	}
	return strings.Join(out, " ")
}

// oomMarkers are what PyTorch and the CUDA runtime print when a server runs
// out of GPU memory (torch.OutOfMemoryError's message begins "CUDA out of
// memory"; the CUDA runtime's error string is "out of memory").
var oomMarkers = [][]byte{
	[]byte("CUDA out of memory"),
	[]byte("OutOfMemoryError"),
	[]byte("CUDA error: out of memory"),
}

// oomTail is how much of the end of the server's output is searched.
const oomTail = 256 << 10

// serverOOM returns the marker found when the end of the server's output
// says it ran out of GPU memory ("" otherwise).
func (a *attempt) serverOOM() string {
	for _, name := range []string{"server.err", "server.out"} {
		tail, err := readTail(filepath.Join(a.dir, name), oomTail)
		if err != nil {
			continue
		}
		for _, m := range oomMarkers {
			if bytes.Contains(tail, m) {
				return string(m)
			}
		}
	}
	return ""
}

// serverExitReason is why an attempt whose server exited failed: oom when
// its output says it ran out of GPU memory (seed 002 stop condition 2,
// "GPU OOM"), server-exit otherwise.
func (a *attempt) serverExitReason() state.Reason {
	if a.serverOOM() != "" {
		return state.ReasonOOM
	}
	return state.ReasonServerExit
}

func (a *attempt) oomNote() string {
	if m := a.serverOOM(); m != "" {
		return "; its output says " + strconv.Quote(m)
	}
	return ""
}

// terminalClasses is the methodology's request-level taxonomy (seed 000):
// the terminal class of every request, as Warden's load client counts
// them in its result's totals.by_class.
var terminalClasses = []string{
	"success", "quality-failed", "client-cancelled", "deadline-exceeded", "admission-rejected",
	"oom", "worker-lost", "transport-error", "invalid-output", "harness-error",
}

// recordTerminalClasses records, when the client's result reports them,
// its requests' counts by terminal class as figures (requests_<class>);
// a class the taxonomy does not know is counted as requests_other.
func (a *attempt) recordTerminalClasses() {
	b, err := readChildFile(filepath.Join(a.dir, a.run.ResultFile))
	if err != nil {
		return // no result: nothing reported
	}
	var r struct {
		Totals *struct {
			ByClass map[string]float64 `json:"by_class"`
		} `json:"totals"`
	}
	if json.Unmarshal(b, &r) != nil || r.Totals == nil {
		return
	}
	for class, n := range r.Totals.ByClass {
		name := "requests_other"
		if slices.Contains(terminalClasses, class) {
			name = "requests_" + strings.ReplaceAll(class, "-", "_")
		}
		a.setFigure(name, a.figures[name]+n)
	}
}
