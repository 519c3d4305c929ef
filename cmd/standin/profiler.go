package main

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"warden/pkg/atomicfile"
)

// The profiler, as vLLM's torch profiler behaves (docs/servers.md):
//
//   - /start_profile starts a window; a start while one is open is
//     ignored, and /stop_profile without one is a no-op (both 200).
//   - With --profiler-step-s S the window follows vLLM's step schedule:
//     the engine steps every S seconds; steps 0..warmup-1 are the warm-up,
//     warmup..warmup+active-1 the active steps, and after the last active
//     step the trace is written at once, whether or not /stop_profile
//     comes. A /stop_profile before that writes what was recorded: the
//     active steps begun so far, ProfilerStep#warmup..#k after k steps
//     (nothing during the warm-up). Without it (S = 0), /stop_profile
//     writes the whole window at once, ProfilerStep#2..#9.
//   - --profiler-reused is vLLM's reused profiler (issue #45987): the
//     profiler object is built on the first /start_profile and restarted
//     for the next, whose schedule has already run: every window after the
//     first answers 200 and writes no trace.

// profilerSchedule is the schedule of --profiler-config and its pace.
type profilerSchedule struct {
	stepS          float64 // seconds per engine step; 0: the window ends at /stop_profile
	warmup, active int
	reused         bool
	// saveS is how long the trace's save takes after the last active step
	// (a real server's export of a large trace); a /stop_profile during it
	// returns once it is written, as vLLM's synchronous stop does.
	saveS float64
}

func addProfilerFlags(f *pflag.FlagSet, s *profilerSchedule) {
	f.Float64Var(&s.stepS, "profiler-step-s", 0, "seconds per engine step of the profiler's schedule: the trace is written after the last active step, or truncated by an earlier /stop_profile (0: written on /stop_profile)")
	f.IntVar(&s.warmup, "profiler-warmup-iterations", 2, "the schedule's warm-up steps (vLLM's warmup_iterations)")
	f.IntVar(&s.active, "profiler-active-iterations", 8, "the schedule's active steps (vLLM's active_iterations)")
	f.BoolVar(&s.reused, "profiler-reused", false, "misbehave as unpatched vLLM: every profile window after the first writes no trace")
	f.Float64Var(&s.saveS, "profiler-save-s", 0, "with --profiler-step-s: seconds the trace's save takes after the last active step; a /stop_profile during it returns once the trace is written")
}

func (s profilerSchedule) validate() error {
	if s.stepS < 0 || s.warmup < 0 || s.active < 1 || s.saveS < 0 {
		return errors.New("--profiler-step-s must not be negative, --profiler-warmup-iterations not negative, --profiler-active-iterations positive")
	}
	return nil
}

// stepDuration is a step's length in the trace's timestamps.
func (s profilerSchedule) stepDuration() time.Duration {
	if s.stepS > 0 {
		return seconds(s.stepS)
	}
	return time.Millisecond
}

// profiler holds the open window and writes its traces.
type profiler struct {
	cfg     layer2Config
	l1      *layer1Writer // nil: no Layer-1 stream; the steps are the profiler's own (layer2.go)
	mu      sync.Mutex    // guards the fields below; one window at a time
	open    bool
	start   time.Time
	startNS int64 // CLOCK_MONOTONIC at /start_profile
	window  int
	steps   int           // engine steps run in the open window
	saved   bool          // the open window's trace is written (or being saved)
	halt    chan struct{} // closed by /stop_profile: the stepper ends
	saving  chan struct{} // closed when a save in progress (--profiler-save-s) has written the trace
	// ticks, when set, replaces the step timer (tests step by hand).
	ticks func() (<-chan time.Time, func())
}

// startProfile answers vLLM's POST /start_profile.
func (a *api) startProfile(w http.ResponseWriter, _ *http.Request) {
	if p := a.profiler; p != nil {
		p.begin()
	}
	w.WriteHeader(http.StatusOK)
}

// stopProfile answers vLLM's POST /stop_profile, writing what the window
// recorded before it returns (vLLM's call is synchronous too).
func (a *api) stopProfile(w http.ResponseWriter, _ *http.Request) {
	if p := a.profiler; p != nil {
		if err := p.stop(); err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (p *profiler) begin() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.open {
		return
	}
	p.open, p.start, p.startNS, p.steps, p.saved = true, time.Now(), monoNow(), 0, false
	p.window++
	if p.l1 != nil {
		p.l1.mu.Lock()
		p.l1.l2.profiling, p.l1.l2.unrepr = true, p.cfg.brk == l2BreakUnrepr
		p.l1.mu.Unlock()
	}
	if p.cfg.sched.stepS > 0 {
		p.halt = make(chan struct{})
		go p.stepper(p.halt, p.window)
	}
}

// stepper runs the open window's engine steps; it ends at the last
// active step or when the window is stopped.
func (p *profiler) stepper(halt <-chan struct{}, window int) {
	tick, stopTick := p.stepTicks()
	defer stopTick()
	for {
		select {
		case <-halt:
			return
		case <-tick:
		}
		p.mu.Lock()
		if !p.open || p.window != window {
			p.mu.Unlock()
			return
		}
		p.steps++
		done := p.steps >= p.cfg.sched.warmup+p.cfg.sched.active
		if done && !p.saved {
			p.saved = true
			if save := p.cfg.sched.saveS; save > 0 {
				// the save takes its time; a stop waits for it
				saving := make(chan struct{})
				p.saving = saving
				p.mu.Unlock()
				time.Sleep(seconds(save))
				p.mu.Lock()
				p.saving = nil
				defer close(saving)
			}
			if err := p.write(p.cfg.sched.warmup, p.cfg.sched.warmup+p.cfg.sched.active-1); err != nil {
				newLogger("server").Warn("profiler: trace not written", "err", err)
			}
		}
		p.mu.Unlock()
		if done {
			return
		}
	}
}

// stepTicks is the stepper's clock: a ticker of the step's length.
func (p *profiler) stepTicks() (<-chan time.Time, func()) {
	if p.ticks != nil {
		return p.ticks()
	}
	t := time.NewTicker(p.cfg.sched.stepDuration())
	return t.C, t.Stop
}

func (p *profiler) stop() error {
	p.mu.Lock()
	if saving := p.saving; saving != nil {
		// a save in progress: the stop returns once the trace is written
		p.mu.Unlock()
		<-saving
		p.mu.Lock()
	}
	defer p.mu.Unlock()
	if !p.open {
		return nil
	}
	p.open = false
	if p.halt != nil {
		close(p.halt)
		p.halt = nil
	}
	if p.saved {
		return nil
	}
	p.saved = true
	w := p.cfg.sched.warmup
	if p.cfg.sched.stepS == 0 {
		return p.write(w, w+p.cfg.sched.active-1)
	}
	if p.steps < w {
		p.endProfiling()
		return nil // stopped in the warm-up: nothing recorded
	}
	return p.write(w, p.steps)
}

// write writes the window's trace of every rank, ProfilerStep#first..#last;
// nothing for a reused profiler's later windows. Called with mu held.
func (p *profiler) write(first, last int) error {
	if p.cfg.dir == "" || (p.cfg.sched.reused && p.window > 1) {
		p.endProfiling()
		return nil
	}
	steps, err := p.windowSteps(last + 1)
	if err != nil {
		p.endProfiling()
		return err
	}
	if err := os.MkdirAll(p.cfg.dir, 0o755); err != nil {
		return fmt.Errorf("traces: %w", err)
	}
	for r := range p.cfg.tp {
		if p.cfg.brk == l2BreakMissing && r == p.cfg.tp-1 {
			continue
		}
		b, err := p.trace(r, first, last, steps)
		if err != nil {
			return err
		}
		name := fmt.Sprintf("dp0_pp0_tp%d_dcp0_ep0_rank%d.%d.pt.trace.json.gz", r, r, time.Now().UnixNano())
		if err := atomicfile.WriteFile(filepath.Join(p.cfg.dir, name), b, 0o644); err != nil {
			return fmt.Errorf("traces: %w", err)
		}
	}
	return nil
}

// endProfiling tells the Layer-1 writer that no window is open (the
// unrepresentative break shapes only a window's steps). Called with mu held.
func (p *profiler) endProfiling() {
	if p.l1 != nil {
		p.l1.mu.Lock()
		p.l1.l2.profiling = false
		p.l1.mu.Unlock()
	}
}
