package launch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBootIDFromFile: the file's content, trimmed, is the boot id; a
// missing or empty file is an error that names the variable that chose it.
func TestBootIDFromFile(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(f, []byte("  boot-a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if id, err := BootIDFromFile(f).Read(); err != nil || id != "boot-a" {
		t.Fatalf("Read = %q, %v; want boot-a", id, err)
	}
	if err := os.WriteFile(f, []byte("boot-b"), 0o644); err != nil {
		t.Fatal(err)
	}
	if id, err := BootIDFromFile(f).Read(); err != nil || id != "boot-b" {
		t.Fatalf("after a simulated reboot: %q, %v; want boot-b", id, err)
	}
	if err := os.WriteFile(f, []byte(" \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := BootIDFromFile(f)(); err == nil || !strings.Contains(err.Error(), "empty") || !strings.Contains(err.Error(), BootIDFileEnv) {
		t.Fatalf("empty file: %v", err)
	}
	if _, err := BootIDFromFile(filepath.Join(dir, "absent"))(); err == nil || !strings.Contains(err.Error(), BootIDFileEnv) {
		t.Fatalf("missing file: %v", err)
	}
}

// TestBootIDFromEnv: without the variable the kernel's boot id is used
// (a nil source); with it, the file it names.
func TestBootIDFromEnv(t *testing.T) {
	t.Setenv(BootIDFileEnv, "")
	if BootIDFromEnv() != nil {
		t.Fatal("an unset variable gives a source")
	}
	f := filepath.Join(t.TempDir(), "boot_id")
	if err := os.WriteFile(f, []byte("boot-env\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(BootIDFileEnv, f)
	b := BootIDFromEnv()
	if b == nil {
		t.Fatal("no source for a set variable")
	}
	if id, err := b.Read(); err != nil || id != "boot-env" {
		t.Fatalf("Read = %q, %v; want boot-env", id, err)
	}
}

// TestReadNilIsKernel: a nil source reads the kernel's boot id.
func TestReadNilIsKernel(t *testing.T) {
	want, err := ReadBootID()
	if err != nil {
		t.Skipf("no kernel boot id here: %v", err)
	}
	var b BootIDSource
	if got, err := b.Read(); err != nil || got != want {
		t.Fatalf("nil Read = %q, %v; want %q", got, err, want)
	}
}
