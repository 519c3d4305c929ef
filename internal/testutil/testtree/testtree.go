// Package testtree reads a directory tree whole, for tests that prove an
// operation changed nothing in it.
package testtree

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// Snapshot is every file under dir with its content, every directory
// (content nil, its path ending in "/") and every link (its target), by
// path relative to dir.
func Snapshot(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		switch {
		case d.IsDir():
			out[rel+"/"] = nil
		case d.Type().IsRegular():
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			out[rel] = b
		default:
			l, err := os.Readlink(path)
			if err != nil {
				return err
			}
			out[rel] = []byte("link to " + l)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
