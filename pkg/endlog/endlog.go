// Package endlog keeps DIR/proc-ends.log: when the controller proved an
// attempt's processes gone, for the attempts whose end it could not record
// in the database (a full disk). Resume charges such an attempt up to that
// time, and a status read without a controller counts its GPU time in
// flight up to it.
package endlog

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"warden/pkg/atomicfile"
)

// File, in the campaign directory, is the end log. Its space is allocated
// when the controller claims the campaign, so writing a record needs no new
// block or inode: it is written where the database no longer can be.
const File = "proc-ends.log"

const (
	endSlot = 256 // bytes per record: "seq run attempt unix_nano\n", space padded
	// Slots is how many records the log keeps; the oldest slot is reused
	// past that.
	Slots = 4096
)

// Log is an open end log. A nil *Log records nothing (Record says so).
type Log struct {
	mu   sync.Mutex
	f    *os.File
	next uint64 // sequence of the next record
}

// Open opens (creating and allocating) the end log of dir.
func Open(dir string) (*Log, error) {
	path := filepath.Join(dir, File)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, err
	}
	size := int64(endSlot * Slots)
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		// no fallocate: write the zeros, which allocates all the same
		if _, werr := f.WriteAt(make([]byte, size), 0); werr != nil {
			f.Close()
			return nil, fmt.Errorf("allocate %s: %w", path, errors.Join(err, werr))
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		f.Close()
		return nil, err
	}
	recs, err := parse(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	l := &Log{f: f}
	for _, r := range recs {
		l.next = max(l.next, r.seq+1)
	}
	return l, nil
}

// Record notes that attempt n of run had no process left at t, and syncs.
func (l *Log) Record(run string, n int, t time.Time) error {
	if l == nil {
		return errors.New("no end log")
	}
	// the sequence is read, written and advanced under mu: attempts end
	// at once, and two records of one sequence would make the next open
	// reuse the later one's slot
	l.mu.Lock()
	defer l.mu.Unlock()
	line := fmt.Sprintf("%d %s %d %d", l.next, run, n, t.UnixNano())
	if len(line) >= endSlot || strings.ContainsAny(run, " \n\x00") {
		return fmt.Errorf("run id %q does not fit an end record", run)
	}
	buf := bytes.Repeat([]byte{' '}, endSlot)
	copy(buf, line)
	buf[endSlot-1] = '\n'
	if _, err := l.f.WriteAt(buf, int64(l.next%Slots)*endSlot); err != nil {
		return err
	}
	l.next++
	return unix.Fdatasync(int(l.f.Fd()))
}

// SetNext makes seq the sequence of the next record (as after seq
// records): a test reaches the log's wrap with it.
func (l *Log) SetNext(seq uint64) {
	l.mu.Lock()
	l.next = seq
	l.mu.Unlock()
}

// Close closes the file; a nil Log has none.
func (l *Log) Close() {
	if l != nil {
		l.f.Close()
	}
}

// Key names an attempt: its run and number.
type Key struct {
	Run string
	N   int
}

type endRecord struct {
	seq uint64
	key Key
	at  time.Time
}

// parse reads every record of an end log; empty slots are skipped, a slot
// that is not a record is an error (the file is not ours).
func parse(f *os.File) ([]endRecord, error) {
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return nil, err
	}
	var out []endRecord
	for i := 0; i+endSlot <= len(b); i += endSlot {
		slot := b[i : i+endSlot]
		if bytes.Count(slot, []byte{0}) == endSlot {
			continue
		}
		fs := strings.Fields(string(slot))
		if len(fs) != 4 {
			return nil, fmt.Errorf("%s: slot %d is not an end record", f.Name(), i/endSlot)
		}
		seq, e1 := strconv.ParseUint(fs[0], 10, 64)
		n, e2 := strconv.Atoi(fs[2])
		ns, e3 := strconv.ParseInt(fs[3], 10, 64)
		if err := errors.Join(e1, e2, e3); err != nil {
			return nil, fmt.Errorf("%s: slot %d: %w", f.Name(), i/endSlot, err)
		}
		out = append(out, endRecord{seq: seq, key: Key{fs[1], n}, at: time.Unix(0, ns)})
	}
	return out, nil
}

// Read maps each attempt with an end record in dir to its latest recorded
// end. No file: none.
func Read(dir string) (map[Key]time.Time, error) {
	f, err := os.Open(filepath.Join(dir, File))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := parse(f)
	if err != nil {
		return nil, err
	}
	ends := map[Key]time.Time{}
	for _, r := range recs {
		if r.at.After(ends[r.key]) {
			ends[r.key] = r.at
		}
	}
	return ends, nil
}
