package gpu

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestReasonNames(t *testing.T) {
	for _, tc := range []struct {
		mask uint64
		want []string
	}{
		{0, nil},
		{ReasonGpuIdle, []string{"gpu_idle"}},
		{ReasonSwPowerCap | ReasonHwThermalSlowdown, []string{"sw_power_cap", "hw_thermal_slowdown"}},
		{ReasonReliability | ReasonGpuIdle, []string{"gpu_idle", "reliability"}},
		{1<<11 | 1<<63, []string{"bit_11", "bit_63"}},
	} {
		if got := ReasonNames(tc.mask); !slices.Equal(got, tc.want) {
			t.Errorf("ReasonNames(%#x) = %q, want %q", tc.mask, got, tc.want)
		}
	}
	// Every defined bit has its own name.
	seen := map[string]bool{}
	for b := 0; b < 11; b++ {
		names := ReasonNames(1 << b)
		if len(names) != 1 || seen[names[0]] || strings.HasPrefix(names[0], "bit_") {
			t.Errorf("bit %d named %q", b, names)
		}
		if len(names) == 1 {
			seen[names[0]] = true
		}
	}
}

func TestReadingJSONLeavesAbsentFieldsOut(t *testing.T) {
	zero := 0
	r := Reading{Index: 2, UUID: "GPU-x", NUMANode: -1, MemoryUsedMiB: &zero}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"index":2,"uuid":"GPU-x","numa_node":-1,"memory_used_mib":0}`
	if string(b) != want {
		t.Fatalf("JSON = %s, want %s (a measured zero is kept, absent fields are left out)", b, want)
	}
}
