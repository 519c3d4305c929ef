package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/google/renameio/v2"
)

// The methodology's raw traces (seed 000, section 10): "每次运行生成不可变
// 目录：…requests.jsonl、events.jsonl…每个事件包含 run、request、session、
// stage、attempt、chunk、event、monotonic timestamp、wall-clock timestamp、
// device、bytes、batch 和状态码". requests.jsonl holds one line per planned
// initial request, sent or not; events.jsonl the events the client saw of
// each, in time order, the terminal one last. Both are built from the
// frozen records when the run ends: the hot path records nothing more for
// them. device and batch are the server's and not seen by the client.

// Schemas of the seed's record lines.
const (
	SeedRequestSchema = "warden.loadgen.seed-request/1"
	SeedEventSchema   = "warden.loadgen.seed-event/1"
)

// File names of the seed's records in the result directory.
const (
	SeedRequestsFile = "requests.jsonl"
	SeedEventsFile   = "events.jsonl"
)

// StageClient is the stage of every event loadgen records: the client
// sees the entry's stream, never the server's stages (thinker, talker,
// vocoder).
const StageClient = "client"

// Event names of events.jsonl.
const (
	EventPlanned     = "planned"
	EventSent        = "sent"
	EventFirstToken  = "first_token"
	EventOutputChunk = "output_chunk"
	EventTerminal    = "terminal"
)

// StatusOK is the status of an event that is not a request's terminal.
const StatusOK = "ok"

// SeedStatus is a class in the spelling of section 12's terminal taxonomy
// ("终态枚举至少包括 success、quality-failed、client-cancelled、
// deadline-exceeded、admission-rejected、OOM、worker-lost、transport-error、
// invalid-output 和 harness-error"). A class outside it, or none, is
// harness-error: the client failed to tell (fail closed).
func SeedStatus(c Class) string {
	switch c {
	case OOM:
		return "OOM"
	case Success, QualityFailed, ClientCancelled, DeadlineExceeded, AdmissionRejected, WorkerLost, TransportError, InvalidOutput, HarnessError:
		return string(c)
	}
	return string(HarnessError)
}

// SeedStatuses lists the taxonomy's spellings, in the order of Classes.
func SeedStatuses() []string {
	out := make([]string, len(Classes))
	for i, c := range Classes {
		out[i] = SeedStatus(c)
	}
	return out
}

// SeedRequest is one line of requests.jsonl: a planned initial request.
// Times are CLOCK_MONOTONIC ns (0: the instant never came) beside their
// wall-clock times (result.json's clock anchor applied; "" when never).
type SeedRequest struct {
	Schema     string `json:"schema"`
	RunID      string `json:"run_id"`
	RunAttempt int    `json:"run_attempt"`
	RequestID  string `json:"request_id"`
	// SessionID is null: loadgen's requests are single-turn.
	SessionID *string `json:"session_id"`
	Stage     string  `json:"stage"`
	// Attempt is the request's attempt in its attempt group: loadgen
	// never retries, so 1.
	Attempt int `json:"attempt"`
	Row     int `json:"row"`
	// Sent is false for a request planned before admission ended but
	// never handed to the transport: the generator fell behind (then it is
	// harness-error), or its deadline passed before it could be sent
	// (deadline-exceeded).
	Sent          bool   `json:"sent"`
	PlannedMonoNS int64  `json:"planned_mono_ns"`
	PlannedWall   string `json:"planned_wall"`
	SentMonoNS    int64  `json:"sent_mono_ns"`
	SentWall      string `json:"sent_wall"`
	// GeneratorLagNS is sent - planned; for a request found past its
	// deadline before the send, the instant it was found - planned; for
	// one never reached, the end of admission - planned (a lower bound).
	GeneratorLagNS int64 `json:"generator_lag_ns"`
	// DeadlineMonoNS is planned + the per-request deadline; 0 without one.
	DeadlineMonoNS   int64  `json:"deadline_mono_ns"`
	FirstTokenMonoNS int64  `json:"first_token_mono_ns"`
	FirstAudioMonoNS int64  `json:"first_audio_mono_ns"`
	EndMonoNS        int64  `json:"end_mono_ns"`
	EndWall          string `json:"end_wall"`
	// Bytes, Samples and SampleRate are the audio chunks' (decoded WAV
	// bytes, samples per channel, the first chunk's rate); 0 for text.
	Bytes        int64 `json:"bytes"`
	Samples      int64 `json:"samples"`
	SampleRate   int   `json:"sample_rate"`
	TokenChunks  int   `json:"token_chunks"`
	AudioChunks  int   `json:"audio_chunks"`
	OutputTokens int   `json:"output_tokens"`
	// Status is the terminal class in the taxonomy's spelling.
	Status     string `json:"status"`
	HTTPStatus int    `json:"http_status"`
	Reason     string `json:"reason,omitempty"`
	// Events is the request's lines in events.jsonl.
	Events int `json:"events"`
}

// SeedEvent is one line of events.jsonl. ChunkID is the audio chunk's
// index in its request for an output_chunk, null otherwise.
type SeedEvent struct {
	Schema     string  `json:"schema"`
	RunID      string  `json:"run_id"`
	RequestID  string  `json:"request_id"`
	SessionID  *string `json:"session_id"`
	Stage      string  `json:"stage"`
	Attempt    int     `json:"attempt"`
	ChunkID    *int    `json:"chunk_id"`
	Event      string  `json:"event"`
	MonoNS     int64   `json:"mono_ns"`
	WallTime   string  `json:"wall_time"`
	Bytes      int     `json:"bytes"`
	Samples    int64   `json:"samples"`
	SampleRate int     `json:"sample_rate"`
	Status     string  `json:"status"`
}

// SeedRecordsInfo is result.json's seed_records block: what the two
// files hold, so that their completeness is checked against it.
type SeedRecordsInfo struct {
	RequestsFile string `json:"requests_file"`
	EventsFile   string `json:"events_file"`
	RunID        string `json:"run_id"`
	// Requests and Events are the lines of each file.
	Requests int `json:"requests"`
	Events   int `json:"events"`
	// Planned counts the planned initial requests (every line of
	// requests.jsonl); Sent those handed to the transport (the success
	// rate's denominator); Unsent the others.
	Planned int `json:"planned"`
	Sent    int `json:"sent"`
	Unsent  int `json:"unsent"`
	// ByStatus counts the lines by status, every status of the taxonomy
	// present.
	ByStatus map[string]int `json:"by_status"`
	// DeadlineS is the per-request deadline from the planned send (0:
	// none).
	DeadlineS float64 `json:"request_deadline_s"`
	// UnsentLag is the generator lag of the requests never sent.
	UnsentLag Dist `json:"unsent_lag_ms"`
}

// unsent lists the open-loop requests planned before admission ended
// (closedAt) that were never admitted: the schedule replayed from its
// seed. A closed loop plans a request only when a sender is free, so
// none is.
func (r *run) unsent(slots []*slot, closedAt int64) ([]slot, error) {
	if r.cfg.Rate == 0 {
		return nil, nil
	}
	admitted := make(map[int]bool, len(slots))
	for _, s := range slots {
		admitted[s.rec.Row] = true
	}
	p, err := NewPlanner(r.cfg.Arrival, r.cfg.Rate, r.cfg.Seed)
	if err != nil {
		return nil, err
	}
	var out []slot
	for i := 0; i < r.m.Len(); i++ {
		planned := r.t0 + int64(p.Next())
		if planned >= closedAt {
			break
		}
		if admitted[i] {
			continue
		}
		out = append(out, slot{rec: Record{Schema: RecordSchema, ID: r.m.ID(i), Row: i, PlannedNS: planned,
			Class: HarnessError, Reason: "planned before admission ended, never sent: the generator fell behind"}})
	}
	return out, nil
}

// seedWriter renders the seed's lines of one run.
type seedWriter struct {
	r        *run
	closedAt int64   // end of admission: the unsent requests' lag ends here
	frozenAt int64   // when the records froze: an unfinished request's terminal
	lags     []int64 // of the unsent requests
}

// wall is mono's wall-clock time, "" for 0.
func (w *seedWriter) wall(mono int64) string {
	if mono == 0 {
		return ""
	}
	return w.r.clock.Time(mono).UTC().Format("2006-01-02T15:04:05.000000000Z07:00")
}

// request is the requests.jsonl line of s and its events.
func (w *seedWriter) request(s *slot, sent bool) (SeedRequest, []SeedEvent) {
	rec, cfg := &s.rec, w.r.cfg
	q := SeedRequest{Schema: SeedRequestSchema, RunID: cfg.RunID, RunAttempt: cfg.RunAttempt, RequestID: rec.ID, Stage: StageClient,
		Attempt: 1, Row: rec.Row, Sent: sent, PlannedMonoNS: rec.PlannedNS, PlannedWall: w.wall(rec.PlannedNS),
		FirstTokenMonoNS: rec.FirstTokenNS, EndMonoNS: rec.EndNS, EndWall: w.wall(rec.EndNS), TokenChunks: rec.Chunks,
		OutputTokens: rec.OutputTokens, Status: SeedStatus(rec.Class), HTTPStatus: rec.HTTPStatus, Reason: rec.Reason}
	q.DeadlineMonoNS, _ = cfg.deadlineOf(rec.PlannedNS)
	switch {
	case sent:
		q.SentMonoNS, q.SentWall, q.GeneratorLagNS = rec.SentNS, w.wall(rec.SentNS), rec.SentNS-rec.PlannedNS
	case rec.SentNS > 0: // admitted, then found past its deadline
		q.GeneratorLagNS = rec.SentNS - rec.PlannedNS
		w.lags = append(w.lags, q.GeneratorLagNS)
	default:
		q.GeneratorLagNS = max(0, w.closedAt-rec.PlannedNS)
		w.lags = append(w.lags, q.GeneratorLagNS)
	}
	ev := w.event(&q, EventPlanned, rec.PlannedNS, StatusOK)
	evs := []SeedEvent{ev}
	if sent {
		evs = append(evs, w.event(&q, EventSent, rec.SentNS, StatusOK))
	}
	if rec.FirstTokenNS > 0 {
		evs = append(evs, w.event(&q, EventFirstToken, rec.FirstTokenNS, StatusOK))
	}
	if a := rec.Audio; a != nil {
		q.FirstAudioMonoNS, q.AudioChunks, q.Samples = a.FirstAudioNS, len(a.Chunks), a.Samples
		for i, c := range a.Chunks {
			e := w.event(&q, EventOutputChunk, c.AtNS, StatusOK)
			e.ChunkID, e.Bytes, e.Samples, e.SampleRate = &i, c.Bytes, c.Samples, c.SampleRate
			q.Bytes += int64(c.Bytes)
			if q.SampleRate == 0 {
				q.SampleRate = c.SampleRate
			}
			evs = append(evs, e)
		}
	}
	end := rec.EndNS
	if end == 0 {
		end = w.frozenAt // never ended on its own: ended when the records froze
		if !sent {
			end = w.closedAt
		}
	}
	evs = append(evs, w.stressEvents(&q, rec)...)
	sort.SliceStable(evs, func(a, b int) bool { return evs[a].MonoNS < evs[b].MonoNS })
	evs = append(evs, w.event(&q, EventTerminal, end, q.Status))
	q.Events = len(evs)
	return q, evs
}

// event is one event of request q.
func (w *seedWriter) event(q *SeedRequest, name string, at int64, status string) SeedEvent {
	return SeedEvent{Schema: SeedEventSchema, RunID: q.RunID, RequestID: q.RequestID, Stage: StageClient, Attempt: q.Attempt,
		Event: name, MonoNS: at, WallTime: w.wall(at), Status: status}
}

// writeSeedRecords writes requests.jsonl and events.jsonl (each through a
// temporary file, fsynced and renamed into place) for the admitted
// requests and the unsent ones, in row order, and returns the block
// result.json gives them.
func (r *run) writeSeedRecords(slots []*slot, unsent []slot, closedAt, frozenAt int64) (*SeedRecordsInfo, error) {
	info := &SeedRecordsInfo{RequestsFile: SeedRequestsFile, EventsFile: SeedEventsFile, RunID: r.cfg.RunID,
		ByStatus: map[string]int{}, DeadlineS: r.cfg.RequestDeadline.Seconds()}
	for _, st := range SeedStatuses() {
		info.ByStatus[st] = 0
	}
	type item struct {
		s    *slot
		sent bool
	}
	items := make([]item, 0, len(slots)+len(unsent))
	for _, s := range slots {
		items = append(items, item{s, !s.rec.Unsent})
	}
	for i := range unsent {
		items = append(items, item{&unsent[i], false})
	}
	sort.SliceStable(items, func(a, b int) bool { return items[a].s.rec.Row < items[b].s.rec.Row })
	w := &seedWriter{r: r, closedAt: closedAt, frozenAt: frozenAt}
	dir := r.cfg.ResultDir
	reqs, err := newLineFile(filepath.Join(dir, SeedRequestsFile))
	if err != nil {
		return nil, err
	}
	defer reqs.cleanup()
	evs, err := newLineFile(filepath.Join(dir, SeedEventsFile))
	if err != nil {
		return nil, err
	}
	defer evs.cleanup()
	for _, it := range items {
		q, es := w.request(it.s, it.sent)
		for i := range es {
			if err := evs.add(&es[i]); err != nil {
				return nil, err
			}
		}
		if err := reqs.add(&q); err != nil {
			return nil, err
		}
		info.Planned++
		if it.sent {
			info.Sent++
		}
		info.ByStatus[q.Status]++
	}
	info.Requests, info.Events, info.Unsent = reqs.n, evs.n, info.Planned-info.Sent
	info.UnsentLag = distNS(w.lags)
	if err := evs.commit(); err != nil {
		return nil, err
	}
	if err := reqs.commit(); err != nil {
		return nil, err
	}
	return info, syncDir(dir)
}

// lineFile is a JSON-lines file written through a pending temporary file:
// the lines appear under the name only once commit fsynced and renamed it.
type lineFile struct {
	path string
	f    *renameio.PendingFile
	bw   *bufio.Writer
	enc  *json.Encoder
	n    int
}

func newLineFile(path string) (*lineFile, error) {
	f, err := renameio.NewPendingFile(path, renameio.WithTempDir(filepath.Dir(path)), renameio.WithPermissions(0o644))
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	bw := bufio.NewWriterSize(f, 64<<10)
	return &lineFile{path: path, f: f, bw: bw, enc: json.NewEncoder(bw)}, nil
}

// add appends one line.
func (l *lineFile) add(v any) error {
	if err := l.enc.Encode(v); err != nil {
		return fmt.Errorf("write %s: %w", l.path, err)
	}
	l.n++
	return nil
}

// commit flushes, fsyncs and renames the file into place.
func (l *lineFile) commit() error {
	if err := l.bw.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", l.path, err)
	}
	if err := l.f.CloseAtomicallyReplace(); err != nil {
		return fmt.Errorf("write %s: %w", l.path, err)
	}
	return nil
}

// cleanup removes the temporary file of an uncommitted write.
func (l *lineFile) cleanup() { _ = l.f.Cleanup() }

// deadlineOf is the instant a request planned at planned must have ended
// by, and whether there is one.
func (c *Config) deadlineOf(planned int64) (int64, bool) {
	if c.RequestDeadline <= 0 {
		return 0, false
	}
	return planned + int64(c.RequestDeadline), true
}

// sendBy sends a request planned at planned, ended at its deadline when
// the run has one. A request whose deadline passed before it could be
// sent fails at once, deadline-exceeded: the deadline is never moved.
func (r *run) sendBy(ctx context.Context, body []byte, e expect, planned int64) outcome {
	at, ok := r.cfg.deadlineOf(planned)
	if !ok {
		return r.sender.send(ctx, body, e)
	}
	if now := r.clock.Now(); now >= at {
		return outcome{end: now, class: DeadlineExceeded, reason: "its deadline passed before it could be sent", unsent: true}
	}
	dctx, cancel := context.WithDeadline(ctx, r.clock.Time(at))
	defer cancel()
	return r.sender.send(dctx, body, e)
}

// writeSeed writes the seed's records when the run asks for them and
// puts their block into res. closedAt is the end of admission, frozenAt
// when the records froze.
func (r *run) writeSeed(res *Result, slots []*slot, closedAt, frozenAt int64) error {
	if !r.cfg.SeedRecords {
		return nil
	}
	unsent, err := r.unsent(slots, closedAt)
	if err != nil {
		return err
	}
	info, err := r.writeSeedRecords(slots, unsent, closedAt, frozenAt)
	if err != nil {
		return err
	}
	res.SeedRecords = info
	return nil
}
