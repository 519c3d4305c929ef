// Package testtmpfs mounts a tmpfs of a given size for a test: a real
// file system that fills up, or that a test fills itself.
package testtmpfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Mount mounts a tmpfs of size (mount's size= option: "16m") in a new
// directory and returns it; it is unmounted at the test's cleanup, lazily,
// as a process the test started may still hold it. The test skips where a
// tmpfs cannot be mounted (not root, or not allowed here). Cleanups run
// last-registered first: call Mount before starting what uses it, so that
// its cleanup runs after theirs.
func Mount(t testing.TB, size string) string {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}
