package protocols

import (
	"errors"
	"strings"
	"testing"
)

// A YAML syntax error is reported with its line and a column: where that
// line's content starts (the parser itself names no column).
func TestYAMLErrorColumn(t *testing.T) {
	base := readMini(t)
	for _, tc := range []struct {
		old, new  string
		line, col int
	}{
		{"    kind: standin\n", "   kind: standin\n", 14, 4},
		{"    kind: standin\n", "      kind: standin\n", 14, 7},
		{"    expected_s: 10\n    client: [standin, client, --result-dir", "    expected_s: 10\n  client: [standin, client, --result-dir", 20, 3},
	} {
		_, err := PlanBytes("bad.yaml", []byte(strings.Replace(base, tc.old, tc.new, 1)), Options{})
		var ps *Problems
		if !errors.As(err, &ps) || len(ps.List) != 1 {
			t.Fatalf("%q: %v", tc.new, err)
		}
		p := ps.List[0]
		if p.Pos.Line != tc.line || p.Pos.Column != tc.col || !strings.HasPrefix(p.Error(), "bad.yaml:"+itoa(tc.line)+":"+itoa(tc.col)+": ") {
			t.Errorf("%q: %s, want line %d column %d", tc.new, p.Error(), tc.line, tc.col)
		}
	}
}
