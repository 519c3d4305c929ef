package protocols

import "warden/internal/cpulist"

// ParseCPUList parses a Linux CPU list ("0-19", "0,2,4-7") into sorted,
// distinct CPU numbers, each at most 65535 (see cpulist.Parse).
func ParseCPUList(s string) ([]int, error) { return cpulist.Parse(s) }

// FormatCPUList writes sorted CPU numbers in the compact list form (see
// cpulist.Format).
func FormatCPUList(cpus []int) string { return cpulist.Format(cpus) }
