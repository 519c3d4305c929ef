package loadgen

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// A profile window ends when the server's window ends. The server's
// profiler counts engine steps (vLLM's --profiler-config schedule: wait 0,
// warm-up 2, active 8) and saves its trace after the last active step; a
// /stop_profile that comes earlier saves what it has, a truncated window
// (seed 002, "Layer 2: sampled Kineto windows": "active ProfilerStep
// numbers are exactly 2 through 9"). So after /start_profile the client
// waits, bounded by the window budget (the seed's 24 s per window), until
// it sees the server's window end:
//
//   - traces: a new complete trace file for every rank in the traces
//     directory (one per rank and window, as vLLM's tensorboard handler
//     writes them), or
//   - layer1-steps: the Layer-1 stream growing by warm-up + active records
//     (one record per engine step),
//
// and only then calls /stop_profile. Without either source it holds
// ProfileHold (the legacy fixed hold), and the window's end is not
// observed.

// Wait sources of a profile window.
const (
	WaitTraces = "traces"
	WaitLayer1 = "layer1-steps"
	WaitHold   = "hold"
)

// Outcomes of a profile window.
const (
	// WindowComplete: the server's window was seen to end within the budget.
	WindowComplete = "complete"
	// WindowIncomplete: it was not (Failure says why).
	WindowIncomplete = "incomplete"
	// WindowNotObserved: the legacy fixed hold; nothing was watched.
	WindowNotObserved = "not-observed"
	// WindowLate: the server ran every step of its window before
	// /stop_profile (the Layer-1 stream grew by warm-up + active steps),
	// and its traces were complete only after the budget: whole, not
	// truncated, but past the bound (Failure gives both times).
	WindowLate = "late"
)

// DefaultTracePattern matches the torch profiler's gzipped Chrome traces
// (vLLM names them <worker>.<ns>.pt.trace.json.gz, the worker name ending
// in rank<R>).
const DefaultTracePattern = "*.pt.trace.json.gz"

// ProfileWait says how a profile window waits for the server's window.
type ProfileWait struct {
	// TracesDir is the server's trace directory (vLLM's
	// torch_profiler_dir); the window waits for new trace files there.
	TracesDir string
	// Ranks is the trace files expected per window, one per rank (TP).
	Ranks int
	// TracePattern is the trace files' glob; DefaultTracePattern if empty.
	TracePattern string
	// Layer1Stream is the server's Layer-1 JSONL stream, or a directory
	// holding exactly one: without TracesDir, the window waits for it to
	// grow by warm-up + active records; with TracesDir its growth is
	// recorded as steps seen, which tells a late window from a truncated
	// one.
	Layer1Stream string
	// Poll is how often the sources are looked at; 100 ms if zero.
	Poll time.Duration
}

func (p ProfileWait) source() string {
	switch {
	case p.TracesDir != "":
		return WaitTraces
	case p.Layer1Stream != "":
		return WaitLayer1
	}
	return WaitHold
}

func (p ProfileWait) check() error {
	if p.TracesDir != "" && p.Ranks < 1 {
		return errors.New("a traces directory needs at least one expected rank")
	}
	if p.TracePattern != "" {
		if _, err := filepath.Match(p.TracePattern, "x"); err != nil {
			return fmt.Errorf("trace pattern %q: %w", p.TracePattern, err)
		}
	}
	if p.Poll < 0 {
		return errors.New("the poll interval must not be negative")
	}
	return nil
}

// ProfileWindow is one synchronous /start_profile ... /stop_profile pair
// and what the client saw of the server's window in between. Status 0
// means no response; the errors say why, in the client's words.
type ProfileWindow struct {
	Index             int    `json:"index"`
	StartCallMonoNS   int64  `json:"start_call_mono_ns"`
	StartReturnMonoNS int64  `json:"start_return_mono_ns"`
	StartStatus       int    `json:"start_status"`
	StartError        string `json:"start_error,omitempty"`
	StopCallMonoNS    int64  `json:"stop_call_mono_ns"`
	StopReturnMonoNS  int64  `json:"stop_return_mono_ns"`
	StopStatus        int    `json:"stop_status"`
	StopError         string `json:"stop_error,omitempty"`
	// WaitFor is the source watched: traces, layer1-steps or hold.
	WaitFor string `json:"wait_for"`
	// BudgetS bounds the window, from the /start_profile call.
	BudgetS float64 `json:"budget_s"`
	// WaitS is the time from /start_profile returning to the /stop_profile
	// call.
	WaitS float64 `json:"wait_s"`
	// Outcome is complete, incomplete or not-observed; Failure says why a
	// window is incomplete.
	Outcome string `json:"outcome"`
	Failure string `json:"failure,omitempty"`
	// StepsNeeded is warm-up + active; StepsSeen the Layer-1 records
	// written between /start_profile returning and the /stop_profile
	// call (present only when a Layer-1 stream is watched).
	StepsNeeded int    `json:"steps_needed"`
	StepsSeen   *int64 `json:"steps_seen,omitempty"`
	// RanksExpected is the trace files a window needs (traces only).
	RanksExpected int `json:"ranks_expected,omitempty"`
	// Traces are the trace files that appeared in the traces directory
	// during the window, before or after /stop_profile; TracesFound
	// counts the complete ones.
	Traces      []TraceFile `json:"traces"`
	TracesFound int         `json:"traces_found"`
	// TraceReadyS is the time from the /start_profile call to when every
	// rank's trace was seen complete: at a poll before /stop_profile, or
	// at the /stop_profile return for traces first complete after it
	// (the server's synchronous save returns with the stop). Absent when
	// they never were.
	TraceReadyS *float64 `json:"trace_ready_s,omitempty"`
}

// TraceFile is one trace the server wrote during a window. Only its name
// (never its directory), rank and size are recorded.
type TraceFile struct {
	File  string `json:"file"`
	Rank  int    `json:"rank"` // -1 when neither the name nor a single rank says
	Bytes int64  `json:"bytes"`
	// Complete: it is completely written (traceComplete).
	Complete bool `json:"complete"`
	// AfterStop: first seen complete after /stop_profile returned, as a
	// window cut short by the stop writes it.
	AfterStop bool `json:"after_stop"`
}

var rankInTraceName = regexp.MustCompile(`rank(\d+)`)

// traceRank reads the rank from a trace name: the last "rank<R>" (vLLM's
// dp0_pp0_tp0_dcp0_ep0_rank0.<ns>.pt.trace.json.gz), else 0 when one rank
// is expected, else -1.
func traceRank(name string, ranks int) int {
	if m := rankInTraceName.FindAllStringSubmatch(name, -1); len(m) > 0 {
		r, err := strconv.Atoi(m[len(m)-1][1])
		if err == nil {
			return r
		}
	}
	if ranks == 1 {
		return 0
	}
	return -1
}

// traceWatch follows the traces directory during one window.
type traceWatch struct {
	dir, pattern string
	ranks        int
	before       map[string]bool // names present before /start_profile
	seen         map[string]*TraceFile
	order        []string
	sizes        map[string]int64 // last size of a file not yet complete
	readyAt      int64            // when every rank's trace was first seen complete before the stop
}

func newTraceWatch(p ProfileWait) *traceWatch {
	pat := p.TracePattern
	if pat == "" {
		pat = DefaultTracePattern
	}
	w := &traceWatch{dir: p.TracesDir, pattern: pat, ranks: p.Ranks, before: map[string]bool{},
		seen: map[string]*TraceFile{}, sizes: map[string]int64{}}
	for _, n := range w.list() {
		w.before[n] = true
	}
	return w
}

// list returns the names matching the pattern (none when the directory
// does not exist yet: the server creates it on its first trace).
func (w *traceWatch) list() []string {
	paths, _ := filepath.Glob(filepath.Join(w.dir, w.pattern))
	names := make([]string, 0, len(paths))
	for _, p := range paths {
		names = append(names, filepath.Base(p))
	}
	sort.Strings(names)
	return names
}

// scan looks at the new files; a file is checked for completeness once
// its size held still between two scans (final: at once).
func (w *traceWatch) scan(afterStop, final bool) {
	for _, n := range w.list() {
		if w.before[n] {
			continue
		}
		tf, ok := w.seen[n]
		if !ok {
			tf = &TraceFile{File: n, Rank: traceRank(n, w.ranks)}
			w.seen[n] = tf
			w.order = append(w.order, n)
		}
		if tf.Complete {
			continue
		}
		st, err := os.Stat(filepath.Join(w.dir, n))
		if err != nil {
			continue
		}
		tf.Bytes = st.Size()
		last, had := w.sizes[n]
		w.sizes[n] = st.Size()
		if st.Size() == 0 || (!final && (!had || last != st.Size())) {
			continue
		}
		if traceComplete(filepath.Join(w.dir, n)) {
			tf.Complete, tf.AfterStop = true, afterStop
		}
	}
}

// missing returns the ranks without a complete new trace.
func (w *traceWatch) missing() []int {
	have := map[int]bool{}
	for _, tf := range w.seen {
		if tf.Complete {
			have[tf.Rank] = true
		}
	}
	var miss []int
	for r := range w.ranks {
		if !have[r] {
			miss = append(miss, r)
		}
	}
	return miss
}

func (w *traceWatch) files() ([]TraceFile, int) {
	out := make([]TraceFile, 0, len(w.order))
	n := 0
	for _, name := range w.order {
		tf := *w.seen[name]
		if tf.Complete {
			n++
		}
		out = append(out, tf)
	}
	return out, n
}

// traceComplete reports whether a trace file is completely written: a
// gzip stream that decompresses to its end with a matching checksum and
// length (the torch profiler writes it in place, so a partial file fails
// here), or an uncompressed trace whose last byte other than white space
// is its closing brace. Whether the trace holds a valid window is the
// Layer-2 validator's question, not the client's; nothing is kept in
// memory.
func traceComplete(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if !strings.HasSuffix(path, ".gz") {
		st, err := f.Stat()
		if err != nil || st.Size() == 0 {
			return false
		}
		tail := make([]byte, min(st.Size(), 256))
		if _, err := f.ReadAt(tail, st.Size()-int64(len(tail))); err != nil {
			return false
		}
		tail = bytes.TrimRight(tail, " \t\r\n")
		return len(tail) > 0 && tail[len(tail)-1] == '}'
	}
	zr, err := gzip.NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return false
	}
	_, err = io.Copy(io.Discard, zr)
	return err == nil
}

// stepWatch counts the Layer-1 records appended since the window began.
type stepWatch struct {
	path  string
	start int64 // size when the window began
	// partial: the window began inside a line, whose end is not a step
	// of the window
	partial bool
}

func newStepWatch(path string) *stepWatch {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		// a directory: the one stream in it (the server's Layer-1
		// directory, VLLM_OPPROF_DIR); none or several: no steps seen
		ms, _ := filepath.Glob(filepath.Join(path, "*.jsonl"))
		path = filepath.Join(path, "*.jsonl (none or several)")
		if len(ms) == 1 {
			path = ms[0]
		}
	}
	w := &stepWatch{path: path}
	if f, err := os.Open(path); err == nil {
		if st, err := f.Stat(); err == nil && st.Size() > 0 {
			w.start = st.Size()
			b := make([]byte, 1)
			if _, err := f.ReadAt(b, st.Size()-1); err == nil && b[0] != '\n' {
				w.partial = true
			}
		}
		f.Close()
	}
	return w
}

// steps returns the complete lines written since the window began.
func (w *stepWatch) steps() int64 {
	f, err := os.Open(w.path)
	if err != nil {
		return 0
	}
	defer f.Close()
	if _, err := f.Seek(w.start, io.SeekStart); err != nil {
		return 0
	}
	var n int64
	buf := make([]byte, 64<<10)
	for {
		k, err := f.Read(buf)
		for _, c := range buf[:k] {
			if c == '\n' {
				n++
			}
		}
		if err != nil {
			break
		}
	}
	if w.partial && n > 0 {
		n--
	}
	return n
}

// profileWindow calls /start_profile, waits for the server's window to
// end (bounded by the budget, from the /start_profile call), and calls
// /stop_profile, each call synchronous and timestamped. It returns false
// with the window when the run must stop (wait said so).
func (r *run) profileWindow(ctx context.Context, w int, wait func(int64) bool) (ProfileWindow, bool) {
	p := r.cfg.ProfileWait
	need := r.cfg.ProfileWarmupIterations + r.cfg.ProfileActiveIterations
	pw := ProfileWindow{Index: w, WaitFor: p.source(), BudgetS: r.cfg.ProfileWindowBudget.Seconds(), StepsNeeded: need, Traces: []TraceFile{}}
	var traces *traceWatch
	if p.TracesDir != "" {
		traces = newTraceWatch(p)
		pw.RanksExpected = p.Ranks
	}
	var steps *stepWatch
	if p.Layer1Stream != "" {
		steps = newStepWatch(p.Layer1Stream)
	}
	pw.StartCallMonoNS = r.clock.Now()
	pw.StartStatus, pw.StartError = r.post(ctx, "/start_profile")
	pw.StartReturnMonoNS = r.clock.Now()
	deadline := pw.StartCallMonoNS + int64(r.cfg.ProfileWindowBudget)

	ended, ok := false, true
	switch {
	case pw.StartStatus != 200:
		// nothing to wait for: close the window at once
	case pw.WaitFor == WaitHold:
		ok = wait(pw.StartReturnMonoNS + int64(r.cfg.ProfileHold))
	default:
		ended, ok = r.waitWindow(traces, steps, need, deadline, wait)
	}
	if !ok {
		pw.StopCallMonoNS, pw.StopReturnMonoNS = r.clock.Now(), r.clock.Now()
		pw.WaitS = float64(pw.StopCallMonoNS-pw.StartReturnMonoNS) / 1e9
		pw.Outcome, pw.Failure = WindowIncomplete, "the run stopped during the window"
		return pw, false
	}
	pw.StopCallMonoNS = r.clock.Now()
	pw.WaitS = float64(pw.StopCallMonoNS-pw.StartReturnMonoNS) / 1e9
	if steps != nil {
		n := steps.steps()
		pw.StepsSeen = &n
	}
	pw.StopStatus, pw.StopError = r.post(ctx, "/stop_profile")
	pw.StopReturnMonoNS = r.clock.Now()
	if traces != nil {
		if ended {
			ready := float64(traces.readyAt-pw.StartCallMonoNS) / 1e9
			pw.TraceReadyS = &ready
		}
		traces.scan(true, true)
		pw.Traces, pw.TracesFound = traces.files()
		if !ended && pw.StopStatus == 200 && len(traces.missing()) == 0 {
			ready := float64(pw.StopReturnMonoNS-pw.StartCallMonoNS) / 1e9
			pw.TraceReadyS = &ready
		}
	}
	pw.Outcome, pw.Failure = judgeWindow(pw, ended, traces)
	return pw, true
}

// waitWindow polls the window's source until the server's window ended
// or the deadline passed. It returns whether it ended, and false as its
// second value when the run must stop.
func (r *run) waitWindow(traces *traceWatch, steps *stepWatch, need int, deadline int64, wait func(int64) bool) (bool, bool) {
	poll := r.cfg.ProfileWait.Poll
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	for {
		if traces != nil {
			traces.scan(false, false)
			if len(traces.missing()) == 0 {
				traces.readyAt = r.clock.Now()
				return true, true
			}
		} else if steps.steps() >= int64(need) {
			return true, true
		}
		now := r.clock.Now()
		if now >= deadline {
			return false, true
		}
		if !wait(min(now+int64(poll), deadline)) {
			return false, false
		}
	}
}

// judgeWindow names the window's outcome and, when incomplete, why.
func judgeWindow(pw ProfileWindow, ended bool, traces *traceWatch) (string, string) {
	switch {
	case pw.StartStatus != 200:
		return WindowIncomplete, fmt.Sprintf("/start_profile answered %s", statusText(pw.StartStatus, pw.StartError))
	case pw.StopStatus != 200:
		return WindowIncomplete, fmt.Sprintf("/stop_profile answered %s", statusText(pw.StopStatus, pw.StopError))
	case pw.WaitFor == WaitHold:
		return WindowNotObserved, ""
	case ended:
		return WindowComplete, ""
	}
	budget := strconv.FormatFloat(pw.BudgetS, 'g', -1, 64)
	if traces == nil {
		return WindowIncomplete, fmt.Sprintf("the Layer-1 stream grew by %d of the %d steps of the server's window within the %s s budget; /stop_profile cut the window short",
			*pw.StepsSeen, pw.StepsNeeded, budget)
	}
	if pw.TracesFound == 0 {
		return WindowIncomplete, fmt.Sprintf("no trace file appeared within the %s s budget, nor after /stop_profile", budget)
	}
	miss := traces.missing()
	if len(miss) > 0 {
		return WindowIncomplete, fmt.Sprintf("no complete trace for rank(s) %v within the %s s budget, nor after /stop_profile", miss, budget)
	}
	ready := strconv.FormatFloat(*pw.TraceReadyS, 'f', 3, 64)
	switch {
	case pw.StepsSeen != nil && *pw.StepsSeen >= int64(pw.StepsNeeded):
		return WindowLate, fmt.Sprintf("late, not truncated: the server ran all %d steps of its window before /stop_profile (%d Layer-1 steps seen), and its traces were complete %s s after /start_profile, past the %s s budget",
			pw.StepsNeeded, *pw.StepsSeen, ready, budget)
	case pw.StepsSeen != nil:
		return WindowIncomplete, fmt.Sprintf("the server ran %d of the %d steps of its window within the %s s budget: /stop_profile cut it short and its traces were written on the stop, complete %s s after /start_profile (a truncated window)",
			*pw.StepsSeen, pw.StepsNeeded, budget, ready)
	}
	return WindowIncomplete, fmt.Sprintf("the traces were complete only on the stop, %s s after /start_profile, past the %s s budget: a truncated window or a late one, which the client cannot tell without the Layer-1 stream (--profile-layer1-stream); the layer2 validator judges its steps", ready, budget)
}

func statusText(status int, errText string) string {
	if status == 0 {
		return "no response (" + errText + ")"
	}
	return strconv.Itoa(status)
}
