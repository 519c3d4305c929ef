package provenance

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"warden/pkg/safefile"
)

// ErrNotRegular is returned (wrapped in *NotRegularError) when an input is
// not a regular file: a FIFO, a device, a directory, a socket.
var ErrNotRegular = errors.New("not a regular file")

// NotRegularError names an input that is not a regular file and what it is.
type NotRegularError struct {
	Path   string // as given
	Target string // what Path resolves to, when it is a symbolic link; "" otherwise
	Kind   string // "FIFO", "character device", "directory", ...
}

func (e *NotRegularError) Error() string {
	if e.Target != "" {
		return fmt.Sprintf("%s (a link to %s) is not a regular file: it is a %s", e.Path, e.Target, e.Kind)
	}
	return fmt.Sprintf("%s is not a regular file: it is a %s", e.Path, e.Kind)
}

func (e *NotRegularError) Unwrap() error { return ErrNotRegular }

// ErrTooLarge is returned (wrapped in *TooLargeError) when an input is
// larger than Options.MaxFileBytes.
var ErrTooLarge = errors.New("provenance file over the size limit")

// TooLargeError names an input over the size limit, its size and the limit.
type TooLargeError struct {
	Path  string
	Size  int64 // at least this many bytes; the file may still be growing
	Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s is %d bytes, over the provenance size limit of %d bytes (%s) per file; the protocol can raise the limit",
		e.Path, e.Size, e.Limit, humanBytes(e.Limit))
}

func (e *TooLargeError) Unwrap() error { return ErrTooLarge }

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// kind names a non-regular file type for an error message.
func kind(m fs.FileMode) string {
	if k := safefile.Kind(m); k != "" {
		return k
	}
	return "file of mode " + m.String()
}

// openRegular opens an input for reading, refusing anything that is not a
// regular file without blocking and without reading from it.
//
// A path given by an operator may be a symbolic link to a regular file: it
// is resolved first, the target is checked with lstat (so a FIFO or a
// device is never even opened), then opened with O_NONBLOCK (an open of a
// FIFO that appeared meanwhile returns at once) and O_NOFOLLOW (a link
// planted in place of the target fails), and checked again with fstat, so
// that what is read is the regular file that was checked.
func openRegular(path string) (*os.File, fs.FileInfo, error) {
	target, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", path, err)
	}
	link := ""
	if target != filepath.Clean(path) {
		link = target
	}
	li, err := os.Lstat(target)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", path, err)
	}
	if !li.Mode().IsRegular() {
		return nil, nil, &NotRegularError{Path: path, Target: link, Kind: kind(li.Mode())}
	}
	f, err := os.OpenFile(target, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, nil, &NotRegularError{Path: path, Target: link, Kind: "symbolic link (planted after it was resolved)"}
		}
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, &NotRegularError{Path: path, Target: link, Kind: kind(fi.Mode())}
	}
	return f, fi, nil
}

// hashRegular is the hex SHA-256 and the size of a regular file of at most
// limit bytes (limit <= 0: no limit), read streaming in bounded memory.
func hashRegular(path string, limit int64) (string, int64, error) {
	f, fi, err := openRegular(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	if limit > 0 && fi.Size() > limit {
		return "", 0, &TooLargeError{Path: path, Size: fi.Size(), Limit: limit}
	}
	h := sha256.New()
	var r io.Reader = f
	if limit > 0 {
		r = io.LimitReader(f, limit+1)
	}
	n, err := io.CopyBuffer(h, r, make([]byte, copyBuf))
	if err != nil {
		return "", 0, fmt.Errorf("hash %s: %w", path, err)
	}
	if limit > 0 && n > limit {
		return "", 0, &TooLargeError{Path: path, Size: n, Limit: limit}
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
