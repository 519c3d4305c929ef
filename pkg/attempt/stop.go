package attempt

import (
	"context"
	"errors"
	"slices"
	"syscall"
	"time"

	"warden/pkg/budget"
	"warden/pkg/failpoint"
	"warden/pkg/gates"
	"warden/pkg/launch"
	"warden/pkg/state"
)

// stopThenFail leaves the happy path: note the reason, stop everything,
// prove cleanup, then fail.
func (a *Attempt) stopThenFail(reason state.Reason, detail string) Outcome {
	if err := a.rec.Transition(state.Stopping, reason, detail, nil); err != nil {
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
	if err := a.rec.Transition(state.Interrupted, reason, detail, nil); err != nil {
		return a.harness(err)
	}
	return Outcome{State: state.Interrupted, Reason: reason, Detail: detail, Interrupted: true}
}

func (a *Attempt) interrupt(detail string) Outcome { return a.stopThenInterrupt(detail) }

// Grace periods of the processes an attempt starts, set once on their
// launch specs (the server's come from the protocol). The client gets time
// to write its results after SIGTERM; a validator is a short check.
const (
	clientGrace      = 10 * time.Second
	clientGroupGrace = 2 * time.Second
)

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

// stopProc ends p with its spec's grace periods and notes the signals
// for the next transition.
func (a *Attempt) stopProc(p *launch.Proc) {
	ctx, cancel := context.WithTimeout(context.Background(), p.Stop.Grace+p.Stop.GroupGrace+StopSlack)
	defer cancel()
	recs, err := p.Shutdown(ctx)
	a.rec.NoteSignals(recs...)
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
		a.own.End() // from here the cleanup gate judges what holds the GPUs
	}
	n := a.rec.PendingSignals()
	if a.client != nil {
		a.stopProc(a.client)
	}
	if a.server != nil {
		a.stopProc(a.server)
	}
	if a.rec.PendingSignals() > n {
		failpoint.Hit("signals-sent-unrecorded")
	}
}

// cleanup proves the attempt's processes are gone and its GPUs back to
// baseline within the protocol's timeout, then charges the GPU time.
func (a *Attempt) cleanup() (Outcome, bool) {
	a.joinHostRecords()
	if err := a.rec.Transition(state.Cleanup, "", "proving cleanup", nil); err != nil {
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
	a.rec.Gate(v)
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
	if err := a.rec.Seal(); err != nil { // the evidence is final: made durable, its digests noted
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
	a.env.released(a.rec.Key())
	a.rec.SetFigure("gpu_seconds", amt)
	// recorded with the next transition; a crash before it is charged at
	// resume, from the server's start to the attempt's last record
	a.rec.NoteCharge(amt, "server start to cleanup")
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
		a.rec.NoteSignals(rec)
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
