package safefile

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestOpenRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	reg := filepath.Join(dir, "reg")
	if err := os.WriteFile(reg, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(reg, link); err != nil {
		t.Fatal(err)
	}
	// a socket cannot be opened at all (ENXIO)
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// a FIFO with no writer: a plain open would block forever
	for path, what := range map[string]string{fifo: "a FIFO", link: "a symbolic link", dir: "a directory", "/dev/zero": "a character device", sock: "a socket"} {
		_, err := ReadFile(path, 1<<20)
		if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), what) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v; want ErrNotRegular naming it as %s", path, err, what)
		}
	}
	if b, err := ReadFile(reg, 5); err != nil || string(b) != "hello" {
		t.Errorf("regular file: %q %v", b, err)
	}
	if _, err := ReadFile(reg, 4); !errors.Is(err, ErrTooLarge) {
		t.Errorf("over the limit: %v, want ErrTooLarge", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing"), 10); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
}

// Kind names every type of file that is not regular, the character
// device before the device bit it also carries, and nothing else.
func TestKindNamesEachNonRegularType(t *testing.T) {
	for m, want := range map[fs.FileMode]string{
		fs.ModeNamedPipe:                      "FIFO",
		fs.ModeDevice | fs.ModeCharDevice:     "character device",
		fs.ModeDevice:                         "block device",
		fs.ModeSocket:                         "socket",
		fs.ModeDir | 0o755:                    "directory",
		fs.ModeSymlink | 0o777:                "symbolic link",
		0o644:                                 "",
		fs.ModeSetuid | fs.ModeSticky | 0o755: "",
	} {
		if got := Kind(m); got != want {
			t.Errorf("Kind(%v) = %q, want %q", m, got, want)
		}
	}
}
