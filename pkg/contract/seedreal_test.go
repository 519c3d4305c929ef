package contract

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// The warm-up and recovery checks read the files of a real loadgen run
// (testdata/loadgen: a 0.1 s warm-up with 3 successes, 0.2 s clean
// segments, two profile windows each followed by a 0.1 s recovery).
func TestWarmupRecoveryOnRealLoadgenFiles(t *testing.T) {
	const dir = "testdata/loadgen/saturation"
	var res seedResult
	b, err := os.ReadFile(filepath.Join(dir, "result.json"))
	if err != nil || json.Unmarshal(b, &res) != nil || len(res.Segments) == 0 || res.Segments[0].Kind != "warmup" {
		t.Fatalf("result.json: %v", err)
	}
	n := float64(res.Segments[0].Succeeded)
	if n < 1 {
		t.Fatalf("the testdata's warm-up has no success")
	}
	if r := WarmupDir(dir, WarmupOptions{MinCompletions: int(n)}); r.Verdict != "pass" || r.Figures["warmup_completions"] != n {
		t.Fatalf("warmup, %v: %+v", n, r)
	}
	if r := WarmupDir(dir, WarmupOptions{MinCompletions: int(n) + 1}); r.Verdict != "fail" || r.Figures["warmup_completions"] != n {
		t.Fatalf("warmup, %v: %+v", n+1, r)
	}
	// a Layer-1 stream over the run's monotonic times, waiting queue 2
	l1 := t.TempDir()
	writeLayer1Over(t, dir, l1)
	// At these sizes a 50 ms window holds two or three successes, so
	// whether each recovery is within 10% depends on the run: the check
	// must read both recoveries and clean segment C from the real files and
	// judge each by its own figures.
	r := recoveryOver(dir, l1)
	if r.Verdict == "error" || r.Figures["recoveries"] != 2 || r.Figures["recovery1_seconds"] != 0.1 || r.Figures["clean_c_waiting"] != 2 || r.Figures["clean_c_completion_rps"] <= 0 {
		t.Fatalf("recovery on the real files: %+v", r)
	}
	all := true
	for _, w := range []string{"recovery1", "recovery2"} {
		ratio, pass := r.Figures[w+"_completion_ratio"], r.Figures[w+"_pass"]
		within := ratio >= 0.9 && ratio <= 1.1 && r.Figures[w+"_waiting"] == 2
		if _, ok := r.Figures[w+"_completion_ratio"]; !ok || (pass == 1) != within {
			t.Errorf("%s: ratio %v, waiting %v, pass %v", w, ratio, r.Figures[w+"_waiting"], pass)
		}
		all = all && within
	}
	if (r.Verdict == "pass") != all {
		t.Errorf("verdict %s with recoveries within 10%%: %v (%+v)", r.Verdict, all, r)
	}
}
