package gates

import (
	"unicode/utf16"
	"unicode/utf8"
)

// unescaper decodes string escapes in a byte stream: JSON's \" \\ \/ \b
// \f \n \r \t and \uXXXX (a surrogate pair as one character, a lone
// surrogate as U+FFFD), as Go's encoding/json and Python's json.dumps
// write them (ASCII-only and HTML-safe forms included), and the \' \a \v
// and \xNN (a character below U+0100) that Python's repr and Go's %q add.
// Every other byte, and a backslash that starts no escape, is copied as
// it is. Fed in
// pieces, it holds back an escape cut at the end of a piece until the
// next one, so the decoded stream does not depend on where the pieces
// end.
//
// The privacy scan searches this view of each file beside its raw bytes:
// a private value written into JSON (a log line, a record that does not
// parse) is found although its quotes, newlines or non-ASCII characters
// are escaped.
type unescaper struct {
	pend []byte // an unfinished escape from the last piece
}

// maxEscape is the longest escape: a surrogate pair, \uD83C\uDF63.
const maxEscape = 12

// decode appends the decoded form of p to dst; final says no more input
// follows (a pending escape is then copied as it is).
func (u *unescaper) decode(dst, p []byte, final bool) []byte {
	in := p
	if len(u.pend) > 0 {
		in = append(u.pend, p...)
		u.pend = nil
	}
	for i := 0; i < len(in); {
		c := in[i]
		if c != '\\' {
			j := i + 1
			for j < len(in) && in[j] != '\\' {
				j++
			}
			dst = append(dst, in[i:j]...)
			i = j
			continue
		}
		n, out, ok := escapeAt(in[i:], final)
		if !ok { // cut at the end of the piece
			u.pend = append([]byte(nil), in[i:]...)
			return dst
		}
		dst = append(dst, out...)
		i += n
	}
	return dst
}

// escapeAt decodes the escape at the start of b (b[0] is a backslash). It
// returns the bytes consumed and the decoded bytes; ok is false when b may
// be an escape cut short and more input may follow.
func escapeAt(b []byte, final bool) (n int, out []byte, ok bool) {
	if len(b) < 2 {
		return 1, b[:1], final
	}
	switch b[1] {
	case '"', '\\', '/':
		return 2, b[1:2], true
	case 'b':
		return 2, []byte{'\b'}, true
	case 'f':
		return 2, []byte{'\f'}, true
	case 'n':
		return 2, []byte{'\n'}, true
	case 'r':
		return 2, []byte{'\r'}, true
	case 't':
		return 2, []byte{'\t'}, true
	case '\'':
		return 2, b[1:2], true // Python's repr
	case 'a':
		return 2, []byte{'\a'}, true
	case 'v':
		return 2, []byte{'\v'}, true
	case 'x':
		// \xNN: Python's repr of a character below U+0100, Go's %q of a byte
		if len(b) < 4 {
			if !final && allHex(b[2:]) {
				return 0, nil, false
			}
			return 1, b[:1], true
		}
		r, ok := hex4([]byte{'0', '0', b[2], b[3]})
		if !ok {
			return 1, b[:1], true
		}
		return 4, utf8.AppendRune(nil, r), true
	case 'u':
	default:
		return 1, b[:1], true
	}
	r1, ok1 := hex4(b[2:])
	if !ok1 {
		if len(b) < 6 && !final && allHex(b[2:]) {
			return 0, nil, false
		}
		return 1, b[:1], true
	}
	if !utf16.IsSurrogate(r1) {
		return 6, utf8.AppendRune(nil, r1), true
	}
	// A high surrogate wants \uDCxx after it.
	rest := b[6:]
	if len(rest) < 6 && !final && couldBeEscape(rest) {
		return 0, nil, false
	}
	if len(rest) >= 6 && rest[0] == '\\' && rest[1] == 'u' {
		if r2, ok := hex4(rest[2:]); ok {
			if r := utf16.DecodeRune(r1, r2); r != utf8.RuneError {
				return 12, utf8.AppendRune(nil, r), true
			}
		}
	}
	return 6, utf8.AppendRune(nil, utf8.RuneError), true
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

func allHex(b []byte) bool {
	for _, c := range b {
		if _, ok := hex4([]byte{c, '0', '0', '0'}); !ok {
			return false
		}
	}
	return true
}

// couldBeEscape reports whether b is a prefix of some \uXXXX.
func couldBeEscape(b []byte) bool {
	if len(b) >= 1 && b[0] != '\\' {
		return false
	}
	if len(b) >= 2 && b[1] != 'u' {
		return false
	}
	return len(b) <= 2 || allHex(b[2:])
}
