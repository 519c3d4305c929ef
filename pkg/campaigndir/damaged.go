package campaigndir

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"warden/pkg/atomicfile"
	"warden/pkg/dirlayout"
	"warden/pkg/state"
)

// DamagedSuffix begins the name of the copy kept of a damaged state
// database: state.db.damaged-20260713T101500Z.
const DamagedSuffix = ".damaged-"

// DamagedError says that the campaign's state database is damaged or
// empty (state.ErrCorrupt): nothing was changed in it, and Kept, when not
// empty, is the copy kept beside it as evidence.
type DamagedError struct {
	Path string // the database
	Kept string // the copy, or "" when none could be made (KeepErr says why)
	Err  error  // what the open found
	// KeepErr is why no copy was made; nil when Kept is set.
	KeepErr error
}

func (e *DamagedError) Error() string {
	kept := "a copy is kept as " + e.Kept
	if e.Kept == "" {
		kept = fmt.Sprintf("no copy could be kept (%v)", e.KeepErr)
	}
	return fmt.Sprintf("refused: the campaign's state database %s is damaged or empty; it was not changed and %s; restore it from a backup, or move the campaign aside: %v",
		e.Path, kept, e.Err)
}

func (e *DamagedError) Unwrap() error { return e.Err }

// CheckDatabase verifies the state database of the campaign in dir (every
// page, read-only) before a controller claims anything. A damaged or empty
// one returns a *DamagedError, a copy of it kept; another failure to open
// it (a lock, a missing file) returns that error.
func CheckDatabase(dir string) error {
	path := dirlayout.State(dir)
	st, err := state.OpenReadOnly(path, 2*time.Second)
	if err != nil {
		return damaged(path, err)
	}
	return st.Close()
}

// damaged turns an open's state.ErrCorrupt into a *DamagedError, keeping a
// copy of the file; it returns any other error as it is.
func damaged(path string, err error) error {
	if !errors.Is(err, state.ErrCorrupt) {
		return err
	}
	kept, kerr := KeepDamaged(path, time.Now())
	return &DamagedError{Path: path, Kept: kept, Err: err, KeepErr: kerr}
}

// KeepDamaged copies the file at path to path.damaged-<UTC time> beside it
// and returns the copy's path. A copy with the same content already kept
// is returned instead of a new one (a controller restarted in a loop must
// not fill the disk); an existing name is never overwritten.
func KeepDamaged(path string, now time.Time) (string, error) {
	sum, err := fileSum(path)
	if err != nil {
		return "", err
	}
	if prior, _ := filepath.Glob(path + DamagedSuffix + "*"); len(prior) > 0 {
		for _, p := range prior {
			if strings.HasSuffix(p, ".tmp") {
				continue
			}
			if s, err := fileSum(p); err == nil && bytes.Equal(s, sum) {
				return p, nil
			}
		}
	}
	dst := path + DamagedSuffix + now.UTC().Format("20060102T150405.000000000Z")
	if err := copyNew(path, dst); err != nil {
		return "", fmt.Errorf("keep a copy of %s: %w", path, err)
	}
	return dst, nil
}

func fileSum(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

// copyNew copies src to dst, which must not exist: through a temporary
// file, synced, then linked to its name (a link never replaces a file),
// and the directory synced.
func copyNew(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := errors.Join(out.Sync(), out.Close()); err != nil {
		return err
	}
	if err := os.Link(tmp, dst); err != nil {
		return err
	}
	return atomicfile.SyncDir(filepath.Dir(dst))
}
