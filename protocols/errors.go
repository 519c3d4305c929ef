package protocols

import (
	"fmt"
	"sort"
	"strings"
)

// MaxErrors is how many problems one validation reports before it stops
// listing them; the rest are counted in the last line.
const MaxErrors = 50

// Pos is a position in a protocol file, 1-based. A zero Pos means the
// position is unknown.
type Pos struct {
	Line   int `json:"line"`
	Column int `json:"column"`
}

// Problem is one thing wrong with a protocol file: where, which field, and
// what, in words an operator can act on.
type Problem struct {
	File  string `json:"file"`
	Pos   Pos    `json:"pos"`
	Field string `json:"field"` // path of the field, e.g. "slots[2].cpus"
	Msg   string `json:"message"`
	// Input says the problem is an input this machine lacks (a file, a
	// manifest, an executable, a prior verdict), which Options.CheckInputs
	// looks for: controller plan --check-inputs=false plans without them.
	Input bool `json:"input,omitempty"`
}

// Where is FILE:LINE:COL, as far as the position is known.
func (p Problem) Where() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Pos.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Pos.Line)
		if p.Pos.Column > 0 {
			fmt.Fprintf(&b, ":%d", p.Pos.Column)
		}
	}
	return b.String()
}

func (p Problem) Error() string {
	var b strings.Builder
	b.WriteString(p.Where())
	b.WriteString(": ")
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Inputs counts the problems that are inputs this machine lacks.
func (ps *Problems) Inputs() int {
	n := 0
	for _, p := range ps.List {
		if p.Input {
			n++
		}
	}
	return n
}

// Problems is every problem found in one protocol, in file order. It is
// the error returned by Load and Plan when a protocol is not valid; use
// errors.As to get at the list.
type Problems struct {
	List    []Problem
	Omitted int // problems found beyond MaxErrors
}

func (ps *Problems) Error() string {
	lines := make([]string, 0, len(ps.List)+1)
	for _, p := range ps.List {
		lines = append(lines, p.Error())
	}
	if ps.Omitted > 0 {
		lines = append(lines, fmt.Sprintf("... and %d more problems not shown", ps.Omitted))
	}
	return strings.Join(lines, "\n")
}

// collector gathers problems for one file.
type collector struct {
	file  string
	list  []Problem
	seen  map[Problem]bool // a template expanded for many runs reports once
	extra int
}

func (c *collector) add(pos Pos, field, format string, args ...any) {
	c.addProblem(Problem{File: c.file, Pos: pos, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// addInput adds a problem of an input this machine lacks (Problem.Input).
func (c *collector) addInput(pos Pos, field, format string, args ...any) {
	c.addProblem(Problem{File: c.file, Pos: pos, Field: field, Msg: fmt.Sprintf(format, args...), Input: true})
}

func (c *collector) addProblem(p Problem) {
	if c.seen[p] {
		return
	}
	if c.seen == nil {
		c.seen = map[Problem]bool{}
	}
	c.seen[p] = true
	if len(c.list) >= MaxErrors {
		c.extra++
		return
	}
	c.list = append(c.list, p)
}

func (c *collector) full() bool { return len(c.list) >= MaxErrors }

func (c *collector) err() error {
	if len(c.list) == 0 {
		return nil
	}
	list := append([]Problem(nil), c.list...)
	sort.SliceStable(list, func(i, j int) bool {
		a, b := list[i].Pos, list[j].Pos
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
	return &Problems{List: list, Omitted: c.extra}
}
