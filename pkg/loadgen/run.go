package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"time"
)

// Sentinel errors of Run.
var (
	// ErrManifestTooShort: an open-loop run would plan more requests
	// than the manifest holds; returned before anything is sent.
	ErrManifestTooShort = errors.New("the manifest holds fewer requests than the run needs")
	// ErrManifestExhausted: admission reached the end of the manifest
	// (a closed loop, or an open loop whose profile windows ran long).
	// The run stopped admitting at once, drained, and wrote its results
	// with complete=false; the manifest never wraps.
	ErrManifestExhausted = errors.New("the manifest ran out of requests during the run")
	// ErrInterrupted: the context ended (SIGTERM, SIGINT). Outstanding
	// requests were cancelled and recorded as client-cancelled; results
	// were written with complete=false and no done phase.
	ErrInterrupted = errors.New("interrupted")
	// ErrDrainAbandoned: the drain reached its bound (--drain-timeout-
	// seconds) with requests outstanding. They were recorded
	// deadline-exceeded and counted in drain.abandoned, and the results
	// were written with complete=false: a run that abandoned a request is
	// never complete.
	ErrDrainAbandoned = errors.New("drain bound reached")
	// ErrResultExists: the result directory already holds a result.json;
	// a finished run's directory is never overwritten.
	ErrResultExists = errors.New("the result directory already holds a result.json")
	// ErrModelNotServed: with CheckServedModel, the server's /v1/models
	// does not list the model the run would send (or cannot be read);
	// nothing was sent or written. SGLang-Omni answers 404 model_not_found
	// to any other name than the one it serves, so every request would
	// fail.
	ErrModelNotServed = errors.New("the server does not serve the model the run sends")
)

// Config is one run. Durations of zero are allowed except where said.
type Config struct {
	// BaseURL is the server's, such as http://127.0.0.1:8000.
	BaseURL  string
	Model    string
	Endpoint Endpoint
	// ServerKind says which chat delta field carries reasoning text
	// (serverkind.go); "" reads both.
	ServerKind ServerKind
	// LoadPoint is a label recorded in the result (saturation, moderate,
	// or any other).
	LoadPoint string
	// Rate is λ in requests per second; 0 runs a closed loop.
	Rate float64
	// Arrival is the open-loop class (unused in a closed loop).
	Arrival Arrival
	// Dispatchers is how many open-loop dispatchers share the one
	// schedule, each admitting every Dispatchers-th request on an OS
	// thread of its own; 0 picks one per DispatcherRPS of Rate, at most
	// GOMAXPROCS.
	Dispatchers int
	// MaxConcurrency bounds outstanding requests, in both loops. In an
	// open loop a request due while the bound is reached waits: its wait
	// is generator lag.
	MaxConcurrency int
	IgnoreEOS      bool
	Temperature    float64
	Warmup         time.Duration
	// CleanSegment must be positive when NumClean > 0.
	CleanSegment time.Duration
	NumClean     int
	// ProfileWindows after the clean interval; 0 for none.
	ProfileWindows int
	// ProfileWait says how a window sees the server's window end
	// (profile.go): new trace files, or Layer-1 steps. Without either,
	// the legacy fixed ProfileHold.
	ProfileWait ProfileWait
	// ProfileHold is the legacy fixed time between /start_profile
	// returning and the /stop_profile call, used only when ProfileWait
	// watches nothing.
	ProfileHold time.Duration
	// ProfileWindowBudget bounds one window, from the /start_profile call
	// to the /stop_profile call (the seed budgets 24 s), and estimates its
	// length in the open-loop manifest check.
	ProfileWindowBudget time.Duration
	// ProfileWarmupIterations and ProfileActiveIterations are the server's
	// profiler schedule (its own configuration sets it): a window waits
	// for their sum of Layer-1 steps, and they are recorded.
	ProfileWarmupIterations int
	ProfileActiveIterations int
	Recovery                time.Duration
	DrainTimeout            time.Duration
	Seed                    uint64
	// ResultDir receives the files; created if needed.
	ResultDir string
	// PhaseFile, when set, receives phase lines.
	PhaseFile string
	// Derivation of λ, recorded as given.
	RateFraction           float64
	SaturationCompletedRPS float64
	SaturationResultSHA256 string
	// Modalities, when set, is a chat request's "modalities" (such as
	// text and audio: audio.go); MinAudioSamples the samples a chunk
	// needs to be the first playable one (0: DefaultMinAudioSamples).
	Modalities      []string
	MinAudioSamples int64
	// AudioFormat is the format the server declares for its audio: every
	// audio chunk must be of it, else the request is invalid-output
	// (declared_format). Zero fields: DefaultAudioFormat's.
	AudioFormat AudioFormat
	// RequestDeadline, when positive, is each request's deadline from its
	// planned send, the common entry (seedrecords.go): a request still
	// outstanding then is ended and recorded deadline-exceeded.
	RequestDeadline time.Duration
	// SeedRecords writes requests.jsonl and events.jsonl, the seed's raw
	// traces (seedrecords.go), with RunID and RunAttempt in every line.
	SeedRecords bool
	RunID       string
	RunAttempt  int
	// Stress is the stress loads' options (stress.go); zero for none.
	Stress Stress
	// Quality is the quality pass after the drain (quality.go); zero
	// Rows for none.
	Quality Quality
	// CheckServedModel reads the server's GET /v1/models before the run
	// and refuses it (ErrModelNotServed) unless Model is among the ids
	// listed; the ids are recorded in result.json (served_models).
	CheckServedModel bool
}

// admissionEstimate is how long admission is expected to last: warm-up,
// clean interval, and each profile window's budget and recovery.
func (c *Config) admissionEstimate() time.Duration {
	return c.Warmup + time.Duration(c.NumClean)*c.CleanSegment +
		time.Duration(c.ProfileWindows)*(c.ProfileWindowBudget+c.Recovery)
}

// Check validates the configuration against the manifest and returns the
// rows an open-loop run needs (0 for a closed loop). It sends nothing.
func (c *Config) Check(m *Manifest) (int64, error) {
	switch {
	case c.BaseURL == "":
		return 0, errors.New("no base URL")
	case c.Endpoint != Completions && c.Endpoint != Chat:
		return 0, fmt.Errorf("endpoint %q: want completions or chat", c.Endpoint)
	case c.Endpoint == Chat && m.TokenIDs:
		return 0, errors.New("a chat endpoint needs text prompts; this manifest has token ids")
	case c.Dispatchers < 0:
		return 0, errors.New("dispatchers must not be negative")
	case c.MaxConcurrency < 1:
		return 0, errors.New("max concurrency must be at least 1")
	case math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) || c.Rate < 0:
		return 0, fmt.Errorf("rate %v: want a finite positive rate, or 0 for a closed loop", c.Rate)
	case c.NumClean < 0 || c.ProfileWindows < 0:
		return 0, errors.New("segment and window counts must not be negative")
	case c.NumClean > 0 && c.CleanSegment <= 0:
		return 0, errors.New("clean segments need a positive duration")
	case c.Warmup < 0 || c.Recovery < 0 || c.DrainTimeout < 0 || c.ProfileHold < 0 || c.ProfileWindowBudget < 0 || c.RequestDeadline < 0:
		return 0, errors.New("durations must not be negative")
	case c.ResultDir == "":
		return 0, errors.New("no result directory")
	case c.ProfileWindows > 0 && c.ProfileWait.source() != WaitHold && c.ProfileWindowBudget <= 0:
		return 0, errors.New("a profile window that waits for the server needs a positive window budget")
	}
	if err := c.ProfileWait.check(); err != nil {
		return 0, err
	}
	if err := c.Stress.Check(); err != nil {
		return 0, err
	}
	if c.Rate == 0 {
		return 0, nil
	}
	need, err := CountBefore(c.Arrival, c.Rate, c.Seed, c.admissionEstimate())
	if err != nil {
		return 0, err
	}
	if need > int64(m.Len()) {
		return need, fmt.Errorf("%w: %s at %.6g requests/s plans %d requests over %v of admission, the manifest holds %d",
			ErrManifestTooShort, c.Arrival, c.Rate, need, c.admissionEstimate(), m.Len())
	}
	return need, nil
}

// segment is an interval of the timeline.
type segment struct {
	name, kind string
	index      int
	start, end int64
}

// slot is one admitted request: its record, and whether it ended.
type slot struct {
	rec  Record
	done bool
}

// run is the state of one Run.
type run struct {
	cfg     Config
	m       *Manifest
	clock   *Clock
	builder *bodyBuilder
	sender  *sender
	phases  *phaseLog
	t0      int64
	// cleanStart and cleanEnd bound the clean interval (nominal).
	cleanStart, cleanEnd int64

	stopAdmit chan struct{} // closed when admission ends
	exhausted chan struct{} // closed when the manifest ran out
	exhaust   sync.Once
	fatal     chan error // a harness failure of the admission side
	// wg counts admission goroutines and outstanding requests.
	wg sync.WaitGroup

	mu        sync.Mutex
	slots     []*slot // guarded by mu
	nextRow   int     // guarded by mu: the closed loop's next manifest row
	closed    bool    // guarded by mu: admission has stopped; admit refuses
	finalized bool    // guarded by mu: records no longer change

	dispatchers int // open-loop dispatchers; 0 in a closed loop
	// jobs hands admitted open-loop requests to idle senders (unbuffered:
	// a request is handed only to a sender waiting for one).
	jobs chan sendJob

	itlMu sync.Mutex
	itl   *logHist // guarded by itlMu

	// servedModels are the ids the server's /v1/models listed
	// (CheckServedModel); nil when not asked.
	servedModels []string
}

// Run executes the timeline of cfg against the server with manifest m and
// writes its files to cfg.ResultDir. The result is returned with a nil
// error when the timeline ran to its end; with ErrManifestExhausted or
// ErrInterrupted it was still written. Other errors mean nothing usable
// was written.
func Run(ctx context.Context, cfg Config, m *Manifest) (*Result, error) {
	need, err := cfg.Check(m)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(cfg.ResultDir, "requests"), 0o755); err != nil {
		return nil, fmt.Errorf("result directory: %w", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.ResultDir, "result.json")); err == nil {
		return nil, fmt.Errorf("%s: %w", cfg.ResultDir, ErrResultExists)
	}
	clock, err := NewClock()
	if err != nil {
		return nil, err
	}
	builder, err := newBodyBuilder(cfg.Endpoint, cfg.Model, cfg.Temperature, cfg.IgnoreEOS)
	if err != nil {
		return nil, err
	}
	phases, err := openPhaseLog(cfg.PhaseFile, clock)
	if err != nil {
		return nil, err
	}
	defer phases.close()
	tr := newTransport(cfg.MaxConcurrency)
	defer tr.CloseIdleConnections()

	r := &run{cfg: cfg, m: m, clock: clock, builder: builder, phases: phases,
		stopAdmit: make(chan struct{}), exhausted: make(chan struct{}), fatal: make(chan error, 1), itl: newLogHist(),
		jobs: make(chan sendJob)}
	r.sender = &sender{client: newClient(tr), url: cfg.BaseURL + cfg.Endpoint.path(), clock: clock, itl: r.addITL, kind: cfg.ServerKind}
	if conns, ok := newH1Pool(r.sender.url, cfg.MaxConcurrency); ok {
		r.sender.conns = conns
		defer conns.closeIdle()
	}
	if cfg.Stress.active() {
		r.sender.stress = &r.cfg.Stress
	}
	if err := r.configureAudio(); err != nil {
		return nil, err
	}
	if cfg.CheckServedModel {
		if r.servedModels, err = r.checkServedModel(ctx); err != nil {
			return nil, err
		}
	}
	r.slots = make([]*slot, 0, slotsCap(need, m.Len()))
	return r.execute(ctx, tr, need)
}

// maxSlotsCap bounds the records reserved before a run (8 bytes each).
const maxSlotsCap = 1 << 22

// slotsCap is how many records to reserve: the rows an open loop plans
// (need), else the manifest's (a closed loop cannot send more), up to
// maxSlotsCap. Admission appends a record under the run's lock, which the
// dispatcher takes before each send: growing a slice of millions of
// records there would copy it, and delay the sends, for milliseconds.
func slotsCap(need int64, rows int) int {
	if need > 0 {
		return int(min(need+need/16+64, maxSlotsCap))
	}
	return min(rows, maxSlotsCap)
}

// addITL keeps an inter-token gap that closed inside the clean interval.
func (r *run) addITL(at, gap int64) {
	if at < r.cleanStart || at >= r.cleanEnd {
		return
	}
	r.itlMu.Lock()
	r.itl.add(gap)
	r.itlMu.Unlock()
}

func (r *run) execute(ctx context.Context, tr *http.Transport, need int64) (*Result, error) {
	cfg := r.cfg
	// Requests run under reqCtx: cancelled only by an interruption, or
	// after the results are written.
	reqCtx, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		cancelRequests()
		r.wg.Wait()
	}()

	r.t0 = r.clock.Now()
	r.cleanStart = r.t0 + int64(cfg.Warmup)
	r.cleanEnd = r.cleanStart + int64(cfg.NumClean)*int64(cfg.CleanSegment)
	if err := r.phases.mark(PhaseWarmup, 0, nil); err != nil {
		return nil, err
	}
	if cfg.Rate > 0 {
		k := dispatchers(cfg.Dispatchers, cfg.Rate, runtime.GOMAXPROCS(0))
		r.dispatchers = k
		sem := make(chan struct{}, cfg.MaxConcurrency)
		for j := range k {
			r.wg.Add(1)
			go r.dispatch(ctx, reqCtx, sem, j, k)
		}
	} else {
		for i := 0; i < cfg.MaxConcurrency; i++ {
			r.wg.Add(1)
			go r.worker(ctx, reqCtx)
		}
	}

	tl := &timeline{r: r, ctx: ctx, cur: segment{name: PhaseWarmup, kind: PhaseWarmup, start: r.t0, end: r.cleanStart}}
	ok := tl.wait(r.cleanStart) && tl.cleanSegments() && tl.profileWindows()
	segs, windows, cur, stopErr := tl.segs, tl.windows, tl.cur, tl.stopErr
	// Admission ends here: on time at the nominal end of the last
	// segment, or early, now.
	outstandingAtStop := r.closeAdmission()
	drainStart := cur.end
	if !ok {
		drainStart = max(r.clock.Now(), cur.start)
		cur.end = drainStart
	}
	segs = append(segs, cur)
	if errors.Is(stopErr, ErrInterrupted) {
		cancelRequests()
	} else if err := r.phases.mark(PhaseDrain, 0, nil); err != nil && stopErr == nil {
		stopErr = err
	}
	drain := DrainInfo{StartMonoNS: drainStart, OutstandingAtStart: outstandingAtStop}
	drain.EndMonoNS, drain.TimedOut = r.drain(ctx, cancelRequests)
	if ctx.Err() != nil && stopErr == nil {
		stopErr = ErrInterrupted
	}
	drain.Seconds = float64(drain.EndMonoNS-drain.StartMonoNS) / 1e9
	if !errors.Is(stopErr, ErrInterrupted) && !drain.TimedOut && ctx.Err() == nil {
		// every admitted request ended: the drain gate stops here, not
		// at done, which follows the release poll and the results
		if err := r.phases.mark(PhaseDrained, 0, nil); err != nil && stopErr == nil {
			stopErr = err
		}
	}
	segs = append(segs, segment{name: PhaseDrain, kind: PhaseDrain, start: drainStart, end: drain.EndMonoNS})

	// Freeze the records: requests still outstanding keep running until
	// the results are written, but their outcomes are no longer taken.
	r.mu.Lock()
	r.finalized = true
	slots := r.slots
	r.mu.Unlock()
	// Several dispatchers admit in about, not exactly, row order.
	sort.SliceStable(slots, func(a, b int) bool { return slots[a].rec.Row < slots[b].rec.Row })
	stopErr = r.abandon(slots, &drain, stopErr)
	frozenAt := r.clock.Now()

	res := r.summarize(segs, windows, slots, drain, need)
	res.ServedModels = r.servedModels
	res.Complete = stopErr == nil
	res.Interrupted = errors.Is(stopErr, ErrInterrupted)
	res.Manifest.Exhausted = errors.Is(stopErr, ErrManifestExhausted)
	r.summarizeStress(ctx, res, slots)
	r.qualityPass(ctx, res)
	if err := r.writeSeed(res, slots, drainStart, frozenAt); err != nil {
		return nil, err
	}
	if err := r.write(res, segs, slots); err != nil {
		return nil, err
	}
	if stopErr == nil {
		successes := res.Clean.Completed
		if err := r.phases.mark(PhaseDone, 0, &successes); err != nil {
			return res, err
		}
	}
	return res, stopErr
}

// timeline walks a run's admission timeline: warm-up, the clean segments,
// then each profile window with its recovery.
type timeline struct {
	r       *run
	ctx     context.Context
	segs    []segment // the segments ended so far
	windows []ProfileWindow
	cur     segment // the open segment, with its nominal end
	stopErr error   // why the run stopped early, once it has
}

// closeSeg ends the open segment.
func (tl *timeline) closeSeg() { tl.segs = append(tl.segs, tl.cur) }

// open ends the open segment and opens seg, marking its phase in the
// phase file; false when the mark failed and the run must stop.
func (tl *timeline) open(seg segment) bool {
	tl.closeSeg()
	tl.cur = seg
	if err := tl.r.phases.mark(seg.kind, seg.index, nil); err != nil {
		tl.stopErr = err
		return false
	}
	return true
}

// wait blocks until the monotonic instant; false when the run must stop
// early (interruption, exhaustion, a fatal error).
func (tl *timeline) wait(until int64) bool {
	r := tl.r
	d := time.Until(r.clock.Time(until))
	if d <= 0 {
		return tl.stopErr == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-tl.ctx.Done():
		tl.stopErr = ErrInterrupted
	case <-r.exhausted:
		tl.stopErr = ErrManifestExhausted
	case err := <-r.fatal:
		tl.stopErr = err
	}
	return false
}

// cleanSegments runs the clean segments; false when the run must stop.
func (tl *timeline) cleanSegments() bool {
	r, cfg := tl.r, tl.r.cfg
	ok := true
	for k := 1; ok && k <= cfg.NumClean; k++ {
		start := r.cleanStart + int64(k-1)*int64(cfg.CleanSegment)
		if !tl.open(segment{name: "clean-" + strconv.Itoa(k), kind: PhaseClean, index: k, start: start, end: start + int64(cfg.CleanSegment)}) {
			return false
		}
		ok = tl.wait(tl.cur.end)
	}
	return ok
}

// profileWindows runs the profile windows, each followed by its
// recovery; false when the run must stop.
func (tl *timeline) profileWindows() bool {
	r, cfg := tl.r, tl.r.cfg
	ok := true
	for w := 1; ok && w <= cfg.ProfileWindows; w++ {
		if !tl.open(segment{name: "profile-" + strconv.Itoa(w), kind: PhaseProfile, index: w, start: tl.cur.end}) {
			return false
		}
		pw, more := r.profileWindow(tl.ctx, w, tl.wait)
		tl.windows = append(tl.windows, pw)
		if !more || tl.stopErr != nil {
			return false
		}
		tl.cur.end = pw.StopReturnMonoNS
		if !tl.open(segment{name: "recovery-" + strconv.Itoa(w), kind: PhaseRecovery, index: w, start: pw.StopReturnMonoNS, end: pw.StopReturnMonoNS + int64(cfg.Recovery)}) {
			return false
		}
		ok = tl.wait(tl.cur.end)
	}
	return ok
}

// abandon records the requests still outstanding once the drain ended:
// after an interruption client-cancelled, else abandoned at the drain
// bound, deadline-exceeded. A drain that reached its bound makes the run
// incomplete (ErrDrainAbandoned, joined to an exhaustion), whatever else
// it holds. It returns the run's stop error.
func (r *run) abandon(slots []*slot, drain *DrainInfo, stopErr error) error {
	interrupted := errors.Is(stopErr, ErrInterrupted)
	for _, s := range slots {
		if s.done {
			continue
		}
		drain.Unfinished++
		if interrupted {
			s.rec.Class, s.rec.Reason = ClientCancelled, "outstanding when the client was interrupted"
			continue
		}
		s.rec.Class, s.rec.Reason = DeadlineExceeded, "abandoned: outstanding at the drain bound"
		drain.Abandoned++
	}
	if interrupted || !drain.TimedOut && drain.Abandoned == 0 || stopErr != nil && !errors.Is(stopErr, ErrManifestExhausted) {
		return stopErr
	}
	return errors.Join(stopErr, fmt.Errorf("%w after %.3f s: %d request(s) abandoned; results written",
		ErrDrainAbandoned, r.cfg.DrainTimeout.Seconds(), drain.Abandoned))
}

// drain waits for the outstanding requests, up to the drain timeout; it
// never cancels them (an interruption already did). It returns when the
// drain ended and whether it timed out.
func (r *run) drain(ctx context.Context, cancelRequests context.CancelFunc) (int64, bool) {
	done := make(chan struct{})
	// Ends when every admission goroutine and request has returned;
	// execute's deferred cancel guarantees that.
	go func() {
		r.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(r.cfg.DrainTimeout)
	defer t.Stop()
	select {
	case <-done:
		return r.clock.Now(), false
	case <-t.C:
		select {
		case <-done: // everything ended at the bound itself
			return r.clock.Now(), false
		default:
			return r.clock.Now(), true
		}
	case <-ctx.Done():
		cancelRequests()
		<-done
		return r.clock.Now(), false
	}
}

// closeAdmission stops admission: admit refuses from now on, and the
// senders are told. It returns the requests outstanding at that moment.
func (r *run) closeAdmission() int {
	r.mu.Lock()
	r.closed = true
	n := 0
	for _, s := range r.slots {
		if !s.done {
			n++
		}
	}
	r.mu.Unlock()
	close(r.stopAdmit)
	return n
}

// post sends an empty POST and returns the status (0 without a response)
// and, on failure, the reason.
func (r *run) post(ctx context.Context, path string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.cfg.BaseURL+path, http.NoBody)
	if err != nil {
		return 0, "build request"
	}
	resp, err := r.sender.client.Do(req)
	if err != nil {
		return 0, errKind(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, "status " + strconv.Itoa(resp.StatusCode)
	}
	return resp.StatusCode, ""
}

// admit records a request as sent and returns its slot; nil once
// admission has stopped (the request is not sent).
func (r *run) admit(i int, planned int64) *slot {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	s := &slot{rec: Record{Schema: RecordSchema, ID: r.m.ID(i), Row: i, PlannedNS: planned, SentNS: r.clock.Now(),
		ExpectedInputTokens: r.m.InputTokens(i), RequestedOutputTokens: r.m.OutputTokens(i)}}
	r.slots = append(r.slots, s)
	return s
}

// finish stores a request's outcome unless the records are frozen.
func (r *run) finish(s *slot, o outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finalized {
		return
	}
	s.done = true
	rec := &s.rec
	rec.Stress = o.stress.record(&o)
	rec.FirstTokenNS, rec.FirstChunkNS, rec.EndNS = o.firstToken, o.firstChunk, o.end
	rec.PromptTokens, rec.OutputTokens, rec.UsageSource = o.promptTokens, o.outputTokens, o.usageSource
	rec.Chunks, rec.ITLMaxNS, rec.HTTPStatus = o.chunks, o.itlMax, o.status
	rec.Class, rec.Reason, rec.Unsent = o.class, o.reason, o.unsent
	if o.audio != nil {
		rec.Audio = o.audio.finish(rec.SentNS, o.end)
	}
}

// admitNext takes the manifest's next row for a closed-loop worker,
// builds its body and records it as sent, all under one lock, so that
// rows are sent in order without gaps. It returns nil when admission has
// stopped or the manifest is exhausted (then it says so).
func (r *run) admitNext(planned int64) (*slot, []byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, nil, nil
	}
	i := r.nextRow
	if i >= r.m.Len() {
		r.signalExhausted()
		return nil, nil, nil
	}
	body, err := r.body(i)
	if err != nil {
		return nil, nil, err
	}
	r.nextRow++
	s := &slot{rec: Record{Schema: RecordSchema, ID: r.m.ID(i), Row: i, PlannedNS: planned, SentNS: r.clock.Now(),
		ExpectedInputTokens: r.m.InputTokens(i), RequestedOutputTokens: r.m.OutputTokens(i)}}
	r.slots = append(r.slots, s)
	return s, body, nil
}

// body builds request i's body.
func (r *run) body(i int) ([]byte, error) {
	p, err := r.m.prompt(i)
	if err != nil {
		return nil, err
	}
	return r.builder.build(p, r.m.OutputTokens(i)), nil
}

// expect is what request i's stream must report to be a success.
func (r *run) expect(i int) expect {
	return expect{output: r.m.OutputTokens(i), exact: r.cfg.IgnoreEOS, input: r.m.InputTokens(i), inputExact: r.m.TokenIDs,
		cancel: CancelSelected(r.cfg.Seed, i, r.cfg.Stress.CancelAfterFirstChunk)}
}

// signalExhausted reports the manifest's end once.
func (r *run) signalExhausted() { r.exhaust.Do(func() { close(r.exhausted) }) }

// signalFatal reports a harness failure of the admission side.
func (r *run) signalFatal(err error) {
	select {
	case r.fatal <- err:
	default:
	}
}

// worker is one of a closed loop's MaxConcurrency senders: it sends the
// next request of the manifest as soon as its previous one ended. A
// request's planned time is when its worker became free.
func (r *run) worker(ctx, reqCtx context.Context) {
	defer r.wg.Done()
	planned := r.t0
	for {
		select {
		case <-r.stopAdmit:
			return
		case <-ctx.Done():
			return
		default:
		}
		s, body, err := r.admitNext(planned)
		if err != nil {
			r.signalFatal(err)
			return
		}
		if s == nil {
			return
		}
		o := r.sendBy(reqCtx, body, r.expect(s.rec.Row), planned)
		r.finish(s, o)
		planned = o.end
	}
}

// segmentOf names the segment holding instant t ("" if none).
func segmentOf(segs []segment, t int64) string {
	i := sort.Search(len(segs), func(i int) bool { return segs[i].end > t })
	if i < len(segs) && t >= segs[i].start {
		return segs[i].name
	}
	if len(segs) > 0 && t >= segs[len(segs)-1].end {
		return segs[len(segs)-1].name
	}
	return ""
}
