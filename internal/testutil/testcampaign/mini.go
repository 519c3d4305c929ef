package testcampaign

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Mini writes protocols/testdata/mini.yaml (two slots, two patterns, a
// saturation and a moderate run each, on the stand-in) with each old of
// the old, new pairs in edits replaced once by its new, to a directory of
// its own so that the test may change it, and returns its path. An old
// the protocol does not hold fails the test: the edit would do nothing.
func Mini(t testing.TB, edits ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "protocols", "testdata", "mini.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "mini.yaml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return Edit(t, p, edits...)
}

// Edit rewrites the protocol file at path: each old of the old, new pairs
// in edits is replaced once by its new. An old the file does not hold
// fails the test: the edit would do nothing. It returns path.
func Edit(t testing.TB, path string, edits ...string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	y := string(b)
	for i := 0; i+1 < len(edits); i += 2 {
		if !strings.Contains(y, edits[i]) {
			t.Fatalf("test bug: %q not in the protocol %s", edits[i], path)
		}
		y = strings.Replace(y, edits[i], edits[i+1], 1)
	}
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// repoRoot is the module's root: the first directory above the test's
// working directory (its package's) that holds go.mod.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}
