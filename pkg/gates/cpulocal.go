package gates

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// CPULocal checks that a slot's CPU mask is local to its GPUs: every CPU of
// the slot must be in the CPU affinity of every GPU of the slot, as NVML's
// GetCpuAffinity reports it per GPU (gpuAffinity maps the GPU index to its
// CPUs). The GPUs of the slot are the keys of gpuAffinity.
//
// Verdicts: pass when every CPU is local to every GPU; fail naming, per
// GPU, the slot CPUs outside its affinity; error when the slot has no CPUs,
// no GPUs, or a GPU's affinity is empty (unknown: NVML did not say, so
// locality cannot be judged).
//
// Figures: slot_cpus, nonlocal_cpus (distinct slot CPUs outside some GPU's
// affinity), and gpuN_nonlocal_cpus per GPU.
//
// A fail is a preflight failure: the caller does not launch and stops the
// campaign for review (the CPU map no longer matches the topology). An
// error is recorded, never a pass; the attempt (pkg/attempt, preflight)
// launches after it, its record saying locality was not judged.
func CPULocal(slotCPUs []int, gpuAffinity map[int][]int, now time.Time) Verdict {
	v := Verdict{Gate: "cpu-local", Verdict: Pass, At: now, Figures: map[string]float64{"slot_cpus": float64(len(slotCPUs)), "nonlocal_cpus": 0}}
	if len(slotCPUs) == 0 {
		v.Verdict, v.Detail = Error, "the slot has no CPUs"
		return v
	}
	if len(gpuAffinity) == 0 {
		v.Verdict, v.Detail = Error, "the slot has no GPUs with a known affinity"
		return v
	}
	gpus := make([]int, 0, len(gpuAffinity))
	for g := range gpuAffinity {
		gpus = append(gpus, g)
	}
	sort.Ints(gpus)
	var unknown, problems []string
	nonlocal := map[int]bool{}
	for _, g := range gpus {
		aff := gpuAffinity[g]
		if len(aff) == 0 {
			unknown = append(unknown, strconv.Itoa(g))
			continue
		}
		in := make(map[int]bool, len(aff))
		for _, c := range aff {
			in[c] = true
		}
		var out []int
		for _, c := range slotCPUs {
			if !in[c] {
				out = append(out, c)
				nonlocal[c] = true
			}
		}
		v.Figures["gpu"+strconv.Itoa(g)+"_nonlocal_cpus"] = float64(len(out))
		if len(out) > 0 {
			problems = append(problems, fmt.Sprintf("CPUs %s are not local to GPU %d (affinity %s)", formatCPUs(out), g, formatCPUs(aff)))
		}
	}
	v.Figures["nonlocal_cpus"] = float64(len(nonlocal))
	if len(unknown) > 0 {
		v.Verdict = Error
		v.Detail = "CPU affinity unknown for GPU " + strings.Join(unknown, ", ")
		if len(problems) > 0 {
			v.Detail += "; " + strings.Join(problems, "; ")
		}
		return v
	}
	if len(problems) > 0 {
		v.Verdict = Fail
		v.Detail = strings.Join(problems, "; ")
	}
	return v
}

// formatCPUs writes a CPU set in the kernel's list format ("0-3,8").
func formatCPUs(cpus []int) string {
	s := append([]int(nil), cpus...)
	sort.Ints(s)
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] <= s[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(s[i]))
		if s[j] != s[i] {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(s[j]))
		}
		i = j + 1
	}
	return b.String()
}
