package protocols

import "fmt"

// estimate places every run that is not conditional on a timeline, as the
// controller would under the plan's regime, and sums the totals. Phases
// are barriers; within a phase, units (a cell's loads, run back to back)
// are started in order on the earliest free slots with enough GPUs.
func (b *builder) estimate(plan *Plan) {
	wall, ok := b.schedule(plan)
	if !ok {
		return
	}
	plan.Totals = b.totals(plan, wall)
}

// placer lays the runs of a plan out in time on their slots.
type placer struct {
	slotByName map[string]SlotInfo
	free       map[string]float64 // slot -> time it is free
	runs       []Run
	now        float64 // when the next phase starts
}

// place puts r on slots from start and returns when it ends.
func (pl *placer) place(r *Run, slots []string, start float64) float64 {
	r.PlannedSlots = slots
	r.PlannedGPUs = nil
	for _, s := range slots {
		r.PlannedGPUs = append(r.PlannedGPUs, pl.slotByName[s].GPUs...)
	}
	r.StartS = start
	return start + r.ExpectedS
}

// schedule places the unconditional runs phase by phase and returns the
// expected wall time; false when a run fits no slots (reported).
func (b *builder) schedule(plan *Plan) (float64, bool) {
	pl := &placer{slotByName: map[string]SlotInfo{}, free: map[string]float64{}, runs: plan.Runs}
	for _, s := range plan.Slots {
		pl.slotByName[s.Name] = s
	}
	regimeSlots := map[string][]string{}
	for _, r := range plan.Regimes {
		regimeSlots[r.Name] = r.Slots
	}
	for pi := range plan.Phases {
		name := plan.Phases[pi].Name
		ph := &b.p.Phases[pi]
		var idx []int
		for i := range pl.runs {
			if pl.runs[i].Phase == name && pl.runs[i].Condition == "" {
				idx = append(idx, i)
			}
		}
		if ph.Kind == "colocation" {
			pl.colocation(idx)
			continue
		}
		regime := ph.Regime
		if regime == "" {
			regime = plan.Regime
		}
		if !b.placeMatrix(pl, idx, regime, regimeSlots[regime]) {
			return 0, false
		}
	}
	return pl.now, true
}

// colocation places a colocation phase's runs (idx): fixed placement, one
// regime's block after another; backgrounds start with the block, the
// target's loads run back to back.
func (pl *placer) colocation(idx []int) {
	runs := pl.runs
	for k := 0; k < len(idx); {
		regime := runs[idx[k]].Regime
		blockEnd, t := pl.now, pl.now
		for ; k < len(idx) && runs[idx[k]].Regime == regime; k++ {
			r := &runs[idx[k]]
			if r.Kind == "background" {
				blockEnd = max(blockEnd, pl.place(r, []string{r.Slot}, pl.now))
				continue
			}
			t = pl.place(r, []string{r.Slot}, t)
			blockEnd = max(blockEnd, t)
		}
		pl.now = blockEnd
	}
}

// placeMatrix places a matrix phase's runs (idx) unit by unit on the
// regime's slots, each unit on the contiguous slots that are free first.
// It is false when a unit needs more GPUs than the slots have (reported).
func (b *builder) placeMatrix(pl *placer, idx []int, regime string, slots []string) bool {
	runs := pl.runs
	for _, s := range slots {
		pl.free[s] = pl.now
	}
	end, last := pl.now, pl.now
	for k := 0; k < len(idx); {
		unit := runs[idx[k]].Unit
		j := k
		gpus := 0
		for j < len(idx) && runs[idx[j]].Unit == unit {
			gpus = max(gpus, runs[idx[j]].GPUs)
			j++
		}
		take, at, ok := pl.window(slots, gpus)
		if !ok {
			b.c.add(Pos{}, "regimes."+regime, "run %s needs %d GPUs; regime %s's slots have fewer", runs[idx[k]].ID, gpus, regime)
			return false
		}
		t := max(at, last)
		last = t
		for ; k < j; k++ {
			t = pl.place(&runs[idx[k]], take, t)
		}
		for _, s := range take {
			pl.free[s] = t
		}
		end = max(end, t)
	}
	pl.now = end
	return true
}

// window returns the run of consecutive slots with gpus GPUs in all that
// is free first, and when; false when no run of them has enough.
func (pl *placer) window(slots []string, gpus int) ([]string, float64, bool) {
	best, bestAt := -1, 0.0
	var bestSlots []string
	for i := range slots {
		var take []string
		have, at := 0, 0.0
		for s := i; s < len(slots) && have < gpus; s++ {
			take = append(take, slots[s])
			have += len(pl.slotByName[slots[s]].GPUs)
			at = max(at, pl.free[slots[s]])
		}
		if have < gpus {
			break
		}
		if best < 0 || at < bestAt {
			best, bestAt, bestSlots = i, at, take
		}
	}
	return bestSlots, bestAt, best >= 0
}

// totals sums the plan's runs and budget; wall is the expected wall time.
func (b *builder) totals(plan *Plan, wall float64) Totals {
	runs := plan.Runs
	tot := Totals{ByKind: map[string]int{}, ByPhase: map[string]int{}}
	cells := map[string]bool{}
	for i := range runs {
		r := &runs[i]
		r.BoundS = r.Server.ReadyTimeoutS + r.DeadlineS + r.Server.ShutdownGraceS + r.Server.GroupGraceS + plan.CleanupS
		tot.BoundsGPUHours += r.BoundS * float64(r.GPUs) / 3600
		tot.Runs++
		tot.ByKind[r.Kind]++
		tot.ByPhase[r.Phase]++
		gh := r.ExpectedS * float64(r.GPUs) / 3600
		if r.Condition != "" {
			tot.Conditional++
			tot.ConditionalGPUHours += gh
			continue
		}
		tot.GPUHoursEstimate += gh
		bh := r.BoundS * float64(r.GPUs) / 3600
		tot.ConservativeGPUHours += bh
		part := &tot.Matrix
		if r.PhaseKind == "colocation" {
			part = &tot.Colocation
		}
		part.Runs++
		part.NominalGPUHours += gh
		part.ConservativeGPUHours += bh
		if r.Measured {
			tot.Measured++
		}
		if r.PhaseKind == "primary" {
			cells[r.Cell] = true
		}
	}
	tot.PrimaryCells = len(cells)
	tot.ExpectedWallS = wall
	bu := b.p.Budget
	tot.BudgetCapGPUHours = bu.CapGPUHours
	tot.BudgetConsumedGPUHours = bu.ConsumedGPUHours
	tot.BudgetRemainingGPUHours = bu.CapGPUHours - bu.ConsumedGPUHours
	tot.RemainingAfterEstimate = tot.BudgetRemainingGPUHours - tot.GPUHoursEstimate
	tot.RemainingAfterWorstCase = tot.RemainingAfterEstimate - tot.ConditionalGPUHours
	tot.Unit = bu.Unit
	tot.Reserve = bu.Reserve
	var refused *RefusedLaunch
	tot.PeakReservationGPUHours, tot.PeakReservationRun, refused = peakReservation(runs, bu.ConsumedGPUHours*3600, bu.Reserve, bu.CapGPUHours*3600)
	tot.ReservationFits = refused == nil
	if refused != nil {
		refused.Budget = fmt.Sprintf("%s:%d:%d", b.c.file, bu.Meta.At("cap_gpu_hours").Line, bu.Meta.At("cap_gpu_hours").Column)
		tot.FirstRefused = refused
	}
	return tot
}

// RefusedLaunch is the first launch on the estimate's timeline whose
// conservative reservation would not fit under the cap (A-P3-4: the
// controller "refuses to launch if the wave's conservative reservation
// would exceed" it), with its figures in GPU-hours.
type RefusedLaunch struct {
	Run          string  `json:"run"`                          // the launch's first run
	StartS       float64 `json:"planned_start_s"`              // when, on the estimate's timeline
	ChargedGPUH  float64 `json:"charged_gpu_hours"`            // consumed before the campaign plus charged by then (nominal)
	InFlightGPUH float64 `json:"in_flight_reserved_gpu_hours"` // reservations of the launches in flight
	LaunchGPUH   float64 `json:"launch_gpu_hours"`             // its own reservation
	TotalGPUH    float64 `json:"total_gpu_hours"`
	CapGPUH      float64 `json:"cap_gpu_hours"`
	// RunsBefore are the runs launched before it on the timeline.
	RunsBefore int    `json:"runs_before"`
	Budget     string `json:"budget"` // file:line:col of budget.cap_gpu_hours
}

// peakReservation walks the estimate's timeline as the controller's budget
// check would (A-P3-4: "Before every launch wave, the detached controller
// records consumed cost and refuses to launch if the wave's conservative
// reservation would exceed" the cap): at each launch, the GPU time charged
// by then (each run's nominal cost, from its planned end) plus the
// reservations of the launches in flight plus the launch's own. A launch
// is a unit of runs, or a co-location block (all its runs reserve at
// once). It returns the largest such total, in GPU-hours, and the first
// run of the launch where it falls. Conditional runs are not placed.
func peakReservation(runs []Run, consumedS float64, reserve string, capS float64) (float64, string, *RefusedLaunch) {
	type launch struct {
		first      string
		start, end float64
		reserveS   float64
		runs       int
	}
	var order []string
	launches := map[string]*launch{}
	for i := range runs {
		r := &runs[i]
		if r.Condition != "" || len(r.PlannedSlots) == 0 {
			continue
		}
		key := fmt.Sprintf("unit %d", r.Unit)
		if r.PhaseKind == "colocation" {
			key = "colocation " + r.Phase + " " + r.Regime
		}
		l := launches[key]
		if l == nil {
			l = &launch{first: r.ID, start: r.StartS}
			launches[key] = l
			order = append(order, key)
		}
		l.start = min(l.start, r.StartS)
		l.end = max(l.end, r.StartS+r.ExpectedS)
		l.runs++
		s := r.ExpectedS
		if reserve == "bounds" && r.BoundS > 0 {
			s = r.BoundS
		}
		l.reserveS += s * float64(r.GPUs)
	}
	peak, at := 0.0, ""
	var refused *RefusedLaunch
	for li, k := range order {
		l := launches[k]
		charged, inFlight := consumedS, 0.0
		for i := range runs {
			r := &runs[i]
			if r.Condition == "" && len(r.PlannedSlots) > 0 && r.StartS+r.ExpectedS <= l.start {
				charged += r.ExpectedS * float64(r.GPUs)
			}
		}
		before := 0
		for oi, k2 := range order {
			o := launches[k2]
			if o != l && o.start <= l.start && o.end > l.start && (o.start < l.start || oi < li) {
				inFlight += o.reserveS
			}
			if o.start < l.start || (o.start == l.start && oi < li) {
				before += o.runs
			}
		}
		total := charged + inFlight + l.reserveS
		if total > peak {
			peak, at = total, l.first
		}
		if refused == nil && total > capS {
			refused = &RefusedLaunch{Run: l.first, StartS: l.start, ChargedGPUH: charged / 3600, InFlightGPUH: inFlight / 3600,
				LaunchGPUH: l.reserveS / 3600, TotalGPUH: total / 3600, CapGPUH: capS / 3600, RunsBefore: before}
		}
	}
	return peak / 3600, at, refused
}
