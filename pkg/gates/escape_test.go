package gates

import (
	"crypto/sha256"
	"encoding/hex"
	"unicode/utf16"
	"unicode/utf8"
)

// substringID names a private text without revealing it.
func substringID(s []byte) string {
	sum := sha256.Sum256(s)
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// jsonEscape (for the tests: artifacts as Go and Python write them) writes s as it appears inside a JSON string. asciiOnly escapes
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
