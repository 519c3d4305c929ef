package main

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"warden/pkg/contract"
)

// Layer-2 traces, as the stand-in writes them: vLLM's POST /start_profile
// and POST /stop_profile (200, empty body), and one gzipped Chrome trace
// per TP rank (--tp) to --traces-dir per window, named as vLLM names them
// (dp0_pp0_tp<R>_dcp0_ep0_rank<R>.<ns>.pt.trace.json.gz). When the trace
// is written, and which steps it holds, is the profiler's schedule
// (profiler.go): ProfilerStep#2..#9 for a whole window, fewer for one
// stopped early. Each recorded step has its ProfilerStep#N and, for the
// active steps, one vLLM execute annotation (cat user_annotation, named by
// the step's tokens, each with its gpu_user_annotation copy on the GPU
// timeline), and the step's kernels.
//
// The kernels are real ones: h200_kernels.json holds, for each kind of
// engine step (prefill, decode, mixed), the kernels a real H200 ran for a
// Qwen3-MoE-shaped model (pkg/contract/testdata/h200), with their mean
// durations and the modules they ran under. Each is written as a kernel
// (cat kernel, with a correlation id), its launch (cuda_runtime
// cudaLaunchKernel, same correlation id) and the modules around the launch
// (python_function "nn.Module: ..."), so the family mapping's scope rules
// apply as on a real trace.
//
// With a Layer-1 stream (--layer1-dir) the steps are the stream's: the
// engine's steps cycle prefill, decode, mixed (the real traces' three
// shapes) and a window's steps are the records submitted after
// /start_profile, from the first whose active steps begin with a prefill;
// the trace clock is CLOCK_MONOTONIC plus a fixed offset, as a Kineto
// trace's clock differs from vLLM's.

// Layer-2 breaks, each a way the seed says a window is not accepted.
const (
	l2BreakMissing   = "missing"    // the last rank's trace is not written
	l2BreakCorrupt   = "corrupt"    // the trace is cut in half
	l2BreakSteps     = "steps"      // the warm-up steps are recorded too (ProfilerStep#0..#9)
	l2BreakNoKernels = "no-kernels" // no kernel events
	l2BreakExecute   = "execute"    // seven execute annotations
	// the seed's composition gates
	l2BreakUnmatched = "unmatched"      // the norm/elementwise and MoE GEMM kernels renamed: no rule matches them
	l2BreakAmbiguous = "join-ambiguous" // Layer 1 gets a second record compatible with the third active step
	l2BreakUnrepr    = "unrepresentative"
)

var layer2Breaks = []string{l2BreakMissing, l2BreakCorrupt, l2BreakSteps, l2BreakNoKernels, l2BreakExecute, l2BreakUnmatched, l2BreakAmbiguous, l2BreakUnrepr}

type layer2Config struct {
	dir   string
	tp    int
	brk   string
	shift string           // FAMILY=DELTA
	sched profilerSchedule // profiler.go
}

func (c layer2Config) validate() error {
	if c.dir == "" {
		return nil
	}
	if c.tp < 1 {
		return fmt.Errorf("--tp must be at least 1")
	}
	if c.brk != "" && !slices.Contains(layer2Breaks, c.brk) {
		return fmt.Errorf("--layer2-break %q: want one of %v", c.brk, layer2Breaks)
	}
	if c.shift != "" {
		if _, _, err := parseShift(c.shift); err != nil {
			return err
		}
	}
	return c.sched.validate()
}

func parseShift(s string) (string, float64, error) {
	fam, d, ok := strings.Cut(s, "=")
	x, err := strconv.ParseFloat(d, 64)
	if !ok || err != nil || x <= 0 || x >= 0.5 {
		return "", 0, fmt.Errorf("--layer2-shift %q: want FAMILY=DELTA with 0 < DELTA < 0.5", s)
	}
	if _, ok := learned().families[fam]; !ok {
		return "", 0, fmt.Errorf("--layer2-shift %q: no learned kernel has family %s", s, fam)
	}
	return fam, x, nil
}

//go:embed h200_kernels.json
var h200Kernels []byte

type learnedKernel struct {
	name    string
	modules []string
	us      float64
	family  string
}

type learnedSet struct {
	kinds    map[string][]learnedKernel
	families map[string]bool
}

var learnedOnce = sync.OnceValue(func() learnedSet {
	var f struct {
		Names []string           `json:"names"`
		Kinds map[string][][]any `json:"kinds"`
	}
	if err := json.Unmarshal(h200Kernels, &f); err != nil {
		panic("h200_kernels.json: " + err.Error())
	}
	out := learnedSet{kinds: map[string][]learnedKernel{}, families: map[string]bool{}}
	for kind, ks := range f.Kinds {
		for _, k := range ks {
			var mods []string
			ms, _ := k[1].([]any) // null: no module scope
			for _, m := range ms {
				mods = append(mods, m.(string))
			}
			lk := learnedKernel{name: f.Names[int(k[0].(float64))], modules: mods, us: k[2].(float64), family: k[3].(string)}
			out.kinds[kind] = append(out.kinds[kind], lk)
			out.families[lk.family] = true
		}
	}
	return out
})

func learned() learnedSet { return learnedOnce() }

// stepShapes: the real traces' engine steps, (context requests, context
// tokens, generation requests, generation tokens), in their order.
var stepShapes = [][4]int{{4, 1024, 0, 0}, {0, 0, 64, 64}, {2, 256, 6, 6}}

func shapeKind(sh [4]int) string {
	switch {
	case sh[2] == 0:
		return "prefill"
	case sh[0] == 0:
		return "decode"
	}
	return "mixed"
}

// l1Shapes gives the Layer-1 records their shapes and
// keeps the recent ones for the profiler. Guarded by the writer's mutex.
type l1Shapes struct {
	recent    []contract.Layer1Record
	profiling bool // a window is open
	unrepr    bool // --layer2-break unrepresentative: steps in a window are all prefill (with vary: 8-40 decodes, a stall)
	// vary (--layer1-vary) draws each step's shape: 200-256 decoding
	// requests and 0-4 prefills of 128-512 tokens each, as the steps of a
	// saturated short-prompt pattern (seed 002's P01) vary; nil: the
	// cycle of the real traces' three shapes.
	vary *rand.Rand
}

const keepRecent = 4096

func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return time.Now().UnixNano()
	}
	return ts.Nano()
}

// shape sets a record's tokens (the cycle of the real traces' three
// shapes; all prefill inside a window under the unrepresentative break)
// and its runtime mode (NONE: eager), and keeps it for the profiler. The
// record's CLOCK_MONOTONIC times are the writer's (layer1.go).
func (s *l1Shapes) shape(r *contract.Layer1Record) {
	var sh [4]int
	switch {
	case s.unrepr && s.profiling && s.vary != nil:
		// a stall during the window only: few requests decode
		sh = s.varied()
		sh[2] = 8 + s.vary.IntN(33)
		sh[3] = sh[2]
	case s.unrepr && s.profiling:
		sh = stepShapes[0]
	case s.vary != nil:
		sh = s.varied()
	default:
		sh = stepShapes[r.Step%3]
	}
	r.NumPrefillReqs, r.PrefillTokens, r.NumDecodeReqs, r.DecodeTokens = int64(sh[0]), int64(sh[1]), int64(sh[2]), int64(sh[3])
	r.NumScheduledReqs = r.NumPrefillReqs + r.NumDecodeReqs
	r.UnpaddedTokens, r.BucketTokens = r.PrefillTokens+r.DecodeTokens, r.PrefillTokens+r.DecodeTokens
	r.RuntimeMode, r.CUDAGraphHit = "NONE", false
	s.recent = append(s.recent, *r)
	if len(s.recent) > keepRecent {
		s.recent = s.recent[len(s.recent)-keepRecent:]
	}
}

// varied draws a step's shape (--layer1-vary).
func (s *l1Shapes) varied() [4]int {
	decodes, prefills := 200+s.vary.IntN(57), s.vary.IntN(5)
	tokens := 0
	for range prefills {
		tokens += 128 + s.vary.IntN(385)
	}
	return [4]int{prefills, tokens, decodes, decodes}
}

// windowSteps gives a window's first n steps (the warm-up, then the
// active ones): n consecutive Layer-1 records submitted after
// /start_profile, from the first whose active steps begin with a prefill
// (so that every window has the same mix of the three shapes), waiting for
// the engine to make them; without a stream, n of the profiler's own, a
// step's length apart. Called with p.mu held.
func (p *profiler) windowSteps(n int) ([]contract.Layer1Record, error) {
	if p.l1 == nil {
		var out []contract.Layer1Record
		step := p.cfg.sched.stepDuration().Nanoseconds()
		for i := range n {
			sh := stepShapes[(i+1)%3]
			out = append(out, contract.Layer1Record{Step: int64(i), SubmitMonoNS: p.startNS + int64(i)*step,
				PrefillTokens: int64(sh[1]), DecodeTokens: int64(sh[3]), NumPrefillReqs: int64(sh[0]), NumDecodeReqs: int64(sh[2])})
		}
		return out, nil
	}
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		p.l1.mu.Lock()
		var got []contract.Layer1Record
		for _, r := range p.l1.l2.recent {
			// the window starts on a step whose active steps begin with
			// a prefill: every window has the same mix of shapes
			if r.SubmitMonoNS >= p.startNS && len(got) < n && (len(got) > 0 || r.Step%3 == 1 || p.l1.l2.vary != nil) {
				got = append(got, r)
			}
		}
		if len(got) == n {
			p.l1.l2.profiling = false
			if p.cfg.brk == l2BreakAmbiguous && n > 4 {
				p.l1.inject(got[4]) // the third active step, again, 1 ms later
			}
			p.l1.mu.Unlock()
			return got, nil
		}
		p.l1.mu.Unlock()
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("traces: the engine made %d of the window's %d steps in 10 s", len(got), n)
		}
		<-tick.C
	}
}

// inject appends a copy of r, submitted 1 ms later, as the next record
// (--layer2-break join-ambiguous). Called with w.mu held.
func (w *layer1Writer) inject(r contract.Layer1Record) {
	r.Step = w.next
	w.next++
	r.SubmitMonoNS += 1_000_000
	r.CompleteMonoNS += 1_000_000
	b, _ := json.Marshal(r)
	w.buf.Write(append(b, '\n'))
	w.encoded++
	w.pending++
	w.last = r.Step
}

type traceEvent struct {
	Ph   string         `json:"ph"`
	Cat  string         `json:"cat"`
	Name string         `json:"name"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Ts   float64        `json:"ts"`
	Dur  float64        `json:"dur"`
	Args map[string]any `json:"args,omitempty"`
}

// traceClockUS: a Kineto trace's clock is not vLLM's monotonic one; the
// stand-in's is CLOCK_MONOTONIC (µs) plus this.
const traceClockUS = 1_700_000_000_000

// trace renders one rank's window: ProfilerStep#first..#last of steps, as
// the torch profiler numbers a window's steps from the /start_profile (the
// warm-up steps 0..warmup-1 are not recorded), an execute annotation on
// each active step.
func (p *profiler) trace(rank, first, last int, steps []contract.Layer1Record) ([]byte, error) {
	warmup, execs := p.cfg.sched.warmup, last-first+1
	switch p.cfg.brk {
	case l2BreakSteps:
		first = 0
	case l2BreakExecute:
		execs--
	}
	if last >= len(steps) {
		return nil, fmt.Errorf("traces: a window of %d steps has %d records", last+1, len(steps))
	}
	var ev []traceEvent
	t := &traceWriter{ev: &ev, rank: rank, brk: p.cfg.brk}
	var active [][]learnedKernel
	for s := first; s <= last; s++ {
		sh := [4]int{int(steps[s].NumPrefillReqs), int(steps[s].PrefillTokens), int(steps[s].NumDecodeReqs), int(steps[s].DecodeTokens)}
		ks := learned().kinds[shapeKind(sh)]
		if p.cfg.brk == l2BreakNoKernels {
			ks = nil
		}
		active = append(active, append([]learnedKernel(nil), ks...))
	}
	if p.cfg.shift != "" {
		fam, delta, _ := parseShift(p.cfg.shift)
		addShare(active, fam, delta)
	}
	for i, s := 0, first; s <= last; i, s = i+1, s+1 {
		t.step(s, steps[s], s >= warmup && s-warmup < execs, active[i])
	}
	// as Kineto does, baseTimeNanoseconds + ts*1000 is wall-clock time
	base := time.Now().UnixNano() - monoNow() - traceClockUS*1000
	doc := map[string]any{
		"baseTimeNanoseconds": base,
		"schemaVersion":       1,
		"deviceProperties":    []any{map[string]any{"id": rank, "name": "STAND-IN (no GPU; kernels learned from an NVIDIA H200)"}},
		"distributedInfo":     map[string]any{"backend": "nccl", "rank": rank, "world_size": p.cfg.tp},
		"traceEvents":         ev,
	}
	js, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	if p.cfg.brk == l2BreakCorrupt {
		js = js[:len(js)/2]
	}
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write(js); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// addShare adds one kernel of family fam to the window's last step, of the
// duration that raises fam's window share by delta: with T the window's
// kernel time and s fam's share, D = delta*T/(1-s-delta).
func addShare(steps [][]learnedKernel, fam string, delta float64) {
	total, of := 0.0, 0.0
	var like *learnedKernel
	for _, ks := range steps {
		for i, k := range ks {
			total += k.us
			if k.family == fam {
				of += k.us
				if like == nil || k.us > like.us {
					like = &ks[i]
				}
			}
		}
	}
	if like == nil || total == 0 || len(steps) == 0 {
		return
	}
	extra := *like
	extra.us = delta * total / (1 - of/total - delta)
	steps[len(steps)-1] = append(steps[len(steps)-1], extra)
}

// traceWriter appends one step's events.
type traceWriter struct {
	ev   *[]traceEvent
	rank int
	brk  string
	corr int
	gpu  float64 // where the GPU timeline is
}

func (t *traceWriter) add(e traceEvent) { *t.ev = append(*t.ev, e) }

func (t *traceWriter) step(n int, rec contract.Layer1Record, execute bool, ks []learnedKernel) {
	ts := float64(rec.SubmitMonoNS)/1000 + traceClockUS + 100 // the annotation starts 100 µs after the submit
	cpu := ts + 10
	name := fmt.Sprintf("execute_context_%d(%d)_generation_%d(%d)", rec.NumPrefillReqs, rec.PrefillTokens, rec.NumDecodeReqs, rec.DecodeTokens)
	if t.gpu < ts {
		t.gpu = ts + 20
	}
	gpuStart := t.gpu
	var body []traceEvent
	for i, k := range ks {
		t.corr++
		for _, m := range k.modules {
			body = append(body, traceEvent{Ph: "X", Cat: "python_function", Name: m, Pid: 1, Tid: 1, Ts: cpu, Dur: 8})
		}
		body = append(body, traceEvent{Ph: "X", Cat: "cuda_runtime", Name: "cudaLaunchKernel", Pid: 1, Tid: 1, Ts: cpu + 1, Dur: 5,
			Args: map[string]any{"correlation": t.corr, "cbid": 211}})
		kname := k.name
		if t.brk == l2BreakUnmatched && (k.family == "norm_elementwise" || k.family == "moe_gemm") {
			kname = fmt.Sprintf("standin_renamed_kernel_%d", i)
		}
		body = append(body, traceEvent{Ph: "X", Cat: "kernel", Name: kname, Pid: 0, Tid: 7, Ts: t.gpu, Dur: k.us,
			Args: map[string]any{"correlation": t.corr, "device": t.rank, "stream": 7}})
		t.gpu += k.us + 1
		cpu += 10
	}
	end := max(cpu, ts+50) + 10
	t.add(traceEvent{Ph: "X", Cat: "user_annotation", Name: fmt.Sprintf("ProfilerStep#%d", n), Pid: 1, Tid: 1, Ts: ts - 5, Dur: end - ts + 10})
	t.add(traceEvent{Ph: "X", Cat: "gpu_user_annotation", Name: fmt.Sprintf("ProfilerStep#%d", n), Pid: 0, Tid: 7, Ts: gpuStart, Dur: 1})
	if execute {
		t.add(traceEvent{Ph: "X", Cat: "user_annotation", Name: name, Pid: 1, Tid: 1, Ts: ts, Dur: end - ts})
		t.add(traceEvent{Ph: "X", Cat: "gpu_user_annotation", Name: name, Pid: 0, Tid: 7, Ts: gpuStart, Dur: max(t.gpu-gpuStart, 1)})
	}
	*t.ev = append(*t.ev, body...)
}
