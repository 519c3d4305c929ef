package main

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"warden/pkg/phasefile"
)

// The client's phases, in the order it reports them.
const (
	phaseWarmup  = phasefile.Warmup
	phaseClean   = phasefile.Clean
	phaseDrain   = phasefile.Drain
	phaseDrained = phasefile.Drained
	phaseDone    = phasefile.Done
)

// phaseLog appends phase changes to the phase file. A nil *phaseLog
// records nothing.
type phaseLog struct {
	w *phasefile.Writer
}

// openPhaseLog opens path for appending; an empty path gives a nil log.
func openPhaseLog(path string) (*phaseLog, error) {
	w, err := phasefile.Open(path)
	if w == nil || err != nil {
		return nil, err
	}
	return &phaseLog{w: w}, nil
}

// mark appends one line for phase.
func (p *phaseLog) mark(phase string) error { return p.markWith(phase, nil) }

// markWith appends one line for phase, with the success count when given.
func (p *phaseLog) markWith(phase string, successes *int) error {
	return p.markIndex(phase, 0, successes)
}

// markIndex appends one line for phase with its index (profile windows and
// recoveries are numbered from 1), as Warden's load client does.
func (p *phaseLog) markIndex(phase string, index int, successes *int) error {
	if p == nil {
		return nil
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return fmt.Errorf("phase %s: monotonic clock: %w", phase, err)
	}
	return p.w.Write(phasefile.Line{Phase: phase, T: time.Now().UTC().Format(time.RFC3339Nano), MonoNS: ts.Nano(), Index: index, Successes: successes})
}

func (p *phaseLog) close() error {
	if p == nil {
		return nil
	}
	return p.w.Close()
}
