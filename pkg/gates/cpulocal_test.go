package gates

import (
	"testing"
	"time"
)

func cpuRange(lo, hi int) []int {
	var out []int
	for c := lo; c <= hi; c++ {
		out = append(out, c)
	}
	return out
}

func TestCPULocal(t *testing.T) {
	now := time.Date(2026, 7, 13, 0, 0, 0, 0, time.UTC)
	numa0, numa1 := cpuRange(0, 79), cpuRange(80, 159)
	cases := []struct {
		name     string
		slot     []int
		affinity map[int][]int
		verdict  string
		figures  map[string]float64
		detail   []string
	}{
		{"GPU0 slot on NUMA0", cpuRange(0, 19), map[int][]int{0: numa0}, Pass,
			map[string]float64{"slot_cpus": 20, "nonlocal_cpus": 0, "gpu0_nonlocal_cpus": 0}, nil},
		{"TP2 slot on both local GPUs", cpuRange(20, 59), map[int][]int{1: numa0, 2: numa0}, Pass,
			map[string]float64{"slot_cpus": 40, "nonlocal_cpus": 0, "gpu1_nonlocal_cpus": 0, "gpu2_nonlocal_cpus": 0}, nil},
		{"GPU4 given NUMA0 CPUs", cpuRange(60, 79), map[int][]int{4: numa1}, Fail,
			map[string]float64{"slot_cpus": 20, "nonlocal_cpus": 20, "gpu4_nonlocal_cpus": 20}, []string{"CPUs 60-79 are not local to GPU 4 (affinity 80-159)"}},
		{"straddling slot", []int{78, 79, 80, 81}, map[int][]int{3: numa0}, Fail,
			map[string]float64{"slot_cpus": 4, "nonlocal_cpus": 2, "gpu3_nonlocal_cpus": 2}, []string{"CPUs 80-81 are not local to GPU 3"}},
		{"TP2 across NUMA nodes", []int{70, 75}, map[int][]int{3: numa0, 4: numa1}, Fail,
			map[string]float64{"slot_cpus": 2, "nonlocal_cpus": 2, "gpu3_nonlocal_cpus": 0, "gpu4_nonlocal_cpus": 2}, []string{"CPUs 70,75 are not local to GPU 4"}},
		{"unknown affinity", cpuRange(0, 3), map[int][]int{0: numa0, 1: nil}, Error, nil, []string{"CPU affinity unknown for GPU 1"}},
		{"no GPUs", cpuRange(0, 3), nil, Error, nil, []string{"no GPUs"}},
		{"no CPUs", nil, map[int][]int{0: numa0}, Error, nil, []string{"no CPUs"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := CPULocal(c.slot, c.affinity, now)
			if v.Verdict != c.verdict || v.Gate != "cpu-local" || !v.At.Equal(now) {
				t.Fatalf("got %+v, want %s", v, c.verdict)
			}
			checkFigures(t, v.Figures, c.figures, 0)
			checkDetail(t, v.Detail, c.detail, nil)
		})
	}
}

func TestFormatCPUs(t *testing.T) {
	for _, c := range []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{3}, "3"},
		{[]int{5, 4, 3, 0, 1, 9}, "0-1,3-5,9"},
		{[]int{2, 2, 3}, "2-3"},
	} {
		if got := formatCPUs(c.in); got != c.want {
			t.Errorf("formatCPUs(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}
