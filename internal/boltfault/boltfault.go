// Package boltfault damages bbolt files for tests: it finds the b-tree
// pages of a database by walking its pages (the page size and high-water
// mark from its meta page) and flips single bits in their headers.
package boltfault

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
)

// Header fields of a bbolt page: their offsets and widths in bytes.
const (
	FieldID       = 0  // uint64
	FieldFlags    = 8  // uint16
	FieldCount    = 10 // uint16
	FieldOverflow = 12 // uint32
)

// Page is one branch or leaf page in use.
type Page struct {
	ID     int64
	Offset int64 // of its header in the file
	Leaf   bool
}

// TreePages returns the branch and leaf pages of the database at path that
// are in use: every page below the high-water mark whose header names its
// own id and a tree type, overflow pages skipped, pages on the free list
// left out (a free page's header is stale, and damaging it changes
// nothing).
func TreePages(path string) ([]Page, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	le := binary.NativeEndian
	if len(data) < 4096 {
		return nil, errors.New("not a bbolt file")
	}
	// bbolt uses the meta page with the higher transaction id.
	m := data[16:]
	pageSize := int64(le.Uint32(m[8:]))
	if pageSize >= 512 && int64(len(data)) >= 2*pageSize {
		if m1 := data[pageSize+16:]; le.Uint32(m1) == le.Uint32(m) && le.Uint64(m1[48:]) > le.Uint64(m[48:]) {
			m = m1
		}
	}
	freelist, hwm := int64(le.Uint64(m[32:])), int64(le.Uint64(m[40:]))
	if pageSize < 512 || hwm*pageSize > int64(len(data)) {
		return nil, fmt.Errorf("meta page: page size %d, %d pages, file %d bytes", pageSize, hwm, len(data))
	}
	free := map[int64]bool{}
	if freelist > 1 && freelist < hwm {
		fl := data[freelist*pageSize:]
		n, start := int64(le.Uint16(fl[10:])), int64(16)
		if n == 0xFFFF {
			n, start = int64(le.Uint64(fl[16:])), 24
		}
		for i := range n {
			free[int64(le.Uint64(fl[start+8*i:]))] = true
		}
	}
	var pages []Page
	for id := int64(2); id < hwm; id++ {
		p := data[id*pageSize:]
		flags, overflow := le.Uint16(p[FieldFlags:]), int64(le.Uint32(p[FieldOverflow:]))
		if int64(le.Uint64(p[FieldID:])) != id || free[id] {
			continue
		}
		if flags == 0x01 || flags == 0x02 {
			pages = append(pages, Page{ID: id, Offset: id * pageSize, Leaf: flags == 0x02})
		}
		id += overflow
	}
	return pages, nil
}

// FlipBit flips bit (0 is the least significant) of the byte at offset
// off in the file at path, in place.
func FlipBit(path string, off int64, bit uint) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		f.Close()
		return err
	}
	b[0] ^= 1 << bit
	if _, err := f.WriteAt(b[:], off); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// FlipHeaderBit flips bit 0 of field in the header of tree page i of the
// database at path (TreePages' order; a negative i counts from the end,
// -1 the last page).
func FlipHeaderBit(path string, i int, field int64) error {
	pages, err := TreePages(path)
	if err != nil {
		return err
	}
	if i < 0 {
		i += len(pages)
	}
	if i < 0 || i >= len(pages) {
		return fmt.Errorf("%s: no tree page %d of %d", path, i, len(pages))
	}
	return FlipBit(path, pages[i].Offset+field, 0)
}
