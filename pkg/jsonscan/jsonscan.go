// Package jsonscan validates and walks JSON text without decoding it: a
// strict RFC 8259 scanner that builds nothing. It accepts exactly what
// encoding/json's Valid accepts (invalid UTF-8 inside strings included,
// as encoding/json does) and is several times faster, for hot paths that
// must reject non-JSON but read only a few fields: a streamed response
// chunk, a line of a JSON-lines file.
package jsonscan

import "encoding/binary"

// MaxDepth bounds the nesting of arrays and objects, as encoding/json's
// decoder does (10,000).
const MaxDepth = 10000

// Valid reports whether p is one JSON value with optional surrounding
// whitespace.
func Valid(p []byte) bool {
	i := SkipSpace(p, 0)
	j := Skip(p, i)
	return j >= 0 && SkipSpace(p, j) == len(p)
}

// SkipSpace returns the index of the first non-whitespace byte of p at
// or after i (len(p) if none).
func SkipSpace(p []byte, i int) int {
	for i < len(p) && isSpace(p[i]) {
		i++
	}
	return i
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// Skip returns the index just past the JSON value that starts at p[i]
// (no leading whitespace), or -1 if there is no valid value there.
func Skip(p []byte, i int) int { return skip(p, i, 0) }

func skip(p []byte, i, depth int) int {
	if i >= len(p) {
		return -1
	}
	switch c := p[i]; {
	case c == '"':
		return SkipString(p, i)
	case c == '{':
		return skipObject(p, i, depth+1)
	case c == '[':
		return skipArray(p, i, depth+1)
	case c == '-' || c >= '0' && c <= '9':
		return SkipNumber(p, i)
	case c == 't':
		return literal(p, i, "true")
	case c == 'f':
		return literal(p, i, "false")
	case c == 'n':
		return literal(p, i, "null")
	}
	return -1
}

func literal(p []byte, i int, lit string) int {
	if len(p)-i < len(lit) || string(p[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

func skipObject(p []byte, i, depth int) int {
	if depth > MaxDepth {
		return -1
	}
	return members(p, i, depth, nil)
}

func skipArray(p []byte, i, depth int) int {
	if depth > MaxDepth {
		return -1
	}
	return items(p, i, depth, nil)
}

// members walks the object that starts at p[i] (a '{') at nesting depth,
// calling fn (unless nil) with each member's key and value, and returns
// the index just past it, or -1.
func members(p []byte, i, depth int, fn func(key, val []byte)) int {
	i, more := open(p, i, '}')
	for more {
		k := i
		if i >= len(p) || p[i] != '"' {
			return -1
		}
		if i = SkipString(p, k); i < 0 {
			return -1
		}
		ke := i - 1
		if i = SkipSpace(p, i); i >= len(p) || p[i] != ':' {
			return -1
		}
		v := SkipSpace(p, i+1)
		if i = skip(p, v, depth); i < 0 {
			return -1
		}
		if fn != nil {
			fn(p[k+1:ke], p[v:i])
		}
		i, more = next(p, i, '}')
	}
	return i
}

// items walks the array that starts at p[i] (a '[') at nesting depth,
// calling fn (unless nil) with each item, and returns the index just past
// it, or -1.
func items(p []byte, i, depth int, fn func(val []byte)) int {
	i, more := open(p, i, ']')
	for more {
		v := i
		if i = skip(p, v, depth); i < 0 {
			return -1
		}
		if fn != nil {
			fn(p[v:i])
		}
		i, more = next(p, i, ']')
	}
	return i
}

// open returns the index of the first value of the object or array that
// opens at p[i] and true, or, when it closes (end) at once, the index
// past it and false.
func open(p []byte, i int, end byte) (int, bool) {
	i = SkipSpace(p, i+1)
	if i < len(p) && p[i] == end {
		return i + 1, false
	}
	return i, true
}

// next reads what follows a value of an object or array, from p[i]: a
// comma (it returns the start of the next value and true) or the closing
// byte end (the index past it and false); anything else gives -1, false.
func next(p []byte, i int, end byte) (int, bool) {
	if i = SkipSpace(p, i); i >= len(p) {
		return -1, false
	}
	switch p[i] {
	case ',':
		return SkipSpace(p, i+1), true
	case end:
		return i + 1, false
	}
	return -1, false
}

// plain marks the bytes a string holds as they are: not a quote, not a
// backslash, not a control character.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// SkipString returns the index just past the string that starts at p[i]
// (a quote), or -1 if it is not a valid JSON string.
func SkipString(p []byte, i int) int {
	i++
	for {
		// Eight bytes at a time while none is a quote, a backslash or a
		// control character (the word tests are exact for "any byte").
		for i+8 <= len(p) {
			x := binary.LittleEndian.Uint64(p[i:])
			if (x-lo*0x20)&^x&hi|hasZero(x^(lo*'"'))|hasZero(x^(lo*'\\')) != 0 {
				break
			}
			i += 8
		}
		for i < len(p) && plain[p[i]] {
			i++
		}
		if i >= len(p) {
			return -1
		}
		switch p[i] {
		case '"':
			return i + 1
		case '\\':
			if i+1 >= len(p) {
				return -1
			}
			switch p[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(p)-i < 6 || !isHex(p[i+2]) || !isHex(p[i+3]) || !isHex(p[i+4]) || !isHex(p[i+5]) {
					return -1
				}
				i += 6
			default:
				return -1
			}
		default: // a control character
			return -1
		}
	}
}

const (
	lo = 0x0101010101010101
	hi = 0x8080808080808080
)

// hasZero is non-zero when a byte of x is zero.
func hasZero(x uint64) uint64 { return (x - lo) &^ x & hi }

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// SkipNumber returns the index just past the number that starts at p[i],
// or -1 if none starts there: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func SkipNumber(p []byte, i int) int {
	if i < len(p) && p[i] == '-' {
		i++
	}
	switch {
	case i >= len(p):
		return -1
	case p[i] == '0':
		i++
	case p[i] >= '1' && p[i] <= '9':
		for i++; i < len(p) && isDigit(p[i]); i++ {
		}
	default:
		return -1
	}
	if i < len(p) && p[i] == '.' {
		i++
		if i >= len(p) || !isDigit(p[i]) {
			return -1
		}
		for i < len(p) && isDigit(p[i]) {
			i++
		}
	}
	if i < len(p) && (p[i] == 'e' || p[i] == 'E') {
		i++
		if i < len(p) && (p[i] == '+' || p[i] == '-') {
			i++
		}
		if i >= len(p) || !isDigit(p[i]) {
			return -1
		}
		for i < len(p) && isDigit(p[i]) {
			i++
		}
	}
	return i
}

// Number is SkipNumber that also parses an integer literal within int64:
// isInt is false for a fraction, an exponent or an integer out of range.
func Number(p []byte, i int) (end int, v int64, isInt bool) {
	start := i
	neg := i < len(p) && p[i] == '-'
	if neg {
		i++
	}
	var u uint64
	switch {
	case i >= len(p):
		return -1, 0, false
	case p[i] == '0':
		i++
		isInt = true
	case p[i] >= '1' && p[i] <= '9':
		isInt = true
		// 18 digits cannot overflow; check only past them.
		for d := i + 18; i < len(p) && i < d && isDigit(p[i]); i++ {
			u = u*10 + uint64(p[i]-'0')
		}
		for ; i < len(p) && isDigit(p[i]); i++ {
			if u > (1<<63)/10 {
				isInt = false
			}
			u = u*10 + uint64(p[i]-'0')
			if u > 1<<63 {
				isInt = false
			}
		}
	default:
		return -1, 0, false
	}
	if i < len(p) && (p[i] == '.' || p[i] == 'e' || p[i] == 'E') {
		return SkipNumber(p, start), 0, false
	}
	if !isInt || !neg && u > 1<<63-1 {
		return i, 0, false
	}
	if neg {
		return i, -int64(u), true
	}
	return i, int64(u), true
}

// Int parses a JSON integer literal (no fraction, no exponent) that fills
// p, within int64. ok is false for anything else.
func Int(p []byte) (v int64, ok bool) {
	neg := len(p) > 0 && p[0] == '-'
	d := p
	if neg {
		d = p[1:]
	}
	if len(d) == 0 || len(d) > 1 && d[0] == '0' {
		return 0, false
	}
	var u uint64
	for _, c := range d {
		if !isDigit(c) {
			return 0, false
		}
		if u > (1<<63)/10 {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
		if u > 1<<63 {
			return 0, false
		}
	}
	if neg {
		return -int64(u), true // -(1<<63) wraps to itself: MinInt64
	}
	if u > 1<<63-1 {
		return 0, false
	}
	return int64(u), true
}

// Members walks the object that starts at p[i] (a '{'), calling fn with
// each member's key (between its quotes, escapes as written) and value
// (its span of p), and returns the index just past the object, or -1 if
// it is not a valid JSON object (fn may have been called for the members
// before the fault).
func Members(p []byte, i int, fn func(key, val []byte)) int {
	if i >= len(p) || p[i] != '{' {
		return -1
	}
	return members(p, i, 1, fn)
}

// Items walks the array that starts at p[i] (a '['), calling fn with each
// item's span, and returns the index just past the array, or -1 if it is
// not a valid JSON array.
func Items(p []byte, i int, fn func(val []byte)) int {
	if i >= len(p) || p[i] != '[' {
		return -1
	}
	return items(p, i, 1, fn)
}

// IntArray is Skip for the array that starts at p[i] (a '['), reporting
// also whether every item is an integer literal within int64 (Number's
// isInt): one pass where Skip and then Int on each item would take two.
func IntArray(p []byte, i int) (end int, allInt bool) {
	if i >= len(p) || p[i] != '[' {
		return -1, false
	}
	i, more := open(p, i, ']')
	allInt = true
	for more {
		if i < len(p) && (p[i] == '-' || isDigit(p[i])) {
			var isInt bool
			i, _, isInt = Number(p, i)
			allInt = allInt && isInt
		} else {
			i = skip(p, i, 1)
			allInt = false
		}
		if i < 0 {
			return -1, false
		}
		i, more = next(p, i, ']')
	}
	return i, allInt
}
