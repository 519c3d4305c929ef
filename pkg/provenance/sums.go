package provenance

import (
	"bytes"
	"fmt"
	"strings"
)

// The index DIR/provenance/SHA256SUMS has one line per recorded input, in
// the order recorded:
//
//	<sha256>  <path>\t<role>[ private][ shard=<size>:<mtime ns>]
//
// The path is as given at start; the copy of a public input is
// DIR/provenance/files/<sha256> (CopyOf). When the path or the role holds
// a backslash, newline, carriage return or tab, the line begins with a
// backslash and those characters are written \\, \n, \r and \t (the
// convention of sha256sum, extended to tab). A hash never begins with a
// backslash, so the lines of campaigns recorded before escaping existed
// read as they always did.

var sumEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, "\r", `\r`, "\t", `\t`)

func needsEscape(s string) bool { return strings.ContainsAny(s, "\\\n\r\t") }

func writeSumLine(b *bytes.Buffer, e Entry) {
	path, role := e.Path, e.Role
	if needsEscape(path) || needsEscape(role) {
		b.WriteByte('\\')
		path, role = sumEscaper.Replace(path), sumEscaper.Replace(role)
	}
	priv := ""
	if e.Private {
		priv = " private"
	}
	fmt.Fprintf(b, "%s  %s\t%s%s%s\n", e.SHA256, path, role, priv, formatShard(e))
}

func parseSumLine(line string) (Entry, error) {
	escaped := strings.HasPrefix(line, `\`)
	rest := strings.TrimPrefix(line, `\`)
	sum, rest, ok := strings.Cut(rest, "  ")
	path, meta, ok2 := strings.Cut(rest, "\t")
	if !ok || !ok2 || !validSum(sum) {
		return Entry{}, fmt.Errorf("malformed line %q", line)
	}
	var e Entry
	meta = parseShard(meta, &e)
	role, priv := strings.CutSuffix(meta, " private")
	if escaped {
		var err error
		if path, err = unescape(path); err != nil {
			return Entry{}, fmt.Errorf("line %q: %w", line, err)
		}
		if role, err = unescape(role); err != nil {
			return Entry{}, fmt.Errorf("line %q: %w", line, err)
		}
	}
	e.Path, e.Role, e.Private, e.SHA256 = path, role, priv, sum
	return e, nil
}

func unescape(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 == len(s) {
			return "", fmt.Errorf("trailing backslash")
		}
		i++
		switch s[i] {
		case '\\':
			b.WriteByte('\\')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		default:
			return "", fmt.Errorf("unknown escape \\%c", s[i])
		}
	}
	return b.String(), nil
}

// validSum reports whether s is a hex SHA-256 in lower case, as recorded:
// only such a name is joined to the copies' directory.
func validSum(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
