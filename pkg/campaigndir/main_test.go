package campaigndir

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestMain puts an executable named standin on PATH: Create looks for the
// executables a protocol names, and the mini protocol's commands name the
// stand-in bare. No test here runs it.
func TestMain(m *testing.M) {
	os.Exit(withStandinOnPath(m))
}

func withStandinOnPath(m *testing.M) int {
	dir, err := os.MkdirTemp("", "campaigndir-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "standin"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	os.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return m.Run()
}
