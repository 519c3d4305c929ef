package validate

import (
	"fmt"
	"time"

	"warden/pkg/gates"
)

// ColocationShares is the F3 comparison of A-P3-1 item 4 computed from the
// traces: each target's single validation window must pass every Layer-2
// rule ("Both target validation windows (one solo and one co-located) must
// satisfy the existing trace and classifiability gates before this
// comparison is made"), then gates.ColocationF3 compares their shares. A
// window that does not pass makes the comparison an error (nothing valid
// to compare); the detail says which and why.
func ColocationShares(soloDir, colocDir string, soloOpts, colocOpts Layer2Options, tol float64, now time.Time) Result {
	m := soloOpts.Mapping
	if m == nil {
		m = DefaultMapping()
	}
	soloOpts.Mapping, colocOpts.Mapping = m, m // one table for both windows
	r := colocationShares(soloDir, colocDir, soloOpts, colocOpts, tol, now)
	r.Detail += "; mapping " + m.Label()
	return r
}

func colocationShares(soloDir, colocDir string, soloOpts, colocOpts Layer2Options, tol float64, now time.Time) Result {
	shares := make([]map[string]float64, 2)
	for i, t := range []struct {
		name, dir string
		opts      Layer2Options
	}{{"solo", soloDir, soloOpts}, {"co-located", colocDir, colocOpts}} {
		if t.opts.TP != 1 || t.opts.Windows != 1 {
			return Result{Verdict: gates.Error, Detail: "the co-location check samples one window of a TP1 target", Figures: map[string]float64{}}
		}
		r, an := Layer2Analyze(t.dir, t.opts)
		if !r.Passed() || an == nil || len(an.Windows) != 1 {
			return Result{Verdict: gates.Error, Detail: fmt.Sprintf("the %s target's window is not accepted (%s): %s", t.name, r.Verdict, r.Detail), Figures: map[string]float64{}}
		}
		shares[i] = an.Windows[0].Shares
	}
	v := gates.ColocationF3(shares[0], shares[1], tol, now)
	return Result{Verdict: v.Verdict, Detail: v.Detail, Figures: v.Figures}
}
