package safefile

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Seal fsyncs and digests a regular file, noting one of only NUL bytes;
// it refuses what is not a regular file, as Open does.
func TestSeal(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Seal(p)
	if err != nil || s.Size != 3 || s.AllNUL || s.SHA256 != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Fatalf("Seal: %+v %v", s, err)
	}
	if err := os.WriteFile(p, make([]byte, 5000), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := SumFile(p); err != nil || !s.AllNUL || s.Size != 5000 {
		t.Fatalf("NUL-filled: %+v %v", s, err)
	}
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := SumFile(p); err != nil || s.AllNUL {
		t.Fatalf("empty file: %+v %v", s, err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Seal(fifo); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("Seal of a FIFO: %v", err)
	}
}

// A directory that takes writes passes and keeps nothing of the probe; one
// that is not there fails.
func TestProbeWrite(t *testing.T) {
	dir := t.TempDir()
	if err := ProbeWrite(dir); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("the probe left %v", ents)
	}
	if err := ProbeWrite(filepath.Join(dir, "absent")); err == nil {
		t.Fatal("a probe in a missing directory passed")
	}
	if err := ProbeWrite(""); err == nil {
		t.Fatal("a probe with no directory passed")
	}
}
