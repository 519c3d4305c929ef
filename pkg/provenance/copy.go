package provenance

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// copyBuf is the size of the buffer that hashing and copying read through:
// the memory they use, whatever the size of the file.
const copyBuf = 1 << 20

// copyInto keeps a read-only copy of the public input e, already hashed, as
// filesDir/<e.SHA256>. The copy is written to a temporary file beside it,
// hashed as it is written, fsynced, and renamed into place only if its hash
// is e.SHA256; otherwise the input changed since it was hashed and the copy
// is refused with a *ChangedError. Runs of zero bytes are left as holes, so
// a sparse input stays sparse. A copy already there (another path with the
// same content) is kept. The caller fsyncs filesDir.
func copyInto(filesDir string, e Entry, limit int64) (err error) {
	dst := filepath.Join(filesDir, e.SHA256)
	if fi, err := os.Lstat(dst); err == nil && fi.Mode().IsRegular() {
		return nil
	}
	src, fi, err := openRegular(e.Path)
	if err != nil {
		return err
	}
	defer src.Close()
	if limit > 0 && fi.Size() > limit {
		return &TooLargeError{Path: e.Path, Size: fi.Size(), Limit: limit}
	}
	tmp, err := os.CreateTemp(filesDir, ".copy-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	var r io.Reader = src
	if limit > 0 {
		r = io.LimitReader(src, limit+1)
	}
	sum, n, err := copySparse(tmp, r)
	if err != nil {
		return fmt.Errorf("copy %s: %w", e.Path, err)
	}
	if limit > 0 && n > limit {
		return &TooLargeError{Path: e.Path, Size: n, Limit: limit}
	}
	if sum != e.SHA256 {
		return fmt.Errorf("copy %s: the input changed while it was being recorded: %w", e.Path,
			&ChangedError{Path: e.Path, Recorded: e.SHA256, Now: sum})
	}
	if err := tmp.Chmod(0o444); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("sync copy of %s: %w", e.Path, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// copySparse copies r to dst, seeking over every all-zero block instead of
// writing it, and returns the hex SHA-256 of what it copied and its length.
func copySparse(dst *os.File, r io.Reader) (string, int64, error) {
	h := sha256.New()
	buf := make([]byte, copyBuf)
	zeros := make([]byte, copyBuf)
	var n int64
	for {
		k, rerr := io.ReadFull(r, buf)
		if k > 0 {
			chunk := buf[:k]
			h.Write(chunk)
			if bytes.Equal(chunk, zeros[:k]) {
				if _, err := dst.Seek(int64(k), io.SeekCurrent); err != nil {
					return "", n, err
				}
			} else if _, err := dst.Write(chunk); err != nil {
				return "", n, err
			}
			n += int64(k)
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return "", n, rerr
		}
	}
	// a trailing hole: the file ends where the input does
	if err := dst.Truncate(n); err != nil {
		return "", n, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
