package safefile

import (
	"errors"
	"io"
)

// ChildLimit bounds what the controller reads of a file a child wrote.
const ChildLimit = 64 << 20

// ReadTail reads at most the last n bytes of a regular file (Open: no
// FIFO, device or link a child planted is waited on or followed).
func ReadTail(path string, n int64) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	off := max(fi.Size()-n, 0)
	b := make([]byte, min(fi.Size(), n))
	k, err := f.ReadAt(b, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b[:k], nil
}
