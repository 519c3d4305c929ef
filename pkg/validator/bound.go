package validator

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"warden/protocols"
)

// BoundedArgv runs argv under an address-space limit (RLIMIT_AS) of
// memMiB, through /bin/sh's ulimit -v, which sets it before the exec: the
// validator runs limited from its first instruction, in the same process
// (the pid started is the validator's after the exec). memMiB 0: half of
// the host's memory.
func BoundedArgv(argv []string, memMiB float64) ([]string, error) {
	kib := uint64(memMiB * 1024)
	if memMiB == 0 {
		total, err := memTotalKiB()
		if err != nil {
			return nil, fmt.Errorf("validator memory bound: %w", err)
		}
		kib = total / 2
	}
	// a limit above the controller's own hard limit cannot be set by an
	// unprivileged shell: the hard limit is the bound then
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_AS, &lim); err == nil && lim.Max != unix.RLIM_INFINITY && kib > lim.Max/1024 {
		kib = lim.Max / 1024
	}
	if kib == 0 {
		return nil, fmt.Errorf("validator memory bound of %v MiB is too small", memMiB)
	}
	return append([]string{"/bin/sh", "-c", `ulimit -v "$1" || exit 125; shift; exec "$@"`, "sh", strconv.FormatUint(kib, 10)}, argv...), nil
}

// memTotalKiB reads MemTotal from /proc/meminfo.
func memTotalKiB() (uint64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != "MemTotal" {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/meminfo MemTotal %q: %w", v, err)
		}
		return n, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("/proc/meminfo has no MemTotal")
}

// defaultValidatorTimeout bounds a validator whose plan names no timeout_s
// (a plan written before validators had one): the protocol's default.
const defaultValidatorTimeout = 600 * time.Second

// Timeout is v's time bound.
func Timeout(v protocols.ValidatorSpec) time.Duration {
	if v.TimeoutS <= 0 {
		return defaultValidatorTimeout
	}
	return time.Duration(v.TimeoutS * float64(time.Second))
}
