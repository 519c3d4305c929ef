package contract

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"warden/pkg/jsonscan"
)

// One trace event is read in one pass: its members are walked once
// (jsonscan), the spans of the members rawEvent names are kept (a
// repeated key's last), and the values are converted only when they are
// of the plain form Kineto writes: a string without escapes, a number
// within float64's range, an integer correlation. Anything else (a null,
// an escape, a key that encoding/json would match only by case folding, a
// value of another type) is handed to encoding/json, so that an event
// reads exactly as json.Unmarshal into rawEvent reads it, errors included
// (TestTraceEventAgreesWithEncodingJSON, FuzzTraceEvent).

// The members of an event that rawEvent reads, by index.
const (
	evName = iota
	evCat
	evPh
	evTs
	evDur
	evPid
	evTid
	evFields
)

// eventScan is what the walk of one event found.
type eventScan struct {
	at   [evFields][]byte
	corr []byte // the last args.correlation
	// odd: the fast reading cannot tell what encoding/json would read
	odd     bool
	scratch []byte // unescaped strings
}

// walk is the scanner traceWindow.scan runs on an event at p[i]: it
// returns the index past the event, or -1 if none ends in p.
func (s *eventScan) walk(p []byte, i int) int {
	*s = eventScan{scratch: s.scratch}
	if i >= len(p) || p[i] != '{' {
		s.odd = true // null, or not an object: encoding/json says which
		return jsonscan.Skip(p, i)
	}
	return s.object(p, i, false)
}

// object walks the object at p[i]: the event itself or, inArgs, its args.
func (s *eventScan) object(p []byte, i int, inArgs bool) int {
	i = jsonscan.SkipSpace(p, i+1)
	if i < len(p) && p[i] == '}' {
		return i + 1
	}
	for {
		if i >= len(p) || p[i] != '"' {
			return -1
		}
		k := i
		if i = jsonscan.SkipString(p, i); i < 0 {
			return -1
		}
		key := p[k+1 : i-1]
		if i = jsonscan.SkipSpace(p, i); i >= len(p) || p[i] != ':' {
			return -1
		}
		v := jsonscan.SkipSpace(p, i+1)
		switch {
		case inArgs:
			i = s.argsMember(p, key, v)
		case string(key) == "args" && v < len(p) && p[v] == '{':
			i = s.object(p, v, true)
		default:
			i = jsonscan.Skip(p, v)
			if i >= 0 {
				s.member(key, p[v:i])
			}
		}
		if i < 0 {
			return -1
		}
		if i = jsonscan.SkipSpace(p, i); i >= len(p) {
			return -1
		}
		switch p[i] {
		case '}':
			return i + 1
		case ',':
			i = jsonscan.SkipSpace(p, i+1)
		default:
			return -1
		}
	}
}

// eventKeys are the keys of an event that rawEvent reads.
var eventKeys = [...]string{"name", "cat", "ph", "ts", "dur", "pid", "tid", "args"}

// member keeps the value of a member of the event (not an object args).
func (s *eventScan) member(key, val []byte) {
	switch string(key) {
	case "name":
		s.at[evName] = val
	case "cat":
		s.at[evCat] = val
	case "ph":
		s.at[evPh] = val
	case "ts":
		s.at[evTs] = val
	case "dur":
		s.at[evDur] = val
	case "pid":
		s.at[evPid] = val
	case "tid":
		s.at[evTid] = val
	case "args":
		s.odd = s.odd || val[0] != 'n' // args not an object: encoding/json refuses it unless null
	default:
		s.odd = s.odd || foldsToAny(key)
	}
}

// argsMember reads one member of args at p[v]; it returns the index past
// the value or -1.
func (s *eventScan) argsMember(p, key []byte, v int) int {
	end := jsonscan.Skip(p, v)
	switch {
	case end < 0:
	case string(key) == "correlation":
		s.corr = p[v:end]
	case maybeCorrelation(key):
		s.odd = s.odd || foldsTo(key, "correlation")
	}
	return end
}

// maybeCorrelation: key is as long as a spelling of "correlation" that
// encoding/json could match: the name with k of its letters written as
// \uXXXX escapes (11 + 5k bytes). No other byte may stand for one of its
// letters: the only non-ASCII runes that fold to ASCII letters are
// U+017F (s) and U+212A (k), neither in the name.
func maybeCorrelation(key []byte) bool {
	n := len(key) - len("correlation")
	return n >= 0 && n%5 == 0 && n <= 5*len("correlation")
}

// foldsToAny: key, not one of eventKeys byte for byte, could be one to
// encoding/json (escaped, folded).
func foldsToAny(key []byte) bool {
	if !plainASCII(key) {
		return true
	}
	for _, k := range eventKeys {
		if len(key) == len(k) && bytes.EqualFold(key, []byte(k)) {
			return true
		}
	}
	return false
}

// plainASCII: key has no escape and no byte outside ASCII.
func plainASCII(key []byte) bool {
	for _, c := range key {
		if c == '\\' || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// foldsTo: encoding/json might match key to the field name (a lower-case
// ASCII name) although key is not name itself: key has escapes or
// non-ASCII bytes (which a fold or an escape may turn into name's
// letters), or equals name but for case.
func foldsTo(key []byte, name string) bool {
	return !plainASCII(key) || len(key) == len(name) && bytes.EqualFold(key, []byte(name))
}

// plainString returns the text of a JSON string value that needs no
// decoding: no escape, valid UTF-8.
func plainString(v []byte) (string, bool) {
	b, ok := plainBytes(v)
	return string(b), ok
}

func plainBytes(v []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != '"' {
		return nil, false
	}
	b := v[1 : len(v)-1]
	if bytes.IndexByte(b, '\\') >= 0 || !utf8.Valid(b) {
		return nil, false
	}
	return b, true
}

// eventNames interns the names of one trace's events (the same kernel
// and operator names recur hundreds of thousands of times), each with the
// scope bits its name matches once they are known.
type eventNames map[string]*eventName

type eventName struct {
	s     string
	bits  uint64
	known bool // bits is set
}

func (m eventNames) get(b []byte) *eventName {
	if n, ok := m[string(b)]; ok {
		return n
	}
	n := &eventName{s: string(b)}
	m[n.s] = n
	return n
}

// category returns the strings of the categories and phases the rules
// compare without an allocation; others are copied.
func category(b []byte) string {
	switch string(b) {
	case "X":
		return "X"
	case "kernel":
		return "kernel"
	case "cpu_op":
		return "cpu_op"
	case "cuda_runtime":
		return "cuda_runtime"
	case "cuda_driver":
		return "cuda_driver"
	case "user_annotation":
		return "user_annotation"
	case "gpu_user_annotation":
		return "gpu_user_annotation"
	case "python_function":
		return "python_function"
	case "gpu_memcpy":
		return "gpu_memcpy"
	case "gpu_memset":
		return "gpu_memset"
	}
	return string(b)
}

// decode fills e from the scan; when the scan was odd, or a value is not
// of the plain form, e is what json.Unmarshal(raw, e) gives, and so is the
// error.
func (s *eventScan) decode(raw []byte, e *rawEvent, names eventNames) error {
	*e = rawEvent{}
	if s.odd || !s.plain(e, names) {
		*e = rawEvent{}
		return json.Unmarshal(raw, e)
	}
	return nil
}

// plain converts the values of the plain form; false: one is not.
func (s *eventScan) plain(e *rawEvent, names eventNames) bool {
	for i, dst := range [...]*string{&e.Name, &e.Cat, &e.Ph} {
		if v := s.at[i]; v != nil {
			b, ok := plainBytes(v)
			if !ok {
				if b, ok = unescape(v, s.scratch[:0]); !ok {
					return false
				}
				s.scratch = b
			}
			if i == evName {
				e.name = names.get(b)
				*dst = e.name.s
			} else {
				*dst = category(b)
			}
		}
	}
	for i, dst := range [...]*float64{&e.Ts, &e.Dur} {
		if v := s.at[evTs+i]; v != nil {
			x, ok := plainFloat(v)
			if !ok {
				return false
			}
			*dst = x
		}
	}
	e.Pid, e.Tid = s.at[evPid], s.at[evTid]
	if s.corr != nil {
		c, ok := jsonscan.Int(s.corr)
		if !ok {
			return false
		}
		e.Args.Correlation = &c
	}
	return true
}

// plainFloat parses a JSON number within float64's range, as
// strconv.ParseFloat does.
func plainFloat(v []byte) (float64, bool) {
	if c := v[0]; c != '-' && (c < '0' || c > '9') {
		return 0, false
	}
	if x, ok := exactFloat(v); ok {
		return x, true
	}
	x, err := strconv.ParseFloat(string(v), 64)
	return x, err == nil
}

// pow10 holds the powers of ten a float64 represents exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
	1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// exactFloat reads a JSON number of the form -?digits(.digits)? whose
// digits, the point removed, are an integer below 2^53 with at most 22
// digits after the point: the integer and the power of ten are both exact
// float64s, so one division is correctly rounded, the value ParseFloat
// gives (Clinger's fast path, strconv's own). ok is false for any other
// number.
func exactFloat(v []byte) (float64, bool) {
	i, neg := 0, v[0] == '-'
	if neg {
		i++
	}
	var m uint64
	digits, frac := 0, -1
	for ; i < len(v); i++ {
		c := v[i]
		switch {
		case c >= '0' && c <= '9':
			m = m*10 + uint64(c-'0')
			digits++
			if frac >= 0 {
				frac++
			}
		case c == '.' && frac < 0:
			frac = 0
		default:
			return 0, false // an exponent
		}
		if digits > 19 {
			return 0, false
		}
	}
	if m >= 1<<53 || frac > 22 {
		return 0, false
	}
	x := float64(m)
	if frac > 0 {
		x /= pow10[frac]
	}
	if neg {
		x = -x
	}
	return x, true
}

// unescape decodes the JSON string v, whose text is ASCII, onto dst as
// encoding/json decodes it (a surrogate pair is one rune, a lone
// surrogate U+FFFD). ok is false for a string with non-ASCII bytes:
// encoding/json replaces each invalid byte there, and is left to do so.
func unescape(v, dst []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != '"' {
		return nil, false
	}
	b := v[1 : len(v)-1]
	for i := 0; i < len(b); {
		c := b[i]
		if c >= utf8.RuneSelf {
			return nil, false
		}
		if c != '\\' {
			dst = append(dst, c)
			i++
			continue
		}
		// the string is valid JSON: an escape is complete
		switch b[i+1] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hex4(b[i+2:])
			i += 6
			if utf16.IsSurrogate(r) {
				if i+6 <= len(b) && b[i] == '\\' && b[i+1] == 'u' {
					if d := utf16.DecodeRune(r, hex4(b[i+2:])); d != unicode.ReplacementChar {
						r = d
						i += 6
						dst = utf8.AppendRune(dst, r)
						continue
					}
				}
				r = unicode.ReplacementChar
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default: // " \ /
			dst = append(dst, b[i+1])
		}
		i += 2
	}
	return dst, true
}

// hex4 reads four hex digits (a valid \u escape's).
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}
