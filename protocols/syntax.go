package protocols

import (
	"bytes"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxSyntaxScan bounds the lines locateSyntaxError parses prefixes for.
const maxSyntaxScan = 400

// locateSyntaxError finds where a YAML syntax error is and which field
// holds it. yaml.v3 reports a parser error at the line where the enclosing
// structure began, counted from 0: often several lines before the fault,
// and always one early. reported is that line (from "yaml: line N"), msg
// the message after it.
//
// The fault is on the first line L, at or after the reported one, such that
// the file's first L lines fail to parse with the same message: the lines
// before L parse (or fail differently, as a flow list cut short does), so
// line L is where the parser found what it could not accept. The enclosing
// field is read from the longest part of the file before line L that
// parses: the deepest mapping key or list item that starts left of line
// L's first character.
//
// It returns the line (reported when no prefix reproduces the message),
// the column of that line's first character that is not a blank (the
// parser names no column: this is where the line's content starts; 0 when
// no prefix reproduces the message) and the field path ("" when the fault
// is at the top level).
func locateSyntaxError(data []byte, reported int, msg string) (int, int, string) {
	lines := bytes.SplitAfter(data, []byte("\n"))
	line := 0
	// The fault is rarely far from where its structure began; the bound
	// keeps a huge file from costing a parse per line.
	for l := max(1, reported); l <= len(lines) && l < reported+maxSyntaxScan; l++ {
		var n yaml.Node
		err := yaml.Unmarshal(bytes.Join(lines[:l], nil), &n)
		if err != nil && strings.HasSuffix(err.Error(), msg) {
			line = l
			break
		}
	}
	if line == 0 {
		return reported, 0, ""
	}
	text := string(lines[line-1])
	col := len(text) - len(strings.TrimLeft(text, " \t")) + 1
	for l := line - 1; l > 0 && l > line-maxSyntaxScan; l-- {
		var doc yaml.Node
		if err := yaml.Unmarshal(bytes.Join(lines[:l], nil), &doc); err == nil {
			if len(doc.Content) == 0 {
				break
			}
			return line, col, enclosing(doc.Content[0], line, col, "")
		}
	}
	return line, col, ""
}

// enclosing descends from n along the last entries that start before
// line, as long as they start left of col, and returns their path.
func enclosing(n *yaml.Node, line, col int, path string) string {
	switch n.Kind {
	case yaml.MappingNode:
		var k, v *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Line < line {
				k, v = n.Content[i], n.Content[i+1]
			}
		}
		if k == nil || k.Column >= col || n.Style&yaml.FlowStyle != 0 {
			return path
		}
		return enclosing(v, line, col, join(path, k.Value))
	case yaml.SequenceNode:
		last := -1
		for i, item := range n.Content {
			if item.Line < line {
				last = i
			}
		}
		// a block item's "- " is two columns left of its content
		if last < 0 || n.Style&yaml.FlowStyle != 0 || n.Content[last].Column-2 >= col {
			return path
		}
		return enclosing(n.Content[last], line, col, path+"["+strconv.Itoa(last)+"]")
	}
	return path
}
