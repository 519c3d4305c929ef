package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"warden/pkg/attempt"
	"warden/pkg/budget"
	"warden/pkg/endlog"
	"warden/pkg/failpoint"
	"warden/pkg/launch"
	"warden/pkg/record"
	"warden/pkg/state"
)

// reclaimUnrecorded ends the processes of a live attempt that the records
// do not name: a controller that died between starting a process and
// recording it, or a descendant that left its process group where no
// cgroup holds it. They are found by the attempt's leaf cgroups and by the
// attempt directory every process of the attempt inherits in its
// environment (WARDEN_ATTEMPT_DIR); each is identity-checked and killed
// through a pidfd (an interrupted attempt needs no graceful stop), and
// waited for. sameBoot must say that the host is still in the boot the
// dead controller ran in: after a reboot nothing of it can be alive, and
// nothing is signalled.
func (c *Runner) reclaimUnrecorded(ctx context.Context, a state.Attempt, sameBoot bool) ([]state.Signal, error) {
	if !sameBoot || a.Dir == "" {
		return nil, nil
	}
	if !strings.HasPrefix(filepath.Clean(a.Dir)+"/", filepath.Clean(c.dir)+"/") {
		return nil, fmt.Errorf("attempt directory %s is not under the campaign directory %s: nothing searched or signalled", a.Dir, c.dir)
	}
	var sigs []state.Signal
	var errs []error
	if c.cgroups.Available() {
		for _, role := range []string{"server", "client"} {
			path := filepath.Join(c.cgroups.Root(), attempt.LeafName(a.RunID, a.N, role))
			if recordedCgroup(a, path) || !isDir(path) {
				continue
			}
			recs, err := launch.Reclaim(ctx, c.boot, launch.Leftover{Role: role + " (unrecorded)", Cgroup: path}, launch.StopOptions{})
			sigs = append(sigs, record.ToSignals(recs)...)
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	ids, err := launch.Marked(c.boot, "WARDEN_ATTEMPT_DIR="+a.Dir, launch.AllProcesses)
	if err != nil {
		return sigs, errors.Join(append(errs, err)...)
	}
	var killed []launch.Identity
	for _, id := range ids {
		rec, err := launch.Signal(c.boot, id, "unrecorded", syscall.SIGKILL)
		if err != nil {
			continue // gone meanwhile, or no longer the process found
		}
		sigs = append(sigs, record.ToSignals([]launch.SignalRecord{rec})...)
		killed = append(killed, id)
		c.log.Warn().Str("run", a.RunID).Int("attempt", a.N).Int("pid", id.PID).Msg("killed a process of the attempt that was never recorded")
	}
	if err := launch.WaitGone(ctx, c.boot, killed, 30*time.Second); err != nil {
		errs = append(errs, err)
	}
	return sigs, errors.Join(errs...)
}

// leftoversFigure marks, in an attempt's figures, that a resume found
// processes of the attempt alive. It is recorded before any of them is
// signalled: a resume that dies while ending them leaves the mark, and the
// next resume charges the attempt's GPUs up to its own time, as they may
// have been held until just before.
const leftoversFigure = "leftovers_alive_at_resume"

// noteLeftovers records leftoversFigure on a live attempt when any of its
// processes, recorded or (in the same boot) not, is alive now; it returns
// the attempt as recorded.
func (c *Runner) noteLeftovers(a state.Attempt, sameBoot bool) state.Attempt {
	if a.Figures[leftoversFigure] > 0 {
		return a
	}
	alive := false
	for _, p := range a.Procs {
		id := launch.Identity{PID: p.PID, StartTime: p.StartTime, BootID: p.BootID}
		if ok, _ := id.Alive(c.boot); ok {
			alive = true
		}
	}
	if !alive && sameBoot && a.Dir != "" {
		ids, _ := launch.Marked(c.boot, "WARDEN_ATTEMPT_DIR="+a.Dir, launch.AllProcesses)
		alive = len(ids) > 0
	}
	if !alive {
		return a
	}
	got, err := c.store.UpdateAttempt(a.RunID, a.N, func(at *state.Attempt) error {
		if at.Figures == nil {
			at.Figures = map[string]float64{}
		}
		at.Figures[leftoversFigure] = 1
		return nil
	})
	if err != nil && !errors.Is(err, state.ErrStateFile) {
		c.log.Warn().Err(err).Str("run", a.RunID).Int("attempt", a.N).Msg("note left-over processes")
		if a.Figures == nil {
			a.Figures = map[string]float64{}
		}
		a.Figures[leftoversFigure] = 1 // charge as held all the same
		return a
	}
	return got
}

func recordedCgroup(a state.Attempt, path string) bool {
	for _, p := range a.Procs {
		if p.Cgroup == path {
			return true
		}
	}
	return false
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// reclaimGrace is what a left-over's API parent, then its group, get
// after SIGTERM at resume before SIGKILL.
const reclaimGrace = 5 * time.Second

// reconcileLeftovers looks at what a previous controller left: every live
// attempt is ended. Its recorded processes are reclaimed only where pid,
// start time and boot id all match (a reused pid, or any pid after a
// reboot, is never signalled); processes of the attempt that were never
// recorded (the controller died between a start and its record) are found
// and killed in the same boot only (reclaimUnrecorded). The attempt
// becomes interrupted and its GPU time is charged to the last heartbeat
// plus the time to reclaim, less what was charged before the crash.
// Reservations still open are released.
func (c *Runner) reconcileLeftovers(ctx context.Context) error {
	live, err := c.store.LiveAttempts()
	if err != nil {
		return err
	}
	cp, err := c.store.Campaign()
	if err != nil {
		return err
	}
	ledger, err := c.store.Ledger()
	if err != nil {
		return err
	}
	// charged: the attempts whose GPU time is on the ledger already (the
	// controller died after charging them), with the time of the charge
	// and the GPU-seconds charged
	charged := map[string]time.Time{}
	chargedGPUSeconds := map[string]float64{}
	for _, e := range ledger {
		if e.Kind == state.LedgerCharge {
			charged[record.Key(e.Run, e.Attempt)] = e.At
			chargedGPUSeconds[record.Key(e.Run, e.Attempt)] += e.GPUSeconds
		}
	}
	bootID, _ := c.bootID()
	sameBoot := bootID != "" && bootID == cp.ControllerBootID
	if err := c.noteDeadController(cp); err != nil {
		return err
	}
	ends, err := endlog.Read(c.dir)
	if err != nil {
		c.log.Warn().Err(err).Msg("read the end log: attempts are charged until this resume")
		ends = nil
	}
	if err := c.exec.reconcileJobs(ctx); err != nil {
		return err
	}
	for _, a := range live {
		if a.Slurm != nil || c.exec.stepsElsewhere() {
			if a.Slurm == nil {
				a.Slurm = &state.SlurmStep{} // never reached srun: nothing of it in Slurm
			}
			if err := c.reconcileSlurmAttempt(ctx, a, chargedGPUSeconds[record.Key(a.RunID, a.N)]); err != nil {
				return err
			}
			continue
		}
		lastCharge, wasCharged := charged[record.Key(a.RunID, a.N)]
		if err := c.reconcileLocalAttempt(ctx, a, cp, sameBoot, ends, lastCharge, wasCharged); err != nil {
			return err
		}
	}
	c.releaseOpen(ledger)
	// Leaves a dead controller left empty (attempts whose processes had
	// ended): nothing of the campaign runs yet, so none is in use.
	if removed, err := c.cgroups.PruneEmpty(ctx); err != nil {
		c.log.Warn().Err(err).Msg("remove empty cgroups left by the previous controller")
	} else if len(removed) > 0 {
		c.log.Info().Int("cgroups", len(removed)).Msg("removed empty cgroups left by the previous controller")
	}
	c.repairStateFiles()
	return nil
}

// reconcileLocalAttempt ends a live attempt that ran on this host: its
// left-overs are reclaimed by identity, and it becomes interrupted with
// its GPU time charged from the server's start (or the attempt's creation)
// to the first moment its GPUs are known free. lastCharge is when it was
// charged, if wasCharged.
func (c *Runner) reconcileLocalAttempt(ctx context.Context, a state.Attempt, cp state.Campaign, sameBoot bool, ends map[endlog.Key]time.Time, lastCharge time.Time, wasCharged bool) error {
	a = c.noteLeftovers(a, sameBoot)
	var sigs []state.Signal
	// processes of the attempt lived at this resume, or at an earlier
	// one that died before it had ended them
	held := a.Figures[leftoversFigure] > 0
	for _, p := range a.Procs {
		id := launch.Identity{PID: p.PID, StartTime: p.StartTime, BootID: p.BootID}
		alive, _ := id.Alive(c.boot)
		if alive {
			held = true
		}
		if why := c.foreign(p, id, alive); why != "" {
			c.log.Warn().Str("run", a.RunID).Int("attempt", a.N).Int("pid", p.PID).Str("why", why).Msg("a recorded process is not this campaign's: not signalled")
			continue
		}
		lo := launch.Leftover{Leader: id, Role: p.Role, Cgroup: p.Cgroup}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		recs, err := launch.Reclaim(rctx, c.boot, lo, launch.StopOptions{Grace: reclaimGrace, GroupGrace: reclaimGrace})
		cancel()
		sigs = append(sigs, record.ToSignals(recs)...)
		if err != nil {
			c.log.Warn().Err(err).Str("run", a.RunID).Int("attempt", a.N).Str("role", p.Role).Msg("reclaim left-over")
		}
	}
	unrec, uerr := c.reclaimUnrecorded(ctx, a, sameBoot)
	sigs = append(sigs, unrec...)
	if uerr != nil {
		c.log.Warn().Err(uerr).Str("run", a.RunID).Int("attempt", a.N).Msg("reclaim unrecorded processes")
	}
	held = held || len(sigs) > 0
	// Never under-count. GPUs were held from the server's start (for a
	// server never recorded, from the attempt's creation: it may have
	// started once the attempt passed preflight) until the first
	// moment they are known free: now, when this resume ended a
	// left-over or found it gone; or the host's boot, when it rebooted
	// since the last sign of life (heartbeat or record). Both bounds
	// are recorded. Time charged already is not charged again.
	lastSeen := cp.Heartbeat
	if a.UpdatedAt.After(lastSeen) {
		lastSeen = a.UpdatedAt
	}
	end := c.now()
	if !sameBoot && !held {
		if bt, err := launch.BootTime(); err == nil && bt.After(lastSeen) && bt.Before(end) {
			end = bt
		}
	}
	// the controller that ended its processes recorded when they were
	// proven gone, though it could not record the attempt's end
	provenGone, proven := ends[endlog.Key{Run: a.RunID, N: a.N}]
	if proven = proven && sameBoot && !held && provenGone.Before(end); proven {
		end = provenGone
	}
	var start time.Time
	switch srv := record.ServerProc(a); {
	case wasCharged:
		if held {
			start = lastCharge // charged to its cleanup, yet something lived on
		}
	case srv != nil:
		start = srv.StartedAt
	case held || serverMayHaveStarted(a.State):
		start = a.CreatedAt
	}
	charge := 0.0
	figures := map[string]float64{}
	if !start.IsZero() {
		charge = budget.Charge(len(a.GPUIDs), start, end)
		figures["last_seen_alive_unix"] = unixSeconds(lastSeen)
		figures["charged_until_unix"] = unixSeconds(end)
		if proven {
			figures["proven_gone_unix"] = unixSeconds(end)
		}
	}
	when := "when this resume knew its GPUs free"
	if proven {
		when = "when the controller that ended its processes proved them gone (" + endlog.File + ")"
	}
	note := fmt.Sprintf("interrupted: from %s to %s, %s (last seen alive %s)",
		start.UTC().Format(time.RFC3339Nano), end.UTC().Format(time.RFC3339Nano), when, lastSeen.UTC().Format(time.RFC3339Nano))
	return c.interruptLeftover(a, charge, note, "the controller died or stopped; left-overs reclaimed at resume", figures,
		func(at *state.Attempt) { at.Signals = append(at.Signals, sigs...) })
}

// releaseOpen releases the reservations the ledger holds open.
func (c *Runner) releaseOpen(ledger []state.LedgerEntry) {
	open := map[string]float64{}
	for _, e := range ledger {
		switch e.Kind {
		case "reserve":
			open[e.Run] += e.GPUSeconds
		case "release":
			open[e.Run] -= e.GPUSeconds
		}
	}
	for run, amt := range open {
		if amt > 1e-9 {
			c.reserved[run] = amt
			c.release(run, 0)
		}
	}
	c.flushReleases()
}

// foreign says why a recorded process must not be signalled by this
// campaign's resume ("" when it may be). Its pid, start time and boot id
// matched already (Identity.Alive). Then: its recorded cgroup must be under
// this campaign's cgroup root; and, alive, what it carries must not name
// another campaign. The environment is evidence only when it says
// something: WARDEN_CAMPAIGN_DIR with this campaign's directory is ours,
// with another (a database copied from another campaign names that
// campaign's processes, with identities that check out) is foreign. An
// environment without the entry (emptied, or rewritten as setproctitle
// does; unreadable) proves nothing either way: the process is ours when it
// is still in the process group it was started in (recorded at spawn; only
// setpgid or setsid change it, never a write to its memory).
func (c *Runner) foreign(p state.Proc, id launch.Identity, alive bool) string {
	if p.Cgroup != "" && c.cgroups.Available() && !strings.HasPrefix(filepath.Clean(p.Cgroup)+"/", filepath.Clean(c.cgroups.Root())+"/") {
		return fmt.Sprintf("its cgroup %s is not under this campaign's", p.Cgroup)
	}
	if !alive {
		return ""
	}
	switch dir, found := launch.EnvValue(id, "WARDEN_CAMPAIGN_DIR"); {
	case found && dir == c.dir:
		return ""
	case found:
		return fmt.Sprintf("it carries WARDEN_CAMPAIGN_DIR=%s, not this campaign's %s", dir, c.dir)
	}
	pgid, _, err := id.Group()
	switch {
	case err != nil:
		return fmt.Sprintf("its environment names no campaign and its process group cannot be read: %v", err)
	case p.PGID <= 0 || pgid != p.PGID:
		return fmt.Sprintf("its environment names no campaign and it is in process group %d, not %d where it was started", pgid, p.PGID)
	}
	return ""
}

// serverMayHaveStarted says whether an attempt in state st may have started
// its server: from the transition to starting on.
func serverMayHaveStarted(st state.AttemptState) bool {
	switch st {
	case state.Planned, state.Reserved, state.Preflight:
		return false
	}
	return true
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// interruptLeftover ends a live attempt a resume found: its charge goes on
// the ledger with note (when there is one), then the attempt becomes
// interrupted with msg, its figures (gpu_seconds added to what it was
// charged before) and what mutate records beside them.
func (c *Runner) interruptLeftover(a state.Attempt, charge float64, note, msg string, figures map[string]float64, mutate func(*state.Attempt)) error {
	figures["gpu_seconds"] = charge
	if charge > 0 {
		if _, err := c.store.AddLedger(state.LedgerEntry{Kind: "charge", Run: a.RunID, Attempt: a.N, GPUSeconds: charge, Note: note}); err != nil {
			return err
		}
	}
	failpoint.Hit("before-transition:interrupted")
	_, err := c.store.Transition(a.RunID, a.N, state.Interrupted, state.ReasonInterrupted, msg, figures,
		func(at *state.Attempt) error {
			if at.Figures == nil {
				at.Figures = map[string]float64{}
			}
			for k, v := range figures {
				if k != "gpu_seconds" {
					at.Figures[k] = v
				}
			}
			at.Figures["gpu_seconds"] += charge
			mutate(at)
			return nil
		})
	if err != nil {
		return fmt.Errorf("mark %s attempt %d interrupted: %w", a.RunID, a.N, err)
	}
	failpoint.Hit("after-transition:interrupted")
	c.log.Info().Str("run", a.RunID).Int("attempt", a.N).Float64("charged_gpu_s", charge).Msg("left-over attempt interrupted")
	return nil
}

// noteDeadController records that the previous controller died, once per
// resume: a campaign still running has no controller that ended it.
func (c *Runner) noteDeadController(cp state.Campaign) error {
	if !cp.ControllerDied() {
		return nil
	}
	now := c.now()
	dead := now.Sub(cp.Heartbeat).Seconds()
	_, err := c.store.AppendEvent(state.Event{Reason: state.EventControllerDead,
		Message: fmt.Sprintf("controller pid %d found dead at resume: its last heartbeat was %.1f s before", cp.ControllerPID, dead),
		Figures: map[string]float64{"dead_from_unix": float64(cp.Heartbeat.UnixNano()) / 1e9, "dead_until_unix": float64(now.UnixNano()) / 1e9,
			"dead_s": dead, "controller_pid": float64(cp.ControllerPID)}})
	return err
}
