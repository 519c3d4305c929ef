package loadgen

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// A manifest is a JSON-lines file, one request per line, in the order the
// requests are sent. Each line is an object:
//
//	{"id": "P01-000000",             // unique request id
//	 "prompt_token_ids": [17, 934],  // the prompt as token ids, or
//	 "prompt": "text",               // the prompt as text (one of the two)
//	 "input_tokens": 2,              // expected prompt tokens
//	 "output_tokens": 64,            // output tokens to request
//	 "arrival": "steady"}            // arrival class, the same on every line
//
// Other keys (such as "prefix_group") are allowed and ignored. The
// manifest is read once at start: its SHA-256 is taken over the very bytes
// parsed, as they are read, and every line is checked. A prompt is read
// again from the file only when its request is built, and never written
// anywhere else; the bytes read back must have the SHA-256 the prompt had
// at the start, so that what is sent is what was hashed even if the file
// is rewritten in place during the run (ErrManifestChanged).

// ErrManifestChanged: a prompt read back from the manifest differs from
// the bytes hashed at the start; the request is not sent.
var ErrManifestChanged = errors.New("the manifest changed since the start")

// MaxLineBytes bounds one manifest line (a 32,768-token prompt of ids is
// under 256 KiB).
const MaxLineBytes = 16 << 20

// Manifest is an opened, checked manifest.
type Manifest struct {
	f *os.File
	// SHA256 is the hex SHA-256 of the file's bytes.
	SHA256 string
	// Arrival is the class every line names.
	Arrival Arrival
	// TokenIDs is true when prompts are token ids, false when text.
	TokenIDs bool
	rows     []row
}

// row is what the manifest keeps of a line in memory: where it is and its
// counts, never its prompt.
type row struct {
	// off is where the prompt's raw JSON value (an array of ids or a
	// string) starts in the file, n its length: a request's prompt is read
	// back without decoding its line.
	off          int64
	n            int32
	inputTokens  int32
	outputTokens int32
	id           string
	// sum is the SHA-256 of the prompt's bytes as parsed at the start.
	sum [sha256.Size]byte
}

// manifestLine is one line as decoded.
type manifestLine struct {
	ID             string          `json:"id"`
	Prompt         json.RawMessage `json:"prompt"`
	PromptTokenIDs json.RawMessage `json:"prompt_token_ids"`
	InputTokens    *int            `json:"input_tokens"`
	OutputTokens   *int            `json:"output_tokens"`
	Arrival        string          `json:"arrival"`
}

// OpenManifest reads and checks the manifest at path. Errors name the line
// but never quote a prompt.
func OpenManifest(path string) (*Manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	m := &Manifest{f: f}
	if err := m.scan(); err != nil {
		f.Close()
		return nil, fmt.Errorf("manifest %s: %w", path, err)
	}
	return m, nil
}

func (m *Manifest) scan() error {
	h := sha256.New()
	br := bufio.NewReaderSize(io.TeeReader(m.f, h), 1<<20)
	ids := map[string]int{}
	var off int64
	arrival := ""
	var long []byte
	for lineNo := 1; ; lineNo++ {
		line, err := readLine(br, &long)
		if len(line) == 0 && err == io.EOF {
			break
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("line %d: %w", lineNo, err)
		}
		n := len(line)
		body := bytes.TrimRight(line, "\r\n")
		if len(bytes.TrimSpace(body)) == 0 {
			return fmt.Errorf("line %d is empty", lineNo)
		}
		l, poff, tokenIDs, err := decodeLine(body)
		if err != nil {
			return fmt.Errorf("line %d: %w", lineNo, err)
		}
		if lineNo == 1 {
			m.TokenIDs = tokenIDs
			arrival = l.Arrival
			if m.Arrival, err = ParseArrival(l.Arrival); err != nil {
				return fmt.Errorf("line 1: %w", err)
			}
		} else {
			if tokenIDs != m.TokenIDs {
				return fmt.Errorf("line %d: mixes token-id and text prompts", lineNo)
			}
			if l.Arrival != arrival {
				return fmt.Errorf("line %d: arrival %q, but line 1 says %q (one class per manifest)", lineNo, l.Arrival, arrival)
			}
		}
		if prev, dup := ids[l.ID]; dup {
			return fmt.Errorf("line %d: id %q repeats line %d", lineNo, l.ID, prev)
		}
		ids[l.ID] = lineNo
		plen := len(l.Prompt)
		if tokenIDs {
			plen = len(l.PromptTokenIDs)
		}
		if poff == 0 {
			if poff, plen, err = promptSpan(body, l, tokenIDs); err != nil {
				return fmt.Errorf("line %d: %w", lineNo, err)
			}
		}
		m.rows = append(m.rows, row{off: off + int64(poff), n: int32(plen), inputTokens: int32(*l.InputTokens), outputTokens: int32(*l.OutputTokens), id: l.ID,
			sum: sha256.Sum256(body[poff : poff+plen])})
		off += int64(n)
		if err == io.EOF {
			break
		}
	}
	if len(m.rows) == 0 {
		return errors.New("no requests")
	}
	m.SHA256 = hex.EncodeToString(h.Sum(nil))
	return nil
}

// promptSpan locates the prompt's raw value in the line: after its key,
// the first occurrence of the bytes json.Unmarshal gave for it (a raw
// value is a verbatim copy of the line's bytes).
func promptSpan(body []byte, l manifestLine, tokenIDs bool) (int, int, error) {
	key, raw := []byte(`"prompt"`), []byte(l.Prompt)
	if tokenIDs {
		key, raw = []byte(`"prompt_token_ids"`), []byte(l.PromptTokenIDs)
	}
	for from := 0; ; {
		k := bytes.Index(body[from:], key)
		if k < 0 {
			return 0, 0, errors.New("cannot locate the prompt in the line")
		}
		after := from + k + len(key)
		rest := bytes.TrimLeft(body[after:], " \t")
		if len(rest) > 0 && rest[0] == ':' {
			start := len(body) - len(rest) + 1
			if v := bytes.Index(body[start:], raw); v >= 0 && len(bytes.TrimSpace(body[start:start+v])) == 0 {
				return start + v, len(raw), nil
			}
		}
		from = after
	}
}

// readLine reads one line of up to MaxLineBytes, with its newline. A line
// that fits the reader's buffer is returned in place, valid until the next
// read; a longer one is gathered in *long.
func readLine(br *bufio.Reader, long *[]byte) ([]byte, error) {
	chunk, err := br.ReadSlice('\n')
	if err != bufio.ErrBufferFull {
		return chunk, err
	}
	buf := append((*long)[:0], chunk...)
	defer func() { *long = buf[:0] }()
	for {
		chunk, err := br.ReadSlice('\n')
		buf = append(buf, chunk...)
		if len(buf) > MaxLineBytes {
			return nil, fmt.Errorf("longer than %d bytes", MaxLineBytes)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return buf, err
	}
}

// decodeLine reads and checks one line: through scanLine where it reads
// the line, else encoding/json. promptOff is where the prompt's value
// starts in body, 0 when not known (then promptSpan finds it); tokenIDs
// reports which prompt field the line has.
func decodeLine(body []byte) (l manifestLine, promptOff int, tokenIDs bool, err error) {
	l, promptOff, ok := scanLine(body)
	if !ok {
		if l, err = decodeLineJSON(body); err != nil {
			return l, 0, false, err
		}
		promptOff = 0
	}
	tokenIDs, err = checkLine(l)
	return l, promptOff, tokenIDs, err
}

// decodeLineJSON decodes a line with encoding/json.
func decodeLineJSON(body []byte) (manifestLine, error) {
	var l manifestLine
	if err := json.Unmarshal(body, &l); err != nil {
		return l, errors.New("not a JSON object of a request")
	}
	return l, nil
}

// checkLine checks a decoded line's fields; tokenIDs reports which prompt
// field it has.
func checkLine(l manifestLine) (bool, error) {
	switch {
	case l.ID == "":
		return false, errors.New("no id")
	case l.InputTokens == nil || *l.InputTokens < 0:
		return false, errors.New("input_tokens missing or negative")
	case l.OutputTokens == nil || *l.OutputTokens < 1:
		return false, errors.New("output_tokens missing or below 1")
	case (len(l.Prompt) == 0) == (len(l.PromptTokenIDs) == 0):
		return false, errors.New("want exactly one of prompt and prompt_token_ids")
	}
	if len(l.PromptTokenIDs) > 0 {
		n, ok := countIDs(l.PromptTokenIDs)
		if !ok {
			return false, errors.New("prompt_token_ids is not an array of non-negative integers")
		}
		if n != *l.InputTokens {
			return false, fmt.Errorf("prompt_token_ids has %d ids, input_tokens says %d", n, *l.InputTokens)
		}
		return true, nil
	}
	if len(l.Prompt) == 0 || l.Prompt[0] != '"' {
		return false, errors.New("prompt is not a string")
	}
	return false, nil
}

// countIDs counts the elements of a JSON array of non-negative integers
// without decoding it.
func countIDs(raw json.RawMessage) (int, bool) {
	b := bytes.TrimSpace(raw)
	if len(b) < 2 || b[0] != '[' || b[len(b)-1] != ']' {
		return 0, false
	}
	b = b[1 : len(b)-1]
	n, digits := 0, false
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			digits = true
		case c == ',':
			if !digits {
				return 0, false
			}
			n++
			digits = false
		case c == ' ' || c == '\n' || c == '\t' || c == '\r':
		default:
			return 0, false
		}
	}
	if digits {
		n++
	} else if n > 0 {
		return 0, false // a trailing comma
	}
	return n, true
}

// Len is the number of requests in the manifest.
func (m *Manifest) Len() int { return len(m.rows) }

// ID, InputTokens and OutputTokens describe request i.
func (m *Manifest) ID(i int) string        { return m.rows[i].id }
func (m *Manifest) InputTokens(i int) int  { return int(m.rows[i].inputTokens) }
func (m *Manifest) OutputTokens(i int) int { return int(m.rows[i].outputTokens) }

// prompt reads request i's prompt back from the file, as raw JSON (an
// array of ids or a string), without decoding it, and checks that it is
// the bytes parsed at the start.
func (m *Manifest) prompt(i int) (json.RawMessage, error) {
	r := m.rows[i]
	buf := make([]byte, r.n)
	if _, err := m.f.ReadAt(buf, r.off); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: request %d (line %d) is past the file's end", ErrManifestChanged, i, i+1)
		}
		return nil, fmt.Errorf("manifest: read request %d: %w", i, err)
	}
	if sha256.Sum256(buf) != r.sum {
		return nil, fmt.Errorf("%w: request %d (line %d) reads other bytes than were hashed", ErrManifestChanged, i, i+1)
	}
	return buf, nil
}

// Close closes the manifest's file.
func (m *Manifest) Close() error { return m.f.Close() }
