package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// The client's phases, in the order it reports them.
const (
	phaseWarmup = "warmup"
	phaseClean  = "clean"
	phaseDrain  = "drain"
	phaseDone   = "done"
)

// phaseLine is one line of the phase file.
type phaseLine struct {
	Phase string `json:"phase"`
	// T is the wall-clock time, RFC 3339 with nanoseconds, UTC.
	T string `json:"t"`
	// MonoNS is CLOCK_MONOTONIC in nanoseconds, comparable across the
	// processes of one boot.
	MonoNS int64 `json:"mono_ns"`
	// Successes is reported with "done": requests completed successfully
	// in the clean interval, for the controller's energy per request.
	Successes *int `json:"successes,omitempty"`
}

// phaseLog appends phase changes to a file as JSON lines, fsynced one by
// one. A nil *phaseLog records nothing.
type phaseLog struct {
	f *os.File
}

// openPhaseLog opens path for appending; an empty path gives a nil log.
func openPhaseLog(path string) (*phaseLog, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open phase file: %w", err)
	}
	return &phaseLog{f: f}, nil
}

// mark appends one line for phase.
func (p *phaseLog) mark(phase string) error { return p.markWith(phase, nil) }

// markWith appends one line for phase, with the success count when given.
func (p *phaseLog) markWith(phase string, successes *int) error {
	if p == nil {
		return nil
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return fmt.Errorf("phase %s: monotonic clock: %w", phase, err)
	}
	data, err := json.Marshal(phaseLine{
		Phase:     phase,
		T:         time.Now().UTC().Format(time.RFC3339Nano),
		MonoNS:    ts.Nano(),
		Successes: successes,
	})
	if err != nil {
		return fmt.Errorf("phase %s: %w", phase, err)
	}
	// One write of the whole line: O_APPEND keeps lines whole.
	if _, err := p.f.Write(append(data, '\n')); err != nil {
		return fmt.Errorf("phase %s: write %s: %w", phase, p.f.Name(), err)
	}
	if err := p.f.Sync(); err != nil {
		return fmt.Errorf("phase %s: sync %s: %w", phase, p.f.Name(), err)
	}
	return nil
}

func (p *phaseLog) close() error {
	if p == nil {
		return nil
	}
	return p.f.Close()
}
