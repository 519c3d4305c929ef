package loadgen

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/google/renameio/v2"
)

// writeFileAtomic writes data to path through a temporary file in the same
// directory, renames it into place and fsyncs the directory.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := renameio.WriteFile(path, data, 0o644, renameio.WithTempDir(dir)); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// writeJSONLines writes one JSON value per line, atomically.
func writeJSONLines[T any](path string, items []T) error {
	var buf []byte
	for _, it := range items {
		b, err := json.Marshal(it)
		if err != nil {
			return fmt.Errorf("encode %s: %w", path, err)
		}
		buf = append(append(buf, b...), '\n')
	}
	return writeFileAtomic(path, buf)
}

// Phase names, in the order a run reports them. Each clean segment, each
// profile window and each recovery has its own line.
const (
	PhaseWarmup   = "warmup"
	PhaseClean    = "clean"
	PhaseProfile  = "profile"
	PhaseRecovery = "recovery"
	PhaseDrain    = "drain"
	PhaseDone     = "done"
)

// PhaseLine is one line of the phase file: the controller's format (the
// same the stand-in client writes), with the segment or window index.
type PhaseLine struct {
	Phase string `json:"phase"`
	// T is the wall-clock time, RFC 3339 with nanoseconds, UTC.
	T string `json:"t"`
	// MonoNS is CLOCK_MONOTONIC in nanoseconds.
	MonoNS int64 `json:"mono_ns"`
	// Index numbers clean segments, profile windows and recoveries from 1.
	Index int `json:"index,omitempty"`
	// Successes is reported with "done": requests completed successfully
	// in the clean interval, for the controller's energy per request.
	Successes *int `json:"successes,omitempty"`
}

// phaseLog appends phase lines to a file, fsynced one by one. A nil
// *phaseLog records nothing.
type phaseLog struct {
	f     *os.File
	clock *Clock
}

func openPhaseLog(path string, clock *Clock) (*phaseLog, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open phase file: %w", err)
	}
	return &phaseLog{f: f, clock: clock}, nil
}

// mark appends one line stamped now and returns its monotonic time.
func (p *phaseLog) mark(phase string, index int, successes *int) error {
	if p == nil {
		return nil
	}
	now := time.Now()
	data, err := json.Marshal(PhaseLine{Phase: phase, T: now.UTC().Format(time.RFC3339Nano),
		MonoNS: p.clock.Mono(now), Index: index, Successes: successes})
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
