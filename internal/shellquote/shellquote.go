// Package shellquote writes words as a POSIX shell reads them back: the
// commands the controller logs (commands.log) and the commands it tells
// an operator to run (hints).
package shellquote

import "strings"

// Word quotes s for a POSIX shell, as one word: unchanged when every
// character is one a shell never treats specially, in single quotes
// otherwise.
func Word(s string) string {
	if s == "" {
		return "''"
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("@%+=:,./_-", c)) {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
}

// Join quotes each of argv with Word and joins them with spaces: a line a
// shell splits back into argv.
func Join(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = Word(a)
	}
	return strings.Join(out, " ")
}
