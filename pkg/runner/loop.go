package runner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"warden/pkg/attempt"
	"warden/pkg/budget"
	"warden/pkg/dirlayout"
	"warden/pkg/failpoint"
	"warden/pkg/gates"
	"warden/pkg/outcome"
	"warden/pkg/provenance"
	"warden/pkg/schedule"
	"warden/pkg/state"
)

// The loop is level-triggered: each pass reads the records (which runs
// are done, which units run now, the campaign's state), asks schedule.Decide what
// to do, and does it. It keeps no memory of events beyond the units it is
// running and the units that ended since the last pass, so after a
// restart the first pass simply looks at everything once.

// unitRun is a unit in flight: one or more runs executed back to back on
// the same slots (a cell's loads).
type unitRun struct {
	schedule.Launch
	cancel context.CancelFunc
	done   chan struct{}
}

// unitResult is how a unit ended.
type unitResult struct {
	unit        int
	failedRun   string       // run that failed for good, if any
	reason      state.Reason // its reason
	detail      string
	verdict     outcome.Verdict // the policy's verdict on the failure
	interrupted bool
	quarantined int // runs of the unit that ended quarantined
}

// errStorage is the cause of the runs' context when the campaign
// directory refuses writes for good.
var errStorage = errors.New("the campaign directory cannot be written")

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// PowerCheckGate is the campaign-level gate the power check's passing
// judgement is recorded as (a failing one is the campaign's stop).
const PowerCheckGate = "power-check"

// budgetEvery is how often the loop sums the GPU time in flight against
// the cap while runs are in flight: the most a budget stop can overrun is
// one tick's worth of the GPUs in flight.
const budgetEvery = time.Second

// Run executes the campaign until it completes, stops for review, or Stop
// is called; then it waits for the units in flight to end and returns.
// Call Reconcile first.
func (c *Runner) Run(ctx context.Context) error {
	tick := time.NewTicker(heartbeatEvery)
	defer tick.Stop()
	budgetTick := time.NewTicker(budgetEvery)
	defer budgetTick.Stop()
	ended := ctx.Done() // the caller's context: its end is a stop
	ctx, cancelRunners := context.WithCancelCause(ctx)
	defer cancelRunners(nil)
	defer c.flushReleases()
	exhausted := false
	storageFailed := c.storageFailed
	stopping := false
	look := true // look at the records and decide on this pass
	lastLook := c.now()
	var finished []schedule.UnitEnd
	stop := func(detail string) {
		if stopping {
			return
		}
		stopping = true
		c.log.Info().Int("active_units", len(c.active)).Msg(detail + ": ending in-flight runs")
		c.stopCampaign(schedule.Stop{Reason: state.StopOperator, Detail: detail + "; resume with controller resume"})
		cancelRunners(nil)
	}
	if isClosed(c.stopReq) {
		// asked while the controller was starting: nothing is launched
		stop("stopped by an operator (controller stop or SIGTERM)")
	}
	for {
		if look && !stopping {
			look, lastLook = false, c.now()
			complete, err := c.step(ctx, finished)
			finished = nil
			if err != nil {
				return err
			}
			if complete {
				c.log.Info().Msg("campaign complete")
				return nil
			}
		}
		if len(c.active) == 0 {
			c.flushReleases()
			cp, err := c.store.Campaign()
			if err != nil {
				return err
			}
			switch {
			case isClosed(c.storageFailed): // closed after storageErr is set: read it after
				return c.storageErr
			case c.stops.Held() != nil:
				// a stop the database refused is in force: written now, or the
				// controller ends without one, its exit saying why
				if err := c.writeHeldStop(); err != nil {
					return err
				}
				continue
			case exhausted:
				c.recordOverrun()
				return nil
			case stopping && c.pendingFreeze() != nil:
				a := *c.pendingFreeze()
				notRun, err := c.store.Freeze(a)
				if err != nil {
					return fmt.Errorf("freeze %s: %w", a.ID, err)
				}
				c.log.Info().Str("amendment", a.ID).Int("not_run", len(notRun)).Msg("matrix frozen")
				return nil
			case stopping:
				c.log.Info().Msg("stopped by operator; campaign is resumable")
				return nil
			case cp.State == state.CampaignStopped:
				c.log.Warn().Str("reason", string(cp.StopReason)).Msg("campaign stopped for review; controller exits")
				return nil
			case cp.State == state.CampaignComplete, cp.State == state.CampaignFrozen:
				return nil
			}
		}
		select {
		case res := <-c.results:
			if e := c.finishUnit(res); e != nil {
				finished = append(finished, *e)
			}
			look = true
		case <-tick.C:
			c.heartbeat()
			look = c.now().Sub(lastLook) >= resyncEvery
		case <-budgetTick.C:
			if stopping || len(c.active) == 0 {
				break
			}
			if s := c.checkInFlight(); s != nil {
				stopping, exhausted = true, true
				c.stopCampaign(*s)
				cancelRunners(attempt.ErrBudgetExhausted)
			}
		case <-c.stopReq:
			stop("stopped by an operator (controller stop or SIGTERM)")
		case <-storageFailed:
			storageFailed = nil // a closed channel: handle it once
			if !stopping {
				stopping = true
				c.log.Error().Int("active_units", len(c.active)).Msg("ending in-flight runs: the campaign directory cannot be written")
				cancelRunners(errStorage)
			}
		case <-ended:
			ended = nil // a closed channel: look once
			stop("the runner's context ended")
		}
	}
}

// step reads the records, decides and carries the decision out. It
// reports whether the campaign is now complete; an error is one the
// campaign's records could not take.
func (c *Runner) step(ctx context.Context, ended []schedule.UnitEnd) (complete bool, err error) {
	if isClosed(c.storageFailed) {
		return false, nil // nothing new while the directory cannot be written
	}
	if c.stops.Held() != nil {
		c.writeHeldStop() // nothing new while a stop is held, written or not
		return false, nil
	}
	v, err := c.view(ended)
	if err != nil {
		c.log.Error().Err(err).Msg("read the records")
		c.stopCampaign(schedule.Stop{Reason: state.StopHarnessError, Detail: err.Error()})
		return false, nil
	}
	d := schedule.Decide(v)
	if launching := d.Err == nil && d.Stop == nil && !d.Complete && len(d.Launch) > 0; !launching {
		c.flushReleases() // else they go with the wave's reservations
	}
	if d.Regime != nil {
		err := c.store.UpdateCampaign(func(cp *state.Campaign) error {
			cp.Regime, cp.RegimeConcurrency = d.Regime.Name, d.Regime.Concurrency
			return nil
		})
		if err != nil {
			return false, err
		}
		c.regime = *d.Regime
		c.log.Info().Str("regime", d.Regime.Name).Int("concurrency", d.Regime.Concurrency).Msg("regime in force")
	}
	if err := c.store.MarkNotRun(schedule.NotRunReasons(d.NotRun)); err != nil {
		return false, err
	}
	switch {
	case d.Err != nil:
		c.log.Error().Err(d.Err).Msg("schedule")
		c.stopCampaign(schedule.Stop{Reason: state.StopHarnessError, Detail: d.Err.Error()})
	case d.Stop != nil:
		c.stopCampaign(*d.Stop)
	case d.Complete:
		if err := c.store.SetCampaignState(state.CampaignComplete, "complete", "every run of the plan is done", nil); err != nil {
			return false, err
		}
		return true, nil
	case len(d.Launch) > 0:
		if s := c.beforeWave(); s != nil {
			c.flushReleases()
			c.stopCampaign(*s)
			return false, nil
		}
		if d.Power != nil {
			pc := c.currentPlan().PowerCheck
			detail := d.Power.Detail(pc.Amendment)
			if _, err := c.store.AddGateVerdict(state.GateVerdict{Gate: PowerCheckGate, Verdict: gates.Pass, Figures: d.Power.Figures(), Detail: detail}); err != nil {
				return false, err
			}
			c.log.Info().Float64("completion_probability", d.Power.Completion).Str("detail", detail).Msg("power check passed: the matrix starts")
		}
		if err := c.launch(ctx, d); err != nil || d.Refused == nil {
			return false, err
		}
		c.stopCampaign(*d.Refused) // the next unit does not fit: stop once these started
	}
	return false, nil
}

// view reads what schedule.Decide looks at.
func (c *Runner) view(ended []schedule.UnitEnd) (schedule.View, error) {
	cp, err := c.store.Campaign()
	if err != nil {
		return schedule.View{}, err
	}
	runs, err := c.store.Runs()
	if err != nil {
		return schedule.View{}, err
	}
	verdicts, details, errs, err := c.gateVerdicts()
	if err != nil {
		return schedule.View{}, err
	}
	v := schedule.View{
		Plan: c.currentPlan(), Running: cp.State == state.CampaignRunning, Runs: runs, Verdicts: verdicts, VerdictDetails: details, GateErrors: errs,
		Active: make(map[int]bool, len(c.active)), Busy: make(map[string]bool, len(c.busy)),
		Regime: c.regime.Name, Account: c.accountOf(cp), Ended: ended,
	}
	for u := range c.active {
		v.Active[u] = true
	}
	if v.Awaiting, err = outcome.AwaitingAmendment(passRuns{c.store, runs}); err != nil {
		return schedule.View{}, err
	}
	if !c.retrySharedCause {
		if v.Held, err = outcome.SharedCause(v.Plan, passRuns{c.store, runs}); err != nil {
			return schedule.View{}, err
		}
	}
	v.CapacityPoints = c.capacity.Points(v.Plan, runs)
	if v.Plan.PowerCheck != nil {
		if v.Measurements, err = c.measurements(); err != nil {
			return schedule.View{}, err
		}
	}
	if len(ended) > 0 {
		// the thresholds are judged now: the reasons of quarantined runs
		v.QuarantineReasons = map[string]state.Reason{}
		for _, r := range runs {
			if r.State() == state.RunQuarantined {
				if a, err := c.store.Attempt(r.ID, r.Result); err == nil {
					v.QuarantineReasons[r.ID] = a.Reason
				}
			}
		}
	}
	for s := range c.busy {
		v.Busy[s] = true
	}
	return v, nil
}

// measurements reads the power figures of the gate verdicts recorded
// since the last read, and returns every one read so far, the latest per
// run, attempt and measure, in the order of their runs and attempts.
func (c *Runner) measurements() ([]schedule.Measurement, error) {
	vs, err := c.store.GateVerdictsAfter(c.measuredSeq)
	if err != nil {
		return nil, err
	}
	if c.measured == nil {
		c.measured = map[string]schedule.Measurement{}
	}
	for _, v := range vs {
		c.measuredSeq = max(c.measuredSeq, v.Seq)
		for _, m := range schedule.MeasurementsOf(v) {
			c.measured[fmt.Sprintf("%s\x00%d\x00%s", m.Run, m.Attempt, m.Measure)] = m
		}
	}
	out := slices.Collect(maps.Values(c.measured))
	slices.SortFunc(out, func(a, b schedule.Measurement) int {
		return cmp.Or(cmp.Compare(a.Run, b.Run), cmp.Compare(a.Attempt, b.Attempt), cmp.Compare(a.Measure, b.Measure))
	})
	return out, nil
}

// passRuns is the store with the runs this pass read: decoding them once
// a pass, not twice.
type passRuns struct {
	*state.Store
	runs []state.Run
}

func (p passRuns) Runs() ([]state.Run, error) { return p.runs, nil }

// checkInFlight is the budget's hard stop while runs are in flight
// (A-P3-4): when the GPU time charged plus the GPU time in flight would
// pass the cap before the next tick, it returns the stop. What the
// graceful end of the runs then takes is charged too: that is the
// overrun, recorded on the ledger (recordOverrun).
func (c *Runner) checkInFlight() *schedule.Stop {
	cp, err := c.store.Campaign()
	if err != nil {
		return nil
	}
	capS := budget.Seconds(cp.BudgetCapGPUHours)
	inFlight, gpus := c.flights.GPUSeconds(c.now())
	if cp.ConsumedGPUSeconds+inFlight+float64(gpus)*budgetEvery.Seconds() <= capS {
		return nil
	}
	return &schedule.Stop{Reason: state.StopBudgetExhausted,
		Detail:  fmt.Sprintf("%.1f GPU-s charged and %.1f in flight pass the cap of %.1f GPU-s: the runs in flight were ended", cp.ConsumedGPUSeconds, inFlight, capS),
		Figures: map[string]float64{"charged_gpu_s": cp.ConsumedGPUSeconds, "in_flight_gpu_s": inFlight, "cap_gpu_s": capS}}
}

// recordOverrun notes on the ledger, after a budget stop ended the runs in
// flight and charged them, how far the charges passed the cap.
func (c *Runner) recordOverrun() {
	cp, err := c.store.Campaign()
	if err != nil {
		return
	}
	over := cp.ConsumedGPUSeconds - budget.Seconds(cp.BudgetCapGPUHours)
	if over <= 0 {
		return
	}
	if _, err := c.store.AddLedger(state.LedgerEntry{Kind: state.LedgerOverrun, GPUSeconds: over,
		Note: fmt.Sprintf("charged past the cap when the budget stop ended the runs in flight (checked every %s)", budgetEvery)}); err != nil {
		c.log.Error().Err(err).Msg("record budget overrun")
	}
	c.log.Warn().Float64("overrun_gpu_s", over).Msg("budget stop: charged past the cap")
}

// gateVerdicts is the last verdict of each campaign-level gate, its
// detail, and how many error verdicts each gate had. The verdicts are
// append-only: only those recorded since the last pass are read.
func (c *Runner) gateVerdicts() (verdicts, details map[string]string, errs map[string]int, err error) {
	if err := c.store.ReadGates(&c.gatesRead); err != nil {
		return nil, nil, nil, err
	}
	return maps.Clone(c.gatesRead.Last), maps.Clone(c.gatesRead.Detail), maps.Clone(c.gatesRead.Errors), nil
}

// finishUnit frees a unit's slots and reservations and returns what the
// decision must know of its end (nil for a unit that ended well or was
// interrupted).
func (c *Runner) finishUnit(res unitResult) *schedule.UnitEnd {
	u := c.active[res.unit]
	if u == nil {
		return nil
	}
	<-u.done
	delete(c.active, res.unit)
	for s, unit := range c.busy {
		if unit == res.unit {
			delete(c.busy, s)
		}
	}
	for _, r := range u.Runs {
		c.release(r.ID, 0)
	}
	if res.interrupted {
		return nil
	}
	return &schedule.UnitEnd{Unit: res.unit, FailedRun: res.failedRun, Reason: res.reason, Detail: res.detail, Verdict: res.verdict}
}

// beforeWave checks what a wave needs of the world that the records do
// not hold: the recorded inputs' hashes and the protocol's disk limits. It
// returns the stop, if one is due.
func (c *Runner) beforeWave() *schedule.Stop {
	if s := c.checkInputs(); s != nil {
		return s
	}
	return c.checkDisk()
}

// checkDisk applies the protocol's disk limits before a wave: free space
// on the campaign's file system and the size of the runs' artifacts.
func (c *Runner) checkDisk() *schedule.Stop {
	st := c.currentPlan().Stop
	if st.MinFreeGB == nil && st.MaxArtifactsGB == nil {
		return nil
	}
	var sfs unix.Statfs_t
	var free uint64
	if err := unix.Statfs(c.dir, &sfs); err == nil {
		free = sfs.Bavail * uint64(sfs.Bsize)
	}
	var b []uint64
	if st.MaxArtifactsGB != nil { // the runs and the provenance copies: both are public artifacts
		b = gates.ArtifactBytes(dirlayout.Runs(c.dir), filepath.Join(c.dir, provenance.SubDir))
	}
	v := gates.Disk(free, gates.Total(b), st.MinFreeGB, st.MaxArtifactsGB, c.now())
	if b != nil {
		v.Figures["provenance_gb"] = float64(b[1]) / 1e9
	}
	if v.Passed() {
		return nil
	}
	if _, err := c.store.AddGateVerdict(state.GateVerdict{Gate: v.Gate, Verdict: v.Verdict, Figures: v.Figures, Detail: v.Detail, At: v.At}); err != nil {
		c.log.Error().Err(err).Msg("record disk gate")
	}
	return &schedule.Stop{Reason: state.StopDisk, Detail: v.Detail, Figures: v.Figures}
}

// launch reserves the wave's conservative cost before any of it starts,
// in one commit with the releases not yet recorded, then starts each unit
// in its own goroutine.
func (c *Runner) launch(ctx context.Context, d schedule.Decision) error {
	reserves := make([]state.LedgerEntry, len(d.Reserve))
	for i, it := range d.Reserve {
		reserves[i] = state.LedgerEntry{Kind: "reserve", Run: it.Run, GPUSeconds: float64(it.GPUs) * it.ExpectedS, Note: "wave reservation"}
	}
	if entries := append(slices.Clone(c.releasing), reserves...); len(entries) > 0 {
		if _, err := c.store.AddLedgerEntries(entries); err != nil {
			return err
		}
	}
	c.releasing = nil
	for _, e := range reserves {
		c.reserved[e.Run] += e.GPUSeconds
	}
	failpoint.Hit("wave-reserved")
	c.log.Info().Int("units", len(d.Launch)).Int("runs", len(d.Reserve)).Float64("reserved_gpu_hours", budget.Hours(budget.Cost(d.Reserve))).Msg("launching wave")
	for _, w := range d.Launch {
		uctx, cancel := context.WithCancel(ctx)
		u := &unitRun{Launch: w, cancel: cancel, done: make(chan struct{})}
		c.active[w.Unit] = u
		for _, s := range w.Slots {
			c.busy[s.Name] = w.Unit
		}
		go func() {
			defer close(u.done)
			defer cancel()
			if u.Coloc {
				c.results <- c.runColocation(uctx, u)
			} else {
				c.results <- c.runUnit(uctx, u)
			}
		}()
	}
	return nil
}

// release returns a run's outstanding reservation to the budget: noted
// at once (the decisions' account leaves it out), recorded with the next
// wave's reservations or by flushReleases. A release lost to a crash
// before it is recorded is made at resume (releaseOpen).
func (c *Runner) release(run string, attempt int) {
	amt := c.reserved[run]
	if amt <= 0 {
		return
	}
	c.releasing = append(c.releasing, state.LedgerEntry{Kind: "release", Run: run, Attempt: attempt, GPUSeconds: amt, Note: "reservation released"})
	delete(c.reserved, run)
}

// flushReleases records the releases not yet recorded, in one commit; on
// an error they stay noted, for the next try.
func (c *Runner) flushReleases() {
	if len(c.releasing) == 0 {
		return
	}
	if _, err := c.store.AddLedgerEntries(c.releasing); err != nil {
		c.log.Error().Err(err).Int("releases", len(c.releasing)).Msg("release reservations")
		return
	}
	c.releasing = nil
}

// checkInputs re-hashes every recorded input the runs read (the protocol
// file is not among them: the campaign runs from its plan.json, and resume
// checks the protocol too); a change, a missing file or an index that
// cannot be read is a stop naming each file with the recorded and the
// found hash.
func (c *Runner) checkInputs() *schedule.Stop {
	err := provenance.VerifyOnly(c.dir, func(e provenance.Entry) bool { return e.Role != "protocol" })
	if err == nil {
		return nil
	}
	return &schedule.Stop{Reason: state.StopInputChanged,
		Detail: "an input recorded at start changed before a launch wave (stop condition 1; register an amendment to change it): " + err.Error()}
}
