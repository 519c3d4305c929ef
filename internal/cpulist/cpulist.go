// Package cpulist reads and writes the Linux CPU-list format ("0-19",
// "0,2,4-7"), as in /sys/devices/system/cpu/online and cpuset.cpus. It is
// a leaf: the protocol package and the GPU backends both use it.
package cpulist

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// maxCPU bounds CPU numbers, so a mistyped range cannot ask for gigabytes.
const maxCPU = 1<<16 - 1

// Parse parses a Linux CPU list ("0-19", "0,2,4-7") into sorted,
// distinct CPU numbers, each at most 65535.
func Parse(s string) ([]int, error) {
	seen := map[int]bool{}
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("CPU list is empty")
	}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("%q is not a CPU number or range (write e.g. 0-19 or 0,2,4-7)", part)
		}
		b := a
		if isRange {
			b, err = strconv.Atoi(hi)
			if err != nil || b < a {
				return nil, fmt.Errorf("%q is not a CPU range (write low-high, low <= high)", part)
			}
		}
		if b > maxCPU {
			return nil, fmt.Errorf("%q names a CPU above %d", part, maxCPU)
		}
		for c := a; c <= b; c++ {
			seen[c] = true
		}
	}
	out := make([]int, 0, len(seen))
	for c := range seen {
		out = append(out, c)
	}
	sort.Ints(out)
	return out, nil
}

// Format writes CPU numbers in the compact list form, merging runs into
// ranges: [8 0 1 2 3 2] gives "0-3,8".
func Format(cpus []int) string {
	cpus = slices.Compact(slices.Sorted(slices.Values(cpus)))
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(cpus[i]))
		} else {
			parts = append(parts, strconv.Itoa(cpus[i])+"-"+strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
