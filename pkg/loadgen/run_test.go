package loadgen

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func smallManifest(t *testing.T, n int) *Manifest {
	t.Helper()
	var lines []string
	for i := 0; i < n; i++ {
		lines = append(lines, `{"id":"r`+strconv.Itoa(i)+`","prompt_token_ids":[1,2],"input_tokens":2,"output_tokens":4,"arrival":"steady"}`)
	}
	m, err := OpenManifest(writeManifest(t, lines...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestDrainNeverCancels: requests that never finish are waited for until
// the drain bound, abandoned (deadline-exceeded, drain.abandoned), the
// run incomplete without a done phase, and cancelled only after the
// results are written.
func TestDrainNeverCancels(t *testing.T) {
	clock, _ := NewClock()
	var mu sync.Mutex
	var cancelledAt []int64
	url := stalledServer(t, func() {
		mu.Lock()
		cancelledAt = append(cancelledAt, clock.Now())
		mu.Unlock()
	})
	dir := t.TempDir()
	cfg := Config{BaseURL: url, Model: "m", Endpoint: Completions, LoadPoint: "saturation", MaxConcurrency: 2,
		IgnoreEOS: true, CleanSegment: 200 * time.Millisecond, NumClean: 1, DrainTimeout: 300 * time.Millisecond,
		ResultDir: dir, PhaseFile: filepath.Join(dir, "phases.jsonl")}
	res, err := Run(context.Background(), cfg, smallManifest(t, 10))
	if !errors.Is(err, ErrDrainAbandoned) || res == nil {
		t.Fatalf("Run = %v; want ErrDrainAbandoned with a result", err)
	}
	if res.Complete || !res.Drain.TimedOut || res.Drain.Unfinished != 2 || res.Drain.Abandoned != 2 || res.Totals.ByClass[DeadlineExceeded] != 2 {
		t.Fatalf("complete %v, drain %+v, classes %v", res.Complete, res.Drain, res.Totals.ByClass)
	}
	data, _ := os.ReadFile(cfg.PhaseFile)
	if strings.Contains(string(data), `"done"`) || strings.Contains(string(data), `"drained"`) || !strings.Contains(string(data), `"drain"`) {
		t.Fatalf("an abandoning run's phases (a drain line, no drained or done): %s", data)
	}
	if d := time.Duration(res.Drain.EndMonoNS - res.Drain.StartMonoNS); d < 300*time.Millisecond {
		t.Fatalf("drain lasted %v, less than its timeout", d)
	}
	// The server sees the cancellations once Run has returned; none came
	// before the drain ended.
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(cancelledAt)
		mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 2 requests ended at the server", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, at := range cancelledAt {
		if at < res.Drain.EndMonoNS {
			t.Fatalf("a request was cancelled %v before the drain ended", time.Duration(res.Drain.EndMonoNS-at))
		}
	}
}

// TestInterruptCancelsAndRecords: an interruption cancels the outstanding
// requests, records them as client-cancelled, writes an incomplete
// result and no done phase.
func TestInterruptCancelsAndRecords(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The server notices a closed connection only once the body is read.
		_, _ = io.Copy(io.Discard, r.Body)
		cancel() // the first request interrupts the run
		<-r.Context().Done()
	}))
	defer srv.Close()
	dir := t.TempDir()
	phases := filepath.Join(dir, "phases.jsonl")
	cfg := Config{BaseURL: srv.URL, Model: "m", Endpoint: Completions, LoadPoint: "x", MaxConcurrency: 1,
		Warmup: time.Hour, CleanSegment: time.Hour, NumClean: 1, DrainTimeout: time.Hour, ResultDir: dir, PhaseFile: phases}
	res, err := Run(ctx, cfg, smallManifest(t, 10))
	if !errors.Is(err, ErrInterrupted) || res == nil {
		t.Fatalf("Run = %v, %v; want ErrInterrupted with a result", res, err)
	}
	if res.Complete || !res.Interrupted || res.Totals.ByClass[ClientCancelled] != 1 {
		t.Fatalf("complete %v interrupted %v classes %v", res.Complete, res.Interrupted, res.Totals.ByClass)
	}
	data, _ := os.ReadFile(phases)
	if strings.Contains(string(data), `"done"`) || strings.Contains(string(data), `"drained"`) || !strings.Contains(string(data), `"warmup"`) {
		t.Fatalf("an interrupted run's phases (no drained or done): %s", data)
	}
	if _, err := os.Stat(filepath.Join(dir, "result.json")); err != nil {
		t.Fatal(err)
	}
}

// TestManifestRewrittenMidRun: the manifest is rewritten in place while
// the run sends it. No request carries bytes other than the ones hashed
// at the start: result.json's manifest.sha256 is the original file's,
// every prompt the server received is the original row's, and the run
// stops, incomplete, at the first row that reads otherwise.
func TestManifestRewrittenMidRun(t *testing.T) {
	var orig, changed []string
	for i := 0; i < 50; i++ {
		line := `{"id":"r%d","prompt_token_ids":[%d,7],"input_tokens":2,"output_tokens":4,"arrival":"steady"}`
		orig = append(orig, fmt.Sprintf(line, i, 1000+i))
		changed = append(changed, fmt.Sprintf(line, i, 2000+i))
	}
	path := writeManifest(t, orig...)
	origBytes, _ := os.ReadFile(path)
	m, err := OpenManifest(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const rewriteAt = 5
	var mu sync.Mutex
	var got []string // prompts received, in order
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Prompt json.RawMessage `json:"prompt"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		got = append(got, string(req.Prompt))
		if len(got) == rewriteAt {
			if err := os.WriteFile(path, []byte(strings.Join(changed, "\n")+"\n"), 0o600); err != nil {
				t.Error(err)
			}
		}
		mu.Unlock()
		raw(tokenChunk, tokenChunk, tokenChunk, tokenChunk, usage(2, 4))(w, r)
	}))
	defer srv.Close()
	dir := t.TempDir()
	cfg := Config{BaseURL: srv.URL, Model: "m", Endpoint: Completions, LoadPoint: "saturation", MaxConcurrency: 1,
		IgnoreEOS: true, Warmup: time.Hour, CleanSegment: time.Hour, NumClean: 1, DrainTimeout: time.Minute, ResultDir: dir}
	res, err := Run(context.Background(), cfg, m)
	if !errors.Is(err, ErrManifestChanged) || res == nil || res.Complete {
		t.Fatalf("Run = %v (result %v); want ErrManifestChanged with an incomplete result", err, res != nil)
	}
	sum := sha256.Sum256(origBytes)
	if res.Manifest.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("manifest.sha256 %s is not the original file's", res.Manifest.SHA256)
	}
	now, _ := os.ReadFile(path)
	if bytes.Equal(now, origBytes) {
		t.Fatal("the manifest was not rewritten")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != rewriteAt || res.Manifest.Used != rewriteAt {
		t.Fatalf("%d requests received, %d used; want %d, none after the rewrite", len(got), res.Manifest.Used, rewriteAt)
	}
	for i, p := range got {
		if want := fmt.Sprintf("[%d,7]", 1000+i); p != want {
			t.Fatalf("request %d carried %s, want the hashed %s", i, p, want)
		}
	}
}

// TestOpenLoopDispatchersShareOneSchedule: three dispatchers admit one
// Poisson schedule between them: every request sent was planned at the
// schedule's own offset for its row, no row is sent twice, each
// dispatcher's share is present, and each segment's records come out in
// row order (a request is filed by the segment it ended in, so a row
// sent before another may end in a later segment).
func TestOpenLoopDispatchersShareOneSchedule(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		raw(tokenChunk, tokenChunk, tokenChunk, tokenChunk, usage(2, 4))(w, r)
	}))
	defer srv.Close()
	dir := t.TempDir()
	arr := Arrival{Kind: "poisson"}
	cfg := Config{BaseURL: srv.URL, Model: "m", Endpoint: Completions, LoadPoint: "moderate", Rate: 300, Arrival: arr, Seed: 7,
		Dispatchers: 3, MaxConcurrency: 64, IgnoreEOS: true, CleanSegment: 300 * time.Millisecond, NumClean: 1,
		DrainTimeout: 10 * time.Second, ResultDir: dir}
	need, err := cfg.Check(smallManifest(t, 1000))
	if err != nil || need < 30 {
		t.Fatalf("need %d rows: %v", need, err)
	}
	res, err := Run(context.Background(), cfg, smallManifest(t, int(need)+20))
	if err != nil {
		t.Fatal(err)
	}
	if res.Load.Dispatchers != 3 {
		t.Fatalf("dispatchers %d", res.Load.Dispatchers)
	}
	planner, _ := NewPlanner(arr, cfg.Rate, cfg.Seed)
	var offsets []int64
	for range need + 20 {
		offsets = append(offsets, int64(planner.Next()))
	}
	seen := map[int]bool{}
	residues := map[int]bool{}
	for _, f := range res.Files.Requests {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		last := -1
		for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
			if len(line) == 0 {
				continue // a segment without requests
			}
			var rec Record
			if err := json.Unmarshal(line, &rec); err != nil {
				t.Fatal(err)
			}
			if seen[rec.Row] || rec.Row <= last {
				t.Fatalf("%s: row %d repeated or out of order (after %d)", f, rec.Row, last)
			}
			seen[rec.Row], residues[rec.Row%3], last = true, true, rec.Row
			if got := rec.PlannedNS - res.Clock.T0MonoNS; got != offsets[rec.Row] {
				t.Fatalf("row %d planned at +%d ns, the schedule says +%d", rec.Row, got, offsets[rec.Row])
			}
			if rec.Class != Success {
				t.Fatalf("row %d: %s (%s)", rec.Row, rec.Class, rec.Reason)
			}
		}
	}
	if len(seen) != res.Totals.Admitted || len(residues) != 3 || len(seen) < 30 {
		t.Fatalf("%d rows recorded, %d admitted, residues %v", len(seen), res.Totals.Admitted, residues)
	}
}

func TestDispatchers(t *testing.T) {
	for _, tc := range []struct {
		n            int
		rate         float64
		procs, wantK int
	}{{0, 100, 8, 1}, {0, 10000, 8, 1}, {0, DispatcherRPS, 8, 1}, {0, DispatcherRPS + 1, 8, 2}, {0, 3 * DispatcherRPS, 2, 2}, {0, 1e7, 4, 4}, {3, 100, 1, 3}} {
		if k := dispatchers(tc.n, tc.rate, tc.procs); k != tc.wantK {
			t.Errorf("dispatchers(%d, %v, %d) = %d, want %d", tc.n, tc.rate, tc.procs, k, tc.wantK)
		}
	}
}

// TestSpareProcs: an open loop asks one spare P per dispatcher, a closed
// loop none.
func TestSpareProcs(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		procs int
		want  int
	}{{Config{}, 2, 0}, {Config{Dispatchers: 3}, 2, 0}, {Config{Rate: 10000}, 2, 1}, {Config{Rate: 3 * DispatcherRPS}, 2, 2},
		{Config{Rate: 100, Dispatchers: 3}, 1, 3}} {
		if got := tc.cfg.SpareProcs(tc.procs); got != tc.want {
			t.Errorf("rate %v, %d dispatchers, %d procs: %d spare, want %d", tc.cfg.Rate, tc.cfg.Dispatchers, tc.procs, got, tc.want)
		}
	}
}

func TestSlotsCap(t *testing.T) {
	for _, tc := range []struct {
		need       int64
		rows, want int
	}{{0, 100, 100}, {1000, 5000, 1000 + 62 + 64}, {0, 1 << 30, maxSlotsCap}, {1 << 40, 10, maxSlotsCap}} {
		if got := slotsCap(tc.need, tc.rows); got != tc.want {
			t.Errorf("slotsCap(%d, %d) = %d, want %d", tc.need, tc.rows, got, tc.want)
		}
	}
}
