package gates

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
)

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

// IndexPrivate indexes the private values of the given private input
// files for the privacy scan (PrivateIndex), without copying the files
// anywhere: every run of at least minLen bytes of any value is then found.
//
// A file whose first non-blank byte is '{' or '[' is read as JSON: one
// document, a top-level array (read element by element), or JSON lines
// (one value at a time). Every string at any depth under a private key
// (prompt, prompts, messages, content, text, generated_text, completion,
// response, output, input, query, system, instruction) is a value. If the
// first value does not parse, the file is read as text; a later value
// that does not parse is an error.
//
// In text, each line (trimmed of white space) is a value.
//
// Values shorter than minLen are counted (PrivateIndex.Short), not
// indexed. minLen below MinLeakBytesFloor is an error.
func IndexPrivate(paths []string, minLen int) (*PrivateIndex, error) {
	b := NewIndexBuilder(minLen)
	if minLen < MinLeakBytesFloor {
		return b.Build() // the error
	}
	// The values are at most as long as the files (JSON escapes only
	// shrink when decoded): one allocation of that size holds them all,
	// where growing by appending would copy them and hold two copies.
	var size int64
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil {
			size += fi.Size()
		}
	}
	if size > 0 && size <= math.MaxUint32 {
		b.text = make([]byte, 0, size)
	}
	for _, p := range paths {
		if err := collectFile(p, b); err != nil {
			return nil, err
		}
	}
	return b.Build()
}

// collectFile adds the private values of one file to b.
func collectFile(path string, b *IndexBuilder) error {
	c := &collector{b: b}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("private values: %w", err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	if first := firstNonBlank(br); first == '{' || first == '[' {
		mark := b.mark()
		ok, err := c.json(br, first == '[')
		if err != nil {
			return fmt.Errorf("private values of %s: %w", path, err)
		}
		if ok {
			return nil
		}
		b.reset(mark)
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("private values of %s: %w", path, err)
		}
		br.Reset(f)
	}
	if err := c.text(br); err != nil {
		return fmt.Errorf("private values of %s: %w", path, err)
	}
	return nil
}

type collector struct{ b *IndexBuilder }

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
		for dec.More() {
			var v any
			if err := dec.Decode(&v); err != nil {
				return ok, ignoreFirst(ok, err)
			}
			ok = true
			c.walk(v, false)
		}
		if !ok {
			// An empty array, or one that ended before its first value.
			if _, err := dec.Token(); err != nil {
				return false, nil
			}
		}
		return true, nil
	}
	for {
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
		for _, k := range slices.Sorted(maps.Keys(x)) {
			c.walk(x[k], private || privateKey(k))
		}
	case []any:
		for _, e := range x {
			c.walk(e, private)
		}
	case string:
		if private {
			c.b.Add([]byte(x))
		}
	}
}

// text takes each line, trimmed, as a value, reading long lines in
// pieces.
func (c *collector) text(br *bufio.Reader) error {
	var line []byte
	for {
		piece, err := br.ReadSlice('\n')
		line = append(line, piece...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if t := bytes.TrimSpace(line); len(t) > 0 {
			c.b.Add(t)
		}
		line = line[:0]
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
