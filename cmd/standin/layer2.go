package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
)

// Layer-2 traces, as the stand-in writes them: vLLM's POST /start_profile
// and POST /stop_profile (200, empty body), and one gzipped Chrome trace
// per TP rank (--tp) to --traces-dir per window, named as vLLM names them
// (dp0_pp0_tp<R>_dcp0_ep0_rank<R>.<ns>.pt.trace.json.gz) and holding what
// a Kineto trace holds for the recorded steps: ProfilerStep#N and one vLLM
// execute annotation per step (cat user_annotation, each with its
// gpu_user_annotation copy on the GPU timeline), a few kernel events per
// step (cat kernel), and "distributedInfo": {"rank": R}. When the trace is
// written, and which steps it holds, is the profiler's schedule
// (profiler.go). Nothing is profiled.

// Layer-2 breaks, each a way the seed says a window is not accepted.
const (
	l2BreakMissing   = "missing"    // the last rank's trace is not written
	l2BreakCorrupt   = "corrupt"    // the trace is cut in half
	l2BreakSteps     = "steps"      // the warm-up steps are recorded too (ProfilerStep#0..#9)
	l2BreakNoKernels = "no-kernels" // no kernel events
	l2BreakExecute   = "execute"    // seven execute annotations
)

var layer2Breaks = []string{l2BreakMissing, l2BreakCorrupt, l2BreakSteps, l2BreakNoKernels, l2BreakExecute}

type layer2Config struct {
	dir   string
	tp    int
	brk   string
	sched profilerSchedule // profiler.go
}

func (c layer2Config) validate() error {
	if c.dir == "" {
		return nil
	}
	if c.tp < 1 {
		return fmt.Errorf("--tp must be at least 1")
	}
	if c.brk != "" && !contains(layer2Breaks, c.brk) {
		return fmt.Errorf("--layer2-break %q: want one of %v", c.brk, layer2Breaks)
	}
	return c.sched.validate()
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

// trace renders one rank's window: ProfilerStep#first..#last, as the
// torch profiler numbers a window's steps from the /start_profile (the
// warm-up steps 0..warmup-1 are not recorded).
func (p *profiler) trace(rank, first, last int) ([]byte, error) {
	execs, kernels := last-first+1, 3
	switch p.cfg.brk {
	case l2BreakSteps:
		first = 0
	case l2BreakNoKernels:
		kernels = 0
	case l2BreakExecute:
		execs--
	}
	warmup := p.cfg.sched.warmup
	t0 := float64(p.start.UnixMicro())
	step := p.cfg.sched.stepDuration().Seconds() * 1e6
	var ev []traceEvent
	corr := 0
	for s := first; s <= last; s++ {
		ts := t0 + float64(s)*step
		ev = append(ev, traceEvent{Ph: "X", Cat: "user_annotation", Name: fmt.Sprintf("ProfilerStep#%d", s), Pid: 1, Tid: 1, Ts: ts, Dur: 0.9 * step},
			traceEvent{Ph: "X", Cat: "gpu_user_annotation", Name: fmt.Sprintf("ProfilerStep#%d", s), Pid: 0, Tid: 7, Ts: ts + 0.04*step, Dur: 0.82 * step})
		if s >= warmup && s-warmup < execs {
			ev = append(ev, traceEvent{Ph: "X", Cat: "user_annotation", Name: "execute_context_0(0)_generation_2(2)", Pid: 1, Tid: 1, Ts: ts + 0.005*step, Dur: 0.85 * step},
				traceEvent{Ph: "X", Cat: "gpu_user_annotation", Name: "execute_context_0(0)_generation_2(2)", Pid: 0, Tid: 7, Ts: ts + 0.05*step, Dur: 0.8 * step})
		}
		for k := range kernels {
			corr++
			ev = append(ev, traceEvent{Ph: "X", Cat: "kernel", Name: "standin_placeholder_kernel", Pid: 0, Tid: 7, Ts: ts + 0.06*step + float64(k)*0.1*step, Dur: 0.09 * step,
				Args: map[string]any{"correlation": corr, "device": rank, "stream": 7}})
		}
	}
	doc := map[string]any{
		"schemaVersion":    1,
		"deviceProperties": []any{map[string]any{"id": rank, "name": "STAND-IN (no GPU)"}},
		"distributedInfo":  map[string]any{"backend": "nccl", "rank": rank, "world_size": p.cfg.tp},
		"traceEvents":      ev,
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
