package gates

import (
	"math"
	"strings"
	"testing"
)

// checkDetail fails the test when a verdict's detail lacks one of want or
// holds one of absent.
func checkDetail(t *testing.T, detail string, want, absent []string) {
	t.Helper()
	for _, d := range want {
		if !strings.Contains(detail, d) {
			t.Errorf("detail %q lacks %q", detail, d)
		}
	}
	for _, d := range absent {
		if strings.Contains(detail, d) {
			t.Errorf("detail %q holds %q", detail, d)
		}
	}
}

// checkFigures fails the test when a figure of want is missing from got
// or differs from it: by more than tol when tol is above 0, at all when
// it is 0.
func checkFigures(t *testing.T, got, want map[string]float64, tol float64) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		differs := g != w
		if tol > 0 {
			differs = math.Abs(g-w) > tol
		}
		if !ok || differs {
			t.Errorf("figure %s = %v (present %v), want %v", k, g, ok, w)
		}
	}
}
