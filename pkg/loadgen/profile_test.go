package loadgen

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeProfiler is a server whose profile window ends after `steps` steps
// of `step` each, writing one gzipped trace per rank then; /stop_profile
// before that writes the window so far; with reuse, every window after the
// first writes nothing (vLLM's reused profiler).
type fakeProfiler struct {
	dir          string
	ranks, steps int
	step         time.Duration
	reuse        bool
	layer1       string // when set, one line per step is appended
	// atStart, when set, is the Layer-1 lines appended at /start_profile
	// (the steps run at once) instead of one per step; the window's trace
	// is then written only at /stop_profile, which returns once it is (a
	// save still in progress at the stop, as vLLM's synchronous stop).
	atStart int

	mu      sync.Mutex
	window  int
	done    bool
	stopped chan struct{}
	wg      sync.WaitGroup
}

func (f *fakeProfiler) write(tag string) {
	if f.reuse && f.window > 1 {
		return
	}
	for r := range f.ranks {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		fmt.Fprintf(zw, `{"traceEvents":[],"tag":%q}`, tag)
		zw.Close()
		name := fmt.Sprintf("dp0_pp0_tp%d_dcp0_ep0_rank%d.%d.pt.trace.json.gz", r, r, time.Now().UnixNano())
		if err := os.WriteFile(filepath.Join(f.dir, name), b.Bytes(), 0o644); err != nil {
			panic(err)
		}
	}
}

func (f *fakeProfiler) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /start_profile", func(w http.ResponseWriter, _ *http.Request) {
		f.mu.Lock()
		f.window++
		f.done = false
		stop := make(chan struct{})
		f.stopped = stop
		f.mu.Unlock()
		if f.atStart > 0 {
			fh, _ := os.OpenFile(f.layer1, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
			fh.WriteString(strings.Repeat(`{"step":1}`+"\n", f.atStart))
			fh.Close()
			return
		}
		f.wg.Add(1)
		go func() { // ends at the window's last step or its stop
			defer f.wg.Done()
			t := time.NewTicker(f.step)
			defer t.Stop()
			for s := 0; s < f.steps; s++ {
				select {
				case <-t.C:
				case <-stop:
					return
				}
				if f.layer1 != "" {
					fh, _ := os.OpenFile(f.layer1, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
					fh.WriteString(`{"step":1}` + "\n")
					fh.Close()
				}
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if !f.done {
				f.done = true
				f.write("full")
			}
		}()
	})
	mux.HandleFunc("POST /stop_profile", func(w http.ResponseWriter, _ *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.stopped != nil {
			close(f.stopped)
			f.stopped = nil
		}
		if !f.done {
			f.done = true
			f.write("truncated")
		}
	})
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Write([]byte("data: {\"choices\":[{\"text\":\"x\"}],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":4}}\n\ndata: [DONE]\n\n"))
	})
	return mux
}

func runWindows(t *testing.T, f *fakeProfiler, budget time.Duration, wait ProfileWait) *Result {
	t.Helper()
	srv := httptest.NewServer(f.handler())
	t.Cleanup(func() { srv.Close(); f.wg.Wait() })
	dir := t.TempDir()
	cfg := Config{BaseURL: srv.URL, Model: "m", Endpoint: Completions, LoadPoint: "x", MaxConcurrency: 1,
		ProfileWindows: 2, ProfileWindowBudget: budget, ProfileWarmupIterations: 2, ProfileActiveIterations: 8,
		ProfileWait: wait, ProfileHold: 10 * time.Millisecond, DrainTimeout: time.Second, ResultDir: dir}
	res, err := Run(context.Background(), cfg, smallManifest(t, 100000))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.ProfileWindows) != 2 {
		t.Fatalf("%d windows", len(res.ProfileWindows))
	}
	return res
}

// TestProfileWindowWaitsForTraces: the window lasts as long as the
// server's 2+8 steps, longer than a fixed hold would, and records the
// trace of every rank.
func TestProfileWindowWaitsForTraces(t *testing.T) {
	f := &fakeProfiler{dir: t.TempDir(), ranks: 2, steps: 10, step: 20 * time.Millisecond}
	res := runWindows(t, f, 10*time.Second, ProfileWait{TracesDir: f.dir, Ranks: 2, Poll: 10 * time.Millisecond})
	for _, w := range res.ProfileWindows {
		if w.Outcome != WindowComplete || w.TracesFound != 2 || w.WaitFor != WaitTraces || w.Failure != "" {
			t.Fatalf("window %+v", w)
		}
		if w.WaitS < 0.2 {
			t.Fatalf("window %d waited %v s, less than the server's ten 20 ms steps", w.Index, w.WaitS)
		}
		for _, tf := range w.Traces {
			if !tf.Complete || tf.AfterStop || tf.Rank < 0 || tf.Rank > 1 {
				t.Fatalf("trace %+v", tf)
			}
		}
	}
}

// TestProfileWindowPastBudget: steps too slow for the budget: the stop
// cuts the window short, and the window says so.
func TestProfileWindowPastBudget(t *testing.T) {
	f := &fakeProfiler{dir: t.TempDir(), ranks: 1, steps: 10, step: time.Second}
	res := runWindows(t, f, 150*time.Millisecond, ProfileWait{TracesDir: f.dir, Ranks: 1, Poll: 10 * time.Millisecond})
	w := res.ProfileWindows[0]
	if w.Outcome != WindowIncomplete || !strings.Contains(w.Failure, "0.15 s budget") || !strings.Contains(w.Failure, "truncated") {
		t.Fatalf("window %+v", w)
	}
	if w.TracesFound != 1 || !w.Traces[0].AfterStop {
		t.Fatalf("traces %+v", w.Traces)
	}
}

// TestProfileWindowLateOrTruncated: a window whose traces are complete
// only on the stop is late when the server had run all its steps before
// /stop_profile (the Layer-1 stream grew by 10), with both times; a
// truncated one when it had not (5 of 10 steps).
func TestProfileWindowLateOrTruncated(t *testing.T) {
	for _, tc := range []struct {
		steps   int
		outcome string
		failure string
	}{
		{10, WindowLate, "late, not truncated: the server ran all 10 steps of its window before /stop_profile (10 Layer-1 steps seen), and its traces were complete "},
		{5, WindowIncomplete, "the server ran 5 of the 10 steps of its window within the 0.2 s budget: /stop_profile cut it short"},
	} {
		dir := t.TempDir()
		l1 := filepath.Join(dir, "opprof", "layer1.jsonl")
		os.MkdirAll(filepath.Dir(l1), 0o755)
		os.WriteFile(l1, nil, 0o644)
		f := &fakeProfiler{dir: dir, ranks: 1, layer1: l1, atStart: tc.steps}
		// the Layer-1 stream given as its directory, the server's VLLM_OPPROF_DIR
		res := runWindows(t, f, 200*time.Millisecond, ProfileWait{TracesDir: dir, Ranks: 1, Layer1Stream: filepath.Dir(l1), Poll: 10 * time.Millisecond})
		w := res.ProfileWindows[0]
		if w.Outcome != tc.outcome || !strings.Contains(w.Failure, tc.failure) || w.TraceReadyS == nil || *w.TraceReadyS < 0.2 ||
			!strings.Contains(w.Failure, "past the 0.2 s budget") && tc.outcome == WindowLate {
			t.Fatalf("%d steps: window %+v (ready %v)", tc.steps, w, w.TraceReadyS)
		}
	}
}

// TestProfileWindowReusedProfiler: the second window writes nothing; it
// waits its budget and records no trace, while the first has one.
func TestProfileWindowReusedProfiler(t *testing.T) {
	f := &fakeProfiler{dir: t.TempDir(), ranks: 1, steps: 3, step: 10 * time.Millisecond, reuse: true}
	res := runWindows(t, f, 300*time.Millisecond, ProfileWait{TracesDir: f.dir, Ranks: 1, Poll: 10 * time.Millisecond})
	w1, w2 := res.ProfileWindows[0], res.ProfileWindows[1]
	if w1.Outcome != WindowComplete || w1.TracesFound != 1 {
		t.Fatalf("first window %+v", w1)
	}
	if w2.Outcome != WindowIncomplete || w2.TracesFound != 0 || w2.StartStatus != 200 || w2.StopStatus != 200 ||
		!strings.Contains(w2.Failure, "no trace file appeared") {
		t.Fatalf("second window %+v", w2)
	}
}

// TestProfileWindowLayer1Steps: without traces, the window waits for the
// Layer-1 stream to grow by warm-up + active records.
func TestProfileWindowLayer1Steps(t *testing.T) {
	dir := t.TempDir()
	l1 := filepath.Join(dir, "layer1.jsonl")
	if err := os.WriteFile(l1, []byte(`{"step":0}`+"\n"+`{"step":`), 0o644); err != nil { // a partial line
		t.Fatal(err)
	}
	f := &fakeProfiler{dir: dir, ranks: 1, steps: 12, step: 15 * time.Millisecond, layer1: l1}
	res := runWindows(t, f, 10*time.Second, ProfileWait{Layer1Stream: l1, Poll: 5 * time.Millisecond})
	for _, w := range res.ProfileWindows {
		if w.Outcome != WindowComplete || w.StepsSeen == nil || *w.StepsSeen < 10 || w.WaitFor != WaitLayer1 {
			t.Fatalf("window %+v", w)
		}
	}
	// too short a budget: incomplete, with the steps it saw
	f2 := &fakeProfiler{dir: dir, ranks: 1, steps: 12, step: time.Second, layer1: filepath.Join(dir, "l1b.jsonl")}
	res = runWindows(t, f2, 100*time.Millisecond, ProfileWait{Layer1Stream: f2.layer1, Poll: 5 * time.Millisecond})
	if w := res.ProfileWindows[0]; w.Outcome != WindowIncomplete || !strings.Contains(w.Failure, "of the 10 steps") {
		t.Fatalf("window %+v", w)
	}
}

// TestProfileWindowLegacyHold: without a source, the fixed hold, and the
// window's end is not observed.
func TestProfileWindowLegacyHold(t *testing.T) {
	f := &fakeProfiler{dir: t.TempDir(), ranks: 1, steps: 1, step: time.Millisecond}
	res := runWindows(t, f, time.Second, ProfileWait{})
	if w := res.ProfileWindows[0]; w.Outcome != WindowNotObserved || w.WaitFor != WaitHold {
		t.Fatalf("window %+v", w)
	}
}

func TestTraceRank(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ranks int
		want  int
	}{
		{"dp0_pp0_tp1_dcp0_ep0_rank1.17.pt.trace.json.gz", 2, 1},
		{"host_123.17.pt.trace.json.gz", 1, 0},
		{"host_123.17.pt.trace.json.gz", 2, -1},
	} {
		if got := traceRank(tc.name, tc.ranks); got != tc.want {
			t.Errorf("traceRank(%s, %d) = %d, want %d", tc.name, tc.ranks, got, tc.want)
		}
	}
}

// TestTraceComplete: a gzip cut short is not complete, nor a JSON trace
// without its closing brace.
func TestTraceComplete(t *testing.T) {
	dir := t.TempDir()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	fmt.Fprint(zw, `{"traceEvents":[`+strings.Repeat(`{"ph":"X"},`, 1000)+`{}]}`)
	zw.Close()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		path string
		want bool
	}{
		{write("a.pt.trace.json.gz", b.Bytes()), true},
		{write("b.pt.trace.json.gz", b.Bytes()[:b.Len()-4]), false},
		{write("c.pt.trace.json.gz", b.Bytes()[:b.Len()/2]), false},
		{write("d.pt.trace.json", []byte(`{"traceEvents":[]}`+"\n")), true},
		{write("e.pt.trace.json", []byte(`{"traceEvents":[`)), false},
		{filepath.Join(dir, "missing.gz"), false},
	} {
		if got := traceComplete(tc.path); got != tc.want {
			t.Errorf("traceComplete(%s) = %v", filepath.Base(tc.path), got)
		}
	}
}
