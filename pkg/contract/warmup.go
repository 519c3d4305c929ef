package contract

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"warden/pkg/gates"
)

// The warm-up gate of seed 002: "60 s warm-up (excluded; require >=32
// completions)", and for P10-class runs A-P3-6, the OR branch: "at least
// 16 complete successfully and trailing Layer-1 telemetry meets the
// stabilization test". It reads files only (the client's result directory
// and the Layer-1 stream), so a re-adjudication can run it on retained
// telemetry.

// The A-P3-6 constants, "frozen before re-adjudicating retained telemetry".
const (
	// StabilizationMinCompletions: "at least 16 complete successfully".
	StabilizationMinCompletions = 16
	// StabilizationMinSteps: "Each bin must contain at least 16
	// model-executed steps".
	StabilizationMinSteps = 16
	// StabilizationMaxDrift: "abs(s)*15/R_bar <= 0.10".
	StabilizationMaxDrift = 0.10
)

// seedResult is the part of loadgen's result.json the warm-up and
// recovery checks read.
type seedResult struct {
	Clock struct {
		T0MonoNS int64 `json:"t0_mono_ns"`
	} `json:"clock"`
	Timeline struct {
		WarmupS   float64 `json:"warmup_s"`
		RecoveryS float64 `json:"recovery_s"`
	} `json:"timeline"`
	Segments []seedSegment `json:"segments"`
	Files    struct {
		Requests []string `json:"requests"`
	} `json:"files"`
}

type seedSegment struct {
	Name        string  `json:"name"`
	Kind        string  `json:"kind"`
	StartMonoNS int64   `json:"start_mono_ns"`
	EndMonoNS   int64   `json:"end_mono_ns"`
	Seconds     float64 `json:"seconds"`
	Succeeded   int     `json:"succeeded"`
	File        string  `json:"file"`
}

// readSeedResult reads DIR/result.json; a file that cannot be read or
// decoded is an error of the findings.
func readSeedResult(f *findings, dir string) (seedResult, bool) {
	var res seedResult
	p := filepath.Join(dir, "result.json")
	b, err := os.ReadFile(p)
	if err != nil {
		f.errorf("read result: %v", err)
		return res, false
	}
	if err := json.Unmarshal(b, &res); err != nil {
		f.errorf("decode %s: %v", p, err)
		return res, false
	}
	return res, true
}

// seedRequest is the part of a request record the checks read.
type seedRequest struct {
	Segment string `json:"segment"`
	EndNS   int64  `json:"end_mono_ns"`
	Class   string `json:"class"`
}

// readRequests reads the request records of the files rel (relative to
// dir, as result.json names them).
func readRequests(dir string, rel []string) ([]seedRequest, error) {
	return readRecords[seedRequest](dir, rel)
}

// readRecords reads the JSON lines of the files rel (relative to dir, as
// result.json names them) as records of type T.
func readRecords[T any](dir string, rel []string) ([]T, error) {
	var out []T
	for _, r := range rel {
		p, err := inside(dir, r)
		if err != nil {
			return out, err
		}
		if err := eachJSONLine(p, func(line []byte) error {
			var q T
			if err := json.Unmarshal(line, &q); err != nil {
				return err
			}
			out = append(out, q)
			return nil
		}); err != nil {
			return out, err
		}
	}
	return out, nil
}

// WarmupOptions are the knobs of the warm-up check.
type WarmupOptions struct {
	// MinCompletions is the warm-up's successful completions (seed: 32).
	MinCompletions int
	// Stabilization allows A-P3-6's OR branch (P10-class runs only).
	Stabilization bool
	// Layer1Dir holds the run's one Layer-1 stream; required with
	// Stabilization. Sidecar, Signals and Layer1 are the Layer-1
	// accounting check's (Layer1Dir), whose pass the branch needs.
	Layer1Dir, Sidecar, Signals string
	Layer1                      Layer1Options
}

// WarmupDir checks the warm-up of the client's result directory dir.
//
// Figures: warmup_completions (the smaller of segments[0].succeeded and
// the successes its records file holds), min_completions, stabilization
// (0/1: the OR branch allowed), count_pass (0/1); with the OR branch also
// layer1_accounting (0/1), the bins' bin1_steps..bin3_steps and
// bin1_tokens_per_s..bin3_tokens_per_s, mean_tokens_per_s,
// slope_tokens_per_s2, normalized_drift, stabilization_pass (0/1) and
// or_branch_pass (0/1). A figure that could not be computed is absent,
// never imputed.
func WarmupDir(dir string, opts WarmupOptions) Result {
	f := newFindings()
	res, ok := readSeedResult(f, dir)
	if !ok {
		return f.result("")
	}
	f.fig("min_completions", float64(opts.MinCompletions))
	f.fig("stabilization", b2f(opts.Stabilization))
	if len(res.Segments) == 0 || res.Segments[0].Kind != "warmup" {
		f.failf("result.json has no warm-up segment first (segments[0] of kind warmup)")
		return f.result("")
	}
	n, ok := warmupCompletions(f, dir, res.Segments[0])
	if !ok {
		return f.result("")
	}
	f.fig("warmup_completions", float64(n))
	byCount := n >= opts.MinCompletions
	f.fig("count_pass", b2f(byCount))
	switch {
	case byCount:
		return f.result(fmt.Sprintf("%d successful warm-up completions, at least %d", n, opts.MinCompletions))
	case !opts.Stabilization:
		f.failf("%d successful warm-up completions, fewer than %d", n, opts.MinCompletions)
		return f.result("")
	}
	branch := stabilization(f, res, opts)
	if n < StabilizationMinCompletions {
		f.failf("%d successful warm-up completions: fewer than %d, and fewer than the OR branch's %d", n, opts.MinCompletions, StabilizationMinCompletions)
		branch = false
	}
	if len(f.errs) == 0 {
		f.fig("or_branch_pass", b2f(branch))
	}
	return f.result(fmt.Sprintf("%d successful warm-up completions (fewer than %d) and the trailing-quartile stabilization test passed (A-P3-6 OR branch)",
		n, opts.MinCompletions))
}

// warmupCompletions is the warm-up segment's successes: its succeeded and
// a recount of its records file, the smaller (fail closed).
func warmupCompletions(f *findings, dir string, seg seedSegment) (int, bool) {
	n := seg.Succeeded
	if seg.File == "" {
		f.failf("the warm-up segment names no records file to recount its completions")
		return 0, false
	}
	recs, err := readRequests(dir, []string{seg.File})
	if err != nil {
		f.errorf("warm-up records: %v", err)
		return 0, false
	}
	k := 0
	for _, r := range recs {
		if r.Class == "success" && r.Segment == seg.Name {
			k++
		}
	}
	if k != n {
		f.notef("segments[0].succeeded %d, its records hold %d successes: the smaller counts", n, k)
	}
	return min(n, k), true
}

// stabilization is A-P3-6's test on the trailing warm-up quartile. The
// seed's bins [45,50), [50,55), [55,60) s of a 60 s warm-up are, for a
// warm-up of L seconds, the last quarter [0.75L, L) after t0 cut in three
// equal bins; the drift is abs(slope)*(L/4)/R_bar (15 s for 60).
func stabilization(f *findings, res seedResult, opts WarmupOptions) bool {
	t0, L := res.Clock.T0MonoNS, res.Timeline.WarmupS
	if t0 <= 0 || !(L > 0) || math.IsInf(L, 0) {
		f.failf("result.json lacks clock.t0_mono_ns or a positive timeline.warmup_s: the trailing quartile cannot be placed")
		return false
	}
	if opts.Layer1Dir == "" {
		f.errorf("the stabilization test needs the run's Layer-1 stream (--layer1-dir)")
		return false
	}
	acc := Layer1Dir(opts.Layer1Dir, opts.Sidecar, opts.Signals, opts.Layer1)
	switch acc.Verdict {
	case gates.Pass:
		f.fig("layer1_accounting", 1)
	case gates.Fail:
		f.fig("layer1_accounting", 0)
		f.failf("the Layer-1 accounting invariant failed (%s)", acc.Detail)
		return false
	default:
		f.errorf("the Layer-1 accounting could not be judged (%s)", acc.Detail)
		return false
	}
	stream, _ := Layer1Stream(opts.Layer1Dir)
	recs, err := ReadLayer1Records(stream)
	if err != nil {
		f.failf("Layer-1 records: %v", err)
		return false
	}
	stabilizationSelf(f, res, recs, L)
	edge := func(k int) int64 { return t0 + int64(math.Round(L*1e9*float64(k)/12)) }
	lo, hi := edge(9), edge(12)
	if !quartileContiguous(f, recs, lo, hi) {
		return false
	}
	binS := L / 12
	var rates, xs []float64
	ok := true
	for j := range 3 {
		a, b := edge(9+j), edge(10+j)
		steps, tokens := 0, int64(0)
		for _, r := range recs {
			if r.ModelExecuted && r.SubmitMonoNS >= a && r.SubmitMonoNS < b {
				steps++
				tokens += r.PrefillTokens + r.DecodeTokens
			}
		}
		rate := float64(tokens) / binS
		f.fig(fmt.Sprintf("bin%d_steps", j+1), float64(steps))
		f.fig(fmt.Sprintf("bin%d_tokens_per_s", j+1), rate)
		if steps < StabilizationMinSteps {
			f.failf("stabilization bin %d [%.4g, %.4g) s holds %d model-executed steps, fewer than %d", j+1, L*float64(9+j)/12, L*float64(10+j)/12, steps, StabilizationMinSteps)
			ok = false
		}
		if !(rate > 0) || math.IsInf(rate, 0) {
			f.failf("stabilization bin %d's scheduled-token throughput %g is not positive and finite", j+1, rate)
			ok = false
		}
		rates = append(rates, rate)
		xs = append(xs, L*(float64(9+j)+0.5)/12)
	}
	if !ok {
		return false
	}
	slope, mean := olsSlope(xs, rates)
	drift := math.Abs(slope) * (L / 4) / mean
	f.fig("mean_tokens_per_s", mean)
	f.fig("slope_tokens_per_s2", slope)
	f.fig("normalized_drift", drift)
	pass := drift <= StabilizationMaxDrift
	f.fig("stabilization_pass", b2f(pass))
	if !pass {
		f.failf("stabilization: normalized drift abs(s)*%g/R_bar = %.4f, more than %.2f", L/4, drift, StabilizationMaxDrift)
	}
	return pass
}

// stabilizationSelf measures the stabilization test's own false-failure
// rate: the same test (three bins of L/12 seconds, each with at least 16
// model-executed steps and a positive scheduled-token throughput, drift
// abs(s)*(L/4)/R_bar within 0.10) on the clean segments' own windows of
// L/4 seconds, one every bin's length inside each segment: steady service
// by the seed's own definition. Figures stabilization.self.windows,
// .pass_fraction and .false_failure_rate (absent without a window).
func stabilizationSelf(f *findings, res seedResult, recs []Layer1Record, L float64) {
	bin := int64(math.Round(L * 1e9 / 12))
	n, pass := 0, 0
	for _, seg := range cleanSegments(res) {
		for a := seg.StartMonoNS; a+3*bin <= seg.EndMonoNS; a += bin {
			n++
			var rates, xs []float64
			ok := true
			for j := range 3 {
				lo, hi := a+int64(j)*bin, a+int64(j+1)*bin
				steps, tokens := 0, int64(0)
				for _, r := range recs {
					if r.ModelExecuted && r.SubmitMonoNS >= lo && r.SubmitMonoNS < hi {
						steps++
						tokens += r.PrefillTokens + r.DecodeTokens
					}
				}
				rate := float64(tokens) / (L / 12)
				ok = ok && steps >= StabilizationMinSteps && rate > 0 && !math.IsInf(rate, 0)
				rates, xs = append(rates, rate), append(xs, (float64(j)+0.5)*L/12)
			}
			if ok {
				slope, mean := olsSlope(xs, rates)
				ok = math.Abs(slope)*(L/4)/mean <= StabilizationMaxDrift
			}
			if ok {
				pass++
			}
		}
	}
	if n == 0 {
		return
	}
	p := float64(pass) / float64(n)
	f.fig("stabilization.self.windows", float64(n))
	f.fig("stabilization.self.pass_fraction", p)
	f.fig("stabilization.self.false_failure_rate", 1-p)
	f.notef("stabilization: the clean segments' own %d windows of %g s pass the test %.1f%% of the time", n, L/4, 100*p)
}

// quartileContiguous: the records (model-executed or not) submitted in
// [lo, hi) have contiguous step indices, in stream order.
func quartileContiguous(f *findings, recs []Layer1Record, lo, hi int64) bool {
	prev, seen, gaps := int64(0), false, 0
	for _, r := range recs {
		if r.SubmitMonoNS < lo || r.SubmitMonoNS >= hi {
			continue
		}
		if seen && r.Step != prev+1 {
			gaps++
		}
		prev, seen = r.Step, true
	}
	f.fig("quartile_step_gaps", float64(gaps))
	if gaps > 0 {
		f.failf("%d discontinuous step index(es) in the trailing warm-up quartile", gaps)
		return false
	}
	return true
}

// olsSlope fits y = a + s*x by ordinary least squares and returns s and
// the mean of y.
func olsSlope(xs, ys []float64) (slope, meanY float64) {
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx /= float64(len(xs))
	my /= float64(len(ys))
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
	}
	return sxy / sxx, my
}

// eachJSONLine calls fn with every non-empty line of the file at path.
func eachJSONLine(path string, fn func(line []byte) error) error {
	fh, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open %s: %w", filepath.Base(path), err)
	}
	defer fh.Close()
	br := bufio.NewReaderSize(fh, 1<<20)
	for n := 1; ; n++ {
		b, err := br.ReadBytes('\n')
		if t := bytes.TrimSpace(b); len(t) > 0 {
			if ferr := fn(t); ferr != nil {
				return fmt.Errorf("%s line %d: %w", filepath.Base(path), n, ferr)
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", filepath.Base(path), err)
		}
	}
}
