package state

import (
	"encoding/binary"
	"fmt"
	"os"
)

// bbolt page layout, as bbolt writes it (internal/common/page.go): a
// 16-byte header (id uint64, flags uint16, count uint16, overflow uint32),
// then count elements of 16 bytes, then their keys and values, packed in
// element order right after the elements.
const (
	pageHeader   = 16
	elementSize  = 16
	flagBranch   = 0x01
	flagLeaf     = 0x02
	flagFreelist = 0x10
	bucketEntry  = 0x01 // a leaf element whose value is a bucket
	noFreelist   = ^uint64(0)
	maxDepth     = 256 // tree levels and nested buckets together
)

// pageWalker verifies the file's pages through ordinary reads, never the
// memory map, so that no damage can fault the process: every page the
// tree reaches is inside the file's high-water mark, has its own id in
// its header and a branch or leaf type, is reached once and is not free;
// every element and its key and value lie inside the page, packed as
// bbolt packs them; the free list names pages inside the file, once each;
// and every page below the mark is reached or free; no page but the root
// is empty. A bit flipped in a
// reachable page's header breaks one of these. bbolt's own Check (key
// order) runs only on a file that passed, since it reads through the map.
type pageWalker struct {
	f        *os.File
	pageSize uint64
	hwm      uint64 // pages in use: ids are below it
	reached  map[uint64]bool
	free     map[uint64]bool
}

// verifyPages walks the file from the meta page m.
func verifyPages(f *os.File, m meta) error {
	w := &pageWalker{f: f, pageSize: uint64(m.pageSize), hwm: m.pgid, reached: map[uint64]bool{0: true, 1: true}, free: map[uint64]bool{}}
	if m.freelist != noFreelist {
		if err := w.freelist(m.freelist); err != nil {
			return err
		}
	}
	if err := w.tree(m.root, 0, true); err != nil {
		return err
	}
	for id := uint64(2); id < w.hwm; id++ {
		if !w.reached[id] && !w.free[id] {
			return fmt.Errorf("page %d is neither reached from the root nor free", id)
		}
	}
	return nil
}

// read returns page id with its overflow pages, marking them reached.
func (w *pageWalker) read(id uint64) ([]byte, error) {
	if id < 2 || id >= w.hwm {
		return nil, fmt.Errorf("page %d is outside the file's %d pages", id, w.hwm)
	}
	var hdr [pageHeader]byte
	if _, err := w.f.ReadAt(hdr[:], int64(id*w.pageSize)); err != nil {
		return nil, fmt.Errorf("page %d: %w", id, err)
	}
	le := binary.NativeEndian
	if got := le.Uint64(hdr[0:]); got != id {
		return nil, fmt.Errorf("page %d says it is page %d", id, got)
	}
	overflow := uint64(le.Uint32(hdr[12:]))
	if id+overflow >= w.hwm {
		return nil, fmt.Errorf("page %d: %d overflow pages pass the file's %d pages", id, overflow, w.hwm)
	}
	for p := id; p <= id+overflow; p++ {
		switch {
		case w.reached[p]:
			return nil, fmt.Errorf("page %d is reached twice (the second time as page %d or its overflow)", p, id)
		case w.free[p]:
			return nil, fmt.Errorf("page %d is reached (from page %d) and free", p, id)
		}
		w.reached[p] = true
	}
	buf := make([]byte, (overflow+1)*w.pageSize)
	if _, err := w.f.ReadAt(buf, int64(id*w.pageSize)); err != nil {
		return nil, fmt.Errorf("page %d: %w", id, err)
	}
	return buf, nil
}

// freelist records the free pages the list at id names.
func (w *pageWalker) freelist(id uint64) error {
	buf, err := w.read(id)
	if err != nil {
		return fmt.Errorf("free list: %w", err)
	}
	le := binary.NativeEndian
	if flags := le.Uint16(buf[8:]); flags != flagFreelist {
		return fmt.Errorf("free list page %d has type %#x", id, flags)
	}
	start, count := uint64(pageHeader), uint64(le.Uint16(buf[10:]))
	if count == 0xFFFF { // the count is the first element
		count, start = le.Uint64(buf[pageHeader:]), pageHeader+8
	}
	if count > (uint64(len(buf))-start)/8 {
		return fmt.Errorf("free list page %d: %d ids do not fit in it", id, count)
	}
	for i := range count {
		p := le.Uint64(buf[start+8*i:])
		switch {
		case p < 2 || p >= w.hwm:
			return fmt.Errorf("free list page %d names page %d, outside the file's %d pages", id, p, w.hwm)
		case w.free[p] || w.reached[p]:
			return fmt.Errorf("free list page %d names page %d twice or a page in use", id, p)
		}
		w.free[p] = true
	}
	return nil
}

// tree verifies the b-tree page id and everything below it. Only the
// database's root page may be empty (in a database without buckets):
// bbolt removes an empty page from its branch and makes an empty bucket
// inline, so an empty page anywhere else lost its elements.
func (w *pageWalker) tree(id uint64, depth int, mayBeEmpty bool) error {
	if depth > maxDepth {
		return fmt.Errorf("page %d: the tree is deeper than %d", id, maxDepth)
	}
	buf, err := w.read(id)
	if err != nil {
		return err
	}
	if err := w.node(buf, depth); err != nil {
		return fmt.Errorf("page %d: %w", id, err)
	}
	if !mayBeEmpty && binary.NativeEndian.Uint16(buf[10:]) == 0 {
		return fmt.Errorf("page %d has no elements, and only the root page may be empty", id)
	}
	return nil
}

// node verifies one branch or leaf page (or an inline bucket's page,
// inside its parent's value) and walks what its elements point to.
func (w *pageWalker) node(buf []byte, depth int) error {
	le := binary.NativeEndian
	flags, count := le.Uint16(buf[8:]), uint64(le.Uint16(buf[10:]))
	if flags != flagBranch && flags != flagLeaf {
		return fmt.Errorf("type %#x is neither branch nor leaf", flags)
	}
	if flags == flagBranch && count == 0 {
		return fmt.Errorf("a branch page without elements")
	}
	next := pageHeader + count*elementSize // where the first key starts
	if next > uint64(len(buf)) {
		return fmt.Errorf("%d elements do not fit in %d bytes", count, len(buf))
	}
	for i := range count {
		e := pageHeader + i*elementSize
		var pos, ksize, vsize uint64
		if flags == flagBranch {
			pos, ksize = uint64(le.Uint32(buf[e:])), uint64(le.Uint32(buf[e+4:]))
		} else {
			pos, ksize, vsize = uint64(le.Uint32(buf[e+4:])), uint64(le.Uint32(buf[e+8:])), uint64(le.Uint32(buf[e+12:]))
		}
		if e+pos != next || ksize == 0 || next+ksize+vsize > uint64(len(buf)) {
			return fmt.Errorf("element %d of %d: its key and value do not follow the previous ones inside the page", i, count)
		}
		value := buf[next+ksize : next+ksize+vsize]
		next += ksize + vsize
		switch eflags := le.Uint32(buf[e:]); {
		case flags == flagBranch:
			if err := w.tree(le.Uint64(buf[e+8:]), depth+1, false); err != nil {
				return err
			}
		case eflags == bucketEntry:
			if err := w.bucket(value, depth+1); err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
		case eflags != 0:
			return fmt.Errorf("element %d has flags %#x", i, eflags)
		}
	}
	return nil
}

// bucket walks a bucket from its header (root page id, sequence): a root
// of 0 is an inline bucket whose page follows the header.
func (w *pageWalker) bucket(value []byte, depth int) error {
	if len(value) < 16 {
		return fmt.Errorf("a bucket value of %d bytes", len(value))
	}
	root := binary.NativeEndian.Uint64(value)
	if root != 0 {
		return w.tree(root, depth, false)
	}
	inline := value[16:]
	if len(inline) < pageHeader || binary.NativeEndian.Uint16(inline[8:]) != flagLeaf {
		return fmt.Errorf("an inline bucket that is not a leaf page")
	}
	return w.node(inline, depth)
}
