package testbin

import (
	"os"
	"path/filepath"
	"testing"
)

// A build that succeeds hands tests the directory holding the binary,
// named after its package's directory, and the directory is gone once
// Run returns tests' code.
func TestRunBuildsThenRemoves(t *testing.T) {
	var dir string
	code := Run("testbin-test-", []string{"./testdata/hello"}, func(d string) int {
		dir = d
		if _, err := os.Stat(filepath.Join(d, "hello")); err != nil {
			t.Errorf("the built binary: %v", err)
		}
		return 7
	})
	if code != 7 {
		t.Errorf("Run returned %d, want tests' 7", code)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the directory %q after Run: %v, want it gone", dir, err)
	}
}

// A build that fails returns 1 and never runs the tests.
func TestRunBuildFails(t *testing.T) {
	called := false
	code := Run("testbin-test-", []string{"./testdata/none"}, func(string) int { called = true; return 0 })
	if code != 1 || called {
		t.Fatalf("Run returned %d, tests called %v; want 1, not called", code, called)
	}
}
