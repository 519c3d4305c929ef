// Package lockfile is a one-owner lock on a file: an exclusive flock that
// records the owner's pid. The kernel drops a flock when its owner dies, so
// a lock left by a dead process is simply taken over; a live owner is
// refused with its pid.
package lockfile

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrHeld is returned (wrapped in *HeldError) when a live process holds the lock.
var ErrHeld = errors.New("lock is held")

// HeldError names the holder.
type HeldError struct {
	Path string
	PID  int
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("%s is held by pid %d", e.Path, e.PID)
}

func (e *HeldError) Unwrap() error { return ErrHeld }

// Lock is a held lock.
type Lock struct {
	f *os.File
}

// Acquire takes the lock at path without waiting.
func Acquire(path string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			// The kernel names the holder (/proc/locks); the pid in the
			// file may still be the last owner's, its successor's not yet
			// written. Failing that, the file: looked at again briefly
			// rather than report pid 0.
			if pid := lockHolder(path); pid > 0 {
				return nil, &HeldError{Path: path, PID: pid}
			}
			pid := Owner(path)
			for i := 0; pid == 0 && i < 50; i++ {
				time.Sleep(10 * time.Millisecond)
				pid = Owner(path)
			}
			return nil, &HeldError{Path: path, PID: pid}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// The pid is written over the old one and the tail cut after, so a
	// reader sees a whole pid on the first line at every moment once one
	// was written.
	line := []byte(strconv.Itoa(os.Getpid()) + "\n")
	_, err = f.WriteAt(line, 0)
	if err == nil {
		err = f.Truncate(int64(len(line)))
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: record pid: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// Release drops the lock. The pid stays in the file as a record of the
// last owner.
func (l *Lock) Release() {
	if l == nil || l.f == nil {
		return
	}
	unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	l.f.Close()
	l.f = nil
}

// Owner is the pid recorded in the lock file: the holder while it is
// held, the last holder otherwise; 0 when there is none.
func Owner(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(first))
	return pid
}

// Held reports whether a live process holds the lock, without disturbing
// it: a shared non-blocking flock fails while an exclusive one is held.
func Held(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		return errors.Is(err, unix.EWOULDBLOCK)
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}

// Wait waits until no live process holds the lock at path, for at most
// timeout, looking every 100 ms; it reports whether the lock was freed.
// While it waits, tick (when not nil) is called once every interval.
func Wait(path string, timeout, every time.Duration, tick func()) bool {
	deadline := time.Now().Add(timeout)
	last := time.Now()
	for Held(path) {
		if time.Now().After(deadline) {
			return false
		}
		if tick != nil && time.Since(last) > every {
			tick()
			last = time.Now()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

// Holder is the pid the kernel lists as holding the lock at path, when it
// is the pid the lock file records (the holder proved by both); 0
// otherwise.
func Holder(path string) int {
	if pid := lockHolder(path); pid > 0 && pid == Owner(path) {
		return pid
	}
	return 0
}

// lockHolder is the pid the kernel lists (/proc/locks) as holding an
// exclusive flock on the file at path, or 0 when none is listed or it
// cannot be read.
func lockHolder(path string) int {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0
	}
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		return 0
	}
	// "1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234 0 EOF"; a blocked
	// waiter's line starts "1: -> FLOCK"
	id := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 6 || f[1] != "FLOCK" || f[3] != "WRITE" || f[5] != id {
			continue
		}
		if pid, err := strconv.Atoi(f[4]); err == nil && pid > 0 {
			return pid
		}
	}
	return 0
}
