package safefile

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
)

// Sum is what a file holds: its size, its SHA-256 and whether every byte
// of it is NUL (what a file system that lost a file's data blocks after
// an I/O error, but kept its size, shows in their place).
type Sum struct {
	Size   int64
	SHA256 string
	AllNUL bool
}

// Seal makes the regular file at path durable (fsync, its error
// returned: an I/O error the file system met writing it back, or no space
// to) and returns its Sum. It opens path as Open does.
func Seal(path string) (Sum, error) {
	return sum(path, true)
}

// SumFile returns the Sum of the regular file at path, opened as Open
// does.
func SumFile(path string) (Sum, error) {
	return sum(path, false)
}

func sum(path string, sync bool) (Sum, error) {
	f, err := Open(path)
	if err != nil {
		return Sum{}, err
	}
	defer f.Close()
	if sync {
		if err := f.Sync(); err != nil {
			return Sum{}, fmt.Errorf("fsync %s: %w", path, err)
		}
	}
	h := sha256.New()
	nul := nulWriter{all: true}
	n, err := io.Copy(io.MultiWriter(h, &nul), f)
	if err != nil {
		return Sum{}, fmt.Errorf("read %s: %w", path, err)
	}
	return Sum{Size: n, SHA256: hex.EncodeToString(h.Sum(nil)), AllNUL: n > 0 && nul.all}, nil
}

// nulWriter notes whether every byte written to it was NUL.
type nulWriter struct{ all bool }

func (w *nulWriter) Write(p []byte) (int, error) {
	for _, b := range p {
		if b != 0 {
			w.all = false
			break
		}
	}
	return len(p), nil
}

// ProbeWrite says whether the file system of dir takes a write of new
// data now: it writes a small file there, fsyncs it (the error of its
// write-back returned: no space, an I/O error) and removes it. A writer
// that met such an error on another file has seen it alone (the kernel
// reports a write-back error to the descriptors open when it happened),
// so a file opened later cannot tell; a new write can.
func ProbeWrite(dir string) error {
	if dir == "" {
		return fmt.Errorf("probe a write: no directory")
	}
	f, err := os.CreateTemp(dir, ".storage-probe-*")
	if err != nil {
		return fmt.Errorf("probe a write in %s: %w", dir, err)
	}
	defer os.Remove(f.Name())
	_, werr := f.Write(bytes.Repeat([]byte{'w'}, 4096))
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return fmt.Errorf("probe a write in %s: %w", dir, err)
	}
	return nil
}
