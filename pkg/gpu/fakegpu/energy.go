package fakegpu

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"warden/pkg/atomicfile"
)

const energyDir = "energy"

// maxStepMicros bounds the time one update adds, so that the product with
// the power limit in milliwatts fits in 64 bits (about 200 days).
const maxStepMicros = 1 << 44

// energyRecord is the content of DIR/energy/<gpu>.json.
type energyRecord struct {
	// NJ is the energy counted so far, in nanojoules: milliwatts times
	// microseconds, exactly.
	NJ uint64 `json:"energy_nj"`
	// AtUnixNS is the time up to which NJ counts. It advances by whole
	// microseconds, so no time is lost between updates.
	AtUnixNS int64 `json:"at_unix_ns"`
}

// advanceEnergy adds mw times the time since the last update to GPU i's
// counter and returns the counter in millijoules. An exclusive flock on
// DIR/energy/<gpu>.lock serializes updates by any process or goroutine, so
// the counter never decreases; a clock that went back adds nothing.
func (b *Backend) advanceEnergy(i int, mw int64) (uint64, error) {
	dir := filepath.Join(b.dir, energyDir)
	if err := atomicfile.MkdirAll(dir, 0o755); err != nil {
		return 0, fmt.Errorf("energy of fake GPU %d: %w", i, err)
	}
	lockPath := filepath.Join(dir, strconv.Itoa(i)+".lock")
	lock, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return 0, fmt.Errorf("energy of fake GPU %d: %w", i, err)
	}
	defer lock.Close() // closing releases the lock
	if err := flock(lock); err != nil {
		return 0, fmt.Errorf("energy of fake GPU %d: lock %s: %w", i, lockPath, err)
	}

	path := filepath.Join(dir, strconv.Itoa(i)+".json")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return 0, fmt.Errorf("energy of fake GPU %d: %w", i, err)
	}
	defer f.Close()
	now := b.now().UnixNano()
	var rec energyRecord
	data, err := io.ReadAll(f)
	switch {
	case err != nil:
		return 0, fmt.Errorf("energy of fake GPU %d: %w", i, err)
	case len(data) == 0:
		rec.AtUnixNS = now // the counter starts at this read
	default:
		if err := json.Unmarshal(data, &rec); err != nil {
			return 0, fmt.Errorf("energy of fake GPU %d: decode %s: %w", i, path, err)
		}
		micros := (now - rec.AtUnixNS) / 1000
		if micros <= 0 {
			return rec.NJ / 1e6, nil
		}
		micros = min(micros, maxStepMicros)
		rec.NJ += uint64(mw) * uint64(micros)
		rec.AtUnixNS += micros * 1000
	}
	out, err := json.Marshal(rec)
	if err != nil {
		return 0, fmt.Errorf("energy of fake GPU %d: %w", i, err)
	}
	// Rewritten in place under the lock, which every reader takes, and
	// not fsynced: the counter is a fake's; losing its last update in a
	// power cut costs nothing, and a new file (or an fsync) on every read
	// would weigh on the controller's per-run cost as no NVML read does.
	out = append(out, '\n')
	if _, err := f.WriteAt(out, 0); err != nil {
		return 0, fmt.Errorf("energy of fake GPU %d: %w", i, err)
	}
	if err := f.Truncate(int64(len(out))); err != nil {
		return 0, fmt.Errorf("energy of fake GPU %d: %w", i, err)
	}
	return rec.NJ / 1e6, nil
}

// flock takes an exclusive lock on f, retrying when a signal interrupts
// the wait.
func flock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
