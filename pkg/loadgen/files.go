package loadgen

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/google/renameio/v2"

	"warden/pkg/phasefile"
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

// Phase names, in the order a run reports them (the phase file's, package
// phasefile). Each clean segment, each profile window and each recovery
// has its own line; they also name the segments' kinds.
const (
	PhaseWarmup   = phasefile.Warmup
	PhaseClean    = phasefile.Clean
	PhaseProfile  = phasefile.Profile
	PhaseRecovery = phasefile.Recovery
	PhaseDrain    = phasefile.Drain
	PhaseDrained  = phasefile.Drained
	PhaseDone     = phasefile.Done
)

// PhaseLine is one line of the phase file.
type PhaseLine = phasefile.Line

// phaseLog stamps phase lines with the run's clock. A nil *phaseLog
// records nothing.
type phaseLog struct {
	w     *phasefile.Writer
	clock *Clock
}

func openPhaseLog(path string, clock *Clock) (*phaseLog, error) {
	w, err := phasefile.Open(path)
	if w == nil || err != nil {
		return nil, err
	}
	return &phaseLog{w: w, clock: clock}, nil
}

// mark appends one line stamped now.
func (p *phaseLog) mark(phase string, index int, successes *int) error {
	if p == nil {
		return nil
	}
	now := time.Now()
	return p.w.Write(phasefile.Line{Phase: phase, T: now.UTC().Format(time.RFC3339Nano),
		MonoNS: p.clock.Mono(now), Index: index, Successes: successes})
}

func (p *phaseLog) close() error {
	if p == nil {
		return nil
	}
	return p.w.Close()
}
