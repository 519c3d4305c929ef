package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warden/pkg/contract"
)

// The validate subcommands as an operator runs them: the verdict is the
// last line, exit 0 whatever it says, 2 for a usage error.
func TestValidateCommandOutput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	stream := filepath.Join(dir, "l1.jsonl")
	var recs []byte
	for i := range int64(2) {
		b, _ := json.Marshal(contract.Layer1Record{Schema: 1, Step: i, ChunkSizeHist: []int64{}, ContextLenHist: []int64{}, RuntimeMode: "NONE"})
		recs = append(append(recs, b...), '\n')
	}
	os.WriteFile(stream, append(recs, "{\"footer\":true,\"encoded_records\":2,\"written_records\":2,\"dropped_records\":0,\"last_step_index\":1,\"step_count\":2}\n"...), 0o644)
	os.WriteFile(stream+".footer.json", []byte(`{"encoded_records":2,"written_records":2,"dropped_records":0,"last_step_index":1,"wall_time_unix_ns":1,"flush_interval_s":1,"final":true}`), 0o644)
	c := &campaign{t: t}
	lastLine := func(out string) map[string]any {
		t.Helper()
		lines := strings.Split(strings.TrimSpace(out), "\n")
		var v map[string]any
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &v); err != nil {
			t.Fatalf("last line is not JSON: %v\n%s", err, out)
		}
		return v
	}
	for _, tc := range []struct {
		args    []string
		verdict string
		class   string
	}{
		{[]string{"validate", "layer1", "--stream", stream}, "pass", ""},
		{[]string{"validate", "layer1", "--dir", dir, "-o", "json"}, "pass", ""},
		{[]string{"validate", "layer1", "--stream", filepath.Join(dir, "absent.jsonl")}, "error", ""},
		{[]string{"validate", "layer1", "--dir", t.TempDir()}, "fail", ""},
		{[]string{"validate", "layer2", "--traces", dir}, "fail", "profile-artifact"},
		{[]string{"validate", "client", "--result-dir", dir}, "error", ""},
		{[]string{"validate", "sanity", "--input", dir, "--out", filepath.Join(dir, "sanity.json")}, "pass", ""},
		{[]string{"validate", "warmup", "--result-dir", dir}, "error", ""},
		{[]string{"validate", "recovery", "--result-dir", dir, "--layer1-dir", dir}, "error", ""},
	} {
		out, code := c.controller(tc.args...)
		v := lastLine(out)
		if code != 0 || v["verdict"] != tc.verdict || (tc.class != "" && v["class"] != tc.class) {
			t.Fatalf("%v: exit %d, last line %v; want exit 0 and %s %s\n%s", tc.args, code, v, tc.verdict, tc.class, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "sanity.json")); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"validate", "layer1"},
		{"validate", "layer1", "--stream", stream, "--dir", dir},
		{"validate", "layer2"},
		{"validate", "layer2", "--traces", dir, "--tp", "0"},
		{"validate", "client"},
		{"validate", "sanity"},
		{"validate", "sanity", "--input", dir, "--constant", "x"},
		{"validate", "layer1", "--stream", stream, "-o", "yaml"},
		{"validate", "layer1", "--stream", stream, "--bogus"},
		{"validate", "layer2", "--traces", dir, "--tp", "two"},
		{"validate", "warmup"},
		{"validate", "warmup", "--result-dir", dir, "--min-completions", "0"},
		{"validate", "warmup", "--result-dir", dir, "--stabilization"},
		{"validate", "warmup", "--result-dir", dir, "--pattern", "P10", "--stabilization-patterns", "P10"},
		{"validate", "recovery", "--result-dir", dir},
		{"validate", "recovery", "--result-dir", dir, "--layer1-dir", dir, "--window-s", "0"},
	} {
		if out, code := c.controller(args...); code != 2 {
			t.Fatalf("%v: exit %d, want 2\n%s", args, code, out)
		}
	}
}
