// Package safefile opens files that a process the controller does not
// trust may have written or replaced: a benchmark's client and server
// write into the attempt directory, and could leave a FIFO, a device, a
// link or a huge file where the controller expects a small regular file.
//
// Open never blocks (O_NONBLOCK: a FIFO with no writer does not wedge the
// caller), never follows a link in the last path element (O_NOFOLLOW), and
// refuses anything that is not a regular file, naming what it is. ReadFile
// adds a size limit.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrNotRegular is returned (wrapped) for a path that is not a regular
// file: a FIFO, a device, a socket, a directory, or a symbolic link.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is returned (wrapped) by ReadFile for a file over its limit.
var ErrTooLarge = errors.New("file too large")

// Open opens path for reading as described in the package comment. The
// file is returned in blocking mode again, so reads behave as usual.
func Open(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("open %s: %w (a symbolic link)", path, ErrNotRegular)
		}
		// a socket cannot be opened at all (ENXIO): say what it is
		if fi, lerr := os.Lstat(path); lerr == nil && !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("open %s: %w (%s)", path, ErrNotRegular, kind(fi.Mode()))
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("open %s: %w (%s)", path, ErrNotRegular, kind(fi.Mode()))
	}
	return f, nil
}

// ReadFile reads a whole regular file of at most limit bytes.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("read %s: %w (over %d bytes)", path, ErrTooLarge, limit)
	}
	return b, nil
}

// Kind names the type of a file that is not regular: "FIFO", "character
// device", "block device", "socket", "directory" or "symbolic link"; ""
// for any other mode.
func Kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	}
	return ""
}

func kind(m fs.FileMode) string {
	if k := Kind(m); k != "" {
		return "a " + k
	}
	return "mode " + m.String()
}
