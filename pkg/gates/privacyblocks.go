package gates

import (
	"bytes"
	"encoding/json"
	"errors"
	"hash/maphash"
	"io"
	"runtime"
	"strconv"
	"sync"
	"unicode"
)

// A campaign's own files (state.db, controller.log) are scanned after
// every attempt and change a little each time: the database rewrites a few
// pages, the log grows at its end. Scanning them whole every time made the
// scan, and so each attempt's end, grow with the campaign. A file held in
// memory whose last clean scan (same path, inode and scan) was of its
// lines is compared with that scan block by block (64-bit hashes with the
// cache's random seed); only the bytes within reach of a changed block are
// examined again.
//
// Why that finds all a whole scan finds. Every byte of the file was found
// clean by a scan before (the last one examined it, or it was unchanged
// since one that did), so a finding a scan of the unchanged file would
// have made was not there; each finding now is one a change made:
//   - Private text in the raw view is a run of MinLen bytes; a forbidden
//     field in bytes is its pattern and the white space and colon after it
//     (fieldBytes, overlap bytes): each depends on its bytes alone, so it
//     holds a changed byte and lies within reach of it.
//   - A key found by parsing a line depends on the whole line: a line that
//     may be JSON (it begins with '{' or '[') is examined whole where the
//     range cuts it.
//   - Private text in the decoded view is decoded from at most 6*MinLen+12
//     raw bytes, and depends on them and on where escapes begin, which a
//     change alters from its place to the first place after it that follows
//     11 bytes with no backslash (no escape is longer than 12; a run of
//     backslashes, however long, carries the change through). So it lies
//     within reach of the changed bytes and that run.
//   - The range's decoded view, begun after 11 bytes with no backslash, is
//     that range's part of the whole file's, but for an escape cut at its
//     end, which reach leaves room for; a finding's line number is counted
//     from the file's start.
//
// A file that is now, or was at its last clean scan, one JSON value is
// scanned whole (its keys are found by parsing it whole).

// blockSize is the unit a file is compared in: a page of the database.
const blockSize = 4 << 10

// fileBlocks is what a clean scan of a file's lines leaves for the next.
type fileBlocks struct {
	ino    uint64
	hashes []uint64 // of each blockSize block; the last may be shorter
	parsed bool     // some line was a JSON value
}

// blocksKey names a file's blocks: for one path and one scan (what it
// looked for), like the clean files.
type blocksKey struct {
	path string
	scan scanIdent
}

func (c *ScanCache) blocksOf(k blocksKey) *fileBlocks {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.blocks[k]
}

func (c *ScanCache) setBlocks(k blocksKey, b *fileBlocks) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b == nil {
		delete(c.blocks, k)
		return
	}
	if c.blocks == nil {
		c.blocks = map[blocksKey]*fileBlocks{}
	}
	c.blocks[k] = b
}

// takeBuf takes the buffer path was last read into (nil: none), and
// putBuf gives it back for the next scan of path. A nil cache keeps none.
func (c *ScanCache) takeBuf(path string) []byte {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.bufs[path]
	delete(c.bufs, path)
	return b
}

func (c *ScanCache) putBuf(path string, b []byte) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bufs == nil {
		c.bufs = map[string][]byte{}
	}
	c.bufs[path] = b
}

// blockHashes hashes data in blockSize blocks: a large file's on up to
// parallelParts goroutines, each its own run of blocks.
func blockHashes(seed maphash.Seed, data []byte) []uint64 {
	hs := make([]uint64, (len(data)+blockSize-1)/blockSize)
	hash := func(from, to int) {
		for i := from; i < to; i++ {
			off := i * blockSize
			hs[i] = maphash.Bytes(seed, data[off:min(off+blockSize, len(data))])
		}
	}
	parts := partsOf(len(data))
	if parts == 1 {
		hash(0, len(hs))
		return hs
	}
	per := (len(hs) + parts - 1) / parts
	var wg sync.WaitGroup
	for from := 0; from < len(hs); from += per {
		wg.Go(func() { hash(from, min(from+per, len(hs))) })
	}
	wg.Wait()
	return hs
}

// A file of at least parallelMin bytes is read (readAtParallel) and hashed
// (blockHashes) in up to parallelParts parts at once, at least parallelMin
// bytes each: copying and hashing a campaign's database of megabytes is
// most of its scan after each attempt.
const (
	parallelMin   = 1 << 20
	parallelParts = 8
)

// partsOf is how many parts n bytes are read and hashed in.
func partsOf(n int) int {
	return max(1, min(parallelParts, runtime.GOMAXPROCS(0), n/parallelMin))
}

// readAtParallel reads the first len(buf) bytes of f into buf, in partsOf
// parts at once. It reports false when any part came back short (the file
// was cut meanwhile): the caller reads the file again from its start.
func readAtParallel(f io.ReaderAt, buf []byte) (bool, error) {
	parts := partsOf(len(buf))
	per := (len(buf) + parts - 1) / parts
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for i := range parts {
		from := i * per
		to := min(from+per, len(buf))
		if from >= to {
			continue
		}
		wg.Go(func() {
			n, err := f.ReadAt(buf[from:to], int64(from))
			if n < to-from && err == nil {
				err = io.ErrUnexpectedEOF
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
	return true, nil
}

// reach is how far from a changed byte a finding that holds it can start
// or end: a private run in the decoded view spans at most 6 raw bytes per
// byte (\u00XX), and 12 for an escape cut at either end; a field pattern
// with its white space and colon spans overlap bytes.
func (s *privacyScan) reach() int {
	r := s.overlap
	if !s.idx.empty() {
		r = max(r, 6*s.idx.MinLen()+12)
	}
	return r
}

// backslashBefore is the last backslash among the maxEscape-1 bytes before
// p, -1 when there is none: then no escape runs across p.
func backslashBefore(data []byte, p int) int {
	from := max(0, p-(maxEscape-1))
	if i := bytes.LastIndexByte(data[from:p], '\\'); i >= 0 {
		return from + i
	}
	return -1
}

// syncBack moves p left until no escape runs across it, so that the
// decoded view from p is the whole view's from there.
func syncBack(data []byte, p int) int {
	for p > 0 {
		i := backslashBefore(data, p)
		if i < 0 {
			return p
		}
		p = i
	}
	return 0
}

// syncForward moves p right until no escape runs across it: a change
// before p alters where escapes begin (through a run of backslashes,
// however long) only up to such a place.
func syncForward(data []byte, p int) int {
	for p < len(data) {
		i := backslashBefore(data, p)
		if i < 0 {
			return p
		}
		p = min(len(data), i+maxEscape)
	}
	return len(data)
}

// jsonLineAt says whether the line that holds byte p is one a whole scan
// may parse as JSON (it begins, after white space, with '{' or '['), and
// returns its bounds.
func jsonLineAt(data []byte, p int) (start, end int, json bool) {
	start = bytes.LastIndexByte(data[:p], '\n') + 1
	end = len(data)
	if k := bytes.IndexByte(data[p:], '\n'); k >= 0 {
		end = p + k + 1
	}
	t := bytes.TrimLeftFunc(data[start:end], unicode.IsSpace)
	return start, end, len(t) > 0 && (t[0] == '{' || t[0] == '[')
}

// changedRanges returns the byte ranges [start, end) of data that hold
// every block whose hash differs from prev (or that prev did not have),
// widened: the start by reach, then back to where no escape runs across;
// the end forward to where escapes are in step again, then by reach; both
// out to the whole line where a line that may be JSON is cut. Ranges do not
// overlap and are in order.
func changedRanges(data []byte, hashes, prev []uint64, reach int) [][2]int {
	var out [][2]int
	// a file cut short at a block's end has its new last block examined:
	// an escape the cut left unfinished is decoded otherwise than before
	changed := func(i int) bool {
		return i >= len(prev) || hashes[i] != prev[i] || (i == len(hashes)-1 && len(hashes) < len(prev))
	}
	for i := 0; i < len(hashes); {
		if !changed(i) {
			i++
			continue
		}
		j := i + 1
		for j < len(hashes) && changed(j) {
			j++
		}
		lo := syncBack(data, max(i*blockSize-reach, 0))
		hi := min(syncForward(data, min(j*blockSize, len(data)))+reach, len(data))
		if ls, _, js := jsonLineAt(data, lo); js {
			lo = ls
		}
		if hi > lo {
			if _, le, js := jsonLineAt(data, hi-1); js {
				hi = le
			}
		}
		if n := len(out); n > 0 && lo <= out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], hi)
		} else {
			out = append(out, [2]int{lo, hi})
		}
		i = j
	}
	return out
}

// memoryChanged scans only the bytes within reach of the blocks of data
// that changed since the file's last clean scan (prev), and reports
// whether it could: false leaves the whole file to memory. It sets the
// blocks the next scan compares with.
func (s *privacyScan) memoryChanged(data []byte, rel string, prev *fileBlocks, ino uint64) bool {
	hashes := blockHashes(s.seed, data)
	wholeJSON := json.Valid(data)
	s.blocksNext = &fileBlocks{ino: ino, hashes: hashes}
	if wholeJSON {
		s.blocksNext = nil // a JSON value is parsed whole, every time
		return false
	}
	if prev == nil || prev.ino != ino {
		return false
	}
	s.blocksNext.parsed = prev.parsed
	ranges := changedRanges(data, hashes, prev.hashes, s.reach())
	s.fig["files_partial"]++
	// The lines examined clean stay those of the last whole scan: the map
	// is shared with any scan of the file at the same time, and only read.
	s.lines = s.known
	pos, nl, scanned := 0, 0, 0 // nl: the line breaks before pos, for the findings' line numbers
	for _, r := range ranges {
		nl += bytes.Count(data[pos:r[0]], []byte{'\n'})
		pos = r[0]
		part := data[r[0]:r[1]]
		scanned += len(part)
		s.privateBoth(part, rel)
		for line := range bytes.Lines(part) {
			start, num := pos, nl+1
			if pos += len(line); line[len(line)-1] == '\n' {
				nl++
			}
			if whole := (start == 0 || data[start-1] == '\n') && (pos == len(data) || data[pos-1] == '\n'); !whole {
				// a piece of a line that is not JSON (changedRanges): its
				// field patterns are where the whole line's are
				s.fieldBytes(line, len(line), rel, "line "+strconv.Itoa(num))
			} else if t := bytes.TrimSpace(line); len(t) > 0 && s.lineOnce(t, rel, num, nil) {
				s.blocksNext.parsed = true
			}
		}
	}
	s.fig["bytes_scanned"] += float64(scanned)
	s.fig["bytes_unchanged"] += float64(len(data) - scanned)
	if s.blocksNext.parsed {
		s.fig["files_parsed"]++
	}
	return true
}
