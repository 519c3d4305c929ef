package loadgen

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func writeManifest(t *testing.T, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "m.jsonl")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOpenManifestRefusesBadLines(t *testing.T) {
	ok := `{"id":"a","prompt_token_ids":[1,2,3],"input_tokens":3,"output_tokens":4,"arrival":"steady"}`
	for name, tc := range map[string]struct {
		lines []string
		want  string
	}{
		"ids disagree with input_tokens": {[]string{`{"id":"a","prompt_token_ids":[1,2],"input_tokens":3,"output_tokens":4,"arrival":"steady"}`}, "has 2 ids"},
		"two arrival classes":            {[]string{ok, `{"id":"b","prompt_token_ids":[1,2,3],"input_tokens":3,"output_tokens":4,"arrival":"burst:8"}`}, "one class per manifest"},
		"repeated id":                    {[]string{ok, ok}, "repeats line 1"},
		"both prompt fields":             {[]string{`{"id":"a","prompt":"x","prompt_token_ids":[1],"input_tokens":1,"output_tokens":4,"arrival":"steady"}`}, "exactly one"},
		"no output tokens":               {[]string{`{"id":"a","prompt_token_ids":[1],"input_tokens":1,"arrival":"steady"}`}, "output_tokens"},
		"mixed prompt kinds":             {[]string{ok, `{"id":"b","prompt":"x","input_tokens":1,"output_tokens":4,"arrival":"steady"}`}, "mixes"},
		"ids not integers":               {[]string{`{"id":"a","prompt_token_ids":[1,-2],"input_tokens":2,"output_tokens":4,"arrival":"steady"}`}, "non-negative integers"},
		"unknown arrival":                {[]string{`{"id":"a","prompt_token_ids":[1],"input_tokens":1,"output_tokens":4,"arrival":"often"}`}, "want steady"},
	} {
		_, err := OpenManifest(writeManifest(t, tc.lines...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "SECRET") {
			t.Errorf("%s: the error quotes a prompt", name)
		}
	}
}

func TestManifestReadsPromptsBackForBodies(t *testing.T) {
	p := writeManifest(t,
		`{"id":"a","prompt_token_ids":[5, 6,7],"input_tokens":3,"output_tokens":4,"arrival":"burst:8","extra":1}`,
		`{"id":"b","prompt_token_ids":[],"input_tokens":0,"output_tokens":2,"arrival":"burst:8"}`)
	m, err := OpenManifest(p)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Len() != 2 || !m.TokenIDs || m.Arrival.String() != "burst:8" || len(m.SHA256) != 64 {
		t.Fatalf("manifest %+v", m)
	}
	b := newBodyBuilderT(t, Completions, true)
	raw, err := m.prompt(0)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal(b.build(raw, m.OutputTokens(0)), &body); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"model": "m", "prompt": []any{5.0, 6.0, 7.0}, "max_tokens": 4.0, "temperature": 0.0,
		"ignore_eos": true, "stream": true, "stream_options": map[string]any{"include_usage": true}}
	if !reflect.DeepEqual(body, want) {
		t.Fatalf("body %v, want %v", body, want)
	}
}

func newBodyBuilderT(t *testing.T, e Endpoint, ignoreEOS bool) *bodyBuilder {
	t.Helper()
	b, err := newBodyBuilder(e, "m", 0, ignoreEOS)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMaterializeIsExactAndDeterministic(t *testing.T) {
	dir := t.TempDir()
	mix, err := ParseMixture(`{"uniform:4:8":0.5,"uniform:40:60":0.3,"uniform:100:120":0.2}`)
	if err != nil {
		t.Fatal(err)
	}
	burst, _ := ParseArrival("burst:8")
	spec := Spec{ID: "P09", Kind: "synthetic", Input: mix, OutputTokens: 64, Prefix: "none", Arrival: burst,
		NumRequests: 1000, Seed: 20260712, VocabMin: 1000, VocabMax: 30000}
	a, err := Materialize(spec, filepath.Join(dir, "a.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Materialize(spec, filepath.Join(dir, "b.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if a.SHA256 != b.SHA256 {
		t.Fatal("the same spec and seed wrote different manifests")
	}
	spec.Seed++
	if c, _ := Materialize(spec, filepath.Join(dir, "c.jsonl")); c.SHA256 == a.SHA256 {
		t.Fatal("another seed wrote the same manifest")
	}
	m, err := OpenManifest(filepath.Join(dir, "a.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.SHA256 != a.SHA256 {
		t.Fatalf("summary SHA-256 %s, file %s", a.SHA256, m.SHA256)
	}
	// Exact component counts: 500, 300, 200.
	counts := map[int]int{}
	for i := 0; i < m.Len(); i++ {
		n := m.InputTokens(i)
		switch {
		case n >= 4 && n <= 8:
			counts[0]++
		case n >= 40 && n <= 60:
			counts[1]++
		case n >= 100 && n <= 120:
			counts[2]++
		default:
			t.Fatalf("row %d has %d input tokens, outside every component", i, n)
		}
		if m.OutputTokens(i) != 64 {
			t.Fatalf("row %d requests %d output tokens", i, m.OutputTokens(i))
		}
	}
	if counts[0] != 500 || counts[1] != 300 || counts[2] != 200 {
		t.Fatalf("component counts %v, want 500/300/200", counts)
	}
	// The mixture is permuted, not in blocks.
	if m.InputTokens(0) <= 8 && m.InputTokens(1) <= 8 && m.InputTokens(2) <= 8 && m.InputTokens(3) <= 8 && m.InputTokens(4) <= 8 {
		t.Log("first five rows all short: possible but unlikely")
	}
}

func TestMaterializePrefixPool(t *testing.T) {
	dir := t.TempDir()
	burst, _ := ParseArrival("burst:8")
	spec := Spec{ID: "P08", Kind: "prefix-pool", NumPrefixes: 8, PrefixLen: 32, SuffixLen: 8, OutputTokens: 512,
		Prefix: "pool", Arrival: burst, NumRequests: 64, Seed: 20260712, VocabMin: 1000, VocabMax: 30000}
	if _, err := Materialize(spec, filepath.Join(dir, "p.jsonl")); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "p.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	byGroup := map[int][][]int{}
	suffixes := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l struct {
			IDs   []int `json:"prompt_token_ids"`
			Input int   `json:"input_tokens"`
			Group int   `json:"prefix_group"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if len(l.IDs) != 40 || l.Input != 40 {
			t.Fatalf("row of %d ids, input_tokens %d, want 40", len(l.IDs), l.Input)
		}
		byGroup[l.Group] = append(byGroup[l.Group], l.IDs)
		key, _ := json.Marshal(l.IDs[32:])
		if suffixes[string(key)] {
			t.Fatal("a suffix repeats")
		}
		suffixes[string(key)] = true
	}
	if len(byGroup) != 8 {
		t.Fatalf("%d prefix groups, want 8", len(byGroup))
	}
	for g, rows := range byGroup {
		if len(rows) != 8 {
			t.Fatalf("group %d has %d rows, want 8 (balanced)", g, len(rows))
		}
		for _, r := range rows[1:] {
			if !reflect.DeepEqual(r[:32], rows[0][:32]) {
				t.Fatalf("group %d rows do not share their prefix", g)
			}
		}
	}
}
