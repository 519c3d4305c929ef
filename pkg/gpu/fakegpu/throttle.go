package fakegpu

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"warden/pkg/atomicfile"
)

// throttleDir holds DIR/throttle/<gpu index>.json: a clock-event reason
// mask the GPU reports on top of the ones its load gives, so that a test
// can drive a thermal or power-brake slowdown through the fake.
const throttleDir = "throttle"

type throttleRecord struct {
	Reasons uint64 `json:"reasons"`
}

// SetThrottle makes GPU gpu report the clock-event reasons of mask (the
// gpu.Reason* bits) in every reading from now on, until it is set again;
// mask 0 clears it. It returns ErrNoDevice for an unknown GPU.
func SetThrottle(dir string, gpu int, mask uint64) error {
	devices, err := readDevices(dir)
	if err != nil {
		return fmt.Errorf("throttle fake GPU %d: %w", gpu, err)
	}
	if gpu < 0 || gpu >= len(devices) {
		return fmt.Errorf("throttle fake GPU %d of %d: %w", gpu, len(devices), ErrNoDevice)
	}
	data, err := json.Marshal(throttleRecord{Reasons: mask})
	if err != nil {
		return err
	}
	td := filepath.Join(dir, throttleDir)
	if err := atomicfile.MkdirAll(td, 0o755); err != nil {
		return fmt.Errorf("throttle fake GPU %d: %w", gpu, err)
	}
	if err := atomicfile.WriteFile(filepath.Join(td, strconv.Itoa(gpu)+".json"), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("throttle fake GPU %d: %w", gpu, err)
	}
	return nil
}

// throttle is the mask SetThrottle gave GPU gpu, 0 when none.
func (b *Backend) throttle(gpu int) (uint64, error) {
	data, err := os.ReadFile(filepath.Join(b.dir, throttleDir, strconv.Itoa(gpu)+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("fake GPU %d throttle: %w", gpu, err)
	}
	var t throttleRecord
	if err := json.Unmarshal(data, &t); err != nil {
		return 0, fmt.Errorf("fake GPU %d throttle: %w", gpu, err)
	}
	return t.Reasons, nil
}
