package validate

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"

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
}

// DefaultLayer2 is the seed's window: TP1, two windows, 2+8 iterations.
func DefaultLayer2() Layer2Options {
	return Layer2Options{TP: 1, Windows: 2, WarmupIters: 2, ActiveIters: 8, Pattern: "*.pt.trace.json.gz",
		ExecuteAnnotate: regexp.MustCompile(`^execute_context_\d+\(\d+\)_generation_\d+\(\d+\)$`)}
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

type traceEvent struct {
	Name string  `json:"name"`
	Cat  string  `json:"cat"`
	Ph   string  `json:"ph"`
	Ts   float64 `json:"ts"`
	Dur  float64 `json:"dur"`
}

var rankInName = regexp.MustCompile(`(?i)(?:rank|tp)[-_]?(\d+)`)

// ReadTrace decompresses and parses one trace, streaming its events.
func ReadTrace(r io.Reader, exec *regexp.Regexp) (TraceSummary, error) {
	var t TraceSummary
	zr, err := gzip.NewReader(bufio.NewReaderSize(r, 1<<20))
	if err != nil {
		return t, fmt.Errorf("gunzip: %w", err)
	}
	dec := json.NewDecoder(bufio.NewReaderSize(zr, 1<<20))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return t, fmt.Errorf("parse: not a JSON object (%v)", err)
	}
	t.Rank = -1
	sawEvents := false
	type span struct{ lo, hi float64 }
	var steps []span
	var execTs []float64
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return t, fmt.Errorf("parse: %w", err)
		}
		key, _ := tok.(string)
		switch key {
		case "traceEvents":
			sawEvents = true
			if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
				return t, fmt.Errorf("parse: traceEvents is not an array (%v)", err)
			}
			for dec.More() {
				var e traceEvent
				if err := dec.Decode(&e); err != nil {
					return t, fmt.Errorf("parse event %d: %w", t.Events, err)
				}
				t.Events++
				if e.Ph != "X" {
					continue
				}
				switch {
				case e.Cat == "gpu_user_annotation":
					// the GPU-timeline copy of a CPU annotation: counted once, on the CPU side
				case strings.HasPrefix(e.Name, "ProfilerStep#"):
					n, err := strconv.Atoi(strings.TrimPrefix(e.Name, "ProfilerStep#"))
					if err != nil {
						return t, fmt.Errorf("parse: step marker %q", e.Name)
					}
					t.Steps = append(t.Steps, n)
					steps = append(steps, span{e.Ts, e.Ts + e.Dur})
				case e.Cat == "kernel":
					t.Kernels++
				case e.Cat == "user_annotation" && exec.MatchString(e.Name):
					t.Execute++
					execTs = append(execTs, e.Ts)
				}
			}
			if _, err := dec.Token(); err != nil {
				return t, fmt.Errorf("parse: %w", err)
			}
		case "distributedInfo":
			var di struct {
				Rank *int `json:"rank"`
			}
			if err := dec.Decode(&di); err != nil {
				return t, fmt.Errorf("parse distributedInfo: %w", err)
			}
			if di.Rank != nil {
				t.Rank, t.RankFrom = *di.Rank, "distributedInfo"
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return t, fmt.Errorf("parse %s: %w", key, err)
			}
		}
	}
	if _, err := dec.Token(); err != nil {
		return t, fmt.Errorf("parse: %w", err)
	}
	if !sawEvents {
		return t, errors.New("parse: no traceEvents")
	}
	sort.Ints(t.Steps)
	for _, ts := range execTs {
		in := false
		for _, s := range steps {
			if ts >= s.lo && ts <= s.hi {
				in = true
				break
			}
		}
		if !in {
			t.Outside++
		}
	}
	return t, nil
}

// Layer2Dir checks every trace in dir.
//
// Figures: files, windows (per rank, the smallest count), ranks,
// bad_windows, kernels_min, execute_min, events. A failed or errored
// verdict carries class profile-artifact, which the outcome policy
// retries once.
func Layer2Dir(dir string, opts Layer2Options) Result {
	f := newFindings()
	res := layer2Dir(f, dir, opts)
	if !res.Passed() {
		res.Class = gates.ClassProfileArtifact
	}
	return res
}

func layer2Dir(f *findings, dir string, opts Layer2Options) Result {
	if opts.TP < 1 {
		f.errorf("TP %d: must be at least 1", opts.TP)
		return f.result("")
	}
	if _, err := os.Stat(dir); err != nil {
		f.errorf("traces: %v", err)
		return f.result("")
	}
	paths, err := filepath.Glob(filepath.Join(dir, opts.Pattern))
	if err != nil {
		f.errorf("traces: %v", err)
		return f.result("")
	}
	sort.Strings(paths)
	f.fig("files", float64(len(paths)))
	if len(paths) == 0 {
		f.failf("no trace files %s in %s", opts.Pattern, dir)
		return f.result("")
	}
	byRank := map[int][]TraceSummary{}
	bad := 0
	kmin, emin, events := -1, -1, 0
	read := readTraces(paths, opts.ExecuteAnnotate)
	for i, p := range paths {
		t, err := read[i].t, read[i].err
		name := filepath.Base(p)
		if err != nil {
			bad++
			f.failf("%s: %v", name, err)
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
		}
		byRank[t.Rank] = append(byRank[t.Rank], t)
	}
	f.fig("bad_windows", float64(bad))
	f.fig("events", float64(events))
	f.fig("kernels_min", float64(max(kmin, 0)))
	f.fig("execute_min", float64(max(emin, 0)))
	f.fig("ranks", float64(len(byRank)))
	checkRanks(f, byRank, opts)
	return f.result(fmt.Sprintf("%d trace(s): %d rank(s), 2+8 steps, %d execute annotations each, kernels in every window", len(paths), opts.TP, opts.ActiveIters))
}

type traceRead struct {
	t   TraceSummary
	err error
}

// readTraces reads the traces a few at a time (each is streamed: memory
// stays small), in the order of paths.
func readTraces(paths []string, exec *regexp.Regexp) []traceRead {
	out := make([]traceRead, len(paths))
	sem := make(chan struct{}, max(1, min(runtime.GOMAXPROCS(0), 4)))
	var wg sync.WaitGroup
	for i, p := range paths {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			t, err := readTraceFile(p, exec)
			out[i] = traceRead{t, err}
		})
	}
	wg.Wait()
	return out
}

func readTraceFile(path string, exec *regexp.Regexp) (TraceSummary, error) {
	fh, err := os.Open(path)
	if err != nil {
		return TraceSummary{}, err
	}
	defer fh.Close()
	t, err := ReadTrace(fh, exec)
	t.File = filepath.Base(path)
	return t, err
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
