package contract

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// trace writes a gzipped Chrome trace of one window.
type trace struct {
	rank      int // -1: no distributedInfo
	steps     []int
	execute   int
	kernels   int
	corrupt   bool
	padEvents int // extra cpu_op events, for size
	window    int // which profile window: its steps start window*1e6 µs later
}

func (tr trace) bytes() []byte {
	var ev []map[string]any
	for i, s := range tr.steps {
		ts := float64(100_000 + i*10000 + tr.window*1_000_000)
		ev = append(ev, map[string]any{"ph": "X", "cat": "user_annotation", "name": fmt.Sprintf("ProfilerStep#%d", s), "ts": ts, "dur": 9000.0, "pid": 1, "tid": 1})
		// Kineto's GPU-timeline copy of the annotation: not a second step
		ev = append(ev, map[string]any{"ph": "X", "cat": "gpu_user_annotation", "name": fmt.Sprintf("ProfilerStep#%d", s), "ts": ts + 30, "dur": 8000.0, "pid": 0, "tid": 7})
		if i < tr.execute {
			ev = append(ev, map[string]any{"ph": "X", "cat": "user_annotation", "name": "execute_context_1(512)_generation_7(7)", "ts": ts + 10, "dur": 8000.0, "pid": 1, "tid": 1})
			ev = append(ev, map[string]any{"ph": "X", "cat": "gpu_user_annotation", "name": "execute_context_1(512)_generation_7(7)", "ts": ts + 20, "dur": 8000.0, "pid": 0, "tid": 7})
		}
		for k := 0; k < tr.kernels; k++ {
			ev = append(ev, map[string]any{"ph": "X", "cat": "kernel", "name": "void flash_fwd_kernel<...>", "ts": ts + 100 + float64(k), "dur": 1.0, "pid": 0, "tid": 7, "args": map[string]any{"correlation": k}})
		}
	}
	for i := 0; i < tr.execute-len(tr.steps); i++ {
		ev = append(ev, map[string]any{"ph": "X", "cat": "user_annotation", "name": "execute_context_0(0)_generation_7(7)", "ts": 1e9, "dur": 1.0})
	}
	for i := 0; i < tr.padEvents; i++ {
		ev = append(ev, map[string]any{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": float64(i), "dur": 3.5, "pid": 1, "tid": 1,
			"args": map[string]any{"External id": i, "Input Dims": [][]int{{4096, 4096}, {4096, 128}}, "Input type": []string{"c10::BFloat16", "c10::BFloat16"}}})
	}
	doc := map[string]any{"schemaVersion": 1, "deviceProperties": []any{map[string]any{"id": 0, "name": "NVIDIA H20"}}, "traceEvents": ev, "displayTimeUnit": "ms"}
	if tr.rank >= 0 {
		doc["distributedInfo"] = map[string]any{"backend": "nccl", "rank": tr.rank, "world_size": 2}
	}
	js, _ := json.Marshal(doc)
	if tr.corrupt {
		js = js[:len(js)/2]
	}
	return gzipBytes(js)
}

func good(rank int) trace {
	return trace{rank: rank, steps: []int{2, 3, 4, 5, 6, 7, 8, 9}, execute: 8, kernels: 3}
}

func goodW(rank, window int) trace {
	t := good(rank)
	t.window = window
	return t
}

// writeL1For writes, in dir, a Layer-1 stream and a phase file that match
// the synthetic traces of windows 0..n-1 (monotonic ns = trace µs * 1000):
// a clean segment of ten steps shaped like the annotations, then per
// window two warm-up steps and the eight active ones.
func writeL1For(t *testing.T, dir string, n int) (string, string) {
	t.Helper()
	var l1, ph strings.Builder
	step := 0
	rec := func(ns int64) {
		fmt.Fprintf(&l1, `{"schema":1,"step":%d,"submit_mono_ns":%d,"complete_mono_ns":%d,"model_executed":true,"num_prefill_reqs":1,"num_decode_reqs":7,"prefill_tokens":512,"decode_tokens":7,"runtime_mode":"NONE"}`+"\n", step, ns, ns+1000)
		step++
	}
	fmt.Fprintf(&ph, `{"phase":"clean","t":"x","mono_ns":%d,"index":3}`+"\n", 0)
	for i := range 10 {
		rec(int64(100_000 + i*20_000))
	}
	for w := range n {
		base := int64(w) * 1_000_000_000
		fmt.Fprintf(&ph, `{"phase":"profile","t":"x","mono_ns":%d,"index":%d}`+"\n", base+50_000_000, w+1)
		rec(base + 60_010_000)
		rec(base + 80_010_000)
		for i := range 8 {
			rec(base + int64(100_000+i*10000+10)*1000)
		}
		fmt.Fprintf(&ph, `{"phase":"recovery","t":"x","mono_ns":%d,"index":%d}`+"\n", base+900_000_000, w+1)
	}
	fmt.Fprintf(&ph, `{"phase":"done","t":"x","mono_ns":%d}`+"\n", int64(n)*1_000_000_000)
	a, b := filepath.Join(dir, "layer1.jsonl"), filepath.Join(dir, "phases.jsonl")
	os.WriteFile(a, []byte(l1.String()), 0o644)
	os.WriteFile(b, []byte(ph.String()), 0o644)
	return a, b
}

func TestLayer2(t *testing.T) {
	cases := []struct {
		name    string
		tp      int
		files   map[string]trace
		raw     map[string][]byte
		verdict string
		detail  string
	}{
		{name: "TP1 two windows", tp: 1, files: map[string]trace{"w1.pt.trace.json.gz": goodW(-1, 0), "w2.pt.trace.json.gz": goodW(0, 1)}, verdict: "pass"},
		{name: "TP2 two windows by distributedInfo", tp: 2, files: map[string]trace{"a.pt.trace.json.gz": goodW(0, 0), "b.pt.trace.json.gz": goodW(1, 0), "c.pt.trace.json.gz": goodW(0, 1), "d.pt.trace.json.gz": goodW(1, 1)}, verdict: "pass"},
		{name: "TP2 ranks by name", tp: 2, files: map[string]trace{"x_rank0.1.pt.trace.json.gz": goodW(-1, 0), "x_rank1.1.pt.trace.json.gz": goodW(-1, 0), "x_rank0.2.pt.trace.json.gz": goodW(-1, 1), "x_rank1.2.pt.trace.json.gz": goodW(-1, 1)}, verdict: "pass"},
		{name: "TP2 missing rank", tp: 2, files: map[string]trace{"a.pt.trace.json.gz": good(0), "c.pt.trace.json.gz": good(0)}, verdict: "fail", detail: "rank 1: no trace"},
		{name: "missing window", tp: 1, files: map[string]trace{"w1.pt.trace.json.gz": good(0)}, verdict: "fail", detail: "1 trace(s), want 2"},
		{name: "no traces", tp: 1, verdict: "fail", detail: "no trace files"},
		{name: "corrupt json", tp: 1, files: map[string]trace{"w1.pt.trace.json.gz": good(0), "w2.pt.trace.json.gz": {rank: 0, steps: []int{2, 3, 4, 5, 6, 7, 8, 9}, execute: 8, kernels: 1, corrupt: true}}, verdict: "fail", detail: "parse"},
		{name: "not gzip", tp: 1, files: map[string]trace{"w1.pt.trace.json.gz": good(0)}, raw: map[string][]byte{"w2.pt.trace.json.gz": []byte("{}")}, verdict: "fail", detail: "gunzip"},
		{name: "warm-up steps recorded", tp: 1, files: map[string]trace{"w1.pt.trace.json.gz": good(0), "w2.pt.trace.json.gz": {rank: 0, steps: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, execute: 8, kernels: 1}}, verdict: "fail", detail: "ProfilerSteps"},
		{name: "seven execute annotations", tp: 1, files: map[string]trace{"w1.pt.trace.json.gz": good(0), "w2.pt.trace.json.gz": {rank: 0, steps: []int{2, 3, 4, 5, 6, 7, 8, 9}, execute: 7, kernels: 1}}, verdict: "fail", detail: "7 execute annotations"},
		{name: "execute outside steps", tp: 1, files: map[string]trace{"w1.pt.trace.json.gz": good(0), "w2.pt.trace.json.gz": {rank: 0, steps: []int{2, 3, 4, 5, 6, 7, 8}, execute: 8, kernels: 1}}, verdict: "fail", detail: "outside every ProfilerStep"},
		{name: "no kernels", tp: 1, files: map[string]trace{"w1.pt.trace.json.gz": good(0), "w2.pt.trace.json.gz": {rank: 0, steps: []int{2, 3, 4, 5, 6, 7, 8, 9}, execute: 8}}, verdict: "fail", detail: "no kernel events"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for n, tr := range tc.files {
				os.WriteFile(filepath.Join(dir, n), tr.bytes(), 0o644)
			}
			for n, b := range tc.raw {
				os.WriteFile(filepath.Join(dir, n), b, 0o644)
			}
			o := DefaultLayer2()
			o.TP = tc.tp
			o.Layer1, o.Phases = writeL1For(t, t.TempDir(), 2)
			r := Layer2Dir(dir, o)
			if r.Verdict != tc.verdict || !strings.Contains(r.Detail, tc.detail) {
				t.Fatalf("got %s %q, want %s containing %q", r.Verdict, r.Detail, tc.verdict, tc.detail)
			}
			if !strings.Contains(r.Detail, "mapping opfamily/v1 sha256:") {
				t.Fatalf("the verdict does not name the mapping: %q", r.Detail)
			}
			if (r.Verdict != "pass") != (r.Class == "profile-artifact") {
				t.Fatalf("class %q for verdict %s", r.Class, r.Verdict)
			}
		})
	}
	o := DefaultLayer2()
	if r := Layer2Dir(filepath.Join(t.TempDir(), "absent"), o); r.Verdict != "error" || r.Class != "profile-artifact" {
		t.Fatalf("absent directory: %+v", r)
	}
}
