package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"warden/pkg/atomicfile"
)

// Layer-2 traces, as the stand-in writes them: vLLM's POST /start_profile
// and POST /stop_profile (200, empty body). Between them the profiler
// "runs" a wait=0, warm-up=2, active=8 schedule; /stop_profile writes one
// gzipped Chrome trace per TP rank (--tp) to --traces-dir, named like the
// torch tensorboard handler's files and holding what a Kineto trace holds
// for the active steps only: ProfilerStep#2..#9 and one vLLM execute
// annotation per step (cat user_annotation, each with its
// gpu_user_annotation copy on the GPU timeline), a few kernel events per step
// (cat kernel), and "distributedInfo": {"rank": R}. Nothing is profiled.

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
	dir string
	tp  int
	brk string
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
	return nil
}

// profiler remembers whether a window is open and writes its traces.
type profiler struct {
	cfg    layer2Config
	mu     sync.Mutex // guards the fields below; one window at a time
	open   bool
	start  time.Time
	window int
}

// startProfile answers vLLM's POST /start_profile.
func (a *api) startProfile(w http.ResponseWriter, _ *http.Request) {
	if p := a.profiler; p != nil {
		p.mu.Lock()
		p.open, p.start = true, time.Now()
		p.mu.Unlock()
	}
	w.WriteHeader(http.StatusOK)
}

// stopProfile answers vLLM's POST /stop_profile, writing the window's
// traces before it returns (vLLM's call is synchronous too).
func (a *api) stopProfile(w http.ResponseWriter, _ *http.Request) {
	if p := a.profiler; p != nil {
		if err := p.stop(); err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (p *profiler) stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.open || p.cfg.dir == "" {
		p.open = false
		return nil
	}
	p.open = false
	p.window++
	if err := os.MkdirAll(p.cfg.dir, 0o755); err != nil {
		return fmt.Errorf("traces: %w", err)
	}
	for r := range p.cfg.tp {
		if p.cfg.brk == l2BreakMissing && r == p.cfg.tp-1 {
			continue
		}
		b, err := p.trace(r)
		if err != nil {
			return err
		}
		name := fmt.Sprintf("standin_rank%d.%d.%d.pt.trace.json.gz", r, p.window, time.Now().UnixNano())
		if err := atomicfile.WriteFile(filepath.Join(p.cfg.dir, name), b, 0o644); err != nil {
			return fmt.Errorf("traces: %w", err)
		}
	}
	return nil
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

// trace renders one rank's window.
func (p *profiler) trace(rank int) ([]byte, error) {
	first, execs, kernels := 2, 8, 3
	switch p.cfg.brk {
	case l2BreakSteps:
		first = 0
	case l2BreakNoKernels:
		kernels = 0
	case l2BreakExecute:
		execs = 7
	}
	t0 := float64(p.start.UnixMicro())
	var ev []traceEvent
	corr := 0
	for s := first; s <= 9; s++ {
		ts := t0 + float64(s)*1000
		ev = append(ev, traceEvent{Ph: "X", Cat: "user_annotation", Name: fmt.Sprintf("ProfilerStep#%d", s), Pid: 1, Tid: 1, Ts: ts, Dur: 900},
			traceEvent{Ph: "X", Cat: "gpu_user_annotation", Name: fmt.Sprintf("ProfilerStep#%d", s), Pid: 0, Tid: 7, Ts: ts + 40, Dur: 820})
		if s >= 2 && s-2 < execs {
			ev = append(ev, traceEvent{Ph: "X", Cat: "user_annotation", Name: "execute_context_0(0)_generation_2(2)", Pid: 1, Tid: 1, Ts: ts + 5, Dur: 850},
				traceEvent{Ph: "X", Cat: "gpu_user_annotation", Name: "execute_context_0(0)_generation_2(2)", Pid: 0, Tid: 7, Ts: ts + 50, Dur: 800})
		}
		for k := range kernels {
			corr++
			ev = append(ev, traceEvent{Ph: "X", Cat: "kernel", Name: "standin_placeholder_kernel", Pid: 0, Tid: 7, Ts: ts + 60 + float64(k)*100, Dur: 90,
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
