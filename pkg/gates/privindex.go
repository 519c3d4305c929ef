package gates

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sort"

	"warden/protocols"
)

// DefaultMinLeakBytes is the length from which a piece of a private value
// counts as a leak when the protocol does not set privacy.min_leak_bytes:
// any run of at least 48 bytes of any private value, taken from anywhere in
// the value, found in an artifact fails the privacy scan (seed 002,
// "Artifact, privacy, and reproducibility contract": "any source prompt
// substring"). Shorter common pieces are not looked for: a few words of a
// prompt ("the number of ", "Hello, world") turn up by chance in logs,
// traces and JSON keys, and every chance hit would stop the campaign.
const DefaultMinLeakBytes = protocols.DefaultMinLeakBytes

// MinLeakBytesFloor is the smallest leak length an index accepts.
const MinLeakBytesFloor = protocols.MinLeakBytesFloor

// PrivateIndex finds, in any byte string, every run of at least MinLen
// bytes that also occurs in one of the private values it was built from.
// It is immutable once built and safe for concurrent use.
//
// # How
//
// The values are kept one after another in one buffer (text). Let L be
// MinLen, w = L/2 the window and s = L - w + 1 the stride. For each value,
// the index holds a 32-bit fingerprint of every w-byte window that starts
// at an offset from the value's start that is a multiple of s (and lies
// wholly in the value), with the window's position, sorted by fingerprint;
// a bit set of the fingerprints' top bits rejects most misses with one
// memory read. A scan rolls a polynomial hash of w bytes over the input,
// at every offset; a fingerprint the index holds is verified byte by byte
// against the private text and extended to both sides, and only a verified
// common run of at least L bytes is reported.
//
// # Guarantee
//
// Every common substring of length >= L is found, and nothing else is
// reported. Proof: let buf[a:a+L] == text[q:q+L], with text[q:q+L] inside
// one value that starts at v. The L - w + 1 = s consecutive offsets
// q-v, q-v+1, ..., q-v+L-w hold exactly one multiple of s; call it
// q-v+d, 0 <= d <= L-w. The window at p = q+d lies in text[q:q+L], so
// inside the value, and is indexed. The scan computes, at offset a+d, the
// hash of buf[a+d:a+d+w] == text[p:p+w]: the same fingerprint, so the
// bit set and the sorted list both hold it (neither has false negatives),
// the bytes compare equal, and extending d bytes to the left and L-w-d to
// the right stays inside both buf[a:a+L] and the value: a verified run of
// L bytes. Conversely a report needs an exact comparison of L bytes, so
// hash collisions cost time, never a false finding.
//
// # Cost
//
// Memory: the text, 8 bytes per indexed window (text/s of them) and the
// bit set (16 bits per window, rounded up to a power of two): for 150 MB
// of private text and L = 48, about 150 + 48 + 16 MB. A scan costs one
// hash update and one bit-set read per input byte; each candidate costs
// at most L byte comparisons (extension stops at L), so a long leak is not
// quadratic.
type PrivateIndex struct {
	minLen, w, stride int
	text              []byte
	ends              []uint32 // ends[i] is the end of value i in text
	entries           []uint64 // fingerprint<<32 | position, sorted
	filter            []uint64
	filterShift       uint
	pow               uint64 // hashBase^(w-1)
	short             int
}

// hashBase is the rolling hash's multiplier (odd, so it is invertible
// modulo 2^64).
const hashBase = 0x100000001B3

// IndexBuilder collects private values for a PrivateIndex.
type IndexBuilder struct {
	minLen int
	text   []byte
	ends   []uint32
	short  int
	err    error
}

// NewIndexBuilder starts an index for leaks of at least minLen bytes;
// minLen below MinLeakBytesFloor is an error at Build.
func NewIndexBuilder(minLen int) *IndexBuilder { return &IndexBuilder{minLen: minLen} }

// Add adds one private value. A value shorter than the leak length is
// counted (Short) and not indexed: no leak of that length can come from it.
func (b *IndexBuilder) Add(v []byte) {
	if len(v) < b.minLen {
		b.short++
		return
	}
	if len(b.text)+len(v) > math.MaxUint32 {
		if b.err == nil {
			b.err = fmt.Errorf("private inputs hold more than %d bytes of text: too large to index", uint64(math.MaxUint32))
		}
		return
	}
	b.text = append(b.text, v...)
	b.ends = append(b.ends, uint32(len(b.text)))
}

// Build indexes the values added.
func (b *IndexBuilder) Build() (*PrivateIndex, error) {
	if b.minLen < MinLeakBytesFloor {
		return nil, fmt.Errorf("private index: leak length %d is below the floor of %d bytes", b.minLen, MinLeakBytesFloor)
	}
	if b.err != nil {
		return nil, b.err
	}
	x := &PrivateIndex{minLen: b.minLen, text: slices.Clip(b.text), ends: slices.Clip(b.ends), short: b.short}
	x.w = b.minLen / 2
	x.stride = b.minLen - x.w + 1
	x.pow = 1
	for range x.w - 1 {
		x.pow *= hashBase
	}
	n := 0
	start := 0
	for _, e := range x.ends {
		if l := int(e) - start; l >= x.w {
			n += (l-x.w)/x.stride + 1
		}
		start = int(e)
	}
	x.entries = make([]uint64, 0, n)
	start = 0
	for _, e := range x.ends {
		for p := start; p+x.w <= int(e); p += x.stride {
			fp := fingerprint(x.hashAt(p))
			x.entries = append(x.entries, uint64(fp)<<32|uint64(p))
		}
		start = int(e)
	}
	slices.Sort(x.entries)
	nbits := 1 << 16
	for nbits < 16*len(x.entries) {
		nbits <<= 1
	}
	x.filter = make([]uint64, nbits/64)
	x.filterShift = uint(32 - bits.TrailingZeros(uint(nbits)))
	for _, en := range x.entries {
		f := uint32(en>>32) >> x.filterShift
		x.filter[f>>6] |= 1 << (f & 63)
	}
	return x, nil
}

// hashAt is the polynomial hash of text[p:p+w].
func (x *PrivateIndex) hashAt(p int) uint64 {
	var h uint64
	for _, c := range x.text[p : p+x.w] {
		h = h*hashBase + uint64(c)
	}
	return h
}

// fingerprint mixes a rolling hash (whose low bits are weak) into 32 bits.
func fingerprint(h uint64) uint32 {
	h ^= h >> 31
	h *= 0xBF58476D1CE4E5B9
	h ^= h >> 29
	return uint32(h >> 32)
}

// MinLen is the leak length: the shortest common run reported.
func (x *PrivateIndex) MinLen() int { return x.minLen }

// Values is the number of private values indexed; Short the number left
// out for being shorter than MinLen; Bytes the private text held.
func (x *PrivateIndex) Values() int { return len(x.ends) }
func (x *PrivateIndex) Short() int  { return x.short }
func (x *PrivateIndex) Bytes() int  { return len(x.text) }

// Windows is the number of indexed windows.
func (x *PrivateIndex) Windows() int { return len(x.entries) }

// empty reports whether there is nothing to look for.
func (x *PrivateIndex) empty() bool { return x == nil || len(x.entries) == 0 }

// value returns the index of the value holding text position p and its
// bounds.
func (x *PrivateIndex) value(p int) (i, start, end int) {
	i = sort.Search(len(x.ends), func(k int) bool { return int(x.ends[k]) > p })
	if i > 0 {
		start = int(x.ends[i-1])
	}
	return i, start, int(x.ends[i])
}

// ID names value i without revealing it: a prefix of its SHA-256.
func (x *PrivateIndex) ID(i int) string {
	start := 0
	if i > 0 {
		start = int(x.ends[i-1])
	}
	sum := sha256.Sum256(x.text[start:x.ends[i]])
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// Scan calls found with the value index of every common run of at least
// MinLen bytes between buf and a private value (see the type's Guarantee),
// possibly more than once for one value.
func (x *PrivateIndex) Scan(buf []byte, found func(value int)) {
	if x.empty() || len(buf) < x.minLen {
		return
	}
	w := x.w
	var h uint64
	for _, c := range buf[:w-1] {
		h = h*hashBase + uint64(c)
	}
	for i := 0; i+w <= len(buf); i++ {
		if i > 0 {
			h -= uint64(buf[i-1]) * x.pow
		}
		h = h*hashBase + uint64(buf[i+w-1])
		fp := fingerprint(h)
		if f := fp >> x.filterShift; x.filter[f>>6]&(1<<(f&63)) == 0 {
			continue
		}
		key := uint64(fp) << 32
		k, _ := slices.BinarySearch(x.entries, key)
		for ; k < len(x.entries) && x.entries[k]&^0xFFFFFFFF == key; k++ {
			if v, ok := x.verify(buf, i, int(uint32(x.entries[k]))); ok {
				found(v)
			}
		}
	}
}

// verify compares buf at i with the private text at p and extends the
// common run to both sides, within buf and within p's value, until it is
// MinLen bytes long.
func (x *PrivateIndex) verify(buf []byte, i, p int) (int, bool) {
	if !bytes.Equal(buf[i:i+x.w], x.text[p:p+x.w]) {
		return 0, false
	}
	v, start, end := x.value(p)
	n := x.w
	for l := 1; n < x.minLen && i-l >= 0 && p-l >= start && buf[i-l] == x.text[p-l]; l++ {
		n++
	}
	for r := x.w; n < x.minLen && i+r < len(buf) && p+r < end && buf[i+r] == x.text[p+r]; r++ {
		n++
	}
	return v, n >= x.minLen
}

// mark and reset undo the values added since mark (a file first read as
// JSON that turns out to be text).
func (b *IndexBuilder) mark() [3]int { return [3]int{len(b.text), len(b.ends), b.short} }

func (b *IndexBuilder) reset(m [3]int) {
	b.text, b.ends, b.short = b.text[:m[0]], b.ends[:m[1]], m[2]
}

// Leaks names (ID) every private value of which data holds a run of at
// least MinLen bytes, in its raw bytes or its JSON-decoded view: the
// privacy scan of one document held in memory (a report before it is
// written). Nil when there is none.
func (x *PrivateIndex) Leaks(data []byte) []string {
	if x.empty() {
		return nil
	}
	seen := map[int]bool{}
	var out []string
	add := func(v int) {
		if !seen[v] {
			seen[v] = true
			out = append(out, x.ID(v))
		}
	}
	x.Scan(data, add)
	if bytes.IndexByte(data, '\\') >= 0 {
		var u unescaper
		x.Scan(u.decode(nil, data, true), add)
	}
	return out
}
