package contract

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// The stand-in server's kernels are learned from the real H200 traces:
// for each kind of engine step (prefill, decode, mixed) of the eager
// window 0, every (kernel name, parent scopes) with its mean duration per
// step of that kind and its family under the v1 mapping. The stand-in
// writes them in its traces (cmd/standin/h200_kernels.json);
// WARDEN_WRITE_TESTDATA=1 writes that file, and this test checks it is
// what the traces give.

// scopeModule is a real module name of the traces for each scope of v1.
var scopeModule = map[string]string{"moe": "nn.Module: Qwen3MoeExperts_0", "moe_route": "nn.Module: Qwen3MoeTopKRouter_0", "attention": "nn.Module: Qwen3MoeAttention_0"}

type standinKernels struct {
	Source  string             `json:"source"`
	Mapping string             `json:"mapping"`
	Names   []string           `json:"names"`
	Kinds   map[string][][]any `json:"kinds"` // [name index, scope modules, mean µs, family]
	Steps   map[string]int     `json:"steps"`
	_       struct{}           `json:"-"`
}

func makeStandinKernels(t *testing.T) []byte {
	m := DefaultMapping()
	paths, _ := filepath.Glob(filepath.Join("testdata", "h200", "eager", "rank0_w0.*.pt.trace.json.gz"))
	d, err := readTraceFile(paths[0], DefaultLayer2().ExecuteAnnotate, m.scopeMatchers())
	if err != nil {
		t.Fatal(err)
	}
	kindOf := map[int]string{}
	steps := map[string]int{}
	for _, ex := range d.execs {
		c, _, g, _, err := parseAnnotation(ex.name)
		if err != nil {
			t.Fatal(err)
		}
		k := map[bool]string{true: "prefill", false: "decode"}[g == 0]
		if c > 0 && g > 0 {
			k = "mixed"
		}
		kindOf[ex.step] = k
		steps[k]++
	}
	type key struct {
		kind, name string
		scopes     uint64
	}
	sum := map[key]float64{}
	byCorr := map[int64]apiCall{}
	for _, c := range d.calls {
		if c.hasC {
			byCorr[c.corr] = c
		}
	}
	for _, g := range d.gpu {
		c, ok := byCorr[g.corr]
		if g.cat != "kernel" || !ok || c.step < 0 {
			continue
		}
		sum[key{kindOf[c.step], g.name, c.scopes}] += g.dur
	}
	var keys []key
	names := map[string]int{}
	for k := range sum {
		keys = append(keys, k)
		names[k.name] = 0
	}
	var nameList []string
	for n := range names {
		nameList = append(nameList, n)
	}
	sort.Strings(nameList)
	for i, n := range nameList {
		names[n] = i
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.kind != b.kind {
			return a.kind < b.kind
		}
		if a.name != b.name {
			return a.name < b.name
		}
		return a.scopes < b.scopes
	})
	out := standinKernels{Source: "pkg/contract/testdata/h200/eager window 0 (shared/traces/h200)", Mapping: m.Label(), Names: nameList, Kinds: map[string][][]any{}, Steps: steps}
	for _, k := range keys {
		var mods []string
		for i, n := range m.scopeNs {
			if k.scopes&(1<<i) != 0 {
				mods = append(mods, scopeModule[n])
			}
		}
		sort.Strings(mods)
		us := sum[k] / float64(steps[k.kind])
		out.Kinds[k.kind] = append(out.Kinds[k.kind], []any{names[k.name], mods, float64(int64(us*1000)) / 1000, m.Classify(k.name, k.scopes)})
	}
	b, err := json.MarshalIndent(out, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

func TestStandinKernelData(t *testing.T) {
	want := makeStandinKernels(t)
	p := filepath.Join("..", "..", "cmd", "standin", "h200_kernels.json")
	if os.Getenv("WARDEN_WRITE_TESTDATA") == "1" {
		os.WriteFile(p, want, 0o644)
	}
	got, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%s is not what the traces give (err %v); WARDEN_WRITE_TESTDATA=1 rewrites it", p, err)
	}
}
