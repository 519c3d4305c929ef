package contract

import (
	"fmt"
	"math"
	"sort"
)

// The representativeness rule's own false-failure rate. Eight profiled
// steps against a clean segment of hundreds: for a window drawn from the
// same process as the segment, SMD ~ N(0, VIF/8), an sd of at least 0.354
// against the seed's limit of 0.25, so the literal rule fails
// representative windows often, and more often the more autocorrelated
// the steps are. So the check measures, on the run's own clean segment C,
// how often C's own consecutive blocks of as many steps as a window holds
// pass the rule against the rest of C: every block start, no resampling,
// so the figure is the same on every reading of the same files.
//
// The calibrated rule (a dated amendment's, never a default): a feature
// fails a window only when its |SMD| is over the seed's limit AND over
// the threshold at which C's own blocks pass jointly with probability q
// (ThresholdsAt): the rule keeps the seed's limit where the segment's
// noise is below it, and is never stricter than the literal rule.

// Representativeness rules.
const (
	RuleLiteral    = "literal"
	RuleCalibrated = "calibrated"
)

// SelfSMD is the distribution of |SMD| of a clean segment's own
// consecutive blocks against the rest of the segment.
type SelfSMD struct {
	BlockSteps int // steps per block: a window's active steps
	Blocks     int // block starts: steps - BlockSteps + 1
	// Abs holds, per feature in smdFeatures' order, each block's |SMD| in
	// block order (+Inf where a constant side differs).
	Abs [][]float64
}

// selfSMD computes the blocks of clean; none when clean holds fewer than
// block+1 steps (the rest of the segment would be empty).
func selfSMD(clean []L1Step, block int) SelfSMD {
	s := SelfSMD{BlockSteps: block}
	n := len(clean)
	if block < 1 || n < block+1 {
		return s
	}
	s.Blocks = n - block + 1
	cols := make([][]float64, len(smdFeatures))
	for _, st := range clean {
		for i, v := range stepFeatures(st) {
			cols[i] = append(cols[i], v)
		}
	}
	s.Abs = make([][]float64, len(smdFeatures))
	for f, x := range cols {
		s.Abs[f] = blockAbsSMD(x, block)
	}
	return s
}

// blockAbsSMD is |SMD| of every block x[i:i+k] against the rest of x,
// from prefix sums of the centred values (the same SMD as SMD: a constant
// block against a constant rest compares exactly).
func blockAbsSMD(x []float64, k int) []float64 {
	n := len(x)
	mean := 0.0
	for _, v := range x {
		mean += v
	}
	mean /= float64(n)
	s1 := make([]float64, n+1) // prefix sums of x - mean
	s2 := make([]float64, n+1) // and of its square
	for i, v := range x {
		d := v - mean
		s1[i+1] = s1[i] + d
		s2[i+1] = s2[i] + d*d
	}
	// runEnd[i]: how many equal values end at i; runStart[i]: start at i
	runEnd := make([]int, n)
	runStart := make([]int, n+1)
	for i := range x {
		runEnd[i] = 1
		if i > 0 && x[i] == x[i-1] {
			runEnd[i] = runEnd[i-1] + 1
		}
	}
	for i := n - 1; i >= 0; i-- {
		runStart[i] = 1
		if i < n-1 && x[i] == x[i+1] {
			runStart[i] = runStart[i+1] + 1
		}
	}
	out := make([]float64, n-k+1)
	tot1, tot2 := s1[n], s2[n]
	for i := 0; i+k <= n; i++ {
		// the block x[i:i+k] and the rest: x[:i] and x[i+k:]
		blockConst := runEnd[i+k-1] >= k
		restConst := restConstant(x, runEnd, runStart, i, k)
		if blockConst && restConst {
			rv := x[0]
			if i == 0 {
				rv = x[k]
			}
			out[i] = math.Abs(signedInf(x[i], rv))
			continue
		}
		b1, b2 := s1[i+k]-s1[i], s2[i+k]-s2[i]
		r1, r2 := tot1-b1, tot2-b2
		m := float64(n - k)
		bm, rm := b1/float64(k), r1/m
		bss := math.Max(0, b2-b1*bm) // sum of squared deviations
		rss := math.Max(0, r2-r1*rm)
		pooled := 0.0
		if n > 2 {
			pooled = math.Sqrt((bss + rss) / float64(n-2))
		}
		if pooled == 0 {
			out[i] = math.Abs(signedInf(bm, rm))
			continue
		}
		out[i] = math.Abs(bm-rm) / pooled
	}
	return out
}

// restConstant says whether x without x[i:i+k] holds one value.
func restConstant(x []float64, runEnd, runStart []int, i, k int) bool {
	n := len(x)
	var v float64
	have := false
	if i > 0 {
		if runEnd[i-1] < i {
			return false
		}
		v, have = x[0], true
	}
	if j := i + k; j < n {
		if runStart[j] < n-j {
			return false
		}
		if have && x[j] != v {
			return false
		}
	}
	return true
}

// jointPass is the fraction of blocks whose every feature is within its
// threshold.
func (s SelfSMD) jointPass(thr []float64) float64 { return jointPassFraction(s.Abs, thr) }

// jointPassFraction is the fraction of samples (columns of dev, one row
// per series) whose every series is within its threshold; NaN for none.
func jointPassFraction(dev [][]float64, thr []float64) float64 {
	if len(dev) == 0 || len(dev[0]) == 0 {
		return math.NaN()
	}
	n := len(dev[0])
	pass := 0
	for b := 0; b < n; b++ {
		ok := true
		for f := range dev {
			if !(dev[f][b] <= thr[f]) {
				ok = false
				break
			}
		}
		if ok {
			pass++
		}
	}
	return float64(pass) / float64(n)
}

// passFraction is the fraction of blocks whose feature f is within limit.
func (s SelfSMD) passFraction(f int, limit float64) float64 {
	n := 0
	for _, v := range s.Abs[f] {
		if v <= limit {
			n++
		}
	}
	return float64(n) / float64(s.Blocks)
}

// quantileAbs is the q-quantile of feature f's block |SMD|: the smallest
// value at least ceil(q x blocks) blocks are at or under.
func (s SelfSMD) quantileAbs(f int, q float64) float64 {
	xs := append([]float64(nil), s.Abs[f]...)
	sort.Float64s(xs)
	return xs[quantileIndex(len(xs), q)]
}

// quantileIndex is the index of the q-quantile in a sorted slice of n.
func quantileIndex(n int, q float64) int {
	k := int(math.Ceil(q*float64(n))) - 1
	return min(max(k, 0), n-1)
}

// MinCalibrationBlocks is the fewest blocks a quantile q can be read from:
// 1/(1-q), so that at least one block lies beyond it.
func MinCalibrationBlocks(q float64) int {
	return int(math.Ceil(1/(1-q) - 1e-9))
}

// ThresholdsAt gives, per feature, the |SMD| threshold at the common
// level at which C's own blocks pass every feature with probability at
// least q, and that joint pass fraction (jointThresholds).
func (s SelfSMD) ThresholdsAt(q float64) (thr []float64, level, joint float64) {
	return jointThresholds(s.Abs, q)
}

// jointThresholds gives, per series of dev (one row per series, one
// column per sample), a threshold at one common level, the smallest k/n
// (k = 1..n) whose per-series k/n-quantiles let at least q of the samples
// through on every series; the level and that joint pass fraction. One
// level for every series, so that a series that is noisier gets a higher
// threshold and the joint false-failure rate, not each series', is 1-q.
func jointThresholds(dev [][]float64, q float64) (thr []float64, level, joint float64) {
	sorted := make([][]float64, len(dev))
	for f := range dev {
		sorted[f] = append([]float64(nil), dev[f]...)
		sort.Float64s(sorted[f])
	}
	n := len(dev[0])
	at := func(k int) []float64 {
		t := make([]float64, len(sorted))
		for f := range sorted {
			t[f] = sorted[f][k-1]
		}
		return t
	}
	lo, hi := 1, n // the smallest k with a joint pass of at least q
	for lo < hi {
		mid := (lo + hi) / 2
		if jointPassFraction(dev, at(mid)) >= q {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	thr = at(lo)
	return thr, float64(lo) / float64(n), jointPassFraction(dev, thr)
}

// DefaultCalibrationQuantile is the calibrated rule's q unless a protocol
// says otherwise: with two windows per run and one exact rerun, a
// representative run then fails twice with probability about 4e-4, and a
// campaign of 56 such runs stops on noise alone about 2% of the time
// (0.95 would give 0.95% a run and 41% a campaign: docs/validators.md).
const DefaultCalibrationQuantile = 0.99

// RecoveryCalibrationQuantile is the calibrated recovery rule's q: a
// recovery failure gets no rerun, so a run of two recoveries passes with
// q^2 and a campaign of 48 runs with about q^96: 0.62 at 0.995, 0.38 at
// 0.99; 0.995 needs 200 samples, and the seed's three 80 s segments give
// 213.
const RecoveryCalibrationQuantile = 0.995

// RepresentativenessOptions select the rule a window is judged by.
type RepresentativenessOptions struct {
	// Rule is RuleLiteral (the seed's; the default) or RuleCalibrated.
	Rule string
	// Quantile is the calibrated rule's q: C's own blocks pass jointly
	// with at least this probability.
	Quantile float64
}

// selfCheck is the false-failure figures of one run, and the calibrated
// thresholds when the calibrated rule judges.
type selfCheck struct {
	self    SelfSMD
	windows int       // windows a run holds
	thr     []float64 // per feature: the limit the window's |SMD| is held to
	ok      bool      // the thresholds could be told
	problem string    // why not
}

// recordSelfCheck computes and records the false-failure figures of the
// literal rule on clean (and the calibrated thresholds), for a run whose
// windows number windows. Figures: smd.self.block_steps, smd.self.blocks,
// smd.self.FEATURE.pass_fraction and .abs_p95, smd.self.window_pass_fraction,
// smd.self.run_pass_fraction, smd.self.false_failure_rate; with the
// calibrated rule smd.calibrated.quantile, .level, .FEATURE.threshold and
// .window_pass_fraction; and the power check's power.representativeness.
// unit_pass_fraction and .samples (docs/validators.md).
func recordSelfCheck(f *findings, what string, clean []L1Step, block, windows int, limit float64, o RepresentativenessOptions) selfCheck {
	sc := selfCheck{self: selfSMD(clean, block), windows: windows}
	s := sc.self
	f.fig("smd.self.block_steps", float64(block))
	f.fig("smd.self.blocks", float64(s.Blocks))
	f.fig("power.representativeness.samples", float64(s.Blocks))
	limits := make([]float64, len(smdFeatures))
	for i := range limits {
		limits[i] = limit
	}
	if s.Blocks == 0 {
		f.notef("representativeness: %s has %d model-executed step(s), fewer than a %d-step block and a rest: the rule's own false-failure rate cannot be told", what, len(clean), block)
		sc.problem = fmt.Sprintf("%s has %d step(s): no %d-step blocks to calibrate on", what, len(clean), block)
	} else {
		for i, name := range smdFeatures {
			f.fig("smd.self."+name+".pass_fraction", s.passFraction(i, limit))
			f.fig("smd.self."+name+".abs_p95", finite(s.quantileAbs(i, 0.95)))
		}
		wp := s.jointPass(limits)
		rp := math.Pow(wp, float64(windows))
		f.fig("smd.self.window_pass_fraction", wp)
		f.fig("smd.self.run_pass_fraction", rp)
		f.fig("smd.self.false_failure_rate", 1-rp)
		f.fig("power.representativeness.unit_pass_fraction", wp)
		f.notef("representativeness: on %s's own %d blocks of %d steps the literal rule passes %.1f%% of windows, so a representative run of %d window(s) fails it %.1f%% of the time",
			what, s.Blocks, block, 100*wp, windows, 100*(1-rp))
	}
	sc.thr, sc.ok = limits, true
	if o.Rule != RuleCalibrated {
		return sc
	}
	f.fig("smd.calibrated.quantile", o.Quantile)
	if need := MinCalibrationBlocks(o.Quantile); s.Blocks < need {
		sc.ok = false
		if sc.problem == "" {
			sc.problem = fmt.Sprintf("%s gives %d blocks of %d steps, fewer than the %d the %g quantile needs", what, s.Blocks, block, need, o.Quantile)
		}
		return sc
	}
	thr, level, joint := s.ThresholdsAt(o.Quantile)
	f.fig("smd.calibrated.level", level)
	f.fig("smd.calibrated.window_pass_fraction", joint)
	sc.thr = make([]float64, len(thr))
	for i, name := range smdFeatures {
		sc.thr[i] = math.Max(limit, thr[i])
		f.fig("smd.calibrated."+name+".threshold", finite(sc.thr[i]))
	}
	return sc
}

// finite clamps an infinite figure to the largest float (JSON has no
// infinity).
func finite(v float64) float64 {
	switch {
	case math.IsInf(v, 1):
		return math.MaxFloat64
	case math.IsInf(v, -1):
		return -math.MaxFloat64
	}
	return v
}

// RepresentativenessReport is analysis/kernels.json's account of the rule.
type RepresentativenessReport struct {
	Rule       string  `json:"rule"`
	Limit      float64 `json:"limit"`
	Quantile   float64 `json:"quantile,omitempty"`
	BlockSteps int     `json:"block_steps"`
	Blocks     int     `json:"blocks"`
	// WindowPassFraction is the fraction of C's blocks the literal rule
	// passes; FalseFailureRate the literal rule's failure rate of a
	// representative run (1 - WindowPassFraction^windows).
	WindowPassFraction *float64      `json:"window_pass_fraction,omitempty"`
	FalseFailureRate   *float64      `json:"false_failure_rate,omitempty"`
	Features           []FeatureSelf `json:"features,omitempty"`
}

// FeatureSelf is one feature's block statistics, and the limit a window's
// |SMD| is held to under the rule.
type FeatureSelf struct {
	Name         string  `json:"name"`
	PassFraction float64 `json:"pass_fraction"`
	AbsP95       float64 `json:"abs_p95"`
	Threshold    float64 `json:"threshold"`
}

func representativenessReport(sc selfCheck, opts Layer2Options) *RepresentativenessReport {
	o := opts.Representativeness
	r := &RepresentativenessReport{Rule: o.Rule, Limit: opts.MaxSMD, BlockSteps: sc.self.BlockSteps, Blocks: sc.self.Blocks}
	if r.Rule == "" {
		r.Rule = RuleLiteral
	}
	if r.Rule == RuleCalibrated {
		r.Quantile = o.Quantile
	}
	if sc.self.Blocks == 0 {
		return r
	}
	limits := make([]float64, len(smdFeatures))
	for i := range limits {
		limits[i] = opts.MaxSMD
	}
	wp := sc.self.jointPass(limits)
	ffr := 1 - math.Pow(wp, float64(max(sc.windows, 1)))
	r.WindowPassFraction, r.FalseFailureRate = &wp, &ffr
	for i, name := range smdFeatures {
		thr := opts.MaxSMD
		if sc.ok && i < len(sc.thr) {
			thr = sc.thr[i]
		}
		r.Features = append(r.Features, FeatureSelf{Name: name, PassFraction: sc.self.passFraction(i, opts.MaxSMD),
			AbsP95: finite(sc.self.quantileAbs(i, 0.95)), Threshold: finite(thr)})
	}
	return r
}
