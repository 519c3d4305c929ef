package validate

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
}

// DefaultRecovery is the seed's rule.
func DefaultRecovery() RecoveryOptions {
	return RecoveryOptions{WindowS: 10, StepS: 1, Tolerance: 0.10, RecoveryS: 30, RecoveryTol: 0.01}
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
	medRate, medWait, ok := cleanMedians(f, roll, *c, int64(math.Round(opts.StepS*1e9)))
	if !ok {
		return f.result("")
	}
	for i, r := range recov {
		judgeRecovery(f, roll, i+1, r, medRate, medWait, opts.Tolerance)
	}
	return f.result(fmt.Sprintf("%d recoveries: completion rate and waiting queue within %.0f%% of clean segment C's medians (%.4g req/s, %.4g waiting) at each recovery's end",
		len(recov), opts.Tolerance*100, medRate, medWait))
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
		f.failf("no Layer-1 record in clean segment C (%s): no waiting-queue median", c.Name)
		return rate, 0, false
	}
	wait = median(waits)
	f.fig("clean_c_waiting", wait)
	if rate <= 0 {
		f.failf("clean segment C's median completion rate is 0: nothing to recover to")
		return rate, wait, false
	}
	return rate, wait, true
}

// judgeRecovery: at the recovery's end both series are within tol of the
// medians; a waiting median of 0 needs exactly 0.
func judgeRecovery(f *findings, roll *rolling, k int, r seedSegment, medRate, medWait, tol float64) {
	pass := true
	rate := roll.rate(r.EndMonoNS)
	f.fig(fmt.Sprintf("recovery%d_completion_rps", k), rate)
	f.fig(fmt.Sprintf("recovery%d_completion_ratio", k), rate/medRate)
	if !within(rate, medRate, tol) {
		f.failf("recovery %s: completion rate %.4g req/s at its end, not within %.0f%% of clean segment C's median %.4g", r.Name, rate, tol*100, medRate)
		pass = false
	}
	wait, ok := roll.waiting(r.EndMonoNS)
	switch {
	case !ok:
		f.failf("recovery %s: no Layer-1 record in its last window, so the waiting queue's return cannot be shown", r.Name)
		pass = false
	default:
		f.fig(fmt.Sprintf("recovery%d_waiting", k), wait)
		if !within(wait, medWait, tol) {
			f.failf("recovery %s: waiting queue %.4g at its end, not within %.0f%% of clean segment C's median %.4g", r.Name, wait, tol*100, medWait)
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
