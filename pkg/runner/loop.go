package main

import (
	"context"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"warden/pkg/failpoint"
	"warden/pkg/gates"

	"warden/pkg/budget"
	"warden/pkg/launch"
	"warden/pkg/state"
	"warden/protocols"
)

// The loop is level-triggered: each pass reads the records (which runs
// are done, which units run now, the campaign's state) and decides what to
// launch. It keeps no memory of events beyond the units it is running, so
// after a restart the first pass simply looks at everything once.

// unitRun is a unit in flight: one or more runs executed back to back on
// the same slots (a cell's loads).
type unitRun struct {
	unit   int
	runs   []protocols.Run
	slots  []protocols.SlotInfo
	cancel context.CancelFunc
	done   chan struct{}
	coloc  bool                // a co-location block
	gate   *protocols.GateInfo // the gate a co-location block decides
	regime string
}

// unitResult is how a unit ended.
type unitResult struct {
	unit        int
	failedRun   string       // run that failed for good, if any
	reason      state.Reason // its reason
	detail      string
	stop        bool // the failure stops the campaign
	interrupted bool
	quarantined int // runs of the unit that ended quarantined
}

func (c *controller) loop(ctx context.Context) error {
	tick := time.NewTicker(heartbeatEvery)
	defer tick.Stop()
	ctx, cancelRunners := context.WithCancel(ctx)
	defer cancelRunners()
	stopping := false
	look := true // look at the records and schedule on this pass
	lastLook := c.now()
	for {
		if look && !stopping {
			look, lastLook = false, c.now()
			if err := c.schedule(ctx); err != nil {
				c.log.Error().Err(err).Msg("schedule")
				c.stopCampaign("harness-error", err.Error(), nil)
			}
		}
		if len(c.active) == 0 {
			cp, err := c.store.Campaign()
			if err != nil {
				return err
			}
			switch {
			case stopping:
				c.log.Info().Msg("stopped by operator; campaign is resumable")
				return nil
			case cp.State == state.CampaignStopped:
				c.log.Warn().Str("reason", cp.StopReason).Msg("campaign stopped for review; controller exits")
				return nil
			case c.allDone():
				if err := c.store.SetCampaignState(state.CampaignComplete, "complete", "every run of the plan is done", nil); err != nil {
					return err
				}
				c.log.Info().Msg("campaign complete")
				return nil
			}
		}
		select {
		case res := <-c.results:
			c.finishUnit(res)
			look = true
		case <-tick.C:
			c.heartbeat()
			look = c.now().Sub(lastLook) >= resyncEvery
		case <-c.stopReq:
			if !stopping {
				stopping = true
				c.log.Info().Int("active_units", len(c.active)).Msg("stop requested: ending in-flight runs")
				c.operatorStop()
				cancelRunners()
			}
		}
	}
}

// operatorStop records the operator's stop: the campaign waits for a
// person and is resumable.
func (c *controller) operatorStop() {
	c.stopCampaign("operator-stop", "stopped by an operator (controller stop or SIGTERM); resume with controller resume", nil)
}

// allDone reports whether every run that must execute is done: every run
// without a condition, and every conditional run whose condition holds
// (a later co-location check after a failed gate).
func (c *controller) allDone() bool {
	runs, err := c.store.Runs()
	if err != nil {
		return false
	}
	verdicts, err := c.gateVerdicts()
	if err != nil {
		return false
	}
	done := map[string]bool{}
	for _, r := range runs {
		done[r.ID] = r.Done
	}
	for _, r := range c.plan.Runs {
		need, known := required(r, verdicts)
		if !known || (need && !satisfied(r, done)) {
			return false
		}
	}
	return true
}

// gateVerdicts is the last verdict of each campaign-level gate.
func (c *controller) gateVerdicts() (map[string]string, error) {
	vs, err := c.store.GateVerdicts("")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, v := range vs {
		out[v.Gate] = v.Verdict
	}
	return out, nil
}

// satisfied says whether a run needs nothing more: it is done, or it is a
// background load whose targets are all done (it only served beside them).
func satisfied(r protocols.Run, done map[string]bool) bool {
	if done[r.ID] {
		return true
	}
	if r.Kind != "background" || len(r.Until) == 0 {
		return false
	}
	for _, t := range r.Until {
		if !done[t] {
			return false
		}
	}
	return true
}

// required says whether a run must execute: runs without a condition
// always; a run conditional on "gate G failed" once G failed. known is
// false while the gate has no verdict yet.
func required(r protocols.Run, verdicts map[string]string) (need, known bool) {
	if r.Condition == "" {
		return true, true
	}
	gate, ok := strings.CutSuffix(strings.TrimPrefix(r.Condition, "gate "), " failed")
	if !ok {
		return false, true
	}
	v, seen := verdicts[gate]
	if !seen {
		return false, false
	}
	return v == gates.Fail, true
}

func (c *controller) finishUnit(res unitResult) {
	u := c.active[res.unit]
	if u == nil {
		return
	}
	<-u.done
	delete(c.active, res.unit)
	for s, unit := range c.busy {
		if unit == res.unit {
			delete(c.busy, s)
		}
	}
	for _, r := range u.runs {
		c.release(r.ID, 0)
	}
	if res.failedRun != "" && res.stop {
		c.stopCampaign(string(res.reason), fmt.Sprintf("run %s failed: %s", res.failedRun, res.detail), nil)
	}
	c.checkStopRules()
}

// checkStopRules applies the protocol's thresholds (the gates' stop
// rules); the denominator is the plan's measured runs.
func (c *controller) checkStopRules() {
	runs, err := c.store.Runs()
	if err != nil {
		return
	}
	var n gates.Counts
	for i, r := range runs {
		if !c.plan.Runs[i].Measured {
			continue
		}
		n.Measured++
		switch r.State() {
		case state.RunQuarantined:
			n.Quarantined++
		case state.RunFailed:
			n.Failed++
		}
	}
	rules := gates.StopRules{QuarantinedFractionGT: c.plan.Stop.QuarantinedFractionGT, FailedFractionGT: c.plan.Stop.FailedFractionGT}
	if stop, rule, detail, figures := rules.Evaluate(n); stop {
		c.stopCampaign(rule, detail, figures)
	}
}

// launchable is a unit ready to start on its slots.
type launchable struct {
	unit   int
	runs   []protocols.Run
	slots  []protocols.SlotInfo
	coloc  bool // a co-location block: backgrounds beside a target
	gate   *protocols.GateInfo
	regime string
}

// schedule launches the next wave: in plan order, the units of the
// current phase whose needs are done and for which slots are free.
func (c *controller) schedule(ctx context.Context) error {
	cp, err := c.store.Campaign()
	if err != nil {
		return err
	}
	if cp.State != state.CampaignRunning {
		return nil
	}
	runs, err := c.store.Runs()
	if err != nil {
		return err
	}
	if len(runs) != len(c.plan.Runs) {
		return fmt.Errorf("the database has %d runs, the plan %d", len(runs), len(c.plan.Runs))
	}
	done := map[string]bool{}
	for _, r := range runs {
		done[r.ID] = r.Done
	}
	verdicts, err := c.gateVerdicts()
	if err != nil {
		return err
	}

	// the current phase: the first with a run that must execute and is not
	// done, or whose need is not known yet
	phase, phaseKind := "", ""
	for _, r := range c.plan.Runs {
		if need, known := required(r, verdicts); !known || (need && !satisfied(r, done)) {
			phase, phaseKind = r.Phase, r.PhaseKind
			break
		}
	}
	if phase == "" {
		return nil
	}
	var wave []launchable
	if phaseKind == "colocation" {
		wave = c.colocationWave(phase, done, verdicts)
	} else {
		regime, err := c.chooseRegime()
		if err != nil {
			c.stopCampaign("no-regime", err.Error(), nil)
			return nil
		}
		if c.regime.Name != regime.Name {
			err := c.store.UpdateCampaign(func(cp *state.Campaign) error {
				cp.Regime, cp.RegimeConcurrency = regime.Name, regime.Concurrency
				return nil
			})
			if err != nil {
				return err
			}
			c.log.Info().Str("regime", regime.Name).Int("concurrency", regime.Concurrency).Msg("regime in force")
		}
		c.regime = regime
		if wave, err = c.matrixWave(phase, regime, done, verdicts); err != nil {
			return err
		}
	}
	if len(wave) == 0 {
		return nil
	}
	return c.launch(ctx, wave)
}

// matrixWave picks the units of a phase to start now under the regime.
func (c *controller) matrixWave(phase string, regime protocols.RegimeInfo, done map[string]bool, verdicts map[string]string) ([]launchable, error) {
	var wave []launchable
	busy := map[string]bool{}
	for s := range c.busy {
		busy[s] = true
	}
	for _, unit := range c.units(phase) {
		if c.active[unit[0].Unit] != nil {
			continue
		}
		var todo []protocols.Run
		for _, r := range unit {
			if need, _ := required(r, verdicts); need && !done[r.ID] {
				todo = append(todo, r)
			}
		}
		if len(todo) == 0 {
			continue
		}
		for _, n := range todo[0].Needs {
			if !done[n] && !slices.ContainsFunc(todo, func(r protocols.Run) bool { return r.ID == n }) {
				return nil, fmt.Errorf("run %s needs %s, which is not done", todo[0].ID, n)
			}
		}
		gpus := 0
		for _, r := range todo {
			gpus = max(gpus, r.GPUs)
		}
		slots := c.freeSlots(regime, busy, gpus)
		if slots == nil {
			break // in order: a later unit does not overtake one waiting for slots
		}
		for _, s := range slots {
			busy[s.Name] = true
		}
		wave = append(wave, launchable{unit: unit[0].Unit, runs: todo, slots: slots, regime: regime.Name})
	}
	return wave, nil
}

// colocationWave picks the next block of a co-location check: the target
// solo, then each regime's backgrounds and target, a later regime only
// after the gate before it failed. Blocks run one at a time on their
// fixed slots.
func (c *controller) colocationWave(phase string, done map[string]bool, verdicts map[string]string) []launchable {
	if len(c.active) > 0 {
		return nil
	}
	byName := map[string]protocols.SlotInfo{}
	for _, s := range c.plan.Slots {
		byName[s.Name] = s
	}
	var blocks [][]protocols.Run
	for _, r := range c.plan.Runs {
		if r.Phase != phase {
			continue
		}
		if n := len(blocks); n > 0 && blocks[n-1][0].Regime == r.Regime {
			blocks[n-1] = append(blocks[n-1], r)
		} else {
			blocks = append(blocks, []protocols.Run{r})
		}
	}
	for _, b := range blocks {
		need, known := required(b[0], verdicts)
		if !known {
			return nil // wait for the gate before it
		}
		if !need {
			continue
		}
		var todo []protocols.Run
		for _, r := range b {
			if !satisfied(r, done) {
				todo = append(todo, r)
			}
		}
		var gate *protocols.GateInfo
		for i := range c.plan.Gates {
			if c.plan.Gates[i].Regime == b[0].Regime {
				gate = &c.plan.Gates[i]
			}
		}
		if len(todo) == 0 {
			if gate != nil {
				if _, seen := verdicts[gate.Name]; !seen {
					// the block's runs completed but the gate was never judged
					// (the controller died in between): judge it now
					return []launchable{{unit: b[0].Unit, coloc: true, gate: gate, regime: b[0].Regime}}
				}
			}
			continue
		}
		var slots []protocols.SlotInfo
		seen := map[string]bool{}
		for _, r := range todo {
			if !seen[r.Slot] {
				seen[r.Slot] = true
				slots = append(slots, byName[r.Slot])
			}
		}
		return []launchable{{unit: b[0].Unit, runs: todo, slots: slots, coloc: true, gate: gate, regime: b[0].Regime}}
	}
	return nil
}

// checkDisk applies the protocol's disk limits before a wave: free space
// on the campaign's file system and the size of the runs' artifacts.
func (c *controller) checkDisk() bool {
	st := c.plan.Stop
	if st.MinFreeGB == nil && st.MaxArtifactsGB == nil {
		return true
	}
	var sfs unix.Statfs_t
	var free uint64
	if err := unix.Statfs(c.dir, &sfs); err == nil {
		free = sfs.Bavail * uint64(sfs.Bsize)
	}
	var used uint64
	if st.MaxArtifactsGB != nil {
		filepath.WalkDir(filepath.Join(c.dir, "runs"), func(_ string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if fi, err := d.Info(); err == nil {
					used += uint64(fi.Size())
				}
			}
			return nil
		})
	}
	v := gates.Disk(free, used, st.MinFreeGB, st.MaxArtifactsGB, c.now())
	if !v.Passed() {
		if _, err := c.store.AddGateVerdict(state.GateVerdict{Gate: v.Gate, Verdict: v.Verdict, Figures: v.Figures, Detail: v.Detail, At: v.At}); err != nil {
			c.log.Error().Err(err).Msg("record disk gate")
		}
		c.stopCampaign("disk", v.Detail, v.Figures)
		return false
	}
	return true
}

// launch reserves the wave's conservative cost before any of it starts,
// then starts each unit in its own goroutine.
func (c *controller) launch(ctx context.Context, wave []launchable) error {
	if !c.checkDisk() {
		return nil
	}
	acct, err := c.account()
	if err != nil {
		return err
	}
	var items []budget.Item
	for _, w := range wave {
		for _, r := range w.runs {
			items = append(items, budget.Item{Run: r.ID, GPUs: r.GPUs, ExpectedS: r.ExpectedS})
		}
	}
	if _, err := acct.Reserve(items); err != nil {
		var ref *budget.Refusal
		if errors.As(err, &ref) {
			c.stopCampaign("budget", ref.Error(), ref.Figures())
			return nil
		}
		return err
	}
	for _, it := range items {
		cost := float64(it.GPUs) * it.ExpectedS
		if _, err := c.store.AddLedger(state.LedgerEntry{Kind: "reserve", Run: it.Run, GPUSeconds: cost, Note: "wave reservation"}); err != nil {
			return err
		}
		c.reserved[it.Run] += cost
	}
	failpoint.Hit("wave-reserved")
	c.log.Info().Int("units", len(wave)).Int("runs", len(items)).Float64("reserved_gpu_hours", budget.Hours(budget.Cost(items))).Msg("launching wave")
	for _, w := range wave {
		uctx, cancel := context.WithCancel(ctx)
		u := &unitRun{unit: w.unit, runs: w.runs, slots: w.slots, cancel: cancel, done: make(chan struct{}), gate: w.gate, coloc: w.coloc, regime: w.regime}
		c.active[w.unit] = u
		for _, s := range w.slots {
			c.busy[s.Name] = w.unit
		}
		go func() {
			defer close(u.done)
			defer cancel()
			if u.coloc {
				c.results <- c.runColocation(uctx, u)
			} else {
				c.results <- c.runUnit(uctx, u)
			}
		}()
	}
	return nil
}

// units returns the phase's units in plan order.
func (c *controller) units(phase string) [][]protocols.Run {
	var out [][]protocols.Run
	for _, r := range c.plan.Runs {
		if r.Phase != phase {
			continue
		}
		if n := len(out); n > 0 && out[n-1][0].Unit == r.Unit {
			out[n-1] = append(out[n-1], r)
		} else {
			out = append(out, []protocols.Run{r})
		}
	}
	return out
}

// chooseRegime is the first regime in fallback order that needs no gate
// or whose gate passed.
func (c *controller) chooseRegime() (protocols.RegimeInfo, error) {
	verdicts, err := c.store.GateVerdicts("")
	if err != nil {
		return protocols.RegimeInfo{}, err
	}
	passed := map[string]bool{}
	for _, v := range verdicts {
		passed[v.Gate] = v.Verdict == "pass"
	}
	for _, r := range c.plan.Regimes {
		if r.Gate == "" || passed[r.Gate] {
			return r, nil
		}
	}
	return protocols.RegimeInfo{}, errors.New("no regime is authorized: every regime needs a co-location gate that has not passed")
}

// freeSlots finds adjacent free slots of the regime with enough GPUs,
// the earliest in the regime's order; nil when none are free.
func (c *controller) freeSlots(regime protocols.RegimeInfo, busy map[string]bool, gpus int) []protocols.SlotInfo {
	byName := map[string]protocols.SlotInfo{}
	for _, s := range c.plan.Slots {
		byName[s.Name] = s
	}
	for i := range regime.Slots {
		var take []protocols.SlotInfo
		have := 0
		for j := i; j < len(regime.Slots) && have < gpus; j++ {
			s := byName[regime.Slots[j]]
			if busy[s.Name] {
				break
			}
			take = append(take, s)
			have += len(s.GPUs)
		}
		if have >= gpus {
			return take
		}
	}
	return nil
}

// release returns a run's outstanding reservation to the budget.
func (c *controller) release(run string, attempt int) {
	amt := c.reserved[run]
	if amt <= 0 {
		return
	}
	if _, err := c.store.AddLedger(state.LedgerEntry{Kind: "release", Run: run, Attempt: attempt, GPUSeconds: amt, Note: "reservation released"}); err != nil {
		c.log.Error().Err(err).Str("run", run).Msg("release reservation")
		return
	}
	delete(c.reserved, run)
}

// reconcileLeftovers looks at what a previous controller left: every live
// attempt is ended. Its recorded processes are reclaimed only where pid,
// start time and boot id all match (a reused pid, or any pid after a
// reboot, is never signalled); processes of the attempt that were never
// recorded (the controller died between a start and its record) are found
// and killed in the same boot only (reclaimUnrecorded). The attempt
// becomes interrupted and its GPU time is charged to the last heartbeat
// plus the time to reclaim, less what was charged before the crash.
// Reservations still open are released.
func (c *controller) reconcileLeftovers(ctx context.Context) error {
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
	charged := map[string]time.Time{}
	for _, e := range ledger {
		if e.Kind == state.LedgerCharge {
			charged[attemptKey(e.Run, e.Attempt)] = e.At
		}
	}
	bootID, _ := readBootID(c.boot)
	sameBoot := bootID != "" && bootID == cp.ControllerBootID
	for _, a := range live {
		a = c.noteLeftovers(a, sameBoot)
		var sigs []state.Signal
		// processes of the attempt lived at this resume, or at an earlier
		// one that died before it had ended them
		held := a.Figures[leftoversFigure] > 0
		for _, p := range a.Procs {
			id := launch.Identity{PID: p.PID, StartTime: p.StartTime, BootID: p.BootID}
			if alive, _ := id.Alive(c.boot); alive {
				held = true
			}
			lo := launch.Leftover{Leader: id, Role: p.Role, Cgroup: p.Cgroup}
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			recs, err := launch.Reclaim(rctx, c.boot, lo, launch.StopOptions{Grace: 5 * time.Second, GroupGrace: 5 * time.Second})
			cancel()
			sigs = append(sigs, toSignals(recs)...)
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
		// Never under-count: GPUs held by a left-over were held from the
		// server's start (or, for a server never recorded, from the
		// attempt's creation, before it started) until it was killed now;
		// otherwise they were held at least until the last sign of life
		// (heartbeat or record). Time charged already is not charged again.
		var start time.Time
		lastCharge, wasCharged := charged[attemptKey(a.RunID, a.N)]
		switch srv := serverProc(a); {
		case wasCharged:
			if held {
				start = lastCharge
			}
		case srv != nil:
			start = srv.StartedAt
		case held:
			start = a.CreatedAt
		}
		charge := 0.0
		if !start.IsZero() {
			end := cp.Heartbeat
			if a.UpdatedAt.After(end) {
				end = a.UpdatedAt
			}
			if held {
				end = c.now()
			}
			charge = budget.Charge(len(a.GPUIDs), start, end)
		}
		if charge > 0 {
			if _, err := c.store.AddLedger(state.LedgerEntry{Kind: "charge", Run: a.RunID, Attempt: a.N, GPUSeconds: charge, Note: "interrupted: to the last heartbeat plus reclaim"}); err != nil {
				return err
			}
		}
		_, err := c.store.Transition(a.RunID, a.N, state.Interrupted, state.ReasonInterrupted,
			"the controller died or stopped; left-overs reclaimed at resume", map[string]float64{"gpu_seconds": charge},
			func(at *state.Attempt) error {
				at.Signals = append(at.Signals, sigs...)
				if at.Figures == nil {
					at.Figures = map[string]float64{}
				}
				at.Figures["gpu_seconds"] += charge
				return nil
			})
		if err != nil {
			return fmt.Errorf("mark %s attempt %d interrupted: %w", a.RunID, a.N, err)
		}
		c.log.Info().Str("run", a.RunID).Int("attempt", a.N).Float64("charged_gpu_s", charge).Msg("left-over attempt interrupted")
	}
	// release reservations left open
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
	c.repairStateFiles()
	return nil
}

func attemptKey(run string, n int) string { return run + "\x00" + strconv.Itoa(n) }

func serverProc(a state.Attempt) *state.Proc {
	for i := range a.Procs {
		if a.Procs[i].Role == "server" {
			return &a.Procs[i]
		}
	}
	return nil
}

func toSignals(recs []launch.SignalRecord) []state.Signal {
	out := make([]state.Signal, len(recs))
	for i, r := range recs {
		out[i] = state.Signal{At: r.At, Role: r.Role, Target: r.Target, PID: r.PID, Signal: r.Signal}
	}
	return out
}
