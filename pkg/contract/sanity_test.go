package contract

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSanity(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "result.json"), []byte(`{"clean": {"seconds": 240, "completed": 100, "hit_ratio": 0.2},
 "timeline": {"clean_segment_s": 80, "num_clean_segments": 3}, "segments": [{"seconds": 80}, {"seconds": 80}, {"seconds": 80}], "name": "x", "p50": null}`), 0o644)
	os.WriteFile(filepath.Join(dir, "s.jsonl"), []byte("{\"step\": 0, \"kv_usage\": 0.5}\n{\"step\": 1}\n{\"step\": 2, \"kv_usage\": 0.7}\n"), 0o644)
	o := DefaultSanity()
	o.Constants = map[string]float64{"result.json:timeline.clean_segment_s": 80, "*segments[].seconds": 80}
	blk, r := Sanity([]string{dir}, dir, o)
	if r.Verdict != "pass" {
		t.Fatalf("%+v", r)
	}
	fam := map[string]Family{}
	for _, f := range blk.Families {
		fam[f.Name] = f
	}
	if f := fam["s.jsonl:kv_usage"]; f.Kind != "ratio" || f.N != 3 || f.Finite != 2 || f.Missing != 1 || *f.Min != 0.5 || *f.Max != 0.7 || f.Distinct != 2 {
		t.Fatalf("kv_usage %+v", f)
	}
	if f := fam["s.jsonl:step"]; f.N != 3 || f.Distinct != 3 || f.Kind != "counter" {
		t.Fatalf("step %+v", f)
	}
	if f := fam["result.json:segments[].seconds"]; f.Expected == nil || !f.Constant {
		t.Fatalf("segments %+v", f)
	}

	for _, tc := range []struct {
		name, body, flag string
		consts           map[string]float64
	}{
		{"negative counter", `{"completed": -1}`, "negative counter", nil},
		{"ratio above one", `{"prefix_hit_ratio": 1.5}`, "ratio above 1", nil},
		{"non-finite", `{"x": NaN, "y": [Infinity, 1]}`, "non-finite", nil},
		{"constant broken", `{"clean": {"seconds": 239}}`, "declared constant 240 does not hold", map[string]float64{"*clean.seconds": 240}},
		{"constant absent", `{"a": 1}`, "declared constant not found", map[string]float64{"*clean.seconds": 240}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := t.TempDir()
			os.WriteFile(filepath.Join(d, "r.json"), []byte(tc.body), 0o644)
			o := DefaultSanity()
			if tc.consts != nil {
				o.Constants = tc.consts
			}
			blk, r := Sanity([]string{d}, d, o)
			if r.Verdict != "fail" || !strings.Contains(strings.Join(blk.RedFlags, "|"), tc.flag) {
				t.Fatalf("%+v %v", r, blk.RedFlags)
			}
		})
	}
	o = DefaultSanity()
	o.Signed = []string{"*.delta"}
	d := t.TempDir()
	os.WriteFile(filepath.Join(d, "r.json"), []byte(`{"a": {"delta": -3}}`), 0o644)
	if _, r := Sanity([]string{d}, d, o); r.Verdict != "pass" {
		t.Fatalf("signed family: %+v", r)
	}
	if _, r := Sanity([]string{filepath.Join(d, "absent")}, "", o); r.Verdict != "error" {
		t.Fatalf("absent input: %+v", r)
	}
}

// A negative energy per request (the idle power read above the run's
// mean) is a red flag of the sanity block: energy.json, which the
// controller writes in each attempt, is a non-negative counter.
func TestSanityNegativeEnergy(t *testing.T) {
	for _, c := range []struct {
		body, verdict string
	}{
		{`{"energy_per_request_j": -0.30}`, "fail"},
		{`{"energy_per_request_j": 4.5}`, "pass"},
		{`{"energy_per_request_j": null, "why": "the client reported no successes"}`, "pass"},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "energy.json"), []byte(c.body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, r := Sanity([]string{filepath.Join(dir, "energy.json")}, dir, DefaultSanity())
		if r.Verdict != c.verdict || c.verdict == "fail" && !strings.Contains(r.Detail, "energy.json:energy_per_request_j: negative counter: min -0.3") {
			t.Errorf("%s: %s %q", c.body, r.Verdict, r.Detail)
		}
	}
}
