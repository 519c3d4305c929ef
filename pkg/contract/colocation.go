package contract

import (
	"fmt"
	"math"
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
	steps := make([][]map[string]float64, 2)
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
		shares[i], steps[i] = an.Windows[0].Shares, an.Windows[0].StepShares
	}
	v := gates.ColocationF3(shares[0], shares[1], tol, now)
	r := Result{Verdict: v.Verdict, Detail: v.Detail, Figures: v.Figures}
	if v.Verdict != gates.Error {
		if note := f3Self(r.Figures, gates.TopFamilies(shares[0], 3), steps[0], steps[1], tol); note != "" {
			r.Detail += "; " + note
		}
	}
	return r
}

// f3Self is the F3 criterion's own false-failure rate, where the data
// allow it: a window's share of family f is read from 8 steps, so with no
// effect at all the co-located share differs from the solo one by noise.
// From each window's per-step shares, the standard error of its share is
// sd/sqrt(steps); the difference's, the two combined; under no effect
// (a normal approximation) |difference| >= tol with probability
// erfc(tol / (se sqrt 2)), and the criterion fails when any F3 family does.
// Figures f3.self.FAMILY.se and f3.self.false_failure_rate; none with
// fewer than two steps in a window.
func f3Self(figs map[string]float64, f3 []string, solo, coloc []map[string]float64, tol float64) string {
	if len(solo) < 2 || len(coloc) < 2 {
		return ""
	}
	se := func(steps []map[string]float64, f string) float64 {
		xs := make([]float64, len(steps))
		for i, s := range steps {
			xs[i] = s[f]
		}
		_, v := meanVar(xs)
		return math.Sqrt(v / float64(len(xs)))
	}
	pass := 1.0
	for _, f := range f3 {
		d := math.Hypot(se(solo, f), se(coloc, f))
		figs["f3.self."+f+".se"] = d
		if d > 0 {
			pass *= 1 - math.Erfc(tol/(d*math.Sqrt2))
		}
	}
	figs["f3.self.false_failure_rate"] = 1 - pass
	return fmt.Sprintf("F3's own false-failure rate (no effect, the windows' per-step noise, a normal approximation): %.1f%%", 100*(1-pass))
}
