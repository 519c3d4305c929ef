// Package phasefile is the format of a load client's phase file, the file
// $WARDEN_PHASE_FILE names: JSON lines, one per phase boundary, appended
// and fsynced one by one. Warden's load client and the stand-in client
// write it; the controller reads it to time the drain and the clean
// interval.
package phasefile

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// The phases a client reports, in order (clean, profile and recovery
// repeat with an Index). Drain is the end of admission; Drained, the end
// of the drain: every admitted request has ended (a drain cut at the
// client's bound has none). Done follows once the results are written.
// The controller's drain gate times Drain to Drained, or to Done from a
// client that writes no Drained line.
const (
	Warmup   = "warmup"
	Clean    = "clean"
	Profile  = "profile"
	Recovery = "recovery"
	Drain    = "drain"
	Drained  = "drained"
	Done     = "done"
)

// Line is one line of the phase file.
type Line struct {
	Phase string `json:"phase"`
	// T is the wall-clock time, RFC 3339 with nanoseconds, UTC.
	T string `json:"t"`
	// MonoNS is CLOCK_MONOTONIC in nanoseconds, comparable across the
	// processes of one boot.
	MonoNS int64 `json:"mono_ns"`
	// Index numbers clean segments, profile windows and recoveries from 1.
	Index int `json:"index,omitempty"`
	// Successes is reported with Done: requests completed successfully in
	// the clean interval, for the controller's energy per request.
	Successes *int `json:"successes,omitempty"`
}

// Parse reads the lines of a phase file's contents, passing over blank
// lines; a line that does not decode as a Line is an error that names it
// by its number, from 1.
func Parse(data []byte) ([]Line, error) {
	var lines []Line
	for i, l := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		var p Line
		if err := json.Unmarshal([]byte(l), &p); err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		lines = append(lines, p)
	}
	return lines, nil
}

// ReadFile reads and parses the phase file at path.
func ReadFile(path string) ([]Line, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return lines, nil
}

// Writer appends lines to a phase file. A nil *Writer writes nothing.
type Writer struct {
	f *os.File
}

// Open opens path for appending; an empty path gives a nil Writer.
func Open(path string) (*Writer, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open phase file: %w", err)
	}
	return &Writer{f: f}, nil
}

// Write appends l in one write (O_APPEND keeps lines whole) and fsyncs it.
func (w *Writer) Write(l Line) error {
	if w == nil {
		return nil
	}
	data, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("phase %s: %w", l.Phase, err)
	}
	if _, err := w.f.Write(append(data, '\n')); err != nil {
		return fmt.Errorf("phase %s: write %s: %w", l.Phase, w.f.Name(), err)
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("phase %s: sync %s: %w", l.Phase, w.f.Name(), err)
	}
	return nil
}

// Close closes the file.
func (w *Writer) Close() error {
	if w == nil {
		return nil
	}
	return w.f.Close()
}
