package gates

import (
	"strings"
	"testing"
	"time"
)

func TestDisk(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	now := time.Now()
	cases := []struct {
		name             string
		free, artifacts  uint64
		minFree, maxArts *float64
		pass             bool
		detail           string
	}{
		{"no limits", 1, 1 << 40, nil, nil, true, ""},
		{"enough free", 200e9, 1e9, f(100), f(8), true, ""},
		{"too little free", 99e9, 1e9, f(100), f(8), false, "99.0 GB free on the campaign's file system, below the 100.0 GB minimum"},
		{"artifacts over", 200e9, 8.5e9, f(100), f(8), false, "the runs' artifacts hold 8.50 GB, more than the 8.0 GB limit"},
		{"artifacts at the limit", 200e9, 8e9, f(100), f(8), true, ""},
	}
	for _, tc := range cases {
		v := Disk(tc.free, tc.artifacts, tc.minFree, tc.maxArts, now)
		if v.Passed() != tc.pass || !strings.Contains(v.Detail, tc.detail) {
			t.Errorf("%s: %+v", tc.name, v)
		}
	}
}
