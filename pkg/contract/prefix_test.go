package contract

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLongestCommonPrefix(t *testing.T) {
	seqs := [][]int64{{1, 2, 3, 4}, {9, 9}, {1, 2, 3, 5}, {1, 2}, {9, 8}}
	if n, a, b := LongestCommonPrefix(seqs); n != 3 || a != 0 || b != 2 {
		t.Fatalf("%d rows %d,%d", n, a, b)
	}
	if n, _, _ := LongestCommonPrefix([][]int64{{1}}); n != 0 {
		t.Fatalf("one row: %d", n)
	}
}

func TestPrefixCheck(t *testing.T) {
	dir := t.TempDir()
	manifest := func(name string, shared int) string {
		var b strings.Builder
		for i := range 50 {
			ids := make([]string, max(40, shared+8))
			for k := range ids {
				v := 1000*i + k // unique per request
				if k < shared {
					v = 7 + k // the shared prefix
				}
				ids[k] = fmt.Sprint(v)
			}
			fmt.Fprintf(&b, `{"id":"r%d","prompt_token_ids":[%s],"input_tokens":40,"output_tokens":4,"arrival":"steady"}`+"\n", i, strings.Join(ids, ","))
		}
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(b.String()), 0o644)
		return p
	}
	layer1 := func(name string, hits int) string {
		var b strings.Builder
		for i := range 100 {
			h := 0
			if i < hits {
				h = 10
			}
			fmt.Fprintf(&b, `{"step":%d,"submit_mono_ns":%d,"prefill_tokens":100,"decode_tokens":0,"prefix_cache_queries":100,"prefix_cache_hits":%d}`+"\n", i, 1000+i, h)
		}
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(b.String()), 0o644)
		return p
	}
	phases := filepath.Join(dir, "phases.jsonl")
	os.WriteFile(phases, []byte(`{"phase":"clean","t":"x","mono_ns":1000,"index":1}`+"\n"+`{"phase":"profile","t":"x","mono_ns":1100,"index":1}`+"\n"), 0o644)
	cases := []struct {
		name    string
		o       PrefixOptions
		verdict string
		detail  string
	}{
		{"unique streams", PrefixOptions{Manifest: manifest("a.jsonl", 16), Layer1: layer1("l0.jsonl", 0), Phases: phases}, "pass", ""},
		{"a 17-token common prefix", PrefixOptions{Manifest: manifest("b.jsonl", 17)}, "fail", "share a prefix of more than 16 tokens"},
		// P08's shared 1,024 tokens: read no further than the 17th
		{"a 1,024-token common prefix", PrefixOptions{Manifest: manifest("b2.jsonl", 1024)}, "fail", "share a prefix of more than 16 tokens"},
		// 9 of 100 steps hit 10 of 100 tokens: 0.9%
		{"hits below 1%", PrefixOptions{Manifest: manifest("c.jsonl", 0), Layer1: layer1("l1.jsonl", 9), Phases: phases}, "pass", ""},
		{"hits at 1%", PrefixOptions{Manifest: manifest("d.jsonl", 0), Layer1: layer1("l2.jsonl", 10), Phases: phases}, "fail", "hit ratio 0.0100 is not below"},
		{"no token ids", PrefixOptions{Manifest: layer1("l3.jsonl", 0)}, "error", "no prompt_token_ids"},
		{"a stream without its phase file", PrefixOptions{Manifest: manifest("e.jsonl", 0), Layer1: layer1("l4.jsonl", 0)}, "error", "needs both"},
		{"absent manifest", PrefixOptions{Manifest: filepath.Join(dir, "absent")}, "error", "manifest"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := DefaultPrefix()
			o.Manifest, o.Layer1, o.Phases = c.o.Manifest, c.o.Layer1, c.o.Phases
			r := PrefixCheck(o)
			if r.Verdict != c.verdict || !strings.Contains(r.Detail, c.detail) {
				t.Fatalf("got %s %q", r.Verdict, r.Detail)
			}
			if c.verdict == "fail" && strings.Contains(c.detail, "prefix of more") && r.Figures["longest_common_prefix"] != 17 {
				t.Fatalf("longest_common_prefix %v, counted up to 17", r.Figures["longest_common_prefix"])
			}
		})
	}
	// a stream without prefix counters cannot tell
	p := filepath.Join(dir, "nocount.jsonl")
	os.WriteFile(p, []byte(`{"step":0,"submit_mono_ns":1001,"prefill_tokens":1,"decode_tokens":0}`+"\n"), 0o644)
	o := DefaultPrefix()
	o.Manifest, o.Layer1, o.Phases = manifest("f.jsonl", 0), p, phases
	if r := PrefixCheck(o); r.Verdict != "error" || !strings.Contains(r.Detail, "no prefix_cache_queries") {
		t.Fatalf("%s %q", r.Verdict, r.Detail)
	}
}
