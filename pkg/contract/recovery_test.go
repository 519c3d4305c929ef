package contract

import (
	"testing"
)

// The synthetic timeline (seedRun): clean-3 is [220, 300) s; profile-1
// [300, 324), recovery-1 [324, 354), profile-2 [354, 378), recovery-2
// [378, 408). Successes every 0.2 s: 50 in any 10 s window, 5 req/s.
func TestRecovery(t *testing.T) {
	in := func(a, b float64) func(float64) bool { return func(s float64) bool { return s >= a && s < b } }
	waiting := func(when func(float64) bool, n int64) func(float64, *Layer1Record) {
		return func(s float64, r *Layer1Record) {
			r.NumWaitingReqs = 4
			if when(s) {
				r.NumWaitingReqs = n
			}
		}
	}
	gapIn := func(when func(float64) bool, g float64) func(float64) float64 {
		return func(s float64) float64 {
			if when(s) {
				return g
			}
			return 0.2
		}
	}
	cases := []struct {
		name    string
		run     seedRun
		noL1    bool
		verdict string
		detail  string
		figs    map[string]float64
	}{
		{name: "recovered", run: seedRun{step: waiting(in(300, 330), 40)}, verdict: "pass",
			figs: map[string]float64{"recoveries": 2, "clean_c_samples": 71, "clean_c_completion_rps": 5, "clean_c_waiting": 4,
				"recovery1_completion_rps": 5, "recovery1_completion_ratio": 1, "recovery1_waiting": 4, "recovery1_pass": 1,
				"recovery2_seconds": 30, "recovery2_pass": 1, "window_s": 10}},
		// the queue is back by the end of recovery-1 but not of recovery-2
		{name: "queue high at the end", run: seedRun{step: waiting(in(400, 408), 5)}, verdict: "fail",
			detail: "recovery recovery-2: waiting queue 4.8 at its end, not within 10% of clean segment C's median 4",
			figs:   map[string]float64{"recovery1_pass": 1, "recovery2_waiting": 4.8, "recovery2_pass": 0}},
		// 80 of the last window's 200 records at 5: 4.4, within 10% of 4
		// (inclusive); 90 of them: 4.45, not
		{name: "queue at 10%", run: seedRun{step: waiting(in(344, 348), 5)}, verdict: "pass", figs: map[string]float64{"recovery1_waiting": 4.4}},
		{name: "queue past 10%", run: seedRun{step: waiting(in(344, 348.5), 5)}, verdict: "fail", detail: "waiting queue 4.45 at its end"},
		{name: "rate low at the end", run: seedRun{successGap: gapIn(in(398, 408), 0.25)}, verdict: "fail",
			detail: "recovery recovery-2: completion rate 4 req/s at its end, not within 10% of clean segment C's median 5",
			figs:   map[string]float64{"recovery2_completion_rps": 4, "recovery2_completion_ratio": 0.8, "recovery2_pass": 0}},
		{name: "rate back only after the window", run: seedRun{successGap: gapIn(in(324, 344), 1)}, verdict: "pass"},
		{name: "waiting median 0, back to 0", run: seedRun{step: waiting(func(s float64) bool { return !in(300, 330)(s) }, 0)}, verdict: "pass",
			figs: map[string]float64{"clean_c_waiting": 0, "recovery1_waiting": 0}},
		{name: "waiting median 0, one left waiting", run: seedRun{step: func(s float64, r *Layer1Record) {
			r.NumWaitingReqs = 0
			if s >= 407.9 {
				r.NumWaitingReqs = 1
			}
		}}, verdict: "fail", detail: "recovery recovery-2: waiting queue 0.01 at its end, not within 10% of clean segment C's median 0"},
		{name: "no clean completions", run: seedRun{successGap: gapIn(in(220, 300), 0)}, verdict: "fail", detail: "median completion rate is 0",
			figs: map[string]float64{"clean_c_completion_rps": 0}},
		{name: "recovery extended", run: seedRun{recoveryS: 31}, verdict: "fail", detail: "recovery recovery-1 lasted 31.000 s, the fixed recovery is 30 s",
			figs: map[string]float64{"recovery1_seconds": 31, "recovery1_pass": 1}},
		{name: "no profile windows", run: seedRun{noProfile: true}, verdict: "fail", detail: "no recovery segment"},
		{name: "no Layer-1 record in the last window", run: seedRun{stepGapNS: 20_000_000_000}, verdict: "fail", detail: "no Layer-1 record in its last window"},
		{name: "no Layer-1 directory given", run: seedRun{}, noL1: true, verdict: "error", detail: "--layer1-dir"},
		{name: "Layer-1 line not schema-v1", run: seedRun{step: func(s float64, r *Layer1Record) {
			if r.Step == 3 {
				r.Schema = 2
			}
		}}, verdict: "fail", detail: "line 4: unknown schema 2"},
		{name: "recovery without a profile window before it", run: seedRun{edit: func(res map[string]any) {
			segs := res["segments"].([]map[string]any)
			segs[4]["kind"] = "clean" // profile-1
		}}, verdict: "fail", detail: "recovery segment recovery-1 does not follow a profile window"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rd, ld := tc.run.write(t)
			o := DefaultRecovery()
			o.Layer1Dir = ld
			if tc.noL1 {
				o.Layer1Dir = ""
			}
			wantResult(t, RecoveryDir(rd, o), tc.verdict, tc.detail, tc.figs)
		})
	}
	if r := RecoveryDir(t.TempDir(), DefaultRecovery()); r.Verdict != "error" {
		t.Fatalf("no result.json: %+v", r)
	}
}

// The recovery rule's own false-failure rate: the clean segments' samples
// (every second from each segment's start + 10 s to its end: 3 x 71)
// against clean segment C's medians. The waiting queue is 6 in [60, 100)
// s and 4 elsewhere (C's median): the samples of segment A at t = 70..107
// s hold more than 20% of records at 6 (mean over 4.4), 38 of 213 out of
// the 10% band; the rate (5 req/s) never leaves it. The calibrated rule
// (quantile 0.99) widens the waiting band to 50%, where those samples lie.
func TestRecoverySelfCheck(t *testing.T) {
	last := func(s float64) bool { return s >= 398 && s < 408 }
	unit := 175.0 / 213
	for _, tc := range []struct {
		name    string
		atEnd   int64
		rule    string
		verdict string
		detail  string
	}{
		{"literal, queue 5.8 at the end", 58, RuleLiteral, "fail", "waiting queue 5.8 at its end, not within 10% of clean segment C's median 4"},
		{"calibrated, queue 5.8 at the end", 58, RuleCalibrated, "pass", "within 50.0% of clean segment C's medians"},
		{"calibrated, queue 6.5 at the end", 65, RuleCalibrated, "fail", "waiting queue 6.5 at its end, not within 50% of clean segment C's median 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// the last window's records average atEnd/10
			rd, ld := seedRun{step: func(s float64, r *Layer1Record) {
				r.NumWaitingReqs = 4
				if s >= 60 && s < 100 {
					r.NumWaitingReqs = 6
				}
				if last(s) {
					r.NumWaitingReqs = tc.atEnd / 10
					if r.Step%10 < tc.atEnd%10 {
						r.NumWaitingReqs++
					}
				}
			}}.write(t)
			o := DefaultRecovery()
			o.Layer1Dir, o.Rule = ld, tc.rule
			r := RecoveryDir(rd, o)
			figs := map[string]float64{"recovery.self.samples": 213, "recovery.self.rate_in_band_fraction": 1,
				"recovery.self.waiting_in_band_fraction": unit, "recovery.self.unit_pass_fraction": unit,
				"recovery.self.run_pass_fraction": unit * unit, "recovery.self.waiting_dev_p95": 0.5,
				"power.recovery.unit_pass_fraction": unit, "power.recovery.samples": 213}
			if tc.rule == RuleCalibrated {
				figs["recovery.calibrated.waiting_tolerance"] = 0.5
				figs["recovery.calibrated.rate_tolerance"] = 0.1
			}
			wantResult(t, r, tc.verdict, tc.detail, figs)
		})
	}
}
