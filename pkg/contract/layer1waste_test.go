package contract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// wasteStream writes a closed stream of ten records (step 5 changed by
// edit) and its final sidecar into a new directory, and returns the
// directory and the stream's path.
func wasteStream(t *testing.T, edit func(r *Layer1Record)) (string, string) {
	t.Helper()
	dir := t.TempDir()
	var b bytes.Buffer
	for i := int64(0); i < 10; i++ {
		r := l1Record(i, 1000+i)
		if i == 5 && edit != nil {
			edit(&r)
		}
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	fmt.Fprintf(&b, `{"footer":true,"encoded_records":10,"written_records":10,"dropped_records":0,"last_step_index":9,"step_count":10}`+"\n")
	path := filepath.Join(dir, "layer1.jsonl")
	side := `{"encoded_records":10,"written_records":10,"dropped_records":0,"last_step_index":9,"wall_time_unix_ns":1,"flush_interval_s":1,"final":true}`
	if os.WriteFile(path, b.Bytes(), 0o644) != nil || os.WriteFile(path+".footer.json", []byte(side), 0o644) != nil {
		t.Fatal("write stream")
	}
	return dir, path
}

// TestLayer1WasteRules: a record that breaks the padding identity, the
// bucket rule or graph-mode consistency fails both validate layer1 and
// validate sanity, with a reason naming the rule; consistent records of
// each mode pass both.
func TestLayer1WasteRules(t *testing.T) {
	cases := []struct {
		name string
		edit func(r *Layer1Record)
		rule string // "" passes
	}{
		{"FULL hit, padded", nil, ""},
		{"PIECEWISE hit", func(r *Layer1Record) { r.RuntimeMode = "PIECEWISE" }, ""},
		{"NONE miss, unpadded", func(r *Layer1Record) {
			r.RuntimeMode, r.CUDAGraphHit, r.BucketTokens, r.PaddingTokens = "NONE", false, 2, 0
		}, ""},
		{"step without a forward", func(r *Layer1Record) {
			r.ModelExecuted, r.CUDAGraphHit, r.RuntimeMode, r.UnpaddedTokens, r.BucketTokens, r.PaddingTokens = false, false, "NONE", 0, 0, 0
		}, ""},
		{"bucket below unpadded", func(r *Layer1Record) { r.BucketTokens, r.PaddingTokens = 1, -1 }, "bucket_ge_unpadded"},
		{"padding not bucket - unpadded", func(r *Layer1Record) { r.PaddingTokens = 3 }, "padding_identity"},
		{"miss under FULL", func(r *Layer1Record) { r.CUDAGraphHit = false }, "graph_mode"},
		{"miss under PIECEWISE", func(r *Layer1Record) { r.CUDAGraphHit, r.RuntimeMode = false, "PIECEWISE" }, "graph_mode"},
		{"hit under NONE", func(r *Layer1Record) { r.RuntimeMode = "NONE" }, "graph_mode"},
		{"hit without a forward", func(r *Layer1Record) { r.ModelExecuted = false }, "graph_mode"},
		{"hit without a bucket", func(r *Layer1Record) { r.UnpaddedTokens, r.BucketTokens, r.PaddingTokens = 0, 0, 0 }, "graph_mode"},
		{"ambiguous mode", func(r *Layer1Record) { r.RuntimeMode = "FULL_AND_PIECEWISE" }, "graph_mode"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, stream := wasteStream(t, c.edit)
			l1 := Layer1Files(stream, "", "", DefaultLayer1)
			_, san := Sanity([]string{dir}, dir, DefaultSanity())
			for name, r := range map[string]Result{"layer1": l1, "sanity": san} {
				if c.rule == "" {
					if r.Verdict != "pass" {
						t.Errorf("%s: %s %s, want pass", name, r.Verdict, r.Detail)
					}
					continue
				}
				if r.Verdict != "fail" || !strings.Contains(r.Detail, c.rule+": 1 record(s) break it (first: line 6, step 5: ") {
					t.Errorf("%s: %s %q, want a fail naming %s at line 6, step 5", name, r.Verdict, r.Detail, c.rule)
				}
			}
			if c.rule != "" && l1.Figures[c.rule+"_violations"] != 1 {
				t.Errorf("layer1 figures %v, want %s_violations 1", l1.Figures, c.rule)
			}
		})
	}
}

// TestSanityWasteFieldsIncomplete: a JSON-lines record that carries some
// of the waste fields but not all cannot be judged, and the block says so
// as a red flag (fail closed); records without any of them are not steps.
func TestSanityWasteFieldsIncomplete(t *testing.T) {
	dir := t.TempDir()
	lines := `{"step":0,"bucket_tokens":4,"unpadded_tokens":2}` + "\n" + `{"step":1,"runtime_mode":"FULL"}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "x.jsonl"), []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	_, r := Sanity([]string{dir}, dir, DefaultSanity())
	if r.Verdict != "fail" || !strings.Contains(r.Detail, "waste_fields: 1 record(s) carry only part of") || !strings.Contains(r.Detail, "line 1 lacks runtime_mode, padding_tokens, cuda_graph_hit") {
		t.Fatalf("%s %q", r.Verdict, r.Detail)
	}
}

// TestLayer1WasteRulesDocumented: the marked table of docs/validators.md's
// layer1 section names exactly Layer1WasteRules, in order.
func TestLayer1WasteRulesDocumented(t *testing.T) {
	b, err := os.ReadFile(validatorsDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, tbl, ok := strings.Cut(string(b), "<!-- layer1-waste-rules -->")
	tbl, _, ok2 := strings.Cut(tbl, "<!-- /layer1-waste-rules -->")
	if !ok || !ok2 {
		t.Fatal("docs/validators.md has no <!-- layer1-waste-rules --> table")
	}
	var rules []string
	for _, line := range strings.Split(tbl, "\n") {
		if cols := strings.Split(line, "|"); len(cols) > 2 && strings.HasPrefix(strings.TrimSpace(cols[1]), "`") {
			rules = append(rules, strings.Trim(strings.TrimSpace(cols[1]), "`"))
		}
	}
	if strings.Join(rules, ",") != strings.Join(Layer1WasteRules, ",") {
		t.Fatalf("docs/validators.md waste rules %v, the code's %v", rules, Layer1WasteRules)
	}
}
