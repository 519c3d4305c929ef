package state

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"warden/pkg/safefile"
)

// EvidenceFile is the digest of one of an attempt's evidence files (its
// processes' output, its client's results), taken when the attempt's
// processes had ended and the file was made durable (fsync, its error
// checked).
type EvidenceFile struct {
	// Path is the file's path relative to the attempt directory.
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// ErrDamagedEvidence is returned (wrapped) for an evidence file that does
// not hold what was recorded of it, or holds nothing but NUL bytes.
var ErrDamagedEvidence = errors.New("damaged evidence")

// CheckEvidence checks the attempt's file rel (relative to its
// directory) before it is read as evidence: a file with a recorded digest
// must match it; one without must not be all NUL bytes. A missing file
// that has no digest is no damage (fs.ErrNotExist is returned as is); one
// that has a digest is. Errors name the file's path.
func (a Attempt) CheckEvidence(rel string) error {
	path := filepath.Join(a.Dir, rel)
	var want *EvidenceFile
	for i := range a.Evidence {
		if a.Evidence[i].Path == rel {
			want = &a.Evidence[i]
		}
	}
	got, err := safefile.SumFile(path)
	switch {
	case err != nil && want == nil && errors.Is(err, fs.ErrNotExist):
		return err
	case err != nil:
		return fmt.Errorf("%w: %s: %w", ErrDamagedEvidence, path, err)
	case want != nil && (got.Size != want.Size || got.SHA256 != want.SHA256):
		return fmt.Errorf("%w: %s holds %d bytes (sha256 %.12s), recorded %d bytes (sha256 %.12s)",
			ErrDamagedEvidence, path, got.Size, got.SHA256, want.Size, want.SHA256)
	case got.AllNUL:
		return fmt.Errorf("%w: %s holds only NUL bytes (%d)", ErrDamagedEvidence, path, got.Size)
	}
	return nil
}

// DamagedEvidence checks every evidence file recorded of the attempt, and
// each of also (paths relative to its directory) that has no digest
// recorded (CheckEvidence), and returns one error per damaged file.
func (a Attempt) DamagedEvidence(also ...string) []error {
	var out []error
	check := func(rel string) {
		if err := a.CheckEvidence(rel); errors.Is(err, ErrDamagedEvidence) {
			out = append(out, err)
		}
	}
	sealed := map[string]bool{}
	for _, e := range a.Evidence {
		sealed[e.Path] = true
		check(e.Path)
	}
	for _, rel := range also {
		if !sealed[rel] {
			sealed[rel] = true
			check(rel)
		}
	}
	return out
}
