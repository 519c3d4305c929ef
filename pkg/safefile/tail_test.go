package safefile

import (
	"os"
	"path/filepath"
	"testing"
)

// ReadTail reads the last bytes of a regular file, all of a short one,
// and refuses what is not a regular file.
func TestReadTail(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "server.err")
	if err := os.WriteFile(path, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadTail(path, 4); err != nil || string(b) != "6789" {
		t.Fatalf("tail 4: %q, %v", b, err)
	}
	if b, err := ReadTail(path, 100); err != nil || string(b) != "0123456789" {
		t.Fatalf("tail 100: %q, %v", b, err)
	}
	if _, err := ReadTail(dir, 4); err == nil {
		t.Fatal("a directory was read")
	}
	if _, err := ReadTail(filepath.Join(dir, "missing"), 4); err == nil {
		t.Fatal("a missing file was read")
	}
}
