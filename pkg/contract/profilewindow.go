package contract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"

	"warden/pkg/gates"
	"warden/pkg/safefile"
)

// Profile windows as the load client saw them (result.json's
// profile_windows, docs/loadgen.md): seed 002, "Layer 2: sampled Kineto
// windows": "/start_profile and /stop_profile return HTTP 200" and each
// window runs the server's 2+8 schedule to its end ("active ProfilerStep
// numbers are exactly 2 through 9"); A-P3-5: "reusing the stopped object
// returned without error but emitted no second trace", which the seventh
// patch repairs.

// ReusedProfilerMessage is the verdict of a later window whose calls
// answered 200 while no trace appeared, the first window's having
// appeared: the unpatched vLLM profiler.
const ReusedProfilerMessage = "second profile window wrote no trace: vLLM reuses its profiler (issue #45987); the protocol requires the fresh-schedule patch"

// ProfileWindowRecord is the part of a profile window the rules read.
type ProfileWindowRecord struct {
	Index       int     `json:"index"`
	StartStatus int     `json:"start_status"`
	StopStatus  int     `json:"stop_status"`
	WaitFor     string  `json:"wait_for"`
	Outcome     string  `json:"outcome"`
	Failure     string  `json:"failure"`
	TracesFound int     `json:"traces_found"`
	WaitS       float64 `json:"wait_s"`
	BudgetS     float64 `json:"budget_s"`
	// TraceReadyS is when every rank's trace was seen complete, from the
	// /start_profile call; absent when never.
	TraceReadyS *float64 `json:"trace_ready_s"`
}

// ProfileWindowOptions are the protocol's declarations.
type ProfileWindowOptions struct {
	// Windows is the windows the protocol declares; 0 takes any number.
	Windows int
	// RequireObserved makes a window whose end was not watched (the
	// legacy fixed hold) an error: the check cannot tell it ran 2+8 steps.
	RequireObserved bool
}

// ProfileWindows judges the windows of one run.
//
// Verdicts: fail when the count differs from the declared one, when a
// call did not answer 200, or when a window did not see the server's
// window end within its budget (class profile-artifact: the seed's one
// exact rerun); a later window that wrote no trace while its calls
// answered 200 and the first window's trace appeared is
// ReusedProfilerMessage, without a class, so the campaign stops at once:
// an exact rerun on the same server cannot repair it. Error when a window
// does not say whether it ended (an older result, or the legacy hold with
// RequireObserved).
//
// A late window (its server ran every step before /stop_profile, its
// traces complete only past the budget) fails with both times, as
// profile-artifact: whole, not truncated, but past the bound.
//
// Figures: windows, complete, incomplete, late, not_observed, traces_min,
// wait_s_max, trace_ready_s_max (the slowest window's traces, from the
// /start_profile call; absent when no window's were seen complete),
// reused_profiler (1 or 0); for the power check
// power.profile_window.ready_s_max and power.profile_window.samples.
func ProfileWindows(ws []ProfileWindowRecord, o ProfileWindowOptions) Result {
	f := newFindings()
	f.fig("windows", float64(len(ws)))
	if o.Windows > 0 && len(ws) != o.Windows {
		f.failf("%d profile windows, the protocol declares %d", len(ws), o.Windows)
	}
	counts := map[string]int{}
	tmin, wmax, artifact := -1, 0.0, false
	rmax, ready := 0.0, 0
	for _, w := range ws {
		counts[w.Outcome]++
		if tmin < 0 || w.TracesFound < tmin {
			tmin = w.TracesFound
		}
		wmax = max(wmax, w.WaitS)
		if w.TraceReadyS != nil {
			rmax, ready = max(rmax, *w.TraceReadyS), ready+1
		}
		switch {
		case w.StartStatus != 200 || w.StopStatus != 200:
			artifact = true
			f.failf("window %d: /start_profile answered %d, /stop_profile %d", w.Index, w.StartStatus, w.StopStatus)
		case w.Outcome == "complete":
		case w.Outcome == "incomplete":
			artifact = true
			f.failf("window %d did not complete within its %g s budget: %s", w.Index, w.BudgetS, w.Failure)
		case w.Outcome == "late":
			artifact = true
			f.failf("window %d was late: %s", w.Index, w.Failure)
		case w.Outcome == "not-observed" && !o.RequireObserved:
			f.notef("window %d held a fixed time: its end was not observed", w.Index)
		case w.Outcome == "not-observed":
			f.errorf("window %d held a fixed time: whether the server ran its 2+8 steps was not observed", w.Index)
		default:
			f.errorf("window %d: the result does not say whether the server's window ended (outcome %q)", w.Index, w.Outcome)
		}
	}
	reused := reusedProfiler(ws)
	f.fig("complete", float64(counts["complete"]))
	f.fig("incomplete", float64(counts["incomplete"]))
	f.fig("late", float64(counts["late"]))
	f.fig("not_observed", float64(counts["not-observed"]))
	if ready > 0 {
		f.fig("trace_ready_s_max", rmax)
		f.fig("power.profile_window.ready_s_max", rmax)
		f.fig("power.profile_window.samples", float64(ready))
	}
	f.fig("traces_min", float64(max(tmin, 0)))
	f.fig("wait_s_max", wmax)
	f.fig("reused_profiler", b2f(reused))
	if reused {
		f.fails = append([]string{ReusedProfilerMessage}, f.fails...)
	}
	r := f.result(fmt.Sprintf("%d profile windows, each seen to end within its budget", len(ws)))
	if !r.Passed() && artifact && !reused {
		r.Class = gates.ClassProfileArtifact
	}
	return r
}

// reusedProfiler reports a later window that watched the traces, whose
// calls answered 200, and that found none, after a first window that
// found some.
func reusedProfiler(ws []ProfileWindowRecord) bool {
	if len(ws) < 2 || ws[0].TracesFound == 0 || ws[0].WaitFor != "traces" {
		return false
	}
	for _, w := range ws[1:] {
		if w.WaitFor == "traces" && w.StartStatus == 200 && w.StopStatus == 200 && w.TracesFound == 0 {
			return true
		}
	}
	return false
}

// ProfileWindowsDir reads DIR/result.json and judges its profile windows;
// a result that cannot be read or has no profile_windows is an error.
func ProfileWindowsDir(dir string, o ProfileWindowOptions) Result {
	path := filepath.Join(dir, "result.json")
	data, err := safefile.ReadFile(path, 64<<20)
	if err != nil {
		f := newFindings()
		f.errorf("result: %v", err)
		return f.result("")
	}
	var doc struct {
		Windows *[]ProfileWindowRecord `json:"profile_windows"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil || doc.Windows == nil {
		f := newFindings()
		f.errorf("%s: no profile_windows (%v)", path, err)
		return f.result("")
	}
	return ProfileWindows(*doc.Windows, o)
}
