package attempt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"warden/pkg/atomicfile"
	"warden/pkg/budget"
	"warden/pkg/campaignfs"
	"warden/pkg/failpoint"
	"warden/pkg/gates"
	"warden/pkg/gpu"
	"warden/pkg/gpu/sample"
	"warden/pkg/launch"
	"warden/pkg/phasefile"
	"warden/pkg/record"
	"warden/pkg/safefile"
	"warden/pkg/state"
	"warden/pkg/validator"
	"warden/protocols"
)

// Attempt is the working state of one attempt.
type Attempt struct {
	*record.Record
	env *Env
	rec record.Recorder
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
	environ  []string // the processes' environment
	server   *launch.Proc
	client   *launch.Proc
	started  time.Time // server start, for the GPU charge
	phases   *phaseWatcher
	quarant  bool

	exited map[int]bool // pids whose exit is noted
	opts   Options
	// drainVerdict is the drain gate once the client reported done
	drainVerdict *gates.Verdict
	sampler      *sample.Sampler
	hostRecs     []chan map[string]float64 // the figures of host records taken beside the attempt (beside)
	// own judges the processes the sampler sees on the GPUs (nil when
	// nothing samples); foreign is its verdict once taken, to fail the
	// attempt with.
	own     *ownProcs
	foreign *gates.Verdict
	// ctx is the attempt's context; its cause says why it ended early
	// (ErrBudgetExhausted, or an operator's stop).
	ctx context.Context
	// stopErr holds what went wrong ending the attempt's processes (a
	// signal or cgroup operation that failed): a cleanup gate that then
	// fails is cleanup-failed, not a timeout.
	stopErr   error
	recording chan struct{} // closed once the last process started is recorded
}

// New prepares attempt s to run in env, its records written to rec. The
// attempt exists in the records already (created); Execute runs it.
func New(env *Env, rec record.Recorder, s Spec) *Attempt {
	a := &Attempt{env: env, rec: rec, needDirs: s.NeedDirs, plan: s.Plan, run: s.Run, n: s.N, dir: s.Dir, slots: s.Slots,
		gpuIDs: s.GPUIDs, cpus: s.CPUs, port: s.Port, opts: s.Options}
	a.Record = record.New(record.Config{Recorder: rec, Dir: env.Dir, Log: env.Log, Now: env.Now, DiskFull: env.DiskFull, StorageFault: env.StorageFault, FlushFiles: env.FlushFiles}, s.Run.ID, s.N, s.Dir)
	return a
}

// Execute runs the attempt from a fresh server to a terminal state. Every
// step is a recorded transition; nothing slow happens inside a database
// transaction. ctx's end stops it (interrupted, or budget-exhausted when
// its cause is ErrBudgetExhausted).
func (a *Attempt) Execute(ctx context.Context) Outcome {
	c := a.env
	a.ctx = ctx
	// Reserved, preflight and starting are one commit, before the server
	// starts: preflight only reads (the GPUs, the host, the port) and
	// writes the attempt's own files.
	a.Pass(state.Reserved, "budget reserved for the wave", nil)
	if ctx.Err() != nil {
		return a.interrupt("stopped before preflight")
	}

	// preflight
	a.Pass(state.Preflight, "checking GPUs and port", nil)
	snap, err := c.GPUs.Snapshot(a.gpuIDs)
	if err != nil {
		return a.fail(state.ReasonHarnessError, "read GPUs: "+err.Error())
	}
	pv := gates.Preflight(snap, 0, c.UID, c.Now())
	a.Gate(pv)
	if !pv.Passed() {
		reason := state.ReasonGPUNotIdle
		if pv.Foreign() {
			reason = state.ReasonForeignGPUProcess
		}
		return a.fail(reason, pv.Detail)
	}
	readings := a.recordPreflight()
	cl := a.checkCPULocal(readings)
	if a.Gate(cl); cl.Verdict == gates.Fail {
		return a.fail(state.ReasonHarnessError, "slot "+strings.Join(protocols.SlotNames(a.slots), "+")+": "+cl.Detail)
	}
	if pp := gates.PortFree(a.port, c.Now()); !pp.Passed() {
		a.Gate(pp)
		return a.fail(state.ReasonHarnessError, pp.Detail)
	} else {
		a.Gate(pp)
	}

	// starting
	envWritten, err := a.prepareCommands()
	if err != nil {
		return a.fail(state.ReasonHarnessError, err.Error())
	}
	err = a.Transition(state.Starting, "", "starting server", nil)
	if werr := <-envWritten; err == nil && werr != nil {
		return a.fail(state.ReasonHarnessError, werr.Error())
	}
	if err != nil {
		return a.harness(err)
	}
	a.startSampler(readings)
	srv, err := a.start("server", a.run.Server.Command, a.run.Server.Env)
	if err != nil {
		return a.fail(state.ReasonHarnessError, "start server: "+err.Error())
	}
	a.server, a.started = srv, srv.Started
	c.held(a.Key(), len(a.gpuIDs), srv.Started)
	if a.run.ClientStart == "at-start" {
		if cl, err := a.start("client", a.run.Client, a.run.Env); err != nil {
			return a.stopThenFail(state.ReasonHarnessError, "start client: "+err.Error())
		} else {
			a.client = cl
		}
	}
	err = a.probeReady(ctx, srv)
	a.recorded()
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return a.stopThenInterrupt("stopped while the server was starting")
	case errors.Is(err, launch.ErrExited):
		return a.stopThenFail(a.serverExitReason(), fmt.Sprintf("server exited before it was ready (%s)%s", ExitText(srv.Exit()), a.oomNote()))
	default:
		return a.stopThenFail(state.ReasonServerNotReady, fmt.Sprintf("server not ready within %.0f s: %v", a.run.Server.ReadyTimeoutS, err))
	}
	lv := a.checkListener(srv, "it answered the readiness probe")
	a.Gate(lv)
	if !lv.Passed() {
		return a.stopThenFail(state.ReasonHarnessError, lv.Detail)
	}
	// Ready goes with the next transition (measuring, or stopping when the
	// configuration check fails): the client's start, which it allows, is
	// recorded with measuring too.
	a.Pass(state.Ready, "server healthy", map[string]float64{"startup_s": c.Now().Sub(a.started).Seconds()})
	for _, cv := range a.effectiveConfig(ctx) {
		a.Gate(cv)
		if !cv.Passed() {
			return a.stopThenFail(state.ReasonConfigMismatch, cv.Detail)
		}
	}

	// measuring
	if a.client == nil {
		// recorded with the transition to measuring, just below
		cl, err := a.startNoted("client", a.run.Client, a.run.Env)
		if err != nil {
			return a.stopThenFail(state.ReasonHarnessError, "start client: "+err.Error())
		}
		a.client = cl
	}
	a.phases = newPhaseWatcher(a.vars["PHASE_FILE"])
	defer a.phases.close()
	if err := a.Transition(state.Measuring, "", "client running", nil); err != nil {
		return a.harness(err)
	}
	if a.opts.Measuring != nil {
		a.opts.Measuring <- a.run.ID
	}
	reason, detail := a.measure(ctx)
	a.recordPostMeasure()
	if reason == state.ReasonInterrupted {
		return a.stopThenInterrupt(detail)
	}
	if reason != "" {
		return a.stopThenFail(reason, detail)
	}
	return a.stopThenValidate()
}

// checkListener is the listener gate: what answered the readiness probe
// holds the port as the attempt's own process (the server's group or
// session, a descendant, or one its cgroup holds), not another process
// that took the port while a late-binding server loaded; when says when
// a foreign holder was found. A port whose owner cannot be told fails
// closed, as an error.
func (a *Attempt) checkListener(srv *launch.Proc, when string) gates.Verdict {
	v := gates.Verdict{Gate: "listener", Verdict: gates.Pass, Figures: map[string]float64{"port": float64(a.port)}, At: a.env.Now()}
	owners, err := launch.CheckListener(a.port, launch.InAttempt(srv.Identity, srv.Leaf()))
	var imp *launch.ImpostorError
	switch {
	case errors.As(err, &imp):
		v.Verdict, v.Detail = gates.Fail, err.Error()+": "+when
		v.Figures["impostor_pid"] = float64(imp.PID)
	case err != nil:
		v.Verdict, v.Detail = gates.Error, "who holds the port cannot be told: "+err.Error()
	default:
		v.Figures["listeners"] = float64(len(owners))
	}
	return v
}

// listenerAgain is the listener gate again while the client measures (at
// each profile window, and at the end of measuring): a server that binds
// with SO_REUSEPORT, as vLLM does, lets any process of its user join the
// port later and answer part of the requests. A foreign holder, or one
// that cannot be told, fails the run; a pass is counted, not recorded.
func (a *Attempt) listenerAgain(when string) (state.Reason, string) {
	v := a.checkListener(a.server, "it joined the port after readiness, found "+when)
	if a.SetFigure("listener_checks", a.Figure("listener_checks")+1); v.Passed() {
		return "", ""
	}
	a.Gate(v)
	return state.ReasonHarnessError, "listener gate " + when + ": " + v.Detail
}

// probeReady polls the server's health until it answers the expected
// status, the server exits, or the protocol's ready timeout passes: as
// often as launch.ReadyPhases say, then every 250 ms (a real server loads
// for minutes).
func (a *Attempt) probeReady(ctx context.Context, srv *launch.Proc) error {
	readyCtx, cancel := context.WithTimeout(ctx, time.Duration(a.run.Server.ReadyTimeoutS*float64(time.Second)))
	defer cancel()
	url := fmt.Sprintf("http://127.0.0.1:%d%s", a.port, a.run.Server.HealthPath)
	return launch.ProbeReady(readyCtx, url, a.run.Server.HealthStatus, 250*time.Millisecond, srv.Done())
}

// measure supervises the client to its end, then checks the port's
// holders once more.
func (a *Attempt) measure(ctx context.Context) (state.Reason, string) {
	if reason, detail := a.supervise(ctx); reason != "" {
		return reason, detail
	}
	return a.listenerAgain("at the end of measuring")
}

// supervise waits for the client while watching the server and the
// client's drain. It wakes once a second to read what the client appended
// to its phase file; nothing else runs while a benchmark measures.
func (a *Attempt) supervise(ctx context.Context) (state.Reason, string) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	checked := 0 // profile windows whose listener was checked
	// The measuring deadline, from the client's start. A background load
	// has none of its own: it ends when its target is done, and the
	// target's deadline bounds it.
	var deadline <-chan time.Time
	if a.opts.Until == nil && a.run.DeadlineS > 0 {
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
			return a.serverExitReason(), "server exited while the client ran (" + ExitText(a.server.Exit()) + ")" + a.oomNote()
		case <-ctx.Done():
			return state.ReasonInterrupted, "stopped while measuring"
		case <-a.opts.Until:
			// a background load: its target is done; end the client
			// gracefully, which is this run's normal end
			a.stopClient()
			return "", ""
		case <-deadline:
			if a.clientGone() {
				return a.clientEnded()
			}
			ran := a.env.Now().Sub(a.client.Started).Seconds()
			a.SetFigure("measure_deadline_s", a.run.DeadlineS)
			a.SetFigure("client_ran_s", ran)
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
			if a.phases.poll(); a.phases.profiles > checked {
				checked = a.phases.profiles
				if r, d := a.listenerAgain(fmt.Sprintf("at profile window %d", checked)); r != "" {
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
func (a *Attempt) clientGone() bool {
	a.env.Launcher.Reaper.Collect()
	select {
	case <-a.client.Done():
		return true
	default:
		return false
	}
}

// clientEnded judges the client's own exit.
func (a *Attempt) clientEnded() (state.Reason, string) {
	a.recordExit(a.client)
	ex := a.client.Exit()
	if a.opts.Until != nil {
		a.SetEarlyBackground()
		return state.ReasonClientFailed, "background load ended before its target (" + ExitText(ex) + ")"
	}
	if ex.Code == state.ExitDrainAbandoned && ex.Signal == "" {
		return state.ReasonDrainAbandoned, fmt.Sprintf("client exit code %d: it abandoned requests still outstanding at its drain bound", ex.Code)
	}
	if ex.Code != 0 || ex.Signal != "" {
		return state.ReasonClientFailed, "client " + ExitText(ex)
	}
	return a.finalDrain(ex.At)
}

// seconds converts protocol seconds to a Duration.
func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// checkDrain reads the client's phases: past the class allowance the run
// is quarantined; past the watchdog the client is ended and the run fails.
// The drain runs from the drain line to the drained line (every request
// ended), or to the done line from a client that writes no drained line;
// end, when set, is when the client exited: the drain ended then at the
// latest. Without either line, it is still running.
func (a *Attempt) checkDrain(end time.Time) (state.Reason, string) {
	a.phases.poll()
	drainAt := a.phases.at(phasefile.Drain)
	if drainAt.IsZero() {
		return "", ""
	}
	final := true
	if t := a.phases.at(phasefile.Drained); !t.IsZero() {
		end = t
	} else if t := a.phases.at(phasefile.Done); !t.IsZero() {
		end = t
	} else if end.IsZero() {
		end, final = a.env.Now(), false
	}
	return a.judgeDrain(end.Sub(drainAt).Seconds(), final)
}

// judgeDrain applies the class's allowance and watchdog to a drain of
// drained seconds; final says the drain is over (its verdict is kept).
func (a *Attempt) judgeDrain(drained float64, final bool) (state.Reason, string) {
	a.SetFigure("drain_s", drained)
	v, outcome := gates.Drain(drained, a.run.DrainS, a.run.WatchdogS, a.env.Now())
	switch outcome {
	case gates.DrainWatchdog:
		a.Gate(v)
		return state.ReasonDrainWatchdog, fmt.Sprintf("drain ran %.1f s, past the %.0f s watchdog of class %s", drained, a.run.WatchdogS, a.run.Class)
	case gates.DrainQuarantine:
		if !a.quarant {
			a.quarant = true
			a.env.Log.Warn().Str("run", a.run.ID).Float64("drain_s", drained).Float64("allowance_s", a.run.DrainS).Msg("drain over allowance: run quarantined")
		}
	case gates.DrainUnknown:
		a.Gate(v)
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
func (a *Attempt) finalDrain(exited time.Time) (state.Reason, string) {
	switch a.run.AdmissionEnd {
	case "result-file":
		path := filepath.Join(a.dir, a.run.ResultFile)
		start, end, err := gates.ReadDrainTimes(path)
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

func (a *Attempt) drainUnseen(detail string) (state.Reason, string) {
	a.Gate(gates.Verdict{Gate: "drain", Verdict: gates.Fail, Detail: detail, At: a.env.Now(),
		Figures: map[string]float64{"allowance_s": a.run.DrainS, "watchdog_s": a.run.WatchdogS}})
	return state.ReasonDrainUnseen, "drain gate: " + detail
}

// stopThenValidate ends the server gracefully, proves cleanup, runs the
// validators and records the terminal state.
func (a *Attempt) stopThenValidate() Outcome {
	if err := a.Transition(state.Stopping, "", "stopping server through its API parent", nil); err != nil {
		return a.harness(err)
	}
	a.shutdown()
	if out, ok := a.cleanup(); !ok {
		return out
	}
	if len(a.run.Validators) == 0 {
		// nothing is started while it validates: recorded with the
		// terminal state
		a.Pass(state.Validating, "validating artifacts", nil)
	} else if err := a.Transition(state.Validating, "", "validating artifacts", nil); err != nil {
		return a.harness(err)
	}
	if a.drainVerdict != nil {
		a.Gate(*a.drainVerdict)
	}
	if r, d := a.validate(); r == state.ReasonQualityFailed {
		return a.terminal(state.Quarantined, r, d)
	} else if r == state.ReasonInterrupted {
		return a.stopThenInterrupt(d)
	} else if r != "" {
		return a.terminal(state.Failed, r, d)
	}
	if a.quarant {
		drained := a.Figure("drain_s")
		return a.terminalFig(state.Quarantined, state.ReasonDrainQuarantine,
			fmt.Sprintf("drain %.1f s over the %.0f s allowance of class %s", drained, a.run.DrainS, a.run.Class),
			map[string]float64{"drain_s": drained, "drain_allowance_s": a.run.DrainS})
	}
	return a.terminal(state.Complete, "", "run complete")
}

// stopThenFail leaves the happy path: note the reason, stop everything,
// prove cleanup, then fail.
func (a *Attempt) stopThenFail(reason state.Reason, detail string) Outcome {
	if err := a.Transition(state.Stopping, reason, detail, nil); err != nil {
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
func (a *Attempt) stopThenInterrupt(detail string) Outcome {
	if a.server != nil || a.client != nil {
		a.shutdown()
		a.charge(a.env.Now())
	}
	a.stopSampler()
	a.joinHostRecords()
	reason := state.ReasonInterrupted
	if a.ctx != nil && errors.Is(context.Cause(a.ctx), ErrBudgetExhausted) {
		reason, detail = state.ReasonBudgetExhausted, "the campaign's GPU time reached its cap: "+detail
	}
	if err := a.Transition(state.Interrupted, reason, detail, nil); err != nil {
		return a.harness(err)
	}
	return Outcome{State: state.Interrupted, Reason: reason, Detail: detail, Interrupted: true}
}

func (a *Attempt) interrupt(detail string) Outcome { return a.stopThenInterrupt(detail) }

// fail ends an attempt with a failure, by the legal path from where it
// is: directly before any process started, through stopping and cleanup
// after.
func (a *Attempt) fail(reason state.Reason, detail string) Outcome {
	if a.server != nil || a.client != nil || a.State() == state.Starting {
		return a.stopThenFail(reason, detail)
	}
	return a.terminal(state.Failed, reason, detail)
}

func (a *Attempt) harness(err error) Outcome {
	a.env.Log.Error().Err(err).Str("run", a.run.ID).Msg("record transition")
	a.joinHostRecords()
	if a.server != nil || a.client != nil {
		a.shutdown()
		if a.stopErr == nil {
			// its processes are proven gone now: resume charges it to here
			if err := a.env.Ends.Record(a.run.ID, a.n, a.env.Now()); err != nil {
				a.env.Log.Warn().Err(err).Str("run", a.run.ID).Msg("record the attempt's end in the end log")
			}
		}
	}
	a.stopSampler()
	// the attempt stays live in the records: resume charges it
	a.env.released(a.Key())
	return Outcome{State: state.Failed, Reason: state.ReasonHarnessError, Detail: err.Error()}
}

func (a *Attempt) terminal(to state.AttemptState, reason state.Reason, detail string) Outcome {
	return a.terminalFig(to, reason, detail, nil)
}

func (a *Attempt) terminalFig(to state.AttemptState, reason state.Reason, detail string, figures map[string]float64) Outcome {
	a.joinHostRecords()
	reason, detail, err := a.End(to, reason, detail, figures)
	if err != nil {
		return a.harness(err)
	}
	return Outcome{State: to, Reason: reason, Detail: detail, EarlyBackground: a.EarlyBackground()}
}

// Grace periods of the processes an attempt starts, set once on their
// launch specs (the server's come from the protocol). The client gets time
// to write its results after SIGTERM; a validator is a short check.
const (
	clientGrace      = 10 * time.Second
	clientGroupGrace = 2 * time.Second
)

// stopProc ends p with its spec's grace periods and notes the signals
// for the next transition.
func (a *Attempt) stopProc(p *launch.Proc) {
	ctx, cancel := context.WithTimeout(context.Background(), p.Stop.Grace+p.Stop.GroupGrace+StopSlack)
	defer cancel()
	recs, err := p.Shutdown(ctx)
	a.NoteSignals(recs...)
	if err != nil {
		a.stopErr = errors.Join(a.stopErr, err)
		a.env.Log.Warn().Err(err).Str("run", a.run.ID).Str("role", p.Role).Msg("stop")
	}
	a.recordExit(p)
}

// stopClient ends the client gracefully: SIGTERM, its grace, the group.
func (a *Attempt) stopClient() { a.stopProc(a.client) }

// shutdown stops the client (if still running) and the server: SIGTERM to
// the API parent, its grace, then the group and the cgroup. Every signal
// is recorded with its time.
func (a *Attempt) shutdown() {
	if a.own != nil {
		a.own.end() // from here the cleanup gate judges what holds the GPUs
	}
	n := a.PendingSignals()
	if a.client != nil {
		a.stopProc(a.client)
	}
	if a.server != nil {
		a.stopProc(a.server)
	}
	if a.PendingSignals() > n {
		failpoint.Hit("signals-sent-unrecorded")
	}
}

// cleanup proves the attempt's processes are gone and its GPUs back to
// baseline within the protocol's timeout, then charges the GPU time.
func (a *Attempt) cleanup() (Outcome, bool) {
	a.joinHostRecords()
	if err := a.Transition(state.Cleanup, "", "proving cleanup", nil); err != nil {
		return a.harness(err), false
	}
	start := a.env.Now()
	deadline := start.Add(time.Duration(a.plan.CleanupS * float64(time.Second)))
	var v gates.Verdict
	// looked at again after 1 ms, the wait doubling up to 100 ms
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		a.killAdopted()
		pids := a.livePIDs()
		snap, err := a.env.GPUs.Snapshot(a.gpuIDs)
		now := a.env.Now()
		if err != nil {
			v = gates.Verdict{Gate: "cleanup", Verdict: gates.Error, Detail: err.Error(), At: now}
		} else {
			v = gates.Cleanup(pids, snap, 0, now.Sub(start), now)
		}
		if v.Passed() || now.After(deadline) {
			break
		}
		time.Sleep(wait) // polling the world, not waiting for a test condition
	}
	a.Gate(v)
	a.charge(a.env.Now())
	if !v.Passed() {
		a.stopSampler()
		reason := state.ReasonCleanupTimeout
		if a.stopErr != nil {
			reason = state.ReasonCleanupFailed
		}
		if snap, err := a.env.GPUs.Snapshot(a.gpuIDs); err == nil {
			for _, g := range snap {
				for _, p := range g.Procs {
					if p.UID != a.env.UID {
						reason = state.ReasonForeignGPUProcess // another user's process holds the GPU
					}
				}
			}
		}
		return a.terminal(state.Failed, reason, "cleanup gate: "+v.Detail), false
	}
	// the samples file is made durable by Seal, just below
	a.stopSamplerForSeal()
	if err := a.Seal(); err != nil { // the evidence is final: made durable, its digests noted
		return a.terminal(state.Failed, state.ReasonHarnessError, err.Error()), false
	}
	return Outcome{}, true
}

// charge records the attempt's GPU time from server start to now, once.
func (a *Attempt) charge(end time.Time) {
	if a.started.IsZero() {
		return
	}
	amt := budget.Charge(len(a.gpuIDs), a.started, end)
	a.started = time.Time{}
	a.env.released(a.Key())
	a.SetFigure("gpu_seconds", amt)
	// recorded with the next transition; a crash before it is charged at
	// resume, from the server's start to the attempt's last record
	a.NoteCharge(amt, "server start to cleanup")
	failpoint.Hit("charged")
}

// killAdopted ends descendants of the attempt that escaped its process
// groups (setsid, double fork) and were reparented to the controller.
// With cgroups the leaves end what they hold, but a root process can move
// itself out of its cgroup too, so the sweep runs either way. Each is
// identified by the attempt's directory in its inherited environment and
// by being our child.
func (a *Attempt) killAdopted() {
	ids, err := launch.Adopted(a.env.Boot, a.marker())
	if err != nil {
		a.env.Log.Warn().Err(err).Str("run", a.run.ID).Msg("look for adopted descendants")
		return
	}
	for _, id := range ids {
		rec, err := launch.Signal(a.env.Boot, id, "adopted", syscall.SIGKILL)
		if err != nil {
			continue // gone already, or no longer ours
		}
		a.NoteSignals(rec)
		a.env.Log.Warn().Str("run", a.run.ID).Int("pid", id.PID).Msg("killed a descendant that escaped its process group")
	}
}

// marker is the environment entry every process of the attempt inherits:
// it names the attempt's directory, and finds its escapees.
func (a *Attempt) marker() string { return "WARDEN_ATTEMPT_DIR=" + a.dir }

// livePIDs lists processes of the attempt still alive: in its cgroups and
// process groups.
func (a *Attempt) livePIDs() []int {
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
				if !slices.Contains(pids, pid) {
					pids = append(pids, pid)
				}
			}
		}
	}
	return pids
}

// validate runs the protocol's validators (exit code and JSON verdict)
// and the built-in privacy scan of the attempt directory.
func (a *Attempt) validate() (state.Reason, string) {
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
	env := a.environ
	if len(a.run.Validators) > 0 {
		path, err := a.writeSignals()
		if err != nil {
			return state.ReasonHarnessError, err.Error()
		}
		env = append(append([]string(nil), a.environ...), validator.EnvSignalsFile+"="+path)
	}
	for _, v := range a.run.Validators {
		argv, err := v.Command.Expand(a.vars)
		if err != nil {
			return state.ReasonHarnessError, err.Error()
		}
		if argv, err = validator.BoundedArgv(argv, v.MemoryMiB); err != nil {
			return state.ReasonHarnessError, err.Error()
		}
		out := campaignfs.Stdout(a.dir, "validator-"+v.Name)
		p, err := a.env.Launcher.Start(launch.Spec{
			Role: "validator:" + v.Name, Argv: argv, Env: env, Dir: a.env.Workdir,
			StdoutPath: out, StderrPath: campaignfs.Stderr(a.dir, "validator-"+v.Name),
			Stop: launch.StopOptions{Grace: validator.Grace, GroupGrace: validator.Grace},
		})
		if err != nil {
			return state.ReasonValidatorFailed, fmt.Sprintf("validator %s: %v", v.Name, err)
		}
		switch a.waitValidator(p, v) {
		case validatorTimedOut:
			bound := validator.Timeout(v).Seconds()
			a.SetFigure("validator_timeout_s", bound)
			return state.ReasonHarnessError, fmt.Sprintf("validator %s ran past its %g s bound (timeout_s); ended", v.Name, bound)
		case validatorStopped:
			return state.ReasonInterrupted, fmt.Sprintf("stopped while validator %s ran; ended", v.Name)
		}
		ex := p.Exit()
		stdout, _ := safefile.ReadFile(out, safefile.ChildLimit)
		vd := gates.ValidatorResult(v.Name, ex.Code, ex.Signal, stdout, a.env.Now())
		a.Gate(vd)
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
	// The campaign's own files are scanned beside the attempt's: both only
	// read, and the attempt's verdict is judged first.
	campaign := make(chan gates.Verdict, 1)
	go func() { campaign <- a.env.campaignPrivacy(a.plan.Privacy) }()
	pv := gates.PrivacyScan(a.dir, a.plan.Privacy, a.env.Private, func(rel string) bool {
		return rel == "state.json" || rel == "gates.jsonl" // the controller's own records
	}, 64<<20, a.env.Now())
	cv := <-campaign
	a.Gate(pv)
	if !pv.Passed() {
		return state.ReasonPrivacyViolation, "privacy scan: " + pv.Detail
	}
	a.Gate(cv)
	if !cv.Passed() {
		return state.ReasonPrivacyViolation, "privacy scan of the campaign's own files: " + cv.Detail
	}
	return "", ""
}

// writeSignals writes the attempt's recorded signals, a JSON array of
// state.Signal, to signals.json in the attempt directory, atomically, and
// returns its path. The signals are those already recorded in the store
// and those still pending for the next transition.
func (a *Attempt) writeSignals() (string, error) {
	sigs, err := a.Signals()
	if err != nil {
		return "", fmt.Errorf("read the attempt's signals: %w", err)
	}
	path := filepath.Join(a.dir, "signals.json")
	if err := atomicfile.WriteJSON(path, sigs, 0o644, atomicfile.Beneath(a.env.Dir)); err != nil {
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
func (a *Attempt) effectiveConfig(ctx context.Context) []gates.Verdict {
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
		out = append(out, gates.EffectiveConfigDir(a.dir, logs, a.env.Now()))
	}
	if len(paths) > 0 {
		doc, err := a.fetchConfig(ctx)
		if err != nil {
			out = append(out, gates.Verdict{Gate: "effective-config", Verdict: gates.Error, At: a.env.Now(),
				Detail: "the server's configuration could not be read: " + err.Error()})
		} else {
			out = append(out, gates.ServerConfig(doc, paths, a.env.Now()))
		}
	}
	return out
}

// fetchConfig asks the server for its effective configuration and keeps
// the answer in the attempt directory.
func (a *Attempt) fetchConfig(ctx context.Context) ([]byte, error) {
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
	body, err := io.ReadAll(io.LimitReader(resp.Body, safefile.ChildLimit))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := atomicfile.WriteFile(filepath.Join(a.dir, "server-config.json"), body, 0o644, atomicfile.NoSync(), atomicfile.Beneath(a.env.Dir)); err != nil {
		a.env.Log.Warn().Err(err).Str("run", a.run.ID).Msg("keep the server's configuration")
	}
	return body, nil
}

// prepareCommands fixes the attempt's launch variables and environment
// and starts writing environment.json: the channel it returns gives the
// write's error once the file is durable.
func (a *Attempt) prepareCommands() (<-chan error, error) {
	c := a.env
	gpuStrs := make([]string, len(a.gpuIDs))
	for i, g := range a.gpuIDs {
		gpuStrs[i] = strconv.Itoa(g)
	}
	numa := ""
	if a.slots[0].NUMA != nil {
		numa = strconv.Itoa(*a.slots[0].NUMA)
	}
	a.vars = map[string]string{
		"CAMPAIGN_DIR": c.Dir,
		"RUN_DIR":      filepath.Dir(a.dir),
		"ATTEMPT_DIR":  a.dir,
		"ATTEMPT":      strconv.Itoa(a.n),
		"GPU_IDS":      strings.Join(gpuStrs, ","),
		"GPU_COUNT":    strconv.Itoa(len(a.gpuIDs)),
		"CPUS":         protocols.FormatCPUList(a.cpus),
		"NUMA_NODE":    numa,
		"PORT":         strconv.Itoa(a.port),
		"SLOT":         strings.Join(protocols.SlotNames(a.slots), "+"),
		"REGIME":       a.opts.Regime,
		"PHASE_FILE":   filepath.Join(a.dir, "phases.jsonl"),
		"PROTOCOL_DIR": filepath.Dir(c.ProtocolPath),
		"WORKDIR":      c.Workdir,
	}
	if a.needDirs == nil && c.NeedDirs != nil {
		var err error
		if a.needDirs, err = c.NeedDirs(a.run); err != nil {
			return nil, err
		}
	}
	for as, run := range a.run.NeedVars {
		res, ok := a.needDirs[as]
		if !ok {
			return nil, fmt.Errorf("run %s needs %s: no result directory given", a.run.ID, run)
		}
		a.vars[as] = res
	}
	if pt := a.run.Capacity; pt != nil {
		rate, err := pt.LaunchRate()
		if err != nil {
			return nil, fmt.Errorf("run %s: %w", a.run.ID, err)
		}
		a.vars[protocols.RateVar] = rate
	}
	cuda := a.vars["GPU_IDS"]
	if c.StepCUDA != "" {
		cuda = c.StepCUDA
	}
	env := append(os.Environ(),
		"CUDA_VISIBLE_DEVICES="+cuda,
		"WARDEN_RUN_ID="+a.run.ID,
		"WARDEN_ATTEMPT="+a.vars["ATTEMPT"],
		"WARDEN_RUN_DIR="+a.vars["RUN_DIR"],
		a.marker(),
		"WARDEN_CAMPAIGN_DIR="+c.Dir,
		"WARDEN_PORT="+a.vars["PORT"],
		"WARDEN_GPU_IDS="+a.vars["GPU_IDS"],
		"WARDEN_CPUS="+a.vars["CPUS"],
		"WARDEN_PHASE_FILE="+a.vars["PHASE_FILE"],
		"WARDEN_DRAIN_ALLOWANCE_S="+strconv.FormatFloat(a.run.DrainS, 'f', -1, 64),
		"WARDEN_DRAIN_WATCHDOG_S="+strconv.FormatFloat(a.run.WatchdogS, 'f', -1, 64),
	)
	if c.FakeGPUDir != "" {
		env = append(env, gpu.FakeDirEnv+"="+c.FakeGPUDir)
	}
	a.environ = env
	// environment.json is written beside the transition to starting; the
	// channel gives the write's error once it is done.
	rec := map[string]any{
		"variables": maps.Clone(a.vars), "gpu_backend": c.GPUs.Name(), "workdir": c.Workdir,
		"protocol_sha256": a.plan.Protocol.SHA256, "run": a.run.ID, "attempt": a.n,
	}
	written := make(chan error, 1)
	go func() {
		written <- atomicfile.WriteJSON(filepath.Join(a.dir, "environment.json"), rec, 0o644, atomicfile.Beneath(c.Dir))
	}()
	return written, nil
}

// start launches the server or the client in its own process group and
// cgroup, pinned to the slot's CPUs from its first instruction, and records
// its identity before anything acts on it (the server's while it is probed).
func (a *Attempt) start(role string, cmd protocols.CommandSpec, extraEnv map[string]string) (*launch.Proc, error) {
	p, proc, err := a.launch(role, cmd, extraEnv)
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := a.rec.ProcStarted(a.run.ID, a.n, proc); err != nil {
			a.env.Log.Error().Err(err).Str("run", a.run.ID).Str("role", role).Msg("record a process started")
		}
	}()
	if a.recording = done; role != "server" {
		a.recorded()
	}
	return p, nil
}

// startNoted is start for a process whose record goes with the transition
// that follows at once: noted, not written alone.
func (a *Attempt) startNoted(role string, cmd protocols.CommandSpec, extraEnv map[string]string) (*launch.Proc, error) {
	p, proc, err := a.launch(role, cmd, extraEnv)
	if err == nil {
		a.NoteProc(proc)
	}
	return p, err
}

// launch starts a process of the attempt (start) and returns it with its
// record.
func (a *Attempt) launch(role string, cmd protocols.CommandSpec, extraEnv map[string]string) (*launch.Proc, state.Proc, error) {
	a.recorded()
	argv, err := cmd.Expand(a.vars)
	if err != nil {
		return nil, state.Proc{}, err
	}
	env := append([]string(nil), a.environ...)
	for _, k := range slices.Sorted(maps.Keys(extraEnv)) {
		v, err := protocols.Expand(extraEnv[k], a.vars)
		if err != nil {
			return nil, state.Proc{}, err
		}
		env = append(env, k+"="+v)
	}
	record.AppendLine(a.env.Dir, filepath.Join(a.dir, "commands.log"), fmt.Sprintf("%s %s: %s", a.env.Now().UTC().Format(time.RFC3339Nano), role, ShellQuote(argv)), a.env.Log)
	if a.own != nil {
		a.own.lockStart() // a sample that sees it waits until it is known
	}
	p, err := a.env.Launcher.Start(launch.Spec{
		Role: role, Argv: argv, Env: env, Dir: a.env.Workdir,
		StdoutPath: campaignfs.Stdout(a.dir, role), StderrPath: campaignfs.Stderr(a.dir, role),
		CPUs:   a.cpus,
		Cgroup: LeafName(a.run.ID, a.n, role),
		Stop:   a.stopOptions(role),
	})
	if a.own != nil {
		if err == nil {
			a.own.register(p)
		}
		a.own.unlockStart()
	}
	if err != nil {
		return nil, state.Proc{}, err
	}
	failpoint.Hit(role + "-started-unrecorded")
	return p, state.Proc{Role: role, PID: p.PID, StartTime: p.StartTime, BootID: p.BootID,
		PGID: p.PGID, Cgroup: p.Cgroup, Argv: argv, StartedAt: p.Started}, nil
}

// recorded waits until the last process started is recorded.
func (a *Attempt) recorded() {
	if a.recording != nil {
		<-a.recording
	}
}

// stopOptions are the grace periods of the server (the protocol's) and
// of the client.
func (a *Attempt) stopOptions(role string) launch.StopOptions {
	if role == "server" {
		return launch.StopOptions{
			Grace:      time.Duration(a.run.Server.ShutdownGraceS * float64(time.Second)),
			GroupGrace: time.Duration(a.run.Server.GroupGraceS * float64(time.Second)),
		}
	}
	return launch.StopOptions{Grace: clientGrace, GroupGrace: clientGroupGrace}
}

// recordExit notes a process's exit, once; the next transition records it.
func (a *Attempt) recordExit(p *launch.Proc) {
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
	a.NoteExit(state.Exit{Role: p.Role, PID: p.PID, Code: ex.Code, Signal: ex.Signal, At: ex.At})
}

// serverExitReason is why an attempt whose server exited failed: oom when
// its output says it ran out of GPU memory (seed 002 stop condition 2,
// "GPU OOM"), server-exit otherwise.
func (a *Attempt) serverExitReason() state.Reason {
	if gates.ServerOOM(a.dir) != "" {
		return state.ReasonOOM
	}
	return state.ReasonServerExit
}

func (a *Attempt) oomNote() string {
	if m := gates.ServerOOM(a.dir); m != "" {
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
func (a *Attempt) recordTerminalClasses() {
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
		a.SetFigure(name, a.Figure(name)+n)
	}
}

// validatorEnd says how a validator's run ended when the controller ended
// it: not at all (it exited), past its time bound, or by a stop.
type validatorEnd int

const (
	validatorExited validatorEnd = iota
	validatorTimedOut
	validatorStopped
)

// waitValidator waits for the validator p until it exits, its time bound
// passes or the attempt is stopped; in the last two cases it ends p (its
// leader, then its group) before it returns.
func (a *Attempt) waitValidator(p *launch.Proc, v protocols.ValidatorSpec) validatorEnd {
	t := time.NewTimer(validator.Timeout(v))
	defer t.Stop()
	var stop <-chan struct{}
	if a.ctx != nil {
		stop = a.ctx.Done()
	}
	select {
	case <-p.Done():
		return validatorExited
	case <-t.C:
		a.stopProc(p)
		return validatorTimedOut
	case <-stop:
		a.stopProc(p)
		return validatorStopped
	}
}
