package fakegpu

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"warden/pkg/atomicfile"
)

// claimRecord is the content of DIR/claims/<gpu>/<pid>-<start>.json.
type claimRecord struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
	UID       int    `json:"uid"`
	MiB       int    `json:"mib"`
	Role      string `json:"role,omitempty"`
}

// ClaimOption adjusts a claim.
type ClaimOption func(*claimRecord)

// WithRole records what the claiming process is (e.g. "engine"), for people
// reading the claim files. It does not change how the claim counts.
func WithRole(role string) ClaimOption {
	return func(c *claimRecord) { c.Role = role }
}

// Claim registers mib MiB of memory on GPU gpu for the calling process, under
// the caller's uid. The memory counts until the process exits; claiming again
// on the same GPU replaces the amount. It returns ErrNoDevice for an unknown
// GPU.
func Claim(dir string, gpu, mib int, opts ...ClaimOption) error {
	start, err := StartTime(os.Getpid())
	if err != nil {
		return fmt.Errorf("claim fake GPU %d: %w", gpu, err)
	}
	return ClaimFor(dir, gpu, os.Getpid(), start, os.Getuid(), mib, opts...)
}

// ClaimFor registers a claim on behalf of another process, identified by pid
// and start time, recording uid as its owner. Tests use it to make a process
// they started look like another user's; a wrong start time makes a claim
// that never counts, like a claim left by an earlier holder of the pid.
func ClaimFor(dir string, gpu, pid int, startTime uint64, uid, mib int, opts ...ClaimOption) error {
	if pid <= 0 || mib < 0 {
		return fmt.Errorf("claim fake GPU %d for pid %d: need pid > 0 and mib >= 0, got mib %d", gpu, pid, mib)
	}
	devices, err := readDevices(dir)
	if err != nil {
		return fmt.Errorf("claim fake GPU %d for pid %d: %w", gpu, pid, err)
	}
	if gpu < 0 || gpu >= len(devices) {
		return fmt.Errorf("claim fake GPU %d of %d for pid %d: %w", gpu, len(devices), pid, ErrNoDevice)
	}
	c := claimRecord{PID: pid, StartTime: startTime, UID: uid, MiB: mib}
	for _, o := range opts {
		o(&c)
	}
	data, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("claim fake GPU %d for pid %d: %w", gpu, pid, err)
	}
	gpuDir := filepath.Join(dir, claimsDir, strconv.Itoa(gpu))
	if err := atomicfile.MkdirAll(gpuDir, 0o755); err != nil {
		return fmt.Errorf("claim fake GPU %d for pid %d: %w", gpu, pid, err)
	}
	path := filepath.Join(gpuDir, fmt.Sprintf("%d-%d.json", pid, startTime))
	if err := atomicfile.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("claim fake GPU %d for pid %d: %w", gpu, pid, err)
	}
	return nil
}
