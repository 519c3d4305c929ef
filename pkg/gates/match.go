package gates

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

// MinSubstringLen is the shortest private substring the privacy scan uses.
// Shorter ones are dropped: a short piece of a prompt ("the number of ",
// "Hello, world") turns up by chance in logs, traces and JSON keys, and
// every chance hit would stop the campaign for a false leak. Sixteen bytes
// is also the window the matcher hashes, which keeps its cost per byte
// independent of how many substrings it looks for.
const MinSubstringLen = 16

// keyLen is the length of the prefix the matcher hashes; every pattern is
// at least this long.
const keyLen = MinSubstringLen

// matcher finds many byte patterns of at least keyLen bytes in one pass:
// at each offset it hashes the next keyLen bytes, tests a bit set, and
// only on a hit looks the key up and compares whole patterns. The cost per
// byte does not grow with the number of patterns.
type matcher struct {
	pats   [][]byte
	form   []string // how it was encoded: "" for the raw bytes
	id     []string // substringID of the private substring it was made from
	bitset []uint64
	shift  uint // 64 - log2(len(bitset)*64)
	byKey  map[[keyLen]byte][]int32
	maxLen int
}

// newMatcher builds a matcher for subs and their JSON-escaped forms. subs
// shorter than MinSubstringLen are skipped; short counts them.
func newMatcher(subs [][]byte) (m *matcher, used, short int) {
	m = &matcher{byKey: map[[keyLen]byte][]int32{}}
	seen := map[string]bool{}
	for _, s := range subs {
		if len(s) < MinSubstringLen {
			short++
			continue
		}
		if seen[string(s)] {
			continue
		}
		seen[string(s)] = true
		used++
		forms := []struct {
			b    []byte
			name string
		}{
			{s, ""},
			{jsonEscape(s, false, false), "JSON-escaped"},
			{jsonEscape(s, true, false), "JSON-escaped, ASCII only"},
			{jsonEscape(s, false, true), "JSON-escaped, HTML-safe"},
		}
		id := substringID(s)
		added := map[string]bool{}
		for _, f := range forms {
			if added[string(f.b)] {
				continue
			}
			added[string(f.b)] = true
			m.pats = append(m.pats, f.b)
			m.form = append(m.form, f.name)
			m.id = append(m.id, id)
			m.maxLen = max(m.maxLen, len(f.b))
		}
	}
	nbits := 1 << 16
	for nbits < 16*len(m.pats) {
		nbits <<= 1
	}
	m.bitset = make([]uint64, nbits/64)
	m.shift = uint(64 - bits.TrailingZeros(uint(nbits)))
	for i, p := range m.pats {
		var k [keyLen]byte
		copy(k[:], p)
		h := m.hash(p)
		m.bitset[h>>6] |= 1 << (h & 63)
		m.byKey[k] = append(m.byKey[k], int32(i))
	}
	return m, used, short
}

func (m *matcher) hash(b []byte) uint64 {
	lo := binary.LittleEndian.Uint64(b)
	hi := binary.LittleEndian.Uint64(b[8:])
	return (lo*0x9E3779B97F4A7C15 ^ hi*0xC2B2AE3D27D4EB4F) >> m.shift
}

// empty reports whether the matcher has no pattern.
func (m *matcher) empty() bool { return len(m.pats) == 0 }

// scan reports, through found, every pattern that starts at an offset
// below limit in buf and lies wholly in buf.
func (m *matcher) scan(buf []byte, limit int, found func(pat int)) {
	if len(m.pats) == 0 {
		return
	}
	end := min(limit, len(buf)-keyLen+1)
	for i := 0; i < end; i++ {
		h := m.hash(buf[i : i+keyLen])
		if m.bitset[h>>6]&(1<<(h&63)) == 0 {
			continue
		}
		var k [keyLen]byte
		copy(k[:], buf[i:])
		for _, p := range m.byKey[k] {
			if bytes.HasPrefix(buf[i:], m.pats[p]) {
				found(int(p))
			}
		}
	}
}

// substringID names a private substring without revealing it.
func substringID(s []byte) string {
	sum := sha256.Sum256(s)
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// jsonEscape writes s as it appears inside a JSON string. asciiOnly escapes
// every non-ASCII character as \uXXXX (Python's json.dumps default); html
// escapes <, >, &, U+2028 and U+2029 (Go's encoding/json default). Bytes
// that are not UTF-8 are kept as they are.
func jsonEscape(s []byte, asciiOnly, html bool) []byte {
	const hexDigits = "0123456789abcdef"
	u := func(b []byte, r rune) []byte {
		return append(b, '\\', 'u', hexDigits[r>>12&15], hexDigits[r>>8&15], hexDigits[r>>4&15], hexDigits[r&15])
	}
	b := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c == '\b':
				b = append(b, '\\', 'b')
			case c == '\f':
				b = append(b, '\\', 'f')
			case c < 0x20, html && (c == '<' || c == '>' || c == '&'):
				b = u(b, rune(c))
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, c)
		case asciiOnly && r > 0xFFFF:
			r1, r2 := utf16.EncodeRune(r)
			b = u(u(b, r1), r2)
		case asciiOnly, html && (r == 0x2028 || r == 0x2029):
			b = u(b, r)
		default:
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return b
}

// runePrefix returns at most n bytes of s, cut back to a UTF-8 boundary
// when s is valid UTF-8 there.
func runePrefix(s []byte, n int) []byte {
	if len(s) <= n {
		return s
	}
	p := s[:n]
	for k := 0; k < utf8.UTFMax && len(p) > 0; k++ {
		if utf8.RuneStart(s[len(p)]) {
			return p
		}
		p = p[:len(p)-1]
	}
	return s[:n]
}
