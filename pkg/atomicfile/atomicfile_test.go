package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// entries lists the names in dir.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestWriteFileContentAndMode(t *testing.T) {
	for _, mode := range []os.FileMode{0o644, 0o600, 0o444} {
		dir := t.TempDir()
		path := filepath.Join(dir, "f")
		if err := WriteFile(path, []byte("hello\n"), mode); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != "hello\n" {
			t.Errorf("content %q, %v; want %q", got, err, "hello\n")
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("mode %v, want %v", fi.Mode().Perm(), mode)
		}
		if names := entries(t, dir); len(names) != 1 {
			t.Errorf("directory holds %q, want only f", names)
		}
	}
}

func TestWriteFileReplacesWhole(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	// An existing file with other permissions and longer content: the new
	// file replaces it whole, with the mode asked for.
	if err := os.WriteFile(path, []byte(strings.Repeat("old content ", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "new" {
		t.Errorf("content %q, %v; want %q", got, err, "new")
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("stat: %v, %v; want mode 0644", fi.Mode(), err)
	}
}

func TestBeforeRenameSeesOldContent(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	var called bool
	var during string
	var tmpSeen bool
	err := WriteFile(path, []byte("new"), 0o644, BeforeRename(func() {
		called = true
		b, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("read inside the hook: %v", err)
		}
		during = string(b)
		// The temporary file, holding the new content, is in the same
		// directory.
		for _, name := range entries(t, dir) {
			if name == "f" {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, name))
			tmpSeen = tmpSeen || (err == nil && string(b) == "new")
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !called {
		t.Fatal("BeforeRename hook not called")
	}
	if during != "old" {
		t.Errorf("inside the hook the file held %q, want the old content", during)
	}
	if !tmpSeen {
		t.Error("inside the hook no temporary file with the new content was in the directory")
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "new" {
		t.Errorf("after the write: %q, %v; want %q", b, err, "new")
	}
}

func TestWriteJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v.json")
	if err := WriteJSON(path, map[string]int{"a": 1}, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if want := "{\n  \"a\": 1\n}\n"; err != nil || string(got) != want {
		t.Errorf("content %q, %v; want %q", got, err, want)
	}
	if err := WriteJSON(path, func() {}, 0o644); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("WriteJSON of a func: %v, want an error naming %s", err, path)
	}
}

func TestWriteFileMissingDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no", "such", "dir", "f")
	err := WriteFile(path, []byte("x"), 0o644)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("WriteFile in a missing directory: %v, want ErrNotExist", err)
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name %s", err, path)
	}
}

func TestFailedWriteLeavesNoTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The rename fails, whoever runs the test (root too): the hook puts a
	// non-empty directory where the file should go.
	err := WriteFile(path, []byte("new"), 0o644, BeforeRename(func() {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(path, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
	}))
	if err == nil {
		t.Fatal("WriteFile over a non-empty directory succeeded")
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name %s", err, path)
	}
	if names := entries(t, dir); len(names) != 1 || names[0] != "f" {
		t.Errorf("after a failed write the directory holds %q, want only f", names)
	}
}

func TestMkdirAll(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "a", "b", "c")
	if err := MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("stat %s: %v", dir, err)
	}
	if err := MkdirAll(dir, 0o755); err != nil {
		t.Errorf("MkdirAll of an existing directory: %v", err)
	}
	// A parent that is a regular file fails for root too.
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{file, filepath.Join(file, "sub")} {
		err := MkdirAll(p, 0o755)
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("MkdirAll(%s) = %v, want an error naming it", p, err)
		}
	}
	// The same failure for WriteFile: the path's parent is a regular file.
	if err := WriteFile(filepath.Join(file, "f"), []byte("x"), 0o644); err == nil {
		t.Error("WriteFile under a regular file succeeded")
	}
}

func TestSyncDir(t *testing.T) {
	if err := SyncDir(t.TempDir()); err != nil {
		t.Error(err)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	if err := SyncDir(missing); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("SyncDir of a missing directory: %v", err)
	}
}

// NoSync keeps every promise but durability: content, mode, the old
// content visible until the rename, no temporary file left on failure.
func TestNoSync(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("old content"), 0o600); err != nil {
		t.Fatal(err)
	}
	var during string
	err := WriteFile(path, []byte("new"), 0o640, NoSync(), BeforeRename(func() {
		b, _ := os.ReadFile(path)
		during = string(b)
	}))
	if err != nil {
		t.Fatal(err)
	}
	if during != "old content" {
		t.Errorf("before the rename the file held %q, want the old content", during)
	}
	got, _ := os.ReadFile(path)
	fi, err := os.Stat(path)
	if err != nil || string(got) != "new" || fi.Mode().Perm() != 0o640 {
		t.Errorf("after NoSync write: %q mode %v (%v); want \"new\" 0640", got, fi.Mode().Perm(), err)
	}
	err = WriteFile(path, []byte("newer"), 0o644, NoSync(), BeforeRename(func() {
		os.Remove(path)
		os.MkdirAll(filepath.Join(path, "sub"), 0o755)
	}))
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("a failed NoSync write: %v; want an error naming %s", err, path)
	}
	if names := entries(t, dir); len(names) != 1 || names[0] != "f" {
		t.Errorf("after a failed NoSync write the directory holds %q, want only f", names)
	}
}

// Beneath: a link planted in the path that leads out of the root fails the
// write; nothing is written outside; a path within the root works, with
// and without fsync.
func TestBeneath(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "runs", "r1"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, opts := range [][]Option{{Beneath(root)}, {Beneath(root), NoSync()}} {
		if err := WriteFile(filepath.Join(root, "runs", "r1", "state.json"), []byte("ok"), 0o644, opts...); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(filepath.Join(root, "runs", "r1", "state.json")); string(b) != "ok" {
			t.Errorf("content %q", b)
		}
	}
	// a directory replaced by a link out of the root
	if err := os.Symlink(outside, filepath.Join(root, "runs", "r2")); err != nil {
		t.Fatal(err)
	}
	err := WriteFile(filepath.Join(root, "runs", "r2", "state.json"), []byte("leak"), 0o644, Beneath(root))
	if err == nil {
		t.Fatal("a write through a link out of the root succeeded")
	}
	if names := entries(t, outside); len(names) != 0 {
		t.Errorf("written outside the root: %v", names)
	}
	if err := WriteFile(filepath.Join(outside, "x"), []byte("x"), 0o644, Beneath(root)); err == nil {
		t.Error("a target outside the root was accepted")
	}
}
