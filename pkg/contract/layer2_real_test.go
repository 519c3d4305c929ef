package contract

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// The real H200 traces of testdata/h200 (eager: the shared traces; graph:
// make_graph_traces.py, the decode step replayed from a CUDA graph) and a
// Layer-1 stream and phase file made from their execute annotations by
// makeL1 below. WARDEN_WRITE_TESTDATA=1 writes them; TestL1TestdataIsMade
// checks that the files are what makeL1 makes.

const monoShift = 5_000_000_000_000_000 // trace µs*1000 minus this is the stand-in monotonic clock

// l2TraceLine is one Layer-1 record the generator writes (schema-v1 names).
type l2TraceLine struct {
	Schema        int    `json:"schema"`
	Step          int64  `json:"step"`
	Submit        int64  `json:"submit_mono_ns"`
	Complete      int64  `json:"complete_mono_ns"`
	ModelExecuted bool   `json:"model_executed"`
	Scheduled     int64  `json:"num_scheduled_reqs"`
	PrefillReqs   int64  `json:"num_prefill_reqs"`
	DecodeReqs    int64  `json:"num_decode_reqs"`
	PrefillTok    int64  `json:"prefill_tokens"`
	DecodeTok     int64  `json:"decode_tokens"`
	Mode          string `json:"runtime_mode"`
	PrefixQueries int64  `json:"prefix_cache_queries"`
	PrefixHits    int64  `json:"prefix_cache_hits"`
}

// the three engine steps of make_h200_traces.py, in its order
var stepShapes = [][4]int64{{4, 1024, 0, 0}, {0, 0, 64, 64}, {2, 256, 6, 6}}

func shapeLine(step, submit int64, sh [4]int64, graphDecode bool) l2TraceLine {
	mode := "NONE"
	if graphDecode && sh[0] == 0 {
		mode = "FULL"
	}
	return l2TraceLine{Schema: 1, Step: step, Submit: submit, Complete: submit + 2_000_000, ModelExecuted: true, Scheduled: sh[0] + sh[2],
		PrefillReqs: sh[0], DecodeReqs: sh[2], PrefillTok: sh[1], DecodeTok: sh[3], Mode: mode}
}

// makeL1 builds, from the windows' execute annotations (trace clock µs),
// a Layer-1 stream (monotonic ns = µs*1000 - monoShift - 150 µs: each step
// submitted 150 µs before its annotation starts) and a phase file (its
// wall-clock times the trace's: monotonic + monoShift +
// baseTimeNanoseconds): 60
// clean steps 20 ms apart cycling through the three shapes before the
// first window, each window's two warm-up steps 20 ms before its first
// annotation, its eight active steps, and five recovery steps after it.
func makeL1(t testing.TB, dir string, graphDecode bool) (stream, phases []byte) {
	t.Helper()
	return makeL1With(t, dir, graphDecode, 60, func(i int) [4]int64 { return stepShapes[i%3] })
}

// makeL1With is makeL1 with a clean segment of cleanN steps, step i of
// shape cleanShape(i).
func makeL1With(t testing.TB, dir string, graphDecode bool, cleanN int, cleanShape func(int) [4]int64) (stream, phases []byte) {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(dir, "*.pt.trace.json.gz"))
	type win struct{ execs []execMark }
	var wins []win
	var base int64
	for _, p := range paths {
		d, err := readTraceFile(p, DefaultLayer2().ExecuteAnnotate, nil)
		if err != nil {
			t.Fatal(err)
		}
		wins = append(wins, win{d.execs})
		base = d.baseNS
	}
	sort.Slice(wins, func(i, j int) bool { return wins[i].execs[0].lo < wins[j].execs[0].lo })
	var lines []l2TraceLine
	var ph []string
	step := int64(0)
	add := func(submit int64, sh [4]int64) {
		lines = append(lines, shapeLine(step, submit, sh, graphDecode))
		step++
	}
	phase := func(name string, index int, mono int64) {
		// wall-clock time is the trace's: baseTimeNanoseconds + µs*1000
		wall := time.Unix(0, mono+monoShift+base).UTC().Format(time.RFC3339Nano)
		ph = append(ph, fmt.Sprintf(`{"phase":%q,"t":%q,"mono_ns":%d,"index":%d}`, name, wall, mono, index))
	}
	mono := func(us float64) int64 { return int64(math.Round(us*1000)) - monoShift - 150_000 }
	first := mono(wins[0].execs[0].lo)
	cleanStart := first - 2*20_000_000 - int64(cleanN+1)*20_000_000
	phase("warmup", 0, cleanStart-1_000_000_000)
	phase("clean", 3, cleanStart-1_000_000)
	for i := range cleanN {
		add(cleanStart+int64(i)*20_000_000, cleanShape(i))
	}
	for k, w := range wins {
		a0 := mono(w.execs[0].lo)
		phase("profile", k+1, a0-2*20_000_000-1_000_000)
		add(a0-2*20_000_000, stepShapes[0])
		add(a0-20_000_000, stepShapes[1])
		last := a0
		for _, ex := range w.execs {
			c, ct, g, gt, err := parseAnnotation(ex.name)
			if err != nil {
				t.Fatal(err)
			}
			last = mono(ex.lo)
			add(last, [4]int64{c, ct, g, gt})
		}
		end := mono(w.execs[len(w.execs)-1].hi)
		phase("recovery", k+1, end+1_000_000)
		for i := range 5 {
			add(end+int64(i+1)*20_000_000, stepShapes[i%3])
		}
	}
	phase("drain", 0, lines[len(lines)-1].Submit+1_000_000)
	phase("done", 0, lines[len(lines)-1].Submit+2_000_000)
	var b bytes.Buffer
	for _, l := range lines {
		js, _ := json.Marshal(l)
		b.Write(append(js, '\n'))
	}
	return b.Bytes(), []byte(strings.Join(ph, "\n") + "\n")
}

var realSets = []struct {
	name  string
	graph bool
}{{"eager", false}, {"graph", true}}

func TestL1TestdataIsMade(t *testing.T) {
	for _, s := range realSets {
		dir := filepath.Join("testdata", "h200", s.name)
		stream, phases := makeL1(t, dir, s.graph)
		if os.Getenv("WARDEN_WRITE_TESTDATA") == "1" {
			os.WriteFile(filepath.Join(dir, "layer1.jsonl"), stream, 0o644)
			os.WriteFile(filepath.Join(dir, "phases.jsonl"), phases, 0o644)
		}
		for name, want := range map[string][]byte{"layer1.jsonl": stream, "phases.jsonl": phases} {
			got, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s/%s is not what makeL1 makes (err %v); WARDEN_WRITE_TESTDATA=1 rewrites it", s.name, name, err)
			}
		}
	}
}

func realOpts(set string) Layer2Options {
	o := DefaultLayer2()
	dir := filepath.Join("testdata", "h200", set)
	o.Layer1, o.Phases = filepath.Join(dir, "layer1.jsonl"), filepath.Join(dir, "phases.jsonl")
	return o
}

func TestLayer2RealTraces(t *testing.T) {
	for _, s := range realSets {
		t.Run(s.name, func(t *testing.T) {
			o := realOpts(s.name)
			r, an := Layer2Analyze(filepath.Join("testdata", "h200", s.name), o)
			if r.Verdict != "pass" || r.Class != "" {
				t.Fatalf("verdict %s %q", r.Verdict, r.Detail)
			}
			if !strings.Contains(r.Detail, "mapping opfamily/v1 sha256:"+DefaultMapping().SHA256) {
				t.Fatalf("the verdict does not name the mapping: %q", r.Detail)
			}
			if len(an.Windows) != 2 {
				t.Fatalf("%d windows", len(an.Windows))
			}
			for _, w := range an.Windows {
				sum := 0.0
				for fam, v := range w.Shares {
					if !strings.HasPrefix(fam, "attention_") {
						sum += v
					}
				}
				split := w.Shares["attention_prefill"] + w.Shares["attention_decode"] + w.Shares["attention_mixed"]
				if math.Abs(sum-1) > 1e-9 || math.Abs(split-w.Shares["attention"]) > 1e-9 || w.Shares["attention_unsplit"] != 0 {
					t.Fatalf("window %d shares %v: sum %v, attention split %v", w.Window, w.Shares, sum, split)
				}
				if len(w.JoinedSteps) != 8 || w.OtherOpaque > 0.30 || len(w.Unmatched) == 0 || len(w.Unmatched) > 20 {
					t.Fatalf("window %d: joined %v, other+opaque %v, %d unmatched", w.Window, w.JoinedSteps, w.OtherOpaque, len(w.Unmatched))
				}
				if w.MemcpyUS <= 0 || w.BusyUS <= 0 || w.BusyUS > (w.DeviceUS+w.MemcpyUS+w.MemsetUS)*(1+1e-5) || w.CPULaunchUS <= 0 || w.RuntimeUS < w.CPULaunchUS {
					t.Fatalf("window %d: apart figures launch %v runtime %v memcpy %v memset %v busy %v device %v", w.Window, w.CPULaunchUS, w.RuntimeUS, w.MemcpyUS, w.MemsetUS, w.BusyUS, w.DeviceUS)
				}
				// the seed's table on real kernels: CUTLASS grouped GEMMs under
				// Qwen3MoeExperts are moe_gemm, cuDNN flash SDPA is attention,
				// the router's top-k is moe_router
				for _, fam := range []string{"moe_gemm", "attention", "moe_router", "norm_elementwise"} {
					if w.Shares[fam] <= 0.01 {
						t.Errorf("window %d: %s share %v", w.Window, fam, w.Shares[fam])
					}
				}
				t.Logf("window %d: %s; other+opaque %.1f%%; busy %.0f µs of %.0f µs kernels; top unmatched %.60q",
					w.Window, fmtShares(w.Shares), 100*w.OtherOpaque, w.BusyUS, w.DeviceUS, w.Unmatched[0].Name)
			}
			wantModes := map[string]float64{"NONE": 16}
			if s.graph {
				wantModes = map[string]float64{"NONE": 12, "FULL": 4}
				if an.Windows[0].GraphReplays != 2 || an.Windows[0].Opaque != 0 {
					t.Fatalf("graph replays %d, opaque %d", an.Windows[0].GraphReplays, an.Windows[0].Opaque)
				}
			}
			for mode, n := range wantModes {
				if r.Figures["r0.mode."+mode+".steps"] != n {
					t.Errorf("mode %s: %v steps, want %v", mode, r.Figures["r0.mode."+mode+".steps"], n)
				}
			}
		})
	}
}

// rewrite copies a real trace set into a temporary directory, changing
// each trace's JSON text with edit (on the decompressed text).
func rewrite(t *testing.T, set string, edit func(string) string) string {
	t.Helper()
	src := filepath.Join("testdata", "h200", set)
	dir := t.TempDir()
	paths, _ := filepath.Glob(filepath.Join(src, "*.pt.trace.json.gz"))
	for _, p := range paths {
		js := gunzipFile(t, p)
		os.WriteFile(filepath.Join(dir, filepath.Base(p)), gzipBytes([]byte(edit(string(js)))), 0o644)
	}
	return dir
}

func TestLayer2RealTracesFail(t *testing.T) {
	grouped := regexp.MustCompile(`"name": "_ZN7cutlass13device_kernel[^"]*"`)
	elementwise := regexp.MustCompile(`"name": "void at::native::[a-z_]*elementwise[^"]*"`)
	cases := []struct {
		name, set string
		edit      func(string) string
		l1, ph    func(o *Layer2Options, dir string)
		verdict   string
		class     string
		detail    string
	}{
		{name: "renamed kernels are unmatched", set: "eager", verdict: "fail", class: "", detail: "not classifiable",
			edit: func(s string) string {
				s = grouped.ReplaceAllString(s, `"name": "renamed_kernel_a"`)
				return elementwise.ReplaceAllString(s, `"name": "renamed_kernel_b"`)
			}},
		{name: "no Layer-1 stream", set: "eager", verdict: "error", class: "profile-artifact", detail: "no Layer-1 stream",
			l1: func(o *Layer2Options, _ string) { o.Layer1 = "" }},
		{name: "a replay without child kernels is opaque", set: "graph", verdict: "pass", class: "", detail: "joined",
			edit: dropReplayKernels},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			edit := tc.edit
			if edit == nil {
				edit = func(s string) string { return s }
			}
			dir := rewrite(t, tc.set, edit)
			o := realOpts(tc.set)
			if tc.l1 != nil {
				tc.l1(&o, dir)
			}
			r, an := Layer2Analyze(dir, o)
			if r.Verdict != tc.verdict || r.Class != tc.class || !strings.Contains(r.Detail, tc.detail) {
				t.Fatalf("got %s [%s] %q; want %s [%s] with %q", r.Verdict, r.Class, r.Detail, tc.verdict, tc.class, tc.detail)
			}
			if tc.name == "a replay without child kernels is opaque" {
				w := an.Windows[0]
				if w.Opaque != 2 || w.Shares[FamilyOpaque] <= 0 {
					t.Fatalf("opaque replays %d, share %v", w.Opaque, w.Shares[FamilyOpaque])
				}
			}
		})
	}
}

func gunzipFile(t testing.TB, p string) []byte {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func gzipBytes(b []byte) []byte {
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	zw.Write(b)
	zw.Close()
	return out.Bytes()
}

// dropReplayKernels removes the GPU activity of every cudaGraphLaunch:
// what CUPTI shows when it sees only the graph launch.
func dropReplayKernels(s string) string {
	var doc map[string]any
	if err := json.Unmarshal([]byte(s), &doc); err != nil {
		panic(err)
	}
	evs := doc["traceEvents"].([]any)
	corr := func(e map[string]any) (float64, bool) {
		a, _ := e["args"].(map[string]any)
		c, ok := a["correlation"].(float64)
		return c, ok
	}
	graph := map[float64]bool{}
	for _, x := range evs {
		e := x.(map[string]any)
		if e["name"] == "cudaGraphLaunch" {
			if c, ok := corr(e); ok {
				graph[c] = true
			}
		}
	}
	var keep []any
	for _, x := range evs {
		e := x.(map[string]any)
		if c, ok := corr(e); ok && graph[c] && (e["cat"] == "kernel" || e["cat"] == "gpu_memcpy" || e["cat"] == "gpu_memset") {
			continue
		}
		keep = append(keep, x)
	}
	doc["traceEvents"] = keep
	b, _ := json.Marshal(doc)
	return string(b)
}

// editL1 writes a copy of a set's Layer-1 stream changed by edit, and
// returns its path.
func editL1(t *testing.T, set string, edit func(recs []map[string]any) []map[string]any) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "h200", set, "layer1.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var recs []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		dec := json.NewDecoder(strings.NewReader(l))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, m)
	}
	var out bytes.Buffer
	for _, m := range edit(recs) {
		js, _ := json.Marshal(m)
		out.Write(append(js, '\n'))
	}
	p := filepath.Join(t.TempDir(), "layer1.jsonl")
	os.WriteFile(p, out.Bytes(), 0o644)
	return p
}

// active: the first window's third active step is record 62+2 (60 clean,
// two warm-up).
const thirdActive = 64

func TestLayer2RealTracesJoinAndModes(t *testing.T) {
	num := func(v int64) json.Number { return json.Number(fmt.Sprint(v)) }
	cases := []struct {
		name, set string
		l1        func([]map[string]any) []map[string]any
		opts      func(*Layer2Options)
		edit      func(string) string
		verdict   string
		class     string
		detail    string
	}{
		{name: "an annotation matches two records", set: "eager", verdict: "fail", class: "profile-artifact", detail: "2 compatible Layer-1 records",
			l1: func(r []map[string]any) []map[string]any {
				dup := map[string]any{}
				for k, v := range r[thirdActive] {
					dup[k] = v
				}
				s, _ := r[thirdActive]["submit_mono_ns"].(json.Number).Int64()
				dup["submit_mono_ns"], dup["step"] = num(s+1_000_000), num(100_000)
				return append(r, dup)
			}},
		{name: "token totals disagree", set: "eager", verdict: "fail", class: "profile-artifact", detail: "disagrees with Layer-1 step 64",
			l1: func(r []map[string]any) []map[string]any {
				r[thirdActive]["decode_tokens"] = num(65)
				return r
			}},
		{name: "steps differ from the clean segment", set: "eager", verdict: "fail", class: "profile-artifact", detail: "not representative",
			l1: func(r []map[string]any) []map[string]any {
				for i := range 60 {
					r[i]["prefill_tokens"], r[i]["decode_tokens"], r[i]["num_prefill_reqs"], r[i]["num_decode_reqs"] = num(0), num(64+int64(i%2)), num(0), num(64+int64(i%2))
				}
				return r
			}},
		{name: "an ambiguous runtime mode", set: "eager", verdict: "fail", class: "profile-artifact", detail: `runtime_mode "" is ambiguous`,
			l1: func(r []map[string]any) []map[string]any {
				delete(r[thirdActive], "runtime_mode")
				return r
			}},
		{name: "a required mode with four steps", set: "graph", verdict: "fail", class: "", detail: "4 active step(s) in the required FULL mode segment",
			opts: func(o *Layer2Options) { o.RequireModes = []string{"FULL"} }},
		{name: "a required mode with sixteen steps", set: "eager", verdict: "pass", detail: "joined",
			opts: func(o *Layer2Options) { o.RequireModes = []string{"NONE"} }},
		{name: "an opaque replay whose time is unknown", set: "graph", verdict: "error", class: "profile-artifact", detail: "opaque graph replay(s) whose device time",
			edit: func(s string) string {
				return dropEvents(dropReplayKernels(s), func(e map[string]any) bool {
					return e["cat"] == "gpu_user_annotation" && e["name"] == "execute_context_0(0)_generation_64(64)"
				})
			}},
		{name: "no phase file", set: "eager", verdict: "error", class: "profile-artifact", detail: "no phase file",
			opts: func(o *Layer2Options) { o.Phases = "" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := realOpts(tc.set)
			dir := filepath.Join("testdata", "h200", tc.set)
			if tc.edit != nil {
				dir = rewrite(t, tc.set, tc.edit)
			}
			if tc.l1 != nil {
				o.Layer1 = editL1(t, tc.set, tc.l1)
			}
			if tc.opts != nil {
				tc.opts(&o)
			}
			r := Layer2Dir(dir, o)
			if r.Verdict != tc.verdict || r.Class != tc.class || !strings.Contains(r.Detail, tc.detail) {
				t.Fatalf("got %s [%s] %q; want %s [%s] with %q", r.Verdict, r.Class, r.Detail, tc.verdict, tc.class, tc.detail)
			}
		})
	}
}

// dropEvents removes the events drop picks.
func dropEvents(s string, drop func(map[string]any) bool) string {
	var doc map[string]any
	if err := json.Unmarshal([]byte(s), &doc); err != nil {
		panic(err)
	}
	var keep []any
	for _, x := range doc["traceEvents"].([]any) {
		if !drop(x.(map[string]any)) {
			keep = append(keep, x)
		}
	}
	doc["traceEvents"] = keep
	b, _ := json.Marshal(doc)
	return string(b)
}

// A run recorded whole on the H200 (testdata/h200/joined): real Kineto
// timestamps, a real monotonic Layer-1 stream, a real phase file.
func TestLayer2RealJoinedRun(t *testing.T) {
	dir := filepath.Join("testdata", "h200", "joined")
	o := DefaultLayer2()
	o.Layer1, o.Phases = filepath.Join(dir, "layer1.jsonl"), filepath.Join(dir, "phases.jsonl")
	r, an := Layer2Analyze(dir, o)
	if r.Verdict != "pass" || r.Figures["w0.clock_mapped"] != 1 || r.Figures["w1.clock_mapped"] != 1 || len(an.Windows) != 2 {
		t.Fatalf("%s %q", r.Verdict, r.Detail)
	}
	if a, b := an.Windows[0].JoinedSteps, an.Windows[1].JoinedSteps; len(a) != 8 || len(b) != 8 || a[0] != 68 || b[0] != 88 {
		t.Fatalf("joined steps %v %v", a, b)
	}
	// the literal rule's own false-failure rate on this run's clean
	// segment: its 60 steps cycle the engine's three shapes, so every
	// 8-step block holds the segment's mix and passes (the rule is only
	// tried where steps vary: TestRepresentativenessRulesOnRealTraces)
	if r.Figures["smd.self.blocks"] != 53 || r.Figures["smd.self.window_pass_fraction"] != 1 || r.Figures["smd.self.false_failure_rate"] != 0 ||
		an.Representativeness == nil || an.Representativeness.Rule != RuleLiteral || an.Representativeness.Blocks != 53 || len(an.Representativeness.Features) != 6 {
		t.Fatalf("false-failure figures %v, analysis %+v", r.Figures, an.Representativeness)
	}
	// the phase file's wall clock 50 ms off: no record is where the mapped
	// clock puts the annotations
	b, _ := os.ReadFile(o.Phases)
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var p map[string]any
		json.Unmarshal([]byte(l), &p)
		w, _ := time.Parse(time.RFC3339Nano, p["t"].(string))
		p["t"] = w.Add(50 * time.Millisecond).Format(time.RFC3339Nano)
		js, _ := json.Marshal(p)
		lines = append(lines, string(js))
	}
	o.Phases = filepath.Join(t.TempDir(), "phases.jsonl")
	os.WriteFile(o.Phases, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	if r := Layer2Dir(dir, o); r.Verdict != "fail" || !strings.Contains(r.Detail, "matches the tokens of no Layer-1 record of the window at its time") {
		t.Fatalf("clock 50 ms off: %s %q", r.Verdict, r.Detail)
	}
}
