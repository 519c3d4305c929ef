package validate

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
	if r := WarmupDir(dir, WarmupOptions{MinCompletions: 3}); r.Verdict != "pass" || r.Figures["warmup_completions"] != 3 {
		t.Fatalf("warmup, 3: %+v", r)
	}
	if r := WarmupDir(dir, WarmupOptions{MinCompletions: 4}); r.Verdict != "fail" || r.Figures["warmup_completions"] != 3 {
		t.Fatalf("warmup, 4: %+v", r)
	}
	// a Layer-1 stream over the run's monotonic times, waiting queue 2
	var res seedResult
	b, _ := os.ReadFile(filepath.Join(dir, "result.json"))
	json.Unmarshal(b, &res)
	l1 := t.TempDir()
	var stream []byte
	last := res.Segments[len(res.Segments)-1].EndMonoNS
	n := int64(0)
	for sub := res.Clock.T0MonoNS; sub < last; sub += 1_000_000 {
		r := l1Record(n, sub)
		r.NumWaitingReqs = 2
		line, _ := json.Marshal(r)
		stream = append(append(stream, line...), '\n')
		n++
	}
	os.WriteFile(filepath.Join(l1, "layer1.jsonl"), stream, 0o644)
	o := DefaultRecovery()
	o.Layer1Dir, o.WindowS, o.StepS, o.RecoveryS = l1, 0.05, 0.01, 0.1
	// at these sizes a 50 ms window holds two or three successes: the run
	// recovered its rate (40 req/s) by the end of recovery-2, not of
	// recovery-1 (60 req/s)
	r := RecoveryDir(dir, o)
	wantResult(t, r, "fail", "recovery recovery-1: completion rate 60 req/s at its end, not within 10% of clean segment C's median 40",
		map[string]float64{"recoveries": 2, "recovery1_seconds": 0.1, "clean_c_samples": 16, "clean_c_completion_rps": 40, "clean_c_waiting": 2,
			"recovery1_completion_ratio": 1.5, "recovery1_pass": 0, "recovery2_completion_rps": 40, "recovery2_waiting": 2, "recovery2_pass": 1})
}
