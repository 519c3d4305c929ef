package contract

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warden/pkg/gates"
)

func TestProfileWindows(t *testing.T) {
	ok := ProfileWindowRecord{Index: 1, StartStatus: 200, StopStatus: 200, WaitFor: "traces", Outcome: "complete", TracesFound: 1, WaitS: 4, BudgetS: 24}
	second := func(m func(*ProfileWindowRecord)) ProfileWindowRecord {
		w := ok
		w.Index = 2
		m(&w)
		return w
	}
	for _, tc := range []struct {
		name    string
		ws      []ProfileWindowRecord
		o       ProfileWindowOptions
		verdict string
		class   string
		detail  string
	}{
		{"complete", []ProfileWindowRecord{ok, second(func(*ProfileWindowRecord) {})}, ProfileWindowOptions{Windows: 2}, gates.Pass, "", "2 profile windows"},
		{"reused profiler", []ProfileWindowRecord{ok, second(func(w *ProfileWindowRecord) {
			w.Outcome, w.TracesFound, w.Failure = "incomplete", 0, "no trace file appeared within the 24 s budget, nor after /stop_profile"
		})}, ProfileWindowOptions{Windows: 2}, gates.Fail, "", ReusedProfilerMessage},
		{"truncated", []ProfileWindowRecord{ok, second(func(w *ProfileWindowRecord) {
			w.Outcome, w.Failure = "incomplete", "cut short"
		})}, ProfileWindowOptions{Windows: 2}, gates.Fail, gates.ClassProfileArtifact, "window 2 did not complete within its 24 s budget: cut short"},
		{"first window empty too", []ProfileWindowRecord{second(func(w *ProfileWindowRecord) {
			w.Index, w.Outcome, w.TracesFound = 1, "incomplete", 0
		}), second(func(w *ProfileWindowRecord) { w.Outcome, w.TracesFound = "incomplete", 0 })}, ProfileWindowOptions{}, gates.Fail, gates.ClassProfileArtifact, "window 1 did not complete"},
		{"late", []ProfileWindowRecord{ok, second(func(w *ProfileWindowRecord) {
			w.Outcome, w.Failure = "late", "late, not truncated: ... complete 29.012 s after /start_profile, past the 24 s budget"
		})}, ProfileWindowOptions{Windows: 2}, gates.Fail, gates.ClassProfileArtifact, "window 2 was late: late, not truncated: ... complete 29.012 s after /start_profile, past the 24 s budget"},
		{"status", []ProfileWindowRecord{second(func(w *ProfileWindowRecord) { w.Index, w.StopStatus = 1, 500 })}, ProfileWindowOptions{}, gates.Fail, gates.ClassProfileArtifact, "/stop_profile 500"},
		{"count", []ProfileWindowRecord{ok}, ProfileWindowOptions{Windows: 2}, gates.Fail, "", "1 profile windows, the protocol declares 2"},
		{"hold noted", []ProfileWindowRecord{second(func(w *ProfileWindowRecord) { w.Index, w.Outcome, w.WaitFor = 1, "not-observed", "hold" })}, ProfileWindowOptions{}, gates.Pass, "", "not observed"},
		{"hold required", []ProfileWindowRecord{second(func(w *ProfileWindowRecord) { w.Index, w.Outcome, w.WaitFor = 1, "not-observed", "hold" })}, ProfileWindowOptions{RequireObserved: true}, gates.Error, "", "was not observed"},
		{"old format", []ProfileWindowRecord{second(func(w *ProfileWindowRecord) { w.Index, w.Outcome, w.WaitFor = 1, "", "" })}, ProfileWindowOptions{}, gates.Error, "", "does not say"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ProfileWindows(tc.ws, tc.o)
			if r.Verdict != tc.verdict || r.Class != tc.class || !strings.Contains(r.Detail, tc.detail) {
				t.Fatalf("%+v", r)
			}
			if (tc.detail == ReusedProfilerMessage) != (r.Figures["reused_profiler"] == 1) {
				t.Fatalf("reused_profiler figure %v", r.Figures)
			}
		})
	}
}

// The slowest window's traces, for the power check: only windows whose
// traces were seen complete count.
func TestProfileWindowsReadyFigures(t *testing.T) {
	at := func(v float64) *float64 { return &v }
	ws := []ProfileWindowRecord{
		{Index: 1, StartStatus: 200, StopStatus: 200, WaitFor: "traces", Outcome: "complete", TracesFound: 1, BudgetS: 24, TraceReadyS: at(17.5)},
		{Index: 2, StartStatus: 200, StopStatus: 200, WaitFor: "traces", Outcome: "complete", TracesFound: 1, BudgetS: 24, TraceReadyS: at(21.25)},
		{Index: 3, StartStatus: 200, StopStatus: 200, WaitFor: "traces", Outcome: "incomplete", BudgetS: 24},
	}
	r := ProfileWindows(ws, ProfileWindowOptions{})
	if r.Figures["trace_ready_s_max"] != 21.25 || r.Figures["power.profile_window.ready_s_max"] != 21.25 || r.Figures["power.profile_window.samples"] != 2 {
		t.Fatalf("%v", r.Figures)
	}
	if r := ProfileWindows(ws[2:], ProfileWindowOptions{}); r.Figures["power.profile_window.samples"] != 0 {
		if _, ok := r.Figures["power.profile_window.ready_s_max"]; ok {
			t.Fatalf("no window's traces complete, yet a ready time: %v", r.Figures)
		}
	}
}

func TestProfileWindowsDir(t *testing.T) {
	dir := t.TempDir()
	if r := ProfileWindowsDir(dir, ProfileWindowOptions{}); r.Verdict != gates.Error {
		t.Fatalf("no result: %+v", r)
	}
	os.WriteFile(filepath.Join(dir, "result.json"), []byte(`{"schema":"x"}`), 0o644)
	if r := ProfileWindowsDir(dir, ProfileWindowOptions{}); r.Verdict != gates.Error || !strings.Contains(r.Detail, "no profile_windows") {
		t.Fatalf("no windows: %+v", r)
	}
	os.WriteFile(filepath.Join(dir, "result.json"), []byte(`{"profile_windows":[{"index":1,"start_status":200,"stop_status":200,"wait_for":"traces","outcome":"complete","traces_found":1}]}`), 0o644)
	if r := ProfileWindowsDir(dir, ProfileWindowOptions{Windows: 1}); r.Verdict != gates.Pass {
		t.Fatalf("one window: %+v", r)
	}
}
