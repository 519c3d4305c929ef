package protocols

import (
	"slices"
	"sort"
	"warden/internal/cpulist"
)

// SlurmRequest is one shape of step a plan asks Slurm for: GPUs and CPUs
// on one node, and how many of its runs ask for it.
type SlurmRequest struct {
	GPUs int `json:"gpus"`
	CPUs int `json:"cpus"`
	Runs int `json:"runs"`
	// Allocation: a co-location block's, on one node for its target and
	// backgrounds together (salloc), its runs steps inside it.
	Allocation bool `json:"allocation,omitempty"`
}

// slurmRequests lists the steps (and co-location allocations) the plan's
// runs ask for, largest first. A run's request is its planned slots' GPUs
// and CPUs (conditional runs count at the slot they would take first).
func (p *Plan) slurmRequests() []SlurmRequest {
	slots := map[string]SlotInfo{}
	for _, s := range p.Slots {
		slots[s.Name] = s
	}
	type key struct {
		gpus, cpus int
		alloc      bool
	}
	count := map[key]int{}
	blocks := map[string][]string{} // co-location unit -> its slots
	for _, r := range p.Runs {
		names := r.PlannedSlots
		if len(names) == 0 && r.Slot != "" {
			names = []string{r.Slot}
		}
		if len(names) == 0 && len(p.Slots) > 0 {
			names = []string{p.Slots[0].Name}
		}
		k := key{}
		for _, n := range names {
			k.gpus += len(slots[n].GPUs)
			cpus, _ := cpulist.Parse(slots[n].CPUs)
			k.cpus += len(cpus)
		}
		count[k]++
		if r.Kind == "background" || len(r.Backgrounds) > 0 {
			u := r.Phase + "/" + r.Regime // one block: its backgrounds and its target
			for _, n := range names {
				if !slices.Contains(blocks[u], n) {
					blocks[u] = append(blocks[u], n)
				}
			}
		}
	}
	for _, names := range blocks {
		k := key{alloc: true}
		for _, n := range names {
			k.gpus += len(slots[n].GPUs)
			cpus, _ := cpulist.Parse(slots[n].CPUs)
			k.cpus += len(cpus)
		}
		count[k]++
	}
	var out []SlurmRequest
	for k, n := range count {
		out = append(out, SlurmRequest{GPUs: k.gpus, CPUs: k.cpus, Runs: n, Allocation: k.alloc})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Allocation != b.Allocation {
			return !a.Allocation
		}
		if a.GPUs != b.GPUs {
			return a.GPUs > b.GPUs
		}
		return a.CPUs > b.CPUs
	})
	return out
}
