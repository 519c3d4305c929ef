package contract

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// What one trace (one window of one rank) holds for the Layer-2 rules:
// the ProfilerStep spans, the execute annotations (CPU side and their
// GPU-timeline copies), the CPU-side parents that a mapping's scopes name,
// the CUDA runtime and driver calls (launches among them), and the GPU
// activity (kernels, memcpy, memset).

type span struct{ lo, hi float64 }

func (s span) has(t float64) bool { return t >= s.lo && t <= s.hi }

type stepMark struct {
	n int
	span
}

type execMark struct {
	name string
	span
	gpu  *span // the gpu_user_annotation copy, when Kineto wrote one
	step int   // index into steps, -1 when outside every step
}

type scopeSpan struct {
	span
	bits uint64
}

type apiCall struct {
	thread string
	name   string
	ts     float64
	dur    float64
	corr   int64
	hasC   bool
	scopes uint64 // filled by attachScopes
	step   int    // index into steps, -1 outside
}

type gpuActivity struct {
	cat  string // kernel, gpu_memcpy, gpu_memset
	name string
	ts   float64
	dur  float64
	corr int64
	hasC bool
}

// traceData is one parsed trace.
type traceData struct {
	summary TraceSummary
	steps   []stepMark
	execs   []execMark
	scopes  map[string][]scopeSpan // by thread
	calls   []apiCall
	gpu     []gpuActivity
	baseNS  int64
}

type rawEvent struct {
	Name string          `json:"name"`
	Cat  string          `json:"cat"`
	Ph   string          `json:"ph"`
	Ts   float64         `json:"ts"`
	Dur  float64         `json:"dur"`
	Pid  json.RawMessage `json:"pid"`
	Tid  json.RawMessage `json:"tid"`
	Args struct {
		Correlation *int64 `json:"correlation"`
	} `json:"args"`
	name *eventName // Name interned, when read by the one-pass reader
}

// ReadTrace decompresses and parses one trace, streaming its events, and
// summarizes its shape.
func ReadTrace(r io.Reader, exec *regexp.Regexp) (TraceSummary, error) {
	d, err := readTraceData(r, exec, nil)
	return d.summary, err
}

// readTraceData parses one trace in one pass (layer2_stream.go): the gzip
// is inflated a chunk ahead on its own goroutine, read to its end (its
// checksum checked), and the JSON must be one object with only
// whitespace after it. scopes are the mapping's scope patterns (nil: no
// scopes are collected).
func readTraceData(r io.Reader, exec *regexp.Regexp, scopes []*regexp.Regexp) (*traceData, error) {
	d := &traceData{scopes: map[string][]scopeSpan{}}
	d.summary.Rank = -1
	zr, err := gzip.NewReader(bufio.NewReaderSize(r, 1<<20))
	if err != nil {
		return d, fmt.Errorf("gunzip: %w", err)
	}
	src := newPrefetcher(zr)
	defer src.Close()
	return d, parseTrace(d, src, exec, scopes)
}

// parseTrace parses the JSON of one trace from src into d.
func parseTrace(d *traceData, src io.Reader, exec *regexp.Regexp, scopes []*regexp.Regexp) error {
	w := newTraceWindow(src)
	sawEvents := false
	rd := &eventReader{d: d, exec: exec, scopes: scopes, bits: map[string]uint64{}, names: eventNames{}}
	err := w.members("the trace", func(key string) error {
		switch key {
		case "traceEvents":
			sawEvents = true
			return rd.events(w)
		case "distributedInfo":
			var di struct {
				Rank *int `json:"rank"`
			}
			if err := decodeMember(w, key, &di); err != nil {
				return err
			}
			if di.Rank != nil {
				d.summary.Rank, d.summary.RankFrom = *di.Rank, "distributedInfo"
			}
			return nil
		case "baseTimeNanoseconds":
			return decodeMember(w, key, &d.baseNS)
		}
		_, err := w.value()
		return err
	})
	if err == nil {
		err = w.end()
	}
	if err != nil {
		return err
	}
	if !sawEvents {
		return errors.New("parse: no traceEvents")
	}
	d.finish()
	if err := d.inWindow(); err != nil {
		return err
	}
	return d.finiteSums()
}

// NonFiniteError says that a trace's durations sum past float64's range
// (each is finite, their sum is not): no share of it can be told, so the
// check errs rather than judges.
type NonFiniteError struct{ What string }

func (e *NonFiniteError) Error() string {
	return "the trace's " + e.What + " sum to a number past float64's range: no share can be computed"
}

// inWindow fails a trace whose GPU activity (kernels, memcpy, memset) is
// not where the window's ProfilerSteps put it (the first step's start to
// the last one's end): none may start before the window, nor before the
// step whose CUDA call launched it, nor end later than the window's own
// length past its end (a GPU that runs behind its CPU, as asynchronous
// scheduling lets it, finishes the last step's work within about a step;
// a kernel of 31 years made every other family's share vanish). Real
// traces (vLLM on an H200, pkg/contract/testdata/h200) hold every kernel
// within its own step.
func (d *traceData) inWindow() error {
	if len(d.steps) == 0 {
		return nil // the shape rules fail a trace without steps
	}
	win := span{d.steps[0].lo, d.steps[0].hi}
	for _, s := range d.steps {
		win.lo, win.hi = min(win.lo, s.lo), max(win.hi, s.hi)
	}
	length := win.hi - win.lo
	launchedIn := map[int64]int{}
	for _, c := range d.calls {
		if c.hasC && c.step >= 0 {
			launchedIn[c.corr] = c.step
		}
	}
	for _, g := range d.gpu {
		end := g.ts + g.dur
		if !(g.ts >= win.lo && end <= win.hi+length) {
			return fmt.Errorf("%s %q at %.0f..%.0f µs (%.6g µs) lies outside the profile window %.0f..%.0f µs of its ProfilerSteps (GPU activity starts after its start and ends at most its length, %.0f µs, past its end)",
				g.cat, g.name, g.ts, end, g.dur, win.lo, win.hi, length)
		}
		if i, ok := launchedIn[g.corr]; ok && g.hasC && g.ts < d.steps[i].lo {
			return fmt.Errorf("%s %q at %.0f µs starts before ProfilerStep#%d (%.0f..%.0f µs), whose CUDA call launched it", g.cat, g.name, g.ts, d.steps[i].n, d.steps[i].lo, d.steps[i].hi)
		}
	}
	return nil
}

// finiteSums refuses, as a *NonFiniteError, a trace whose durations the
// rules add up (GPU activity, CUDA API calls, steps) sum to infinity.
func (d *traceData) finiteSums() error {
	var gpu, calls, steps float64
	for _, g := range d.gpu {
		gpu += g.dur
	}
	for _, c := range d.calls {
		calls += c.dur
	}
	for _, s := range d.steps {
		steps += s.hi - s.lo
	}
	for _, c := range []struct {
		what string
		sum  float64
	}{{"GPU activity durations", gpu}, {"CUDA API call durations", calls}, {"ProfilerStep durations", steps}} {
		if math.IsInf(c.sum, 0) || math.IsNaN(c.sum) {
			return &NonFiniteError{What: c.what}
		}
	}
	return nil
}

// decodeMember decodes the value of the top-level member key into v.
func decodeMember(w *traceWindow, key string, v any) error {
	raw, err := w.value()
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("parse %s: %w", key, err)
	}
	return nil
}

type eventReader struct {
	d      *traceData
	exec   *regexp.Regexp
	scopes []*regexp.Regexp
	bits   map[string]uint64 // scope bits by CPU event name
	gpuEx  []execMark        // GPU-timeline copies of execute annotations
	names  eventNames
	scan   eventScan
}

func (rd *eventReader) events(w *traceWindow) error {
	d := rd.d
	var e rawEvent
	walk := rd.scan.walk
	err := w.items("traceEvents", func() error {
		raw, err := w.scan(walk)
		if err != nil {
			return err
		}
		if err := rd.scan.decode(raw, &e, rd.names); err != nil {
			return fmt.Errorf("parse event %d: %w", d.summary.Events, err)
		}
		d.summary.Events++
		if e.Ph != "X" {
			return nil
		}
		return rd.event(&e)
	})
	if err != nil {
		return err
	}
	// pair each GPU copy with its CPU annotation: same name, in order
	byName := map[string][]*execMark{}
	for i := range d.execs {
		byName[d.execs[i].name] = append(byName[d.execs[i].name], &d.execs[i])
	}
	sort.Slice(rd.gpuEx, func(i, j int) bool { return rd.gpuEx[i].lo < rd.gpuEx[j].lo })
	used := map[string]int{}
	for _, g := range rd.gpuEx {
		if cpu := byName[g.name]; used[g.name] < len(cpu) {
			s := g.span
			cpu[used[g.name]].gpu = &s
			used[g.name]++
		}
	}
	return nil
}

func (rd *eventReader) event(e *rawEvent) error {
	d := rd.d
	if e.Dur < 0 || math.IsInf(e.Ts+e.Dur, 0) {
		return fmt.Errorf("parse event %d (%q): ts %g µs, dur %g µs: a span ends before it starts or past float64's range", d.summary.Events-1, e.Name, e.Ts, e.Dur)
	}
	sp := span{e.Ts, e.Ts + e.Dur}
	switch {
	case e.Cat == "gpu_user_annotation":
		// the GPU-timeline copy of a CPU annotation: counted once, on the CPU side
		if rd.exec.MatchString(e.Name) {
			rd.gpuEx = append(rd.gpuEx, execMark{name: e.Name, span: sp})
		}
		return nil
	case strings.HasPrefix(e.Name, "ProfilerStep#"):
		n, err := strconv.Atoi(strings.TrimPrefix(e.Name, "ProfilerStep#"))
		if err != nil {
			return fmt.Errorf("parse: step marker %q", e.Name)
		}
		d.summary.Steps = append(d.summary.Steps, n)
		d.steps = append(d.steps, stepMark{n, sp})
		return nil
	case e.Cat == "kernel" || e.Cat == "gpu_memcpy" || e.Cat == "gpu_memset":
		if e.Cat == "kernel" {
			d.summary.Kernels++
		}
		g := gpuActivity{cat: e.Cat, name: e.Name, ts: e.Ts, dur: e.Dur}
		if e.Args.Correlation != nil {
			g.corr, g.hasC = *e.Args.Correlation, true
		}
		d.gpu = append(d.gpu, g)
		return nil
	case e.Cat == "cuda_runtime" || e.Cat == "cuda_driver":
		c := apiCall{thread: string(e.Pid) + "/" + string(e.Tid), name: e.Name, ts: e.Ts, dur: e.Dur, step: -1}
		if e.Args.Correlation != nil {
			c.corr, c.hasC = *e.Args.Correlation, true
		}
		d.calls = append(d.calls, c)
		return nil
	case e.Cat == "user_annotation" && rd.exec.MatchString(e.Name):
		d.summary.Execute++
		d.execs = append(d.execs, execMark{name: e.Name, span: sp, step: -1})
	}
	if len(rd.scopes) > 0 && (e.Cat == "cpu_op" || e.Cat == "python_function" || e.Cat == "user_annotation") {
		// the one-pass reader's interned name holds its bits
		var b uint64
		var ok bool
		if e.name != nil {
			b, ok = e.name.bits, e.name.known
		} else {
			b, ok = rd.bits[e.Name]
		}
		if !ok {
			for i, re := range rd.scopes {
				if re.MatchString(e.Name) {
					b |= 1 << i
				}
			}
			if e.name != nil {
				e.name.bits, e.name.known = b, true
			} else {
				rd.bits[e.Name] = b
			}
		}
		if b != 0 {
			th := string(e.Pid) + "/" + string(e.Tid)
			d.scopes[th] = append(d.scopes[th], scopeSpan{sp, b})
		}
	}
	return nil
}

// finish orders the marks, places annotations and calls in their steps,
// counts annotations outside every step and gives each call its scopes.
func (d *traceData) finish() {
	sort.Ints(d.summary.Steps)
	sort.Slice(d.steps, func(i, j int) bool { return d.steps[i].lo < d.steps[j].lo })
	sort.Slice(d.execs, func(i, j int) bool { return d.execs[i].lo < d.execs[j].lo })
	for i := range d.execs {
		d.execs[i].step = d.stepAt(d.execs[i].lo)
		if d.execs[i].step < 0 {
			d.summary.Outside++
		}
	}
	sort.Slice(d.calls, func(i, j int) bool { return d.calls[i].ts < d.calls[j].ts })
	for i := range d.calls {
		d.calls[i].step = d.stepAt(d.calls[i].ts)
	}
	d.attachScopes()
}

// stepAt gives the index of the step whose span holds t, or -1.
func (d *traceData) stepAt(t float64) int {
	i := sort.Search(len(d.steps), func(i int) bool { return d.steps[i].hi >= t })
	if i < len(d.steps) && d.steps[i].has(t) {
		return i
	}
	return -1
}

// attachScopes gives every call the scopes of the parents on its thread
// whose spans hold its start: one sweep per thread over spans sorted by
// start, a stack of the open ones (CPU spans on one thread nest).
func (d *traceData) attachScopes() {
	byThread := map[string][]int{}
	for i, c := range d.calls {
		byThread[c.thread] = append(byThread[c.thread], i)
	}
	for th, idx := range byThread {
		sp := d.scopes[th]
		if len(sp) == 0 {
			continue
		}
		sort.Slice(sp, func(i, j int) bool { return sp[i].lo < sp[j].lo })
		type open struct {
			hi  float64
			cum uint64
		}
		var stack []open
		pop := func(t float64) {
			for len(stack) > 0 && stack[len(stack)-1].hi < t {
				stack = stack[:len(stack)-1]
			}
		}
		k := 0
		for _, i := range idx {
			t := d.calls[i].ts
			for k < len(sp) && sp[k].lo <= t {
				pop(sp[k].lo)
				cum := sp[k].bits
				if len(stack) > 0 {
					cum |= stack[len(stack)-1].cum
				}
				stack = append(stack, open{sp[k].hi, cum})
				k++
			}
			pop(t)
			if len(stack) > 0 {
				d.calls[i].scopes = stack[len(stack)-1].cum
			}
		}
	}
}
