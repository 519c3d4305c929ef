package protocols

import "fmt"

// estimate places every run that is not conditional on a timeline, as the
// controller would under the plan's regime, and sums the totals. Phases
// are barriers; within a phase, units (a cell's loads, run back to back)
// are started in order on the earliest free slots with enough GPUs.
func (b *builder) estimate(plan *Plan) {
	slotByName := map[string]SlotInfo{}
	for _, s := range plan.Slots {
		slotByName[s.Name] = s
	}
	regimeSlots := map[string][]string{}
	for _, r := range plan.Regimes {
		regimeSlots[r.Name] = r.Slots
	}
	free := map[string]float64{} // slot -> time it is free
	now := 0.0
	runs := plan.Runs

	place := func(r *Run, slots []string, start float64) float64 {
		r.PlannedSlots = slots
		r.PlannedGPUs = nil
		for _, s := range slots {
			r.PlannedGPUs = append(r.PlannedGPUs, slotByName[s].GPUs...)
		}
		r.StartS = start
		return start + r.ExpectedS
	}

	for pi := 0; pi < len(plan.Phases); {
		name := plan.Phases[pi].Name
		ph := &b.p.Phases[pi]
		pi++
		var idx []int
		for i := range runs {
			if runs[i].Phase == name && runs[i].Condition == "" {
				idx = append(idx, i)
			}
		}
		end := now
		if ph.Kind == "colocation" {
			// fixed placement, one regime's block after another: backgrounds
			// start with the block, the target's loads run back to back
			for k := 0; k < len(idx); {
				regime := runs[idx[k]].Regime
				blockEnd, t := now, now
				for ; k < len(idx) && runs[idx[k]].Regime == regime; k++ {
					r := &runs[idx[k]]
					if r.Kind == "background" {
						blockEnd = max(blockEnd, place(r, []string{r.Slot}, now))
						continue
					}
					t = place(r, []string{r.Slot}, t)
					blockEnd = max(blockEnd, t)
				}
				now = blockEnd
			}
			end = now
		} else {
			regime := ph.Regime
			if regime == "" {
				regime = plan.Regime
			}
			slots := regimeSlots[regime]
			for _, s := range slots {
				free[s] = now
			}
			last := now
			for k := 0; k < len(idx); {
				unit := runs[idx[k]].Unit
				j := k
				gpus := 0
				for j < len(idx) && runs[idx[j]].Unit == unit {
					gpus = max(gpus, runs[idx[j]].GPUs)
					j++
				}
				best, bestAt := -1, 0.0
				var bestSlots []string
				for i := range slots {
					var take []string
					have, at := 0, 0.0
					for s := i; s < len(slots) && have < gpus; s++ {
						take = append(take, slots[s])
						have += len(slotByName[slots[s]].GPUs)
						at = max(at, free[slots[s]])
					}
					if have < gpus {
						break
					}
					if best < 0 || at < bestAt {
						best, bestAt, bestSlots = i, at, take
					}
				}
				if best < 0 {
					b.c.add(Pos{}, "regimes."+regime, "run %s needs %d GPUs; regime %s's slots have fewer", runs[idx[k]].ID, gpus, regime)
					return
				}
				t := max(bestAt, last)
				last = t
				for ; k < j; k++ {
					t = place(&runs[idx[k]], bestSlots, t)
				}
				for _, s := range bestSlots {
					free[s] = t
				}
				end = max(end, t)
			}
			now = end
		}
	}

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
	tot.ExpectedWallS = now
	bu := b.p.Budget
	tot.BudgetCapGPUHours = bu.CapGPUHours
	tot.BudgetConsumedGPUHours = bu.ConsumedGPUHours
	tot.BudgetRemainingGPUHours = bu.CapGPUHours - bu.ConsumedGPUHours
	tot.RemainingAfterEstimate = tot.BudgetRemainingGPUHours - tot.GPUHoursEstimate
	tot.RemainingAfterWorstCase = tot.RemainingAfterEstimate - tot.ConditionalGPUHours
	tot.Unit = bu.Unit
	tot.Reserve = bu.Reserve
	tot.PeakReservationGPUHours, tot.PeakReservationRun = peakReservation(runs, bu.ConsumedGPUHours*3600, bu.Reserve)
	tot.ReservationFits = tot.PeakReservationGPUHours <= bu.CapGPUHours
	plan.Totals = tot
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
func peakReservation(runs []Run, consumedS float64, reserve string) (float64, string) {
	type launch struct {
		first      string
		start, end float64
		reserveS   float64
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
		s := r.ExpectedS
		if reserve == "bounds" && r.BoundS > 0 {
			s = r.BoundS
		}
		l.reserveS += s * float64(r.GPUs)
	}
	peak, at := 0.0, ""
	for li, k := range order {
		l := launches[k]
		total := consumedS + l.reserveS
		for i := range runs {
			r := &runs[i]
			if r.Condition == "" && len(r.PlannedSlots) > 0 && r.StartS+r.ExpectedS <= l.start {
				total += r.ExpectedS * float64(r.GPUs)
			}
		}
		for oi, k2 := range order {
			o := launches[k2]
			if o != l && o.start <= l.start && o.end > l.start && (o.start < l.start || oi < li) {
				total += o.reserveS
			}
		}
		if total > peak {
			peak, at = total, l.first
		}
	}
	return peak / 3600, at
}
