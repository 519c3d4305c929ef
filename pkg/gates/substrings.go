package gates

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
)

// SubstringPrefixLen is how much of each private value PrivateSubstrings
// keeps: the first 64 bytes (cut back to a character boundary), or minLen
// when that is longer. A prefix long enough to be specific and short
// enough to survive a log that prints only the start of a prompt.
const SubstringPrefixLen = 64

// privateKey reports whether the strings under a manifest key are private
// text: prompts, chat messages, and generated or reference outputs.
func privateKey(k string) bool {
	switch k {
	case "prompt", "prompts", "messages", "content", "text", "generated_text",
		"completion", "response", "output", "input", "query", "system", "instruction":
		return true
	}
	return false
}

// PrivateSubstrings derives the substrings the privacy scan looks for from
// a private input file, without copying the file anywhere.
//
// A file whose first non-blank byte is '{' or '[' is read as JSON: one
// document, a top-level array (read element by element), or JSON lines
// (one value at a time). Every string at any depth under a private key
// (prompt, prompts, messages, content, text, generated_text, completion,
// response, output, input, query, system, instruction) gives its prefix.
// If the first value does not parse, the file is read as text; a later
// value that does not parse is an error, returned with what was found.
//
// In text, each line (trimmed of white space) gives its prefix.
//
// A prefix is the first SubstringPrefixLen bytes, or minLen bytes when
// minLen is larger, and is kept only if it is at least minLen bytes long.
// minLen below MinSubstringLen is raised to it. The result holds at most
// max distinct substrings, the first found; reading stops there.
func PrivateSubstrings(path string, minLen int, max int) ([][]byte, error) {
	if max <= 0 {
		return nil, fmt.Errorf("private substrings of %s: max must be positive, got %d", path, max)
	}
	minLen = maxInt(minLen, MinSubstringLen)
	c := &collector{minLen: minLen, window: maxInt(minLen, SubstringPrefixLen), max: max, seen: map[string]bool{}}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("private substrings: %w", err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	if first := firstNonBlank(br); first == '{' || first == '[' {
		ok, err := c.json(br, first == '[')
		if err != nil {
			return c.out, fmt.Errorf("private substrings of %s: %w", path, err)
		}
		if ok {
			return c.out, nil
		}
		c.out, c.seen = nil, map[string]bool{}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return nil, fmt.Errorf("private substrings of %s: %w", path, err)
		}
		br.Reset(f)
	}
	if err := c.text(br); err != nil {
		return c.out, fmt.Errorf("private substrings of %s: %w", path, err)
	}
	return c.out, nil
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

type collector struct {
	minLen, window, max int
	seen                map[string]bool
	out                 [][]byte
}

func (c *collector) full() bool { return len(c.out) >= c.max }

func (c *collector) add(b []byte) {
	if c.full() {
		return
	}
	p := runePrefix(b, c.window)
	if len(p) < c.minLen || c.seen[string(p)] {
		return
	}
	c.seen[string(p)] = true
	c.out = append(c.out, bytes.Clone(p))
}

// firstNonBlank peeks at the first byte that is not white space, or 0.
func firstNonBlank(br *bufio.Reader) byte {
	for n := 1; ; n++ {
		b, err := br.Peek(n)
		if len(b) < n {
			return 0
		}
		if c := b[n-1]; !isJSONSpace(c) {
			return c
		}
		if err != nil || n >= br.Size() {
			return 0
		}
	}
}

// json reads JSON values; ok is false when the first one does not parse.
func (c *collector) json(r io.Reader, array bool) (ok bool, err error) {
	dec := json.NewDecoder(r)
	if array {
		if _, err := dec.Token(); err != nil {
			return false, nil
		}
		for dec.More() && !c.full() {
			var v any
			if err := dec.Decode(&v); err != nil {
				return ok, ignoreFirst(ok, err)
			}
			ok = true
			c.walk(v, false)
		}
		if !ok && !c.full() {
			// An empty array, or one that ended before its first value.
			if _, err := dec.Token(); err != nil {
				return false, nil
			}
		}
		return true, nil
	}
	for !c.full() {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return true, nil
		}
		if err != nil {
			return ok, ignoreFirst(ok, err)
		}
		ok = true
		c.walk(v, false)
	}
	return true, nil
}

// ignoreFirst drops the error of the first value: the file is then read
// as text instead.
func ignoreFirst(parsedOne bool, err error) error {
	if !parsedOne {
		return nil
	}
	return err
}

func (c *collector) walk(v any, private bool) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			c.walk(x[k], private || privateKey(k))
		}
	case []any:
		for _, e := range x {
			c.walk(e, private)
		}
	case string:
		if private {
			c.add([]byte(x))
		}
	}
}

// text takes the prefix of each line, reading long lines in pieces.
func (c *collector) text(br *bufio.Reader) error {
	var line []byte
	for !c.full() {
		piece, err := br.ReadSlice('\n')
		if len(line) == 0 {
			piece = bytes.TrimLeft(piece, " \t\r\n")
		}
		if len(line) < c.window+1 {
			// Keep one byte past the window so runePrefix can see the
			// character boundary.
			line = append(line, piece[:min(len(piece), c.window+1-len(line))]...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if t := bytes.TrimSpace(line); len(t) > 0 {
			c.add(t)
		}
		line = line[:0]
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return nil
}
