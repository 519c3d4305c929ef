package views

import (
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/rs/zerolog"
)

// Recorded text reaches a person's terminal: a validator's detail, a
// process's stderr, a run id, a client's phase. A byte a terminal acts on
// (ESC ]0;...BEL retitles the window, ESC [2J clears it, CR ESC [K
// rewrites the line: "stopped ..." read as "complete") is written out
// instead, so that what the views print is only what they mean to. Every
// text view escapes what it prints from the records with Esc, or whole
// documents with Escaped; the views' own layout (newlines, tabs for
// tabwriter, the live view's styles) is added after.

// Esc is s with every rune that is not printable written out as an
// escape: \n, \r, \t, \a, \b, \f, \v and \x1b-style \xNN for the other
// bytes below 0x20 and DEL; \u0085, \u202e (C1 controls, bidi and other
// format characters) for the rest; \xNN for each byte that is not UTF-8.
// Printable text, spaces and backslashes are left as they are.
func Esc(s string) string {
	i := 0
	for i < len(s) && s[i] >= 0x20 && s[i] < 0x7f {
		i++
	}
	if i == len(s) {
		return s // plain ASCII: the common case costs no allocation
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for i < len(s) {
		r, w := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && w == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x80 && (r < 0x20 || r == 0x7f):
			b.WriteString(asciiEscape(byte(r)))
		case unicode.IsPrint(r):
			b.WriteString(s[i : i+w])
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += w
	}
	return b.String()
}

func asciiEscape(c byte) string {
	switch c {
	case '\n':
		return `\n`
	case '\r':
		return `\r`
	case '\t':
		return `\t`
	case '\a':
		return `\a`
	case '\b':
		return `\b`
	case '\f':
		return `\f`
	case '\v':
		return `\v`
	}
	return fmt.Sprintf(`\x%02x`, c)
}

// Escaped is a copy of v with Esc applied to every string it holds:
// fields, slice and array elements, map keys and values, through pointers
// and interfaces. Byte slices (raw JSON) and the unexported fields of a
// struct (a time.Time's) are copied as they are.
func Escaped[T any](v T) T {
	rv := reflect.ValueOf(&v).Elem()
	return escapeValue(rv).Interface().(T)
}

func escapeValue(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.String:
		e := Esc(v.String())
		if e == v.String() {
			return v
		}
		n := reflect.New(v.Type()).Elem()
		n.SetString(e)
		return n
	case reflect.Struct:
		n := reflect.New(v.Type()).Elem()
		n.Set(v)
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				n.Field(i).Set(escapeValue(v.Field(i)))
			}
		}
		return n
	case reflect.Slice:
		if v.IsNil() || v.Type().Elem().Kind() == reflect.Uint8 {
			return v
		}
		n := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			n.Index(i).Set(escapeValue(v.Index(i)))
		}
		return n
	case reflect.Array:
		n := reflect.New(v.Type()).Elem()
		for i := range v.Len() {
			n.Index(i).Set(escapeValue(v.Index(i)))
		}
		return n
	case reflect.Map:
		if v.IsNil() {
			return v
		}
		n := reflect.MakeMapWithSize(v.Type(), v.Len())
		it := v.MapRange()
		for it.Next() {
			n.SetMapIndex(escapeValue(it.Key()), escapeValue(it.Value()))
		}
		return n
	case reflect.Pointer:
		if v.IsNil() {
			return v
		}
		n := reflect.New(v.Type().Elem())
		n.Elem().Set(escapeValue(v.Elem()))
		return n
	case reflect.Interface:
		if v.IsNil() {
			return v
		}
		n := reflect.New(v.Type()).Elem()
		n.Set(escapeValue(v.Elem()))
		return n
	}
	return v
}

// ConsoleLog is the controller's log as a person reads it at a terminal
// (controller --foreground): zerolog's console lines, in colour unless
// noColor, with every message, field name and field value escaped (Esc):
// a log line repeats recorded text (a validator's detail, a stop's).
func ConsoleLog(out io.Writer, timeFormat string, noColor bool) zerolog.ConsoleWriter {
	esc := func(i any) string {
		if i == nil {
			return ""
		}
		return Esc(fmt.Sprint(i))
	}
	return zerolog.ConsoleWriter{Out: out, TimeFormat: timeFormat, NoColor: noColor,
		FormatMessage: esc, FormatFieldValue: esc, FormatErrFieldValue: esc,
		FormatFieldName: func(i any) string { return esc(i) + "=" }}
}
