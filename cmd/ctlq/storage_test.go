package main

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"warden/internal/testutil/testtmpfs"
	"warden/pkg/views"
)

// TestStorageFaultFull: a campaign directory whose file system has no
// space left is named full, with the bytes free, so that a dead
// controller's hint says to free space; with room on it, nothing is said.
func TestStorageFaultFull(t *testing.T) {
	dir := testtmpfs.Mount(t, "2m")
	if got := storageFault(dir); got != (views.Storage{}) {
		t.Fatalf("an empty 2 MiB file system: %+v, want nothing said", got)
	}
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 64<<10)
	for i := 0; i < 64; i++ { // at most 4 MiB: twice the file system
		if _, err = f.Write(block); err != nil {
			break
		}
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the file system: %v, want ENOSPC", err)
	}
	if got := storageFault(dir); !got.Full || got.Free >= fullBelow || got.ReadOnly != "" {
		t.Fatalf("a full file system: %+v, want full with under %d bytes free", got, fullBelow)
	}
}
