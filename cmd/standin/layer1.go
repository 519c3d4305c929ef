package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"warden/pkg/atomicfile"
	"warden/pkg/contract"
	"warden/pkg/loadgen"
)

// The Layer-1 stream of seed 002 (A-P3-5), as the stand-in writes it: one
// schema-v1 record (contract.Layer1Record, docs/validators.md) per engine
// "step" at --steps-per-s, buffered and appended to DIR/layer1.jsonl at
// every --flush-interval-s, each flush followed by an atomic replacement of
// the sidecar DIR/layer1.jsonl.footer.json. A graceful shutdown flushes,
// appends the in-stream footer and writes a final sidecar. Steps lie on a
// fixed grid of CLOCK_MONOTONIC submit times (the clock of the client's
// *_mono_ns), step i at start + i/--steps-per-s; the writer catches up
// with the grid at every tick, so a window of the grid holds the same
// number of steps however late the ticks come. The records' figures are
// placeholders: the stand-in measures nothing.

// Layer-1 breaks, each a way the seed says a stream invalidates its run.
const (
	l1BreakDrop      = "drop"       // two records are counted as dropped
	l1BreakGap       = "gap"        // one step index is skipped
	l1BreakPartial   = "partial"    // the stream ends in a half-written line, no footer
	l1BreakNoSidecar = "no-sidecar" // the sidecar is never written
	l1BreakStale     = "stale"      // flushing stops after the first flush; no footer
	// a graceful shutdown that leaves no footer but keeps the sidecar
	// fresh: accepted only after a hard kill, so a graceful stop fails
	l1NoFooter = "no-footer"
)

var layer1Breaks = []string{l1BreakDrop, l1BreakGap, l1BreakPartial, l1BreakNoSidecar, l1BreakStale, l1NoFooter}

type layer1Config struct {
	dir       string
	stepsPerS float64
	flushS    float64
	brk       string
	misbehave layer1Misbehave
	// vary, when not 0, seeds steps whose shapes vary (layer2.go's
	// l1Shapes.vary) instead of the cycle of the real traces' three.
	vary uint64
}

func (c layer1Config) validate() error {
	if c.dir == "" {
		return nil
	}
	if c.stepsPerS <= 0 || c.flushS <= 0 {
		return fmt.Errorf("--steps-per-s and --flush-interval-s must be positive")
	}
	if c.brk != "" && !slices.Contains(layer1Breaks, c.brk) {
		return fmt.Errorf("--layer1-break %q: want one of %v", c.brk, layer1Breaks)
	}
	return c.misbehave.validate()
}

// layer1Writer writes the stream from its own goroutine until close.
type layer1Writer struct {
	cfg     layer1Config
	path    string
	f       *os.File
	clock   *loadgen.Clock
	start   int64 // CLOCK_MONOTONIC of step 0's submit
	period  int64 // ns between two steps' submit times
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex // guards the fields below, between the loop and close
	buf     bytes.Buffer
	next    int64 // next step index
	encoded int64
	written int64
	dropped int64
	last    int64
	pending int64 // records in buf
	grid    int64 // grid slots used: the next step's submit is start + grid*period
	stale   bool  // flushing has stopped (--layer1-break stale)
	err     error
	// profileStop is the CLOCK_MONOTONIC time the first /stop_profile
	// returned, 0 before; the misbehaviour switches read it.
	profileStop int64
	l2          l1Shapes // the steps' shapes and the records the profiler reads (layer2.go)
}

type l1counters struct {
	EncodedRecords int64 `json:"encoded_records"`
	WrittenRecords int64 `json:"written_records"`
	DroppedRecords int64 `json:"dropped_records"`
	LastStepIndex  int64 `json:"last_step_index"`
}

type l1sidecar struct {
	l1counters
	WallTimeUnixNS int64   `json:"wall_time_unix_ns"`
	FlushIntervalS float64 `json:"flush_interval_s"`
	Final          bool    `json:"final"`
}

type l1footer struct {
	Footer bool `json:"footer"`
	l1counters
	StepCount int64 `json:"step_count"`
}

func startLayer1(cfg layer1Config) (*layer1Writer, error) {
	if err := os.MkdirAll(cfg.dir, 0o755); err != nil {
		return nil, fmt.Errorf("layer1: %w", err)
	}
	path := filepath.Join(cfg.dir, "layer1.jsonl")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("layer1: %w", err)
	}
	clock, err := loadgen.NewClock()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("layer1: %w", err)
	}
	w := &layer1Writer{cfg: cfg, path: path, f: f, clock: clock, start: clock.Now(), period: max(1, int64(1e9/cfg.stepsPerS)),
		stop: make(chan struct{}), done: make(chan struct{}), last: -1}
	if cfg.vary != 0 {
		w.l2.vary = rand.New(rand.NewPCG(cfg.vary, 20260714))
	}
	go w.loop()
	return w, nil
}

func (w *layer1Writer) loop() {
	defer close(w.done)
	step := time.NewTicker(seconds(1 / w.cfg.stepsPerS))
	defer step.Stop()
	flush := time.NewTicker(seconds(w.cfg.flushS))
	defer flush.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-step.C:
			w.mu.Lock()
			if !w.stale {
				w.catchUp()
			}
			w.mu.Unlock()
		case <-flush.C:
			w.mu.Lock()
			if !w.stale {
				w.flush(false)
				w.stale = w.cfg.brk == l1BreakStale
			}
			w.mu.Unlock()
		}
	}
}

// catchUp encodes the steps whose grid submit time has come.
func (w *layer1Writer) catchUp() {
	for now := w.clock.Now(); w.start+w.grid*w.period <= now; {
		w.step()
	}
}

// step encodes one record into the buffer, at the next grid slot.
func (w *layer1Writer) step() {
	i := w.next
	w.next++
	if w.cfg.brk == l1BreakGap && i == 3 {
		i = w.next // skip index 3
		w.next++
	}
	submit := w.start + w.grid*w.period
	w.grid++
	rec := contract.Layer1Record{Schema: contract.Layer1SchemaVersion, Step: i, ModelExecuted: true,
		SubmitMonoNS: submit, CompleteMonoNS: submit + w.period/2,
		NumScheduledReqs: 2, NumDecodeReqs: 2, DecodeTokens: 2, ChunkedPrefillClass: "none",
		ChunkSizeHist: []int64{0, 0, 0, 0}, ContextLenHist: []int64{2, 0, 0, 0}, NumWaitingReqs: 1, NumRunningReqs: 2,
		KVCacheUsage: 0.01, CUDAGraphHit: true, RuntimeMode: "FULL", UnpaddedTokens: 2, BucketTokens: 2}
	w.l2.shape(&rec)
	w.cfg.misbehave.apply(&rec, w.profileStop)
	b, _ := json.Marshal(rec)
	w.buf.Write(append(b, '\n'))
	w.encoded++
	w.pending++
	w.last = i
	if w.cfg.brk == l1BreakDrop && w.encoded == 2 {
		w.encoded += 2 // two records "encoded" but dropped by a full queue
		w.dropped += 2
	}
}

// flush appends the buffered records and replaces the sidecar.
func (w *layer1Writer) flush(final bool) {
	if w.buf.Len() > 0 {
		if _, err := w.f.Write(w.buf.Bytes()); err != nil && w.err == nil {
			w.err = err
		}
		w.buf.Reset()
		w.written += w.pending
		w.pending = 0
	}
	if final {
		ft := l1footer{Footer: true, l1counters: w.counters(), StepCount: w.written}
		b, _ := json.Marshal(ft)
		if _, err := w.f.Write(append(b, '\n')); err != nil && w.err == nil {
			w.err = err
		}
	}
	if w.cfg.brk == l1BreakNoSidecar {
		return
	}
	sc := l1sidecar{l1counters: w.counters(), WallTimeUnixNS: time.Now().UnixNano(), FlushIntervalS: w.cfg.flushS, Final: final}
	b, _ := json.Marshal(sc)
	// Renamed into place without fsync: a SIGKILL between the data lines'
	// write and the sidecar's rename leaves lines the sidecar does not
	// count (the validator's counter mismatch); fsyncs there would widen
	// that window from microseconds to milliseconds, and the stand-in's
	// tests kill it at random moments.
	if err := atomicfile.WriteFile(w.path+".footer.json", b, 0o644, atomicfile.NoSync()); err != nil && w.err == nil {
		w.err = err
	}
}

func (w *layer1Writer) counters() l1counters {
	return l1counters{EncodedRecords: w.encoded, WrittenRecords: w.written, DroppedRecords: w.dropped, LastStepIndex: w.last}
}

// close ends the stream at a graceful shutdown: a last flush and the
// in-stream footer with a final sidecar, unless a break says otherwise.
func (w *layer1Writer) close() error {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	switch w.cfg.brk {
	case l1BreakStale:
		// the writer died long ago: nothing more reaches the disk
	case l1BreakPartial:
		w.catchUp()
		w.flush(false)
		_, _ = w.f.Write([]byte(`{"schema":1,"step":` + fmt.Sprint(w.next) + `,"submit_mo`))
	case l1NoFooter:
		w.catchUp()
		w.flush(false)
	default:
		w.catchUp()
		w.flush(true)
	}
	if err := w.f.Close(); err != nil && w.err == nil {
		w.err = err
	}
	return w.err
}
