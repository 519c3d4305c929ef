package gates

import (
	"bytes"
	"encoding/json"
	"hash/maphash"
)

// A campaign's own files (state.db, controller.log) are scanned after
// every attempt and change a little each time: the database rewrites a few
// pages, the log grows at its end. Scanning them whole every time made the
// scan, and so each attempt's end, grow with the campaign. A file held in
// memory whose last clean scan (same path, inode and scan) was of its
// lines is compared with that scan block by block (64-bit hashes with the
// cache's random seed); only the lines within reach of a changed block are
// examined again.
//
// Why that finds all a whole scan finds:
//   - Every line of the file was found clean by a scan before (the last
//     one examined it, or it was unchanged since one that did).
//   - A line break is never inside an escape (JSON strings hold no raw
//     line break, and no escape consumes one), so the decoded view of a
//     run of whole lines is that run's part of the whole file's decoded
//     view, and the lines' numbers are counted from the file's start.
//   - A finding is private text (a run of MinLen bytes in the raw view, of
//     at most 6*MinLen+12 raw bytes in the decoded one) or a forbidden
//     field in one line. One that lies in unchanged blocks alone was there,
//     at the same place, when the file was found clean; so each lies within
//     reach of a changed block: in the lines that hold the changed blocks,
//     widened by that reach on both sides.
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

// blockHashes hashes data in blockSize blocks.
func blockHashes(seed maphash.Seed, data []byte) []uint64 {
	hs := make([]uint64, 0, (len(data)+blockSize-1)/blockSize)
	for off := 0; off < len(data); off += blockSize {
		hs = append(hs, maphash.Bytes(seed, data[off:min(off+blockSize, len(data))]))
	}
	return hs
}

// reach is how far from a changed byte a finding that holds it can start
// or end: a private run in the decoded view spans at most 6 raw bytes per
// byte (\u00XX), and 12 for an escape cut at either end; a field pattern is
// within its line, which is examined whole.
func (s *privacyScan) reach() int {
	if s.idx.empty() {
		return 0
	}
	return 6*s.idx.MinLen() + 12
}

// changedLines returns the byte ranges [start, end) of data, each of whole
// lines, that hold every block whose hash differs from prev (or that prev
// did not have), widened by reach on both sides. Ranges do not overlap and
// are in order.
func changedLines(data []byte, hashes, prev []uint64, reach int) [][2]int {
	var out [][2]int
	for i := 0; i < len(hashes); {
		if i < len(prev) && hashes[i] == prev[i] {
			i++
			continue
		}
		j := i + 1
		for j < len(hashes) && (j >= len(prev) || hashes[j] != prev[j]) {
			j++
		}
		lo, hi := max(i*blockSize-reach, 0), min(j*blockSize+reach, len(data))
		// out to the line breaks before and after
		lo = bytes.LastIndexByte(data[:lo], '\n') + 1
		if k := bytes.IndexByte(data[hi:], '\n'); k >= 0 {
			hi += k + 1
		} else {
			hi = len(data)
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

// memoryChanged scans only the lines within reach of the blocks of data
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
	ranges := changedLines(data, hashes, prev.hashes, s.reach())
	s.fig["files_partial"]++
	s.lines = s.known         // the lines examined stay those of the last whole scan
	n, at, scanned := 0, 0, 0 // n: lines before at, for the findings' line numbers
	for _, r := range ranges {
		n += bytes.Count(data[at:r[0]], []byte{'\n'})
		at = r[0]
		part := data[r[0]:r[1]]
		scanned += len(part)
		s.privateBoth(part, rel)
		for line := range bytes.Lines(part) {
			n++
			at += len(line)
			if t := bytes.TrimSpace(line); len(t) > 0 && s.line(t, rel, n) {
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
