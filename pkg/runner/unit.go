package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"warden/internal/cpulist"
	"warden/pkg/attempt"
	"warden/pkg/dirlayout"
	"warden/pkg/failpoint"
	"warden/pkg/gates"
	"warden/pkg/launch"
	"warden/pkg/outcome"
	"warden/pkg/state"
	"warden/protocols"
)

// runUnit executes the unit's runs back to back. After each attempt the
// outcome policy (outcome.Next) says what follows: the next run, an exact retry,
// or the end of the unit with a failure that stops the campaign.
func (c *Runner) runUnit(ctx context.Context, u *unitRun) unitResult {
	res := unitResult{unit: u.Unit}
	for _, r := range u.Runs {
		retries := 0
		for {
			out := c.runAttempt(ctx, c.exec, r, u.Slots, attempt.Options{Regime: u.Regime})
			v := outcome.Next(out.State, out.Reason, retries, c.currentPlan().Retries)
			switch v.Next {
			case outcome.Restart:
				res.interrupted = true
				return res
			case outcome.Quarantine:
				res.quarantined++
			case outcome.Retry:
				if ctx.Err() != nil {
					res.interrupted = true
					return res
				}
				retries++
				if out.BusyPort > 0 {
					c.awaitPort(ctx, r.ID, out.BusyPort)
				}
				c.log.Warn().Str("run", r.ID).Str("reason", string(out.Reason)).Int("retry", retries).Msg("exact retry after an infrastructure failure")
				failpoint.Hit("retry-decided")
				continue
			case outcome.StopForReview:
				res.failedRun, res.reason, res.detail, res.verdict = r.ID, out.Reason, out.Detail, v
				return res
			}
			break
		}
	}
	return res
}

// runAttempt creates the next attempt of run r on slots in the records
// and has executor x run it to a terminal state.
func (c *Runner) runAttempt(ctx context.Context, x executor, r protocols.Run, slots []protocols.SlotInfo, opts attempt.Options) attempt.Outcome {
	run, err := c.store.Run(r.ID)
	if err != nil {
		return attempt.Outcome{State: state.Failed, Reason: state.ReasonHarnessError, Detail: err.Error()}
	}
	n := run.Attempts + 1
	gpus, cpus := attempt.SlotResources(slots)
	spec := attempt.Spec{Plan: c.currentPlan(), Run: r, N: n, Dir: dirlayout.AttemptDir(c.dir, r.ID, n),
		Slots: slots, GPUIDs: gpus, CPUs: cpus, Port: slots[0].Port, Options: opts}
	env := c.attemptEnv()
	if err := env.MkdirBeneath(spec.Dir); err != nil {
		return attempt.Outcome{State: state.Failed, Reason: state.ReasonHarnessError, Detail: err.Error()}
	}
	cp, _ := c.store.Campaign()
	amends, _ := c.store.Amendments()
	_, err = c.store.NewAttempt(r.ID, spec.Dir, func(at *state.Attempt) {
		at.Slot = strings.Join(protocols.SlotNames(slots), "+")
		at.GPUIDs = gpus
		at.CPUs = cpulist.Format(cpus)
		at.Port = spec.Port
		at.ProtocolSHA256 = cp.ProtocolSHA256
		for _, am := range amends {
			at.Amendments = append(at.Amendments, am.ID)
		}
	})
	if err != nil && !errors.Is(err, state.ErrStateFile) {
		return attempt.Outcome{State: state.Failed, Reason: state.ReasonHarnessError, Detail: err.Error()}
	}
	failpoint.Hit("attempt-created")
	return x.run(ctx, env, spec)
}

// attemptEnv is the environment the campaign's attempts run in.
func (c *Runner) attemptEnv() *attempt.Env {
	return &attempt.Env{
		Dir: c.dir, Workdir: c.workdir, ProtocolPath: c.protocolPath, FakeGPUDir: c.fakeGPUDir,
		GPUs: c.gpus, Launcher: c.starter, Cgroups: c.cgroups, Boot: c.boot, UID: c.uid, Now: c.now, Log: c.log,
		Private: c.private, PrivCache: &c.privCache, Ends: c.ends, InFlight: &c.flights,
		DiskFull: c.diskFullCount, StorageFault: c.stopIfStorageFault, NeedDirs: c.needDirs,
		FlushFiles: func() { c.stopIfStorageFault(c.store.Sync()) },
	}
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
	return dirlayout.AttemptDir(c.dir, run, r.Result), nil
}

// awaitPort waits, before the exact rerun of an attempt whose slot's port
// was taken, for the port to be free (outcome.PortBackoff, on the
// runner's clock).
func (c *Runner) awaitPort(ctx context.Context, run string, port int) {
	waited, free := launch.AwaitPortFree(ctx, port, outcome.PortBackoff, c.after, func(p int) bool { return gates.PortFree(p, c.now(), nil).Passed() })
	c.log.Warn().Str("run", run).Int("port", port).Dur("waited", waited).Bool("free", free).Msg("waited for the slot's port before the exact rerun")
}
