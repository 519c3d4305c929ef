package contract

import (
	"math"
	"testing"
)

func TestWarmup(t *testing.T) {
	// bin j (45-50, 50-55, 55-60 s) holds decode tokens per step tok[j]
	ramp := func(tok [3]int64) func(float64, *Layer1Record) {
		return func(s float64, r *Layer1Record) {
			if s >= 45 && s < 60 {
				r.DecodeTokens = tok[int((s-45)/5)]
			}
		}
	}
	cases := []struct {
		name    string
		run     seedRun
		stab    bool
		noL1    bool
		signals string
		verdict string
		detail  string
		figs    map[string]float64
		absent  []string
	}{
		{name: "32 completions", run: seedRun{warmupSucceeded: 32, warmupRecords: -1}, verdict: "pass",
			figs: map[string]float64{"warmup_completions": 32, "min_completions": 32, "count_pass": 1, "stabilization": 0}, absent: []string{"bin1_steps"}},
		{name: "31 completions", run: seedRun{warmupSucceeded: 31, warmupRecords: -1}, verdict: "fail", detail: "31 successful warm-up completions, fewer than 32",
			figs: map[string]float64{"count_pass": 0}},
		{name: "zero completions", run: seedRun{}, verdict: "fail", detail: "0 successful warm-up completions"},
		{name: "summary more than its records", run: seedRun{warmupSucceeded: 40, warmupRecords: 20}, verdict: "fail", detail: "20 successful warm-up completions",
			figs: map[string]float64{"warmup_completions": 20}},
		// A-P3-6: 100 steps of 2 tokens a bin, flat: R_j = 40 tokens/s; the
		// test's own false-failure rate on the clean segments' 3 x 14
		// windows of 15 s (one every 5 s): flat steps pass every one
		{name: "OR branch, flat", run: seedRun{warmupSucceeded: 20, warmupRecords: -1}, stab: true, verdict: "pass", detail: "A-P3-6 OR branch",
			figs: map[string]float64{"warmup_completions": 20, "count_pass": 0, "layer1_accounting": 1, "bin1_steps": 100, "bin2_steps": 100, "bin3_steps": 100,
				"bin1_tokens_per_s": 40, "bin2_tokens_per_s": 40, "bin3_tokens_per_s": 40, "mean_tokens_per_s": 40, "slope_tokens_per_s2": 0,
				"normalized_drift": 0, "stabilization_pass": 1, "or_branch_pass": 1,
				"stabilization.self.windows": 42, "stabilization.self.pass_fraction": 1, "stabilization.self.false_failure_rate": 0}},
		// a step of twice the tokens in [150, 160) s of clean segment B: the
		// four windows of B that start at 140, 145, 150, 155 s hold it in one
		// or two of their bins and fail the drift; 38 of 42 pass
		{name: "OR branch, a clean segment's windows", run: seedRun{warmupSucceeded: 20, warmupRecords: -1, step: func(s float64, r *Layer1Record) {
			if s >= 150 && s < 160 {
				r.DecodeTokens = 4
			}
		}}, stab: true, verdict: "pass",
			figs: map[string]float64{"stabilization.self.windows": 42, "stabilization.self.pass_fraction": 38.0 / 42, "stabilization.self.false_failure_rate": 1 - 38.0/42}},
		// 10, 11, 12 tokens a step: R = 200, 220, 240; s = 40/10 = 4; 4*15/220
		{name: "OR branch, drifting", run: seedRun{warmupSucceeded: 20, warmupRecords: -1, step: ramp([3]int64{10, 11, 12})}, stab: true,
			verdict: "fail", detail: "normalized drift abs(s)*15/R_bar = 0.2727",
			figs: map[string]float64{"bin1_tokens_per_s": 200, "bin3_tokens_per_s": 240, "mean_tokens_per_s": 220, "slope_tokens_per_s2": 4,
				"normalized_drift": 60.0 / 220, "stabilization_pass": 0, "or_branch_pass": 0}},
		// 20, 21, 21 tokens: R = 400, 420, 420; s = 2; 2*15/413.3 within 10%
		{name: "OR branch, small drift", run: seedRun{warmupSucceeded: 16, warmupRecords: -1, step: ramp([3]int64{20, 21, 21})}, stab: true, verdict: "pass",
			figs: map[string]float64{"slope_tokens_per_s2": 2, "normalized_drift": 2.0 * 15 / (1240.0 / 3), "or_branch_pass": 1}},
		{name: "OR branch, 15 completions", run: seedRun{warmupSucceeded: 15, warmupRecords: -1}, stab: true, verdict: "fail", detail: "fewer than the OR branch's 16",
			figs: map[string]float64{"stabilization_pass": 1, "or_branch_pass": 0}},
		{name: "OR branch not allowed", run: seedRun{warmupSucceeded: 20, warmupRecords: -1}, verdict: "fail", detail: "fewer than 32", absent: []string{"bin1_steps"}},
		{name: "bin of 15 steps", run: seedRun{warmupSucceeded: 20, warmupRecords: -1, step: func(s float64, r *Layer1Record) {
			executed(r, !(s >= 50 && s < 54.25)) // 15 of bin 2's 100 steps ran the model
		}}, stab: true, verdict: "fail", detail: "bin 2 [50, 55) s holds 15 model-executed steps", figs: map[string]float64{"bin2_steps": 15}, absent: []string{"normalized_drift"}},
		{name: "empty bin", run: seedRun{warmupSucceeded: 20, warmupRecords: -1, step: func(s float64, r *Layer1Record) { executed(r, !(s >= 55 && s < 60)) }}, stab: true,
			verdict: "fail", detail: "holds 0 model-executed steps", figs: map[string]float64{"bin3_steps": 0}, absent: []string{"mean_tokens_per_s"}},
		{name: "zero throughput", run: seedRun{warmupSucceeded: 20, warmupRecords: -1, step: ramp([3]int64{2, 0, 2})}, stab: true,
			verdict: "fail", detail: "bin 2's scheduled-token throughput 0 is not positive"},
		// one record's submit time moved into the quartile: its step
		// breaks the quartile's sequence (the stream's steps are intact)
		{name: "discontinuous steps", run: seedRun{warmupSucceeded: 20, warmupRecords: -1, step: func(s float64, r *Layer1Record) {
			if r.Step == 10 {
				r.SubmitMonoNS = ns(47)
			}
		}}, stab: true, verdict: "fail", detail: "discontinuous step index", figs: map[string]float64{"quartile_step_gaps": 1}},
		{name: "accounting invariant", run: seedRun{warmupSucceeded: 20, warmupRecords: -1,
			sidecar: `{"encoded_records":1,"written_records":1,"dropped_records":0,"last_step_index":0,"wall_time_unix_ns":1,"flush_interval_s":1,"final":true}`},
			stab: true, verdict: "fail", detail: "Layer-1 accounting invariant failed", figs: map[string]float64{"layer1_accounting": 0}},
		{name: "no Layer-1 directory given", run: seedRun{warmupSucceeded: 20, warmupRecords: -1}, stab: true, noL1: true, verdict: "error", detail: "--layer1-dir"},
		{name: "no warm-up segment", run: seedRun{warmupSucceeded: 40, warmupRecords: -1, edit: func(res map[string]any) {
			res["segments"] = res["segments"].([]map[string]any)[1:]
		}}, verdict: "fail", detail: "no warm-up segment first"},
		{name: "no t0", run: seedRun{warmupSucceeded: 20, warmupRecords: -1, edit: func(res map[string]any) { delete(res, "clock") }}, stab: true,
			verdict: "fail", detail: "lacks clock.t0_mono_ns"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rd, ld := tc.run.write(t)
			o := WarmupOptions{MinCompletions: 32, Stabilization: tc.stab, Layer1Dir: ld, Layer1: DefaultLayer1}
			if tc.noL1 {
				o.Layer1Dir = ""
			}
			r := WarmupDir(rd, o)
			wantResult(t, r, tc.verdict, tc.detail, tc.figs)
			for _, k := range tc.absent {
				if v, ok := r.Figures[k]; ok {
					t.Errorf("%s = %v, want it absent (never imputed)", k, v)
				}
			}
			for k, v := range r.Figures {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					t.Errorf("%s is %v", k, v)
				}
			}
		})
	}
	if r := WarmupDir(t.TempDir(), WarmupOptions{MinCompletions: 32}); r.Verdict != "error" {
		t.Fatalf("no result.json: %+v", r)
	}
}

// executed sets whether r ran the model; a step without a forward is a
// graph miss (NONE, no padding).
func executed(r *Layer1Record, ran bool) {
	r.ModelExecuted = ran
	if !ran {
		r.CUDAGraphHit, r.RuntimeMode, r.BucketTokens, r.PaddingTokens = false, "NONE", r.UnpaddedTokens, 0
	}
}
