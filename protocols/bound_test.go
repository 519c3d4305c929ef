package protocols

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestRunCountBoundRefusesBeforeExpanding: a short protocol that asks for
// a billion repeats, or a matrix whose axes multiply past MaxRuns, is
// refused by the count, naming file, line and field; the builder never
// made a run (b.runs stays empty), so the refusal costs no memory.
func TestRunCountBoundRefusesBeforeExpanding(t *testing.T) {
	mini := readMini(t)
	var axes, values strings.Builder
	for i := range 6 {
		fmt.Fprintf(&axes, "  - name: ax%d\n    values: [", i)
		fmt.Fprintf(&values, " ax%d: [", i)
		for j := range 10 {
			fmt.Fprintf(&axes, "{id: v%d}, ", j)
			fmt.Fprintf(&values, "v%d, ", j)
		}
		axes.WriteString("]\n")
		values.WriteString("],")
	}
	wide := strings.Replace(mini, "axes:\n", "axes:\n"+axes.String(), 1)
	wide = strings.Replace(wide, "matrix: {pattern: [A, B]}", "matrix: {pattern: [A, B],"+values.String()+"}", 1)
	for _, tc := range []struct {
		name, text, field string
		line              int
	}{
		{"repeats", strings.Replace(mini, "    loads: [sat, mod]", "    loads: [sat, mod]\n    repeats: 1000000000", 1), "phases[0].repeats", 34},
		{"axes", wide, "phases[0].matrix", 44},
		{"repeats past int", strings.Replace(mini, "    loads: [sat, mod]", "    loads: [sat, mod]\n    repeats: 9223372036854775807", 1), "phases[0].repeats", 34},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &collector{file: "huge.yaml"}
			doc := parseDoc(c, []byte(tc.text))
			var p Protocol
			(&decoder{c: c}).decode(doc.Content[0], reflectValue(&p), "")
			b := newBuilder(c, &p, Options{})
			b.validate()
			if b.checkRunCount() {
				t.Fatal("the count passed")
			}
			if len(b.runs) != 0 {
				t.Fatalf("%d runs built before the refusal", len(b.runs))
			}
			var ps *Problems
			if err := c.err(); !errors.As(err, &ps) || len(ps.List) != 1 {
				t.Fatalf("problems: %v", err)
			}
			pr := ps.List[0]
			if pr.File != "huge.yaml" || pr.Field != tc.field || pr.Pos.Line != tc.line || !strings.Contains(pr.Msg, fmt.Sprintf("at most %d", MaxRuns)) {
				t.Fatalf("problem %+v", pr)
			}
			if _, err := PlanBytes("huge.yaml", []byte(tc.text), Options{}); !errors.As(err, &ps) || ps.List[0] != pr {
				t.Fatalf("PlanBytes: %v", err)
			}
		})
	}
}

// TestRunCountBoundAtTheLimit: exactly MaxRuns runs plan; one more does not.
func TestRunCountBoundAtTheLimit(t *testing.T) {
	mini := readMini(t)
	// 2 cells x 2 loads x repeats
	for _, tc := range []struct {
		repeats int
		ok      bool
	}{{MaxRuns / 4, true}, {MaxRuns/4 + 1, false}} {
		c := &collector{file: "edge.yaml"}
		text := strings.Replace(mini, "    loads: [sat, mod]", fmt.Sprintf("    loads: [sat, mod]\n    repeats: %d", tc.repeats), 1)
		doc := parseDoc(c, []byte(text))
		var p Protocol
		(&decoder{c: c}).decode(doc.Content[0], reflectValue(&p), "")
		b := newBuilder(c, &p, Options{})
		b.validate()
		if got := b.checkRunCount(); got != tc.ok {
			t.Fatalf("repeats %d: count ok %v, want %v (%v)", tc.repeats, got, tc.ok, c.err())
		}
	}
}
