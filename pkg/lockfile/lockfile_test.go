package lockfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
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
