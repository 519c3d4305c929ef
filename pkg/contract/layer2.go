package contract

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"warden/pkg/gates"
)

// Layer-2 traces (seed 002, "Layer 2: sampled Kineto windows"): each
// profile window writes one gzipped Chrome trace per TP rank, as the torch
// profiler's tensorboard handler does (*.pt.trace.json.gz). The check
// reads from each trace's "traceEvents" only complete events (ph "X"):
//
//   - "ProfilerStep#N" (not the gpu_user_annotation copies Kineto adds on
//     the GPU timeline): the profiler's step markers. With the server's
//     wait=0, warm-up=2, active=8 schedule only the active steps are
//     recorded, numbered 2 through 9.
//   - user annotations (cat "user_annotation") named like vLLM's
//     execute_context_<n>(<tokens>)_generation_<m>(<tokens>): one per
//     engine step executed.
//   - kernels (cat "kernel").
//
// The rank is the trace's "distributedInfo": {"rank": R}, or else a
// "rank<R>" or "tp<R>" in the file name, or else 0 when TP is 1.

// Layer2Options are the knobs of the Layer-2 check.
type Layer2Options struct {
	TP              int // ranks expected per window (1 for TP1, 2 for TP2)
	Windows         int // windows expected per rank; 0: any number, at least one
	WarmupIters     int // seed: 2
	ActiveIters     int // seed: 8
	Pattern         string
	ExecuteAnnotate *regexp.Regexp
	// Mapping is the kernel-to-family table; nil: the built-in v1.
	Mapping *Mapping
	// Layer1 is the run's Layer-1 stream, Phases the load client's phase
	// file (profile windows' and clean segments' monotonic bounds).
	Layer1, Phases string
	// JoinTolerance: how far a Layer-1 record's submit time may be from
	// its annotation's start once the clocks' offset is fixed.
	JoinTolerance time.Duration
	// ClockTolerance: how far the clocks' offset may be from the one the
	// trace's baseTimeNanoseconds and the phase file's wall and monotonic
	// times give.
	ClockTolerance time.Duration
	// MaxOtherOpaque: the seed's 30% classifiability limit.
	MaxOtherOpaque float64
	// MaxSMD: the seed's 0.25 representativeness limit.
	MaxSMD float64
	// Representativeness selects the rule windows are judged by: the
	// seed's literal one unless an amendment chose the calibrated one.
	Representativeness RepresentativenessOptions
	// RequireModes: CUDA-graph mode segments that need at least eight
	// active steps (stop condition 7).
	RequireModes []string
	// AnalysisOut, when set, receives the per-window analysis (JSON).
	AnalysisOut string
}

// DefaultLayer2 is the seed's window: TP1, two windows, 2+8 iterations,
// the v1 mapping, 30% and 0.25 limits.
func DefaultLayer2() Layer2Options {
	return Layer2Options{TP: 1, Windows: 2, WarmupIters: 2, ActiveIters: 8, Pattern: "*.pt.trace.json.gz",
		ExecuteAnnotate: regexp.MustCompile(`^execute_context_\d+\(\d+\)_generation_\d+\(\d+\)$`),
		JoinTolerance:   5 * time.Millisecond, ClockTolerance: 10 * time.Millisecond, MaxOtherOpaque: 0.30, MaxSMD: 0.25,
		Representativeness: RepresentativenessOptions{Rule: RuleLiteral, Quantile: DefaultCalibrationQuantile}}
}

// TraceSummary is what one trace file holds.
type TraceSummary struct {
	File     string
	Rank     int
	RankFrom string // distributedInfo, name or default
	Steps    []int  // ProfilerStep numbers, sorted
	Execute  int    // execute annotations
	Outside  int    // execute annotations outside every ProfilerStep
	Kernels  int
	Events   int
}

var rankInName = regexp.MustCompile(`(?i)(?:rank|tp)[-_]?(\d+)`)

// l2findings are the findings of the Layer-2 check, and whether one of
// them is stop condition 7 (not classifiable, too few mode steps), which
// no rerun cures.
type l2findings struct {
	*findings
	stop7 bool
}

// Layer2Dir checks every trace in dir.
//
// Figures: files, windows (per rank, the smallest count), ranks,
// bad_windows, kernels_min, execute_min, events, and those of the
// composition gates (docs/validators.md). A failed or errored verdict
// carries class profile-artifact, which the outcome policy retries once,
// unless a failure is stop condition 7.
func Layer2Dir(dir string, opts Layer2Options) Result {
	r, _ := Layer2Analyze(dir, opts)
	return r
}

// Layer2Analyze is Layer2Dir that also returns the analysis of the
// windows that had the right shape (nil when none had).
func Layer2Analyze(dir string, opts Layer2Options) (Result, *Analysis) {
	f := &l2findings{findings: newFindings()}
	if opts.Mapping == nil {
		opts.Mapping = DefaultMapping()
	}
	// every verdict names the table it was reached with
	f.notef("mapping %s", opts.Mapping.Label())
	f.fig("mapping_version", float64(opts.Mapping.Version))
	wins := layer2Shape(f, dir, opts)
	var an *Analysis
	if len(wins) > 0 {
		an = analyzeWindows(f, wins, opts)
		if opts.AnalysisOut != "" {
			if err := WriteAnalysis(opts.AnalysisOut, an); err != nil {
				f.errorf("analysis: %v", err)
			}
		}
	}
	res := f.result(fmt.Sprintf("%d window(s) of %d rank(s): 2+8 steps, %d execute annotations joined to Layer 1, classifiable, representative",
		int(f.figs["files"]), opts.TP, opts.ActiveIters))
	if !res.Passed() && !f.stop7 {
		res.Class = gates.ClassProfileArtifact
	}
	return res, an
}

// layer2Shape checks the files' shape rules and returns, by rank, the
// windows that pass them.
func layer2Shape(f *l2findings, dir string, opts Layer2Options) map[int][]rankWindow {
	if opts.TP < 1 {
		f.errorf("TP %d: must be at least 1", opts.TP)
		return nil
	}
	if _, err := os.Stat(dir); err != nil {
		f.errorf("traces: %v", err)
		return nil
	}
	paths, err := filepath.Glob(filepath.Join(dir, opts.Pattern))
	if err != nil {
		f.errorf("traces: %v", err)
		return nil
	}
	sort.Strings(paths)
	f.fig("files", float64(len(paths)))
	if len(paths) == 0 {
		f.failf("no trace files %s in %s", opts.Pattern, dir)
		return nil
	}
	byRank := map[int][]TraceSummary{}
	good := map[int][]rankWindow{}
	bad := 0
	kmin, emin, events := -1, -1, 0
	read := readTraces(paths, opts.ExecuteAnnotate, opts.Mapping.scopeMatchers())
	for i, p := range paths {
		t, err := read[i].t, read[i].err
		name := filepath.Base(p)
		if err != nil {
			bad++
			if nf := new(NonFiniteError); errors.As(err, &nf) {
				f.errorf("%s: %v", name, err) // it cannot be judged
			} else {
				f.failf("%s: %v", name, err)
			}
			if m := rankInName.FindStringSubmatch(name); m != nil {
				r, _ := strconv.Atoi(m[1])
				byRank[r] = append(byRank[r], t) // counted as the rank's window; already failed
			} else if opts.TP == 1 {
				byRank[0] = append(byRank[0], t)
			}
			continue
		}
		events += t.Events
		if kmin < 0 || t.Kernels < kmin {
			kmin = t.Kernels
		}
		if emin < 0 || t.Execute < emin {
			emin = t.Execute
		}
		if t.Rank < 0 {
			if m := rankInName.FindStringSubmatch(name); m != nil {
				t.Rank, _ = strconv.Atoi(m[1])
				t.RankFrom = "name"
			} else if opts.TP == 1 {
				t.Rank, t.RankFrom = 0, "default"
			} else {
				bad++
				f.failf("%s: no rank in the trace or its name, and TP is %d", name, opts.TP)
				continue
			}
		}
		if t.Rank >= opts.TP {
			bad++
			f.failf("%s: rank %d, but TP is %d", name, t.Rank, opts.TP)
			continue
		}
		if why := checkWindow(t, opts); why != "" {
			bad++
			f.failf("%s (rank %d): %s", name, t.Rank, why)
		} else {
			good[t.Rank] = append(good[t.Rank], rankWindow{name, read[i].d})
		}
		byRank[t.Rank] = append(byRank[t.Rank], t)
	}
	f.fig("bad_windows", float64(bad))
	f.fig("events", float64(events))
	f.fig("kernels_min", float64(max(kmin, 0)))
	f.fig("execute_min", float64(max(emin, 0)))
	f.fig("ranks", float64(len(byRank)))
	checkRanks(f.findings, byRank, opts)
	return good
}

type traceRead struct {
	t   TraceSummary
	d   *traceData
	err error
}

// readTraces reads the traces a few at a time (each is streamed; what is
// kept is the events the rules read), in the order of paths.
func readTraces(paths []string, exec *regexp.Regexp, scopes []*regexp.Regexp) []traceRead {
	out := make([]traceRead, len(paths))
	sem := make(chan struct{}, max(1, min(runtime.GOMAXPROCS(0), 4)))
	var wg sync.WaitGroup
	for i, p := range paths {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			d, err := readTraceFile(p, exec, scopes)
			d.summary.File = filepath.Base(p)
			out[i] = traceRead{d.summary, d, err}
		})
	}
	wg.Wait()
	return out
}

func readTraceFile(path string, exec *regexp.Regexp, scopes []*regexp.Regexp) (*traceData, error) {
	fh, err := os.Open(path)
	if err != nil {
		return &traceData{summary: TraceSummary{Rank: -1}}, err
	}
	defer fh.Close()
	return readTraceData(fh, exec, scopes)
}

// checkWindow: active steps exactly warm-up..warm-up+active-1, each once;
// exactly active execute annotations; at least one kernel.
func checkWindow(t TraceSummary, opts Layer2Options) string {
	var why []string
	want := make([]int, opts.ActiveIters)
	for i := range want {
		want[i] = opts.WarmupIters + i
	}
	if !equalInts(t.Steps, want) {
		why = append(why, fmt.Sprintf("ProfilerSteps %v, want %d..%d", t.Steps, opts.WarmupIters, opts.WarmupIters+opts.ActiveIters-1))
	}
	if t.Execute != opts.ActiveIters {
		why = append(why, fmt.Sprintf("%d execute annotations, want %d", t.Execute, opts.ActiveIters))
	}
	if t.Outside > 0 {
		why = append(why, fmt.Sprintf("%d execute annotation(s) outside every ProfilerStep", t.Outside))
	}
	if t.Kernels == 0 {
		why = append(why, "no kernel events")
	}
	return strings.Join(why, ", ")
}

// checkRanks: every rank 0..TP-1 has the expected number of windows.
func checkRanks(f *findings, byRank map[int][]TraceSummary, opts Layer2Options) {
	wmin := -1
	for r := range opts.TP {
		n := len(byRank[r])
		if wmin < 0 || n < wmin {
			wmin = n
		}
		switch {
		case n == 0:
			f.failf("rank %d: no trace", r)
		case opts.Windows > 0 && n != opts.Windows:
			f.failf("rank %d: %d trace(s), want %d windows", r, n, opts.Windows)
		}
	}
	if opts.Windows == 0 {
		for r := 1; r < opts.TP; r++ {
			if len(byRank[r]) != len(byRank[0]) {
				f.failf("rank %d has %d trace(s), rank 0 has %d", r, len(byRank[r]), len(byRank[0]))
			}
		}
	}
	f.fig("windows", float64(max(wmin, 0)))
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
