package state

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warden/pkg/safefile"
)

// An evidence file is good when it holds what its digest recorded; one
// rewritten, truncated, NUL-filled or gone is damaged evidence, named by
// its path; a file with no digest is damaged only when it is all NUL
// bytes, and one that is neither recorded nor there is no damage.
func TestCheckEvidence(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("client.out", "done\n")
	write("client.err", "warning\n")
	write("gone", "x")
	a := Attempt{N: 1, Dir: dir}
	for _, name := range []string{"client.out", "client.err", "gone"} {
		s, err := safefile.Seal(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		a.Evidence = append(a.Evidence, EvidenceFile{Path: name, Size: s.Size, SHA256: s.SHA256})
	}
	if errs := a.DamagedEvidence(); len(errs) != 0 {
		t.Fatalf("untouched evidence reported damaged: %v", errs)
	}
	write("client.err", "\x00\x00\x00\x00\x00\x00\x00\x00") // same size, NUL-filled
	write("client.out", "dome\n")                           // same size, one byte changed
	os.Remove(filepath.Join(dir, "gone"))
	errs := a.DamagedEvidence()
	if len(errs) != 3 {
		t.Fatalf("damaged: %v; want client.out, client.err and gone", errs)
	}
	for i, name := range []string{"client.out", "client.err", "gone"} {
		if !errors.Is(errs[i], ErrDamagedEvidence) || !strings.Contains(errs[i].Error(), filepath.Join(dir, name)) {
			t.Errorf("%s: %v", name, errs[i])
		}
	}

	write("result.json", "\x00\x00\x00")
	write("other.json", "{}")
	if err := a.CheckEvidence("result.json"); !errors.Is(err, ErrDamagedEvidence) || !strings.Contains(err.Error(), "only NUL bytes") {
		t.Errorf("NUL-filled file without a digest: %v", err)
	}
	if err := a.CheckEvidence("other.json"); err != nil {
		t.Errorf("good file without a digest: %v", err)
	}
	if err := a.CheckEvidence("never"); !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrDamagedEvidence) {
		t.Errorf("missing file without a digest: %v", err)
	}
	if errs := a.DamagedEvidence("result.json", "other.json", "never"); len(errs) != 4 {
		t.Errorf("with also: %v; want the three recorded and result.json", errs)
	}
}
