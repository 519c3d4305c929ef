package loadgen

import (
	"context"
	"fmt"
	"math"
	"time"
)

// The methodology's stress loads (seed 000, section 5: "压力实验加入慢消费者、
// 客户端暂停、突发恢复和取消，以暴露跨阶段队列及背压行为"; section 12: "取消实验
// 验证：入口返回后所有后代阶段最终停止、队列引用清除、显存/共享内存/credit 回收"),
// each a load option of a run:
//
//   - slow consumer: the client reads each stream no faster than a fixed
//     rate: audio at ConsumeRTF times real time (the n-th audio chunk read
//     is consumed at the first audio chunk's read + the audio's duration
//     so far / ConsumeRTF), text at ConsumeTokensPerS token chunks a
//     second (the n-th token chunk at the first token's read + n /
//     ConsumeTokensPerS); it reads nothing more until then, so with TCP
//     back-pressure the server sees a slow reader;
//   - pause and resume: the first chunk read PauseAfter or more after the
//     send starts a pause of Pause in which the client reads nothing;
//   - cancellation after the first chunk: the requests of
//     CancelSelected's set close their connection after their first
//     output chunk (a token or audio), recorded client-cancelled; then the
//     server's running-requests gauge must fall to 0 within ReleaseBound
//     (release.go);
//   - bursts are the arrival class burst:N (schedule.go), no option here.
//
// None of it runs without the options: the sender's stress is nil.

// Stress is a run's stress options; the zero value is none.
type Stress struct {
	ConsumeRTF        float64
	ConsumeTokensPerS float64
	PauseAfter        time.Duration
	Pause             time.Duration
	// CancelAfterFirstChunk is the share of requests cancelled.
	CancelAfterFirstChunk float64
	// ReleaseBound is how long after the drain the server's gauge may take
	// to reach 0 (0: DefaultReleaseBound plus the gauge's GaugeLag).
	ReleaseBound time.Duration
}

// DefaultReleaseBound bounds the wait for the server to release the
// cancelled requests, past the lag of its gauge (GaugeLag).
const DefaultReleaseBound = 5 * time.Second

// active says whether any stress option is on.
func (s Stress) active() bool {
	return s.ConsumeRTF > 0 || s.ConsumeTokensPerS > 0 || s.Pause > 0 || s.CancelAfterFirstChunk > 0
}

// Check refuses options out of range.
func (s Stress) Check() error {
	for _, v := range []float64{s.ConsumeRTF, s.ConsumeTokensPerS, s.CancelAfterFirstChunk} {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return fmt.Errorf("stress option %v: want a finite number, not negative", v)
		}
	}
	switch {
	case s.CancelAfterFirstChunk > 1:
		return fmt.Errorf("cancel share %v: want at most 1", s.CancelAfterFirstChunk)
	case s.PauseAfter < 0 || s.Pause < 0 || s.ReleaseBound < 0:
		return fmt.Errorf("stress durations must not be negative")
	case s.PauseAfter > 0 && s.Pause == 0:
		return fmt.Errorf("a pause start needs a pause length")
	}
	return nil
}

// CancelSelected says whether row is in the set of requests cancelled
// after their first chunk, for the workload seed and the share: rows are
// stratified (row i is chosen when floor((i+1)·share + u) > floor(i·share
// + u), u in [0, 1) drawn from the seed), so any first n rows hold
// floor or ceil of n·share of them, and one seed gives one set for every
// system compared.
func CancelSelected(seed uint64, row int, share float64) bool {
	if share <= 0 {
		return false
	}
	u := float64(splitmix(seed)>>11) / (1 << 53)
	return math.Floor(float64(row+1)*share+u) > math.Floor(float64(row)*share+u)
}

// splitmix is SplitMix64's finalizer.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// StressRecord is a request's record of the stress it was put under
// (Record.Stress); absent without stress options. Times are
// CLOCK_MONOTONIC ns; 0 when the instant never came.
type StressRecord struct {
	// HeldNS is the time the slow consumer held back reading, in all.
	HeldNS int64 `json:"held_ns"`
	// Paused: the client paused reading the stream, from PauseStartNS to
	// PauseEndNS.
	Paused       bool  `json:"paused"`
	PauseStartNS int64 `json:"pause_start_mono_ns"`
	PauseEndNS   int64 `json:"pause_end_mono_ns"`
	// CancelSelected: the request is in the cancelled set; CancelledNS
	// when the client closed it after its first output chunk.
	CancelSelected bool  `json:"cancel_selected"`
	CancelledNS    int64 `json:"cancelled_mono_ns"`
}

// stressTrack is one request's stress state while it streams.
type stressTrack struct {
	cfg    *Stress
	start  int64
	cancel context.CancelFunc
	rec    StressRecord
	// tokens counts token chunks read; audioNS is the audio read so far,
	// in ns of playback; firstAudio when the first audio chunk was read.
	tokens     int64
	audioNS    float64
	firstAudio int64
	audioSeen  int
}

func noop() {}

// startStress gives a request its stress state when the run has stress
// options; else ctx and a no-op, at no cost.
func (s *sender) startStress(ctx context.Context, o *outcome, e expect) (context.Context, func()) {
	if s.stress == nil {
		return ctx, noop
	}
	t := &stressTrack{cfg: s.stress, start: s.clock.Now()}
	t.rec.CancelSelected = e.cancel
	o.stress = t
	if !e.cancel {
		return ctx, noop
	}
	ctx, t.cancel = context.WithCancel(ctx)
	return ctx, t.cancel
}

// afterChunk applies the stress options once a chunk was read: the
// cancellation, the slow consumer's hold, the pause. stop says the stream
// ends here, with c and why.
func (s *sender) afterChunk(ctx context.Context, o *outcome, ch chunk) (c Class, why string, stop bool) {
	t := o.stress
	if t.rec.CancelSelected && (ch.token || ch.audio) {
		t.rec.CancelledNS = s.clock.Now()
		t.cancel()
		return ClientCancelled, "cancelled by the client after its first output chunk", true
	}
	due := int64(0)
	if ch.token && t.cfg.ConsumeTokensPerS > 0 {
		t.tokens++
		due = o.firstToken + int64(float64(t.tokens)/t.cfg.ConsumeTokensPerS*1e9)
	}
	if ch.audio && t.cfg.ConsumeRTF > 0 && o.audio != nil {
		for _, a := range o.audio.rec.Chunks[t.audioSeen:] {
			if t.firstAudio == 0 {
				t.firstAudio = a.AtNS
			}
			if a.SampleRate > 0 {
				t.audioNS += float64(a.Samples) / float64(a.SampleRate) * 1e9
			}
		}
		t.audioSeen = len(o.audio.rec.Chunks)
		due = max(due, t.firstAudio+int64(t.audioNS/t.cfg.ConsumeRTF))
	}
	if due > 0 {
		t.rec.HeldNS += s.holdUntil(ctx, due)
	}
	if t.cfg.Pause > 0 && !t.rec.Paused && s.clock.Now()-t.start >= int64(t.cfg.PauseAfter) {
		t.rec.Paused, t.rec.PauseStartNS = true, s.clock.Now()
		s.holdUntil(ctx, t.rec.PauseStartNS+int64(t.cfg.Pause))
		t.rec.PauseEndNS = s.clock.Now()
	}
	if ctx.Err() != nil {
		c, why := ended(ctx, "while the client held back reading")
		return c, why, true
	}
	return "", "", false
}

// holdUntil waits, reading nothing, until the monotonic instant or the
// end of ctx, and returns how long it waited.
func (s *sender) holdUntil(ctx context.Context, due int64) int64 {
	from := s.clock.Now()
	if due <= from {
		return 0
	}
	t := time.NewTimer(time.Duration(due - from))
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	return s.clock.Now() - from
}

// record is the request's stress record, nil without stress. A paused
// request that failed says so in its reason.
func (t *stressTrack) record(o *outcome) *StressRecord {
	if t == nil {
		return nil
	}
	if t.rec.Paused && o.class == TransportError {
		o.reason += "; after the client's pause"
	}
	r := t.rec
	return &r
}

// Events of events.jsonl a request under stress adds (seed 000, section
// 10 asks each request's "取消和释放" recorded): the client's pause and its
// cancellation. The release is the server's, seen once for the run
// (release.go).
const (
	EventPauseStart = "pause_start"
	EventPauseEnd   = "pause_end"
	EventCancelled  = "cancelled"
)

// stressEvents are the stress events of request q's record.
func (w *seedWriter) stressEvents(q *SeedRequest, rec *Record) []SeedEvent {
	s := rec.Stress
	if s == nil {
		return nil
	}
	var out []SeedEvent
	if s.Paused {
		out = append(out, w.event(q, EventPauseStart, s.PauseStartNS, StatusOK), w.event(q, EventPauseEnd, s.PauseEndNS, StatusOK))
	}
	if s.CancelledNS != 0 {
		out = append(out, w.event(q, EventCancelled, s.CancelledNS, StatusOK))
	}
	return out
}
