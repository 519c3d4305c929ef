package attempt

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"warden/pkg/gates"
	"warden/pkg/phasefile"
	"warden/pkg/state"
)

// startClient starts the client, unless it started with the server, and
// records the transition to measuring; the caller closes a.phases once
// measure returns.
func (a *Attempt) startClient() (Outcome, bool) {
	if a.client == nil {
		// recorded with the transition to measuring, just below
		cl, err := a.startNoted("client", a.run.Client, a.run.Env)
		if err != nil {
			return a.stopThenFail(state.ReasonHarnessError, "start client: "+err.Error()), false
		}
		a.client = cl
	}
	a.phases = phasefile.NewWatcher(a.vars["PHASE_FILE"])
	if err := a.rec.Transition(state.Measuring, "", "client running", nil); err != nil {
		a.phases.Close()
		return a.harness(err), false
	}
	if a.opts.Measuring != nil {
		a.opts.Measuring <- a.run.ID
	}
	return Outcome{}, true
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
			a.rec.SetFigure("measure_deadline_s", a.run.DeadlineS)
			a.rec.SetFigure("client_ran_s", ran)
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
			if a.phases.Poll(); a.phases.Profiles() > checked {
				checked = a.phases.Profiles()
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
		a.rec.SetEarlyBackground()
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
	a.phases.Poll()
	drainAt := a.phases.At(phasefile.Drain)
	if drainAt.IsZero() {
		return "", ""
	}
	final := true
	if t := a.phases.At(phasefile.Drained); !t.IsZero() {
		end = t
	} else if t := a.phases.At(phasefile.Done); !t.IsZero() {
		end = t
	} else if end.IsZero() {
		end, final = a.env.Now(), false
	}
	return a.judgeDrain(end.Sub(drainAt).Seconds(), final)
}

// judgeDrain applies the class's allowance and watchdog to a drain of
// drained seconds; final says the drain is over (its verdict is kept).
func (a *Attempt) judgeDrain(drained float64, final bool) (state.Reason, string) {
	a.rec.SetFigure("drain_s", drained)
	v, outcome := gates.Drain(drained, a.run.DrainS, a.run.WatchdogS, a.env.Now())
	switch outcome {
	case gates.DrainWatchdog:
		a.rec.Gate(v)
		return state.ReasonDrainWatchdog, fmt.Sprintf("drain ran %.1f s, past the %.0f s watchdog of class %s", drained, a.run.WatchdogS, a.run.Class)
	case gates.DrainQuarantine:
		if !a.quarant {
			a.quarant = true
			a.env.Log.Warn().Str("run", a.run.ID).Float64("drain_s", drained).Float64("allowance_s", a.run.DrainS).Msg("drain over allowance: run quarantined")
		}
	case gates.DrainUnknown:
		a.rec.Gate(v)
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
		if a.phases.At("drain").IsZero() {
			return a.drainUnseen("the client never said when admission stopped: no drain line in its phase file " + filepath.Base(a.vars["PHASE_FILE"]))
		}
		return "", ""
	}
}

func (a *Attempt) drainUnseen(detail string) (state.Reason, string) {
	a.rec.Gate(gates.Verdict{Gate: "drain", Verdict: gates.Fail, Detail: detail, At: a.env.Now(),
		Figures: map[string]float64{"allowance_s": a.run.DrainS, "watchdog_s": a.run.WatchdogS}})
	return state.ReasonDrainUnseen, "drain gate: " + detail
}
