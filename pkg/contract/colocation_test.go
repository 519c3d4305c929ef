package contract

import (
	"math"
	"strings"
	"testing"
)

// F3's own false-failure rate: family a's per-step share alternates 0.4
// and 0.6 in both windows (sd 0.1069, a window's share se 0.0378, the
// difference's 0.0535): with no effect |difference| >= 0.03 has
// probability erfc(0.03 / (0.0535 sqrt 2)) = 0.5746; families b and c are
// the same in every step and add nothing.
func TestF3SelfCheck(t *testing.T) {
	steps := func() []map[string]float64 {
		var out []map[string]float64
		for i := range 8 {
			a := 0.4 + 0.2*float64(i%2)
			out = append(out, map[string]float64{"a": a, "b": 0.2, "c": 0.1})
		}
		return out
	}
	solo, coloc := steps(), steps()
	figs := map[string]float64{}
	note := f3Self(figs, []string{"a", "b", "c"}, solo, coloc, 0.03)
	if math.Abs(figs["f3.self.false_failure_rate"]-0.5746280705895831) > 1e-12 || math.Abs(figs["f3.self.a.se"]-0.053452248382484864) > 1e-12 ||
		figs["f3.self.b.se"] > 1e-12 || figs["f3.self.c.se"] > 1e-12 || !strings.Contains(note, "57.5%") {
		t.Fatalf("%v %q", figs, note)
	}
	// a window of one step: nothing to read the noise from
	figs = map[string]float64{}
	if note := f3Self(figs, []string{"a"}, solo[:1], coloc, 0.03); note != "" || len(figs) != 0 {
		t.Fatalf("one step: %v %q", figs, note)
	}
}
