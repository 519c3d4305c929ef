package contract

import (
	"fmt"
	"math"
	"sort"
)

// The recovery gate of seed 002: "After each profile window, the 10-second
// rolling completion rate and waiting-queue depth must return within 10%
// of clean-segment-C medians by the end of the fixed 30-second recovery.
// ... Failure invalidates the run, and recovery is not silently extended."
//
// Both series are rolling over a window of W seconds (10): at an instant
// t, the completion rate is the successes whose end_mono_ns lies in
// [t-W, t), divided by W; the waiting-queue depth is the mean
// num_waiting_reqs of the Layer-1 records submitted in [t-W, t). The
// clean-segment-C medians are the medians of the two series sampled every
// --step-s from C.start+W to C.end (windows inside C only). "By the end"
// is the value at the recovery's end: the window [end-W, end).

// RecoveryOptions are the knobs of the recovery check.
type RecoveryOptions struct {
	WindowS     float64 // the rolling window (seed: 10 s)
	StepS       float64 // spacing of the samples in clean segment C
	Tolerance   float64 // relative (seed: 0.10)
	RecoveryS   float64 // each recovery's fixed length (seed: 30 s)
	RecoveryTol float64 // how far a recovery's length may be from RecoveryS
	Layer1Dir   string  // holds the run's one Layer-1 stream
	// Rule is RuleLiteral (the seed's; the default) or RuleCalibrated:
	// each series' band is the wider of Tolerance and the deviation within
	// which the clean segments' own samples stay jointly with probability
	// Quantile.
	Rule     string
	Quantile float64
}

// DefaultRecovery is the seed's rule.
func DefaultRecovery() RecoveryOptions {
	return RecoveryOptions{WindowS: 10, StepS: 1, Tolerance: 0.10, RecoveryS: 30, RecoveryTol: 0.01, Rule: RuleLiteral, Quantile: RecoveryCalibrationQuantile}
}

// rolling answers the two rolling series over sorted instants.
type rolling struct {
	ends    []int64 // successes' end_mono_ns, sorted
	submits []int64 // Layer-1 submit_mono_ns, sorted
	waitSum []int64 // prefix sums of num_waiting_reqs in submits' order
	window  int64
}

func newRolling(reqs []seedRequest, recs []Layer1Record, window int64) *rolling {
	r := &rolling{window: window}
	for _, q := range reqs {
		if q.Class == "success" && q.EndNS > 0 {
			r.ends = append(r.ends, q.EndNS)
		}
	}
	sort.Slice(r.ends, func(i, j int) bool { return r.ends[i] < r.ends[j] })
	sorted := append([]Layer1Record(nil), recs...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].SubmitMonoNS < sorted[j].SubmitMonoNS })
	r.waitSum = make([]int64, len(sorted)+1)
	for i, x := range sorted {
		r.submits = append(r.submits, x.SubmitMonoNS)
		r.waitSum[i+1] = r.waitSum[i] + x.NumWaitingReqs
	}
	return r
}

// span is the index range of xs in [t-window, t).
func (r *rolling) span(xs []int64, t int64) (int, int) {
	lo := sort.Search(len(xs), func(i int) bool { return xs[i] >= t-r.window })
	hi := sort.Search(len(xs), func(i int) bool { return xs[i] >= t })
	return lo, hi
}

// rate is the completion rate of the window ending at t, per second.
func (r *rolling) rate(t int64) float64 {
	lo, hi := r.span(r.ends, t)
	return float64(hi-lo) / (float64(r.window) / 1e9)
}

// waiting is the mean waiting-queue depth of the window ending at t; ok
// is false when no Layer-1 record lies in it.
func (r *rolling) waiting(t int64) (float64, bool) {
	lo, hi := r.span(r.submits, t)
	if hi == lo {
		return 0, false
	}
	return float64(r.waitSum[hi]-r.waitSum[lo]) / float64(hi-lo), true
}

// RecoveryDir checks every recovery of the client's result directory dir
// against its clean segment C, with the Layer-1 stream of opts.Layer1Dir.
//
// Figures: window_s, recoveries, clean_c_samples, clean_c_completion_rps
// (median), clean_c_waiting_samples, clean_c_waiting (median); per
// recovery K: recoveryK_seconds, recoveryK_completion_rps,
// recoveryK_completion_ratio (over the C median, when it is positive),
// recoveryK_waiting (absent when no Layer-1 record lies in the last
// window), recoveryK_pass (0/1).
func RecoveryDir(dir string, opts RecoveryOptions) Result {
	f := newFindings()
	res, ok := readSeedResult(f, dir)
	if !ok {
		return f.result("")
	}
	f.fig("window_s", opts.WindowS)
	c, recov := recoverySegments(f, res, opts)
	if c == nil || len(recov) == 0 {
		return f.result("")
	}
	window := int64(math.Round(opts.WindowS * 1e9))
	if c.EndMonoNS-c.StartMonoNS < window {
		f.failf("clean segment C (%s, %.3f s) is shorter than the %g s window", c.Name, c.Seconds, opts.WindowS)
		return f.result("")
	}
	reqs, err := readRequests(dir, res.Files.Requests)
	if err != nil {
		f.errorf("client records: %v", err)
		return f.result("")
	}
	if opts.Layer1Dir == "" {
		f.errorf("the waiting-queue depth needs the run's Layer-1 stream (--layer1-dir)")
		return f.result("")
	}
	stream, sr := Layer1Stream(opts.Layer1Dir)
	if stream == "" {
		return sr
	}
	recs, err := ReadLayer1Records(stream)
	if err != nil {
		f.failf("Layer-1 records: %v", err)
		return f.result("")
	}
	roll := newRolling(reqs, recs, window)
	step := int64(math.Round(opts.StepS * 1e9))
	medRate, medWait, ok := cleanMedians(f, roll, *c, step)
	if !ok {
		return f.result("")
	}
	tolRate, tolWait, ok := recoverySelf(f, roll, cleanSegments(res), len(recov), step, medRate, medWait, opts)
	if !ok {
		return f.result("")
	}
	for i, r := range recov {
		judgeRecovery(f, roll, i+1, r, medRate, medWait, tolRate, tolWait)
	}
	if opts.Rule == RuleCalibrated {
		return f.result(fmt.Sprintf("%d recoveries: completion rate within %.1f%% and waiting queue within %.1f%% of clean segment C's medians (%.4g req/s, %.4g waiting) at each recovery's end (calibrated rule, quantile %g)",
			len(recov), tolRate*100, tolWait*100, medRate, medWait, opts.Quantile))
	}
	return f.result(fmt.Sprintf("%d recoveries: completion rate and waiting queue within %.0f%% of clean segment C's medians (%.4g req/s, %.4g waiting) at each recovery's end",
		len(recov), opts.Tolerance*100, medRate, medWait))
}

// cleanSegments are the result's clean segments, in order.
func cleanSegments(res seedResult) []seedSegment {
	var out []seedSegment
	for _, s := range res.Segments {
		if s.Kind == "clean" {
			out = append(out, s)
		}
	}
	return out
}

// recoverySelf measures the recovery rule's own false-failure rate: the
// rule judges a recovery by one sample of the two rolling series (at its
// end), so how often do the clean segments' own samples (every StepS, each
// window inside one segment) lie outside the band around clean segment
// C's medians? It records the figures and returns the band of each
// series under the rule in force (both Tolerance under the literal rule).
//
// Figures: recovery.self.samples, .rate_in_band_fraction,
// .waiting_in_band_fraction, .unit_pass_fraction (both in band),
// .run_pass_fraction (to the power of the recoveries),
// .false_failure_rate, .rate_dev_p95 and .waiting_dev_p95 (|x/median - 1|);
// power.recovery.unit_pass_fraction and .samples; with the calibrated
// rule recovery.calibrated.quantile, .rate_tolerance, .waiting_tolerance.
func recoverySelf(f *findings, roll *rolling, clean []seedSegment, recoveries int, step int64, medRate, medWait float64, opts RecoveryOptions) (tolRate, tolWait float64, ok bool) {
	dev := [][]float64{nil, nil} // |rate/median - 1|, |waiting/median - 1|
	for _, s := range clean {
		for t := s.StartMonoNS + roll.window; t <= s.EndMonoNS; t += step {
			w, have := roll.waiting(t)
			if !have {
				continue // no Layer-1 record in the window: the sample cannot be told
			}
			dev[0] = append(dev[0], relDev(roll.rate(t), medRate))
			dev[1] = append(dev[1], relDev(w, medWait))
		}
	}
	n := len(dev[0])
	f.fig("recovery.self.samples", float64(n))
	f.fig("power.recovery.samples", float64(n))
	tolRate, tolWait = opts.Tolerance, opts.Tolerance
	if n == 0 {
		f.notef("recovery: the clean segments give no sample of both series: the rule's own false-failure rate cannot be told")
		if opts.Rule == RuleCalibrated {
			f.errorf("the calibrated recovery rule needs samples of the clean segments, and there are none")
			return 0, 0, false
		}
		return tolRate, tolWait, true
	}
	lit := []float64{opts.Tolerance + 1e-9, opts.Tolerance + 1e-9} // as within() rounds
	unit := jointPassFraction(dev, lit)
	run := math.Pow(unit, float64(recoveries))
	f.fig("recovery.self.rate_in_band_fraction", jointPassFraction(dev[:1], lit[:1]))
	f.fig("recovery.self.waiting_in_band_fraction", jointPassFraction(dev[1:], lit[1:]))
	f.fig("recovery.self.unit_pass_fraction", unit)
	f.fig("recovery.self.run_pass_fraction", run)
	f.fig("recovery.self.false_failure_rate", 1-run)
	f.fig("recovery.self.rate_dev_p95", finite(sortedQuantile(dev[0], 0.95)))
	f.fig("recovery.self.waiting_dev_p95", finite(sortedQuantile(dev[1], 0.95)))
	f.fig("power.recovery.unit_pass_fraction", unit)
	f.notef("recovery: the clean segments' own %d samples lie within the band %.1f%% of the time, so a representative run of %d recoveries fails the rule %.1f%% of the time",
		n, 100*unit, recoveries, 100*(1-run))
	if opts.Rule != RuleCalibrated {
		return tolRate, tolWait, true
	}
	f.fig("recovery.calibrated.quantile", opts.Quantile)
	if need := MinCalibrationBlocks(opts.Quantile); n < need {
		f.errorf("the calibrated recovery rule: the clean segments give %d samples, fewer than the %d the %g quantile needs", n, need, opts.Quantile)
		return 0, 0, false
	}
	thr, _, _ := jointThresholds(dev, opts.Quantile)
	tolRate, tolWait = math.Max(opts.Tolerance, thr[0]), math.Max(opts.Tolerance, thr[1])
	if math.IsInf(tolRate, 0) || math.IsInf(tolWait, 0) {
		f.errorf("the calibrated recovery rule: a median of 0 that the clean segments' samples leave (an infinite band): the rule cannot be applied")
		return 0, 0, false
	}
	f.fig("recovery.calibrated.rate_tolerance", tolRate)
	f.fig("recovery.calibrated.waiting_tolerance", tolWait)
	return tolRate, tolWait, true
}

// relDev is |x/m - 1|: 0 for x = m = 0, +Inf for another x when m is 0.
func relDev(x, m float64) float64 {
	if m == 0 {
		if x == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return math.Abs(x/m - 1)
}

// sortedQuantile is the q-quantile of xs (a copy is sorted).
func sortedQuantile(xs []float64, q float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[quantileIndex(len(s), q)]
}

// recoverySegments finds clean segment C (the last clean segment) and the
// recoveries: each directly after a profile window, one per window, each
// its fixed length.
func recoverySegments(f *findings, res seedResult, opts RecoveryOptions) (*seedSegment, []seedSegment) {
	var c *seedSegment
	var recov []seedSegment
	profiles := 0
	for i, s := range res.Segments {
		switch s.Kind {
		case "clean":
			c = &res.Segments[i]
		case "profile":
			profiles++
		case "recovery":
			if i == 0 || res.Segments[i-1].Kind != "profile" {
				f.failf("recovery segment %s does not follow a profile window", s.Name)
			}
			f.fig(fmt.Sprintf("recovery%d_seconds", len(recov)+1), s.Seconds)
			if math.Abs(s.Seconds-opts.RecoveryS) > opts.RecoveryTol {
				f.failf("recovery %s lasted %.3f s, the fixed recovery is %g s", s.Name, s.Seconds, opts.RecoveryS)
			}
			recov = append(recov, s)
		}
	}
	f.fig("recoveries", float64(len(recov)))
	switch {
	case c == nil:
		f.failf("result.json has no clean segment: no clean-segment-C medians")
	case len(recov) == 0:
		f.failf("result.json has no recovery segment after a profile window")
	case len(recov) != profiles:
		f.failf("%d profile windows but %d recoveries", profiles, len(recov))
	}
	return c, recov
}

// cleanMedians samples the two series in clean segment C.
func cleanMedians(f *findings, roll *rolling, c seedSegment, step int64) (rate, wait float64, ok bool) {
	return referenceMedians(f, roll, c, step, "clean segment C")
}

// referenceMedians samples the two series in the reference segment c,
// named what in the findings.
func referenceMedians(f *findings, roll *rolling, c seedSegment, step int64, what string) (rate, wait float64, ok bool) {
	var rates, waits []float64
	for t := c.StartMonoNS + roll.window; t <= c.EndMonoNS; t += step {
		rates = append(rates, roll.rate(t))
		if w, ok := roll.waiting(t); ok {
			waits = append(waits, w)
		}
	}
	f.fig("clean_c_samples", float64(len(rates)))
	f.fig("clean_c_waiting_samples", float64(len(waits)))
	rate = median(rates)
	f.fig("clean_c_completion_rps", rate)
	if len(waits) == 0 {
		f.failf("no Layer-1 record in %s (%s): no waiting-queue median", what, c.Name)
		return rate, 0, false
	}
	wait = median(waits)
	f.fig("clean_c_waiting", wait)
	if rate <= 0 {
		f.failf("%s's median completion rate is 0: nothing to recover to", what)
		return rate, wait, false
	}
	return rate, wait, true
}

// judgeRecovery: at the recovery's end each series is within its band
// (tolRate, tolWait) of the medians; a waiting median of 0 needs exactly 0.
func judgeRecovery(f *findings, roll *rolling, k int, r seedSegment, medRate, medWait, tolRate, tolWait float64) {
	pass := true
	rate := roll.rate(r.EndMonoNS)
	f.fig(fmt.Sprintf("recovery%d_completion_rps", k), rate)
	f.fig(fmt.Sprintf("recovery%d_completion_ratio", k), rate/medRate)
	if !within(rate, medRate, tolRate) {
		f.failf("recovery %s: completion rate %.4g req/s at its end, not within %.4g%% of clean segment C's median %.4g", r.Name, rate, tolRate*100, medRate)
		pass = false
	}
	wait, ok := roll.waiting(r.EndMonoNS)
	switch {
	case !ok:
		f.failf("recovery %s: no Layer-1 record in its last window, so the waiting queue's return cannot be shown", r.Name)
		pass = false
	default:
		f.fig(fmt.Sprintf("recovery%d_waiting", k), wait)
		if !within(wait, medWait, tolWait) {
			f.failf("recovery %s: waiting queue %.4g at its end, not within %.4g%% of clean segment C's median %.4g", r.Name, wait, tolWait*100, medWait)
			pass = false
		}
	}
	f.fig(fmt.Sprintf("recovery%d_pass", k), b2f(pass))
}

// within: x is within tol of m, the bound inclusive (with 1e-9 of m for
// the rounding of the figures); m = 0 wants x = 0 exactly.
func within(x, m, tol float64) bool {
	return math.Abs(x-m) <= tol*m+1e-9*m
}

// median of xs (the mean of the middle two for an even count); xs is
// reordered.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sort.Float64s(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}
