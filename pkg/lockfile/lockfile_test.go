package lockfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "controller.lock")
	if Held(path) {
		t.Fatal("missing lock reported held")
	}
	l, err := Acquire(path)
	if err != nil {
		t.Fatal(err)
	}
	if !Held(path) || Owner(path) != os.Getpid() {
		t.Fatalf("held %v owner %d", Held(path), Owner(path))
	}
	// a second acquisition (another open file description) is refused with the pid
	_, err = Acquire(path)
	var he *HeldError
	if !errors.Is(err, ErrHeld) || !errors.As(err, &he) || he.PID != os.Getpid() {
		t.Fatalf("second Acquire = %v", err)
	}
	l.Release()
	if Held(path) {
		t.Fatal("released lock reported held")
	}
	l2, err := Acquire(path)
	if err != nil {
		t.Fatalf("reacquire after release: %v", err)
	}
	l2.Release()
}

// TestWait: a free lock is waited for not at all; a held one until its
// holder releases it (here from the tick), or until the timeout.
func TestWait(t *testing.T) {
	path := filepath.Join(t.TempDir(), "controller.lock")
	if !Wait(path, 0, 0, func() { t.Fatal("tick while the lock is free") }) {
		t.Fatal("a free lock timed out")
	}
	l, err := Acquire(path)
	if err != nil {
		t.Fatal(err)
	}
	ticks := 0
	if Wait(path, 300*time.Millisecond, 0, func() { ticks++ }) {
		t.Fatal("a held lock was reported free")
	}
	if ticks == 0 || !Held(path) {
		t.Fatalf("%d ticks, held %v; want ticks while it stayed held", ticks, Held(path))
	}
	released := false
	release := func() {
		if !released {
			l.Release()
			released = true
		}
	}
	if !Wait(path, time.Minute, 0, release) || !released {
		t.Fatal("the lock released while waiting was not seen free")
	}
}

// TestHeldNamesTheKernelsHolder: a holder that has the lock but not yet
// its pid written (the file still names the last owner, here a pid no
// process has) is named as the kernel lists it, not by the stale file.
func TestHeldNamesTheKernelsHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "controller.lock")
	if err := os.WriteFile(path, []byte("999999999\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(path)
	var he *HeldError
	if !errors.As(err, &he) || he.PID != os.Getpid() {
		t.Fatalf("Acquire = %v; want held by pid %d (the file names 999999999)", err, os.Getpid())
	}
}
