package contract

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"

	"warden/pkg/jsonscan"
)

// Layer-1 schema v1: the one home of the data line's fields (seed 002,
// "Layer 1: always on": "Each run must produce exactly one schema-v1
// JSONL ... Every line must msgspec-decode"). docs/validators.md lists
// the same fields in one table; TestLayer1SchemaDoc keeps the two equal.
//
// A data line decodes as msgspec decodes a Struct with these fields and
// its default settings: every field is required; a JSON null is not a
// value of any of them; an integer field takes only an integer literal
// (no fraction, no exponent) within int64; a number field takes any JSON
// number; a boolean only true or false; a string only a string; an
// integer array only an array of integer literals. Fields the schema does
// not name are allowed and not read (msgspec's default,
// forbid_unknown_fields=False), so that a later patch may add counters
// without breaking schema-v1 readers. "schema" must be 1.

// Layer1SchemaVersion is the value of a schema-v1 data line's "schema".
const Layer1SchemaVersion = 1

// Layer1Record is one data line of a schema-v1 Layer-1 stream: one
// engine scheduler step. The json tag is the field's name on the line.
type Layer1Record struct {
	Schema int64 `json:"schema"` // 1
	Step   int64 `json:"step"`   // the engine step index, unique and contiguous
	// ModelExecuted is false for a scheduler step that ran no model
	// forward (zero scheduled tokens).
	ModelExecuted bool `json:"model_executed"`
	// step submit/complete timestamps, CLOCK_MONOTONIC nanoseconds (the
	// client's clock: loadgen's *_mono_ns)
	SubmitMonoNS   int64 `json:"submit_mono_ns"`
	CompleteMonoNS int64 `json:"complete_mono_ns"`
	// scheduled requests, prefill/decode batch and token counts
	NumScheduledReqs int64 `json:"num_scheduled_reqs"`
	NumPrefillReqs   int64 `json:"num_prefill_reqs"`
	NumDecodeReqs    int64 `json:"num_decode_reqs"`
	PrefillTokens    int64 `json:"prefill_tokens"`
	DecodeTokens     int64 `json:"decode_tokens"`
	// chunked-prefill class of the step and chunk-size histogram (bucket
	// counts; the bucket edges are the writer's)
	ChunkedPrefillClass string  `json:"chunked_prefill_class"`
	ChunkSizeHist       []int64 `json:"chunk_size_hist"`
	// context-length histogram of the scheduled requests (bucket counts)
	ContextLenHist []int64 `json:"context_len_hist"`
	// waiting/running/deferred queues after scheduling, preemptions in
	// this step, KV usage (fraction of blocks in use), prefix counters
	// (tokens queried and hit in the prefix cache)
	NumWaitingReqs     int64   `json:"num_waiting_reqs"`
	NumRunningReqs     int64   `json:"num_running_reqs"`
	NumDeferredReqs    int64   `json:"num_deferred_reqs"`
	NumPreemptions     int64   `json:"num_preemptions"`
	KVCacheUsage       float64 `json:"kv_cache_usage"`
	PrefixCacheQueries int64   `json:"prefix_cache_queries"`
	PrefixCacheHits    int64   `json:"prefix_cache_hits"`
	// CUDA-graph hit, runtime mode (vLLM's CUDAGraphMode name: NONE,
	// PIECEWISE, FULL), unpadded tokens, bucket tokens, padding
	CUDAGraphHit   bool   `json:"cuda_graph_hit"`
	RuntimeMode    string `json:"runtime_mode"`
	UnpaddedTokens int64  `json:"unpadded_tokens"`
	BucketTokens   int64  `json:"bucket_tokens"`
	PaddingTokens  int64  `json:"padding_tokens"`
}

// Layer1Field is one field of schema v1: its name on the line and its
// JSON type (integer, number, boolean, string, integer-array).
type Layer1Field struct {
	Name string
	Type string
}

// Layer1Fields lists schema v1's fields in Layer1Record's order, read
// from its json tags: the list has no second copy.
var Layer1Fields = layer1Fields()

func layer1Fields() []Layer1Field {
	t := reflect.TypeFor[Layer1Record]()
	out := make([]Layer1Field, 0, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		var typ string
		switch f.Type.Kind() {
		case reflect.Int64:
			typ = "integer"
		case reflect.Float64:
			typ = "number"
		case reflect.Bool:
			typ = "boolean"
		case reflect.String:
			typ = "string"
		case reflect.Slice:
			typ = "integer-array"
		default:
			panic("layer1 schema: field " + f.Name + " has no JSON type")
		}
		out = append(out, Layer1Field{Name: f.Tag.Get("json"), Type: typ})
	}
	return out
}

// layer1Index maps a schema-v1 field's name to its index in Layer1Fields;
// footerField is the index of the footer's "footer" key.
var (
	layer1Index = func() map[string]int {
		m := make(map[string]int, len(Layer1Fields)+1)
		for i, f := range Layer1Fields {
			m[f.Name] = i
		}
		m["footer"] = footerField
		return m
	}()
	footerField = len(Layer1Fields)
)

// layer1Line is one line of a Layer-1 stream, read in a single pass: the
// whole line is checked to be one JSON object (jsonscan, as strict as
// encoding/json), and the value of each key the schema or the footer
// names is kept as its span of the line (the last one when a key
// repeats, as a decoder into a map or a struct keeps it). Keys are
// matched exactly, as msgspec matches them; other keys are validated and
// skipped.
type layer1Line struct {
	line []byte
	// at holds, by field index (footerField last), the span of the
	// field's value in line; hi 0 when the key is absent.
	at []byteSpan
	// ints holds the value of each integer field whose value is an
	// integer literal within int64 (isInt says which); for an
	// integer-array field isInt says that its value is an array of such
	// literals.
	ints  []int64
	isInt []bool
	next  int // the index the next key is expected to have
}

type byteSpan struct{ lo, hi int }

// val is field i's value, nil when absent.
func (l *layer1Line) val(i int) []byte {
	if l.at[i].hi == 0 {
		return nil
	}
	return l.line[l.at[i].lo:l.at[i].hi]
}

// layer1Integer and layer1IntArray mark the integer and the
// integer-array fields of Layer1Fields.
var layer1Integer, layer1IntArray = layer1Typed("integer"), layer1Typed("integer-array")

func layer1Typed(typ string) []bool {
	out := make([]bool, len(Layer1Fields))
	for i, f := range Layer1Fields {
		out[i] = f.Type == typ
	}
	return out
}

// parse reads line, already trimmed of surrounding whitespace. why says
// why it is not one JSON object ("" when it is).
func (l *layer1Line) parse(line []byte) (why string) {
	if l.at == nil {
		l.at, l.ints, l.isInt = make([]byteSpan, footerField+1), make([]int64, footerField), make([]bool, footerField)
	}
	clear(l.at)
	l.line, l.next = line, 0
	if len(line) == 0 || line[0] != '{' {
		return "not a JSON object"
	}
	i := jsonscan.SkipSpace(line, 1)
	if i < len(line) && line[i] == '}' {
		i++
	} else {
		for {
			k := i
			if i >= len(line) || line[i] != '"' {
				return badJSON(line, i)
			}
			idx, known := l.expectedKey(line, k)
			if known {
				i = k + len(Layer1Fields[idx].Name) + 2
			} else {
				if i = jsonscan.SkipString(line, k); i < 0 {
					return badJSON(line, k)
				}
				idx, known = l.lookupKey(line[k+1 : i-1])
			}
			if i = jsonscan.SkipSpace(line, i); i >= len(line) || line[i] != ':' {
				return badJSON(line, i)
			}
			v := jsonscan.SkipSpace(line, i+1)
			if known && idx < footerField && layer1Integer[idx] && v < len(line) && (line[v] == '-' || line[v] >= '0' && line[v] <= '9') {
				i, l.ints[idx], l.isInt[idx] = jsonscan.Number(line, v)
			} else if known && idx < footerField && layer1IntArray[idx] && v < len(line) && line[v] == '[' {
				i, l.isInt[idx] = jsonscan.IntArray(line, v)
			} else {
				i = jsonscan.Skip(line, v)
				if known && idx < footerField {
					l.isInt[idx] = false
				}
			}
			if i < 0 {
				return badJSON(line, v)
			}
			if known {
				l.at[idx] = byteSpan{v, i}
			}
			if i = jsonscan.SkipSpace(line, i); i >= len(line) {
				return badJSON(line, i)
			}
			if line[i] == '}' {
				i++
				break
			}
			if line[i] != ',' {
				return badJSON(line, i)
			}
			i = jsonscan.SkipSpace(line, i+1)
		}
	}
	if i != len(line) {
		return badJSON(line, i)
	}
	return ""
}

// expectedKey reports whether the key string at line[k] (a quote) is the
// next field in the schema's order: writers emit the fields in that
// order, so the key after field i is field i+1's name, written plainly
// and followed by its closing quote. Those bytes are a valid JSON string
// (the schema's names hold no quote, backslash or control character), so
// the match alone scans the key.
func (l *layer1Line) expectedKey(line []byte, k int) (int, bool) {
	if l.next >= footerField {
		return 0, false
	}
	name := Layer1Fields[l.next].Name
	end := k + 1 + len(name)
	if end >= len(line) || line[end] != '"' || string(line[k+1:end]) != name {
		return 0, false
	}
	l.next++
	return l.next - 1, true
}

// lookupKey finds the field index of a key that is not the expected one.
// A key with escapes is unquoted first (rare: writers emit plain names).
func (l *layer1Line) lookupKey(key []byte) (int, bool) {
	if bytes.IndexByte(key, '\\') < 0 {
		idx, ok := layer1Index[string(key)]
		if ok {
			l.next = idx + 1
		}
		return idx, ok
	}
	var s string
	if json.Unmarshal(append(append([]byte{'"'}, key...), '"'), &s) != nil {
		return 0, false
	}
	idx, ok := layer1Index[s]
	return idx, ok
}

func badJSON(line []byte, at int) string {
	if at >= len(line) {
		return "does not decode: unexpected end of the line"
	}
	return fmt.Sprintf("does not decode: invalid JSON at byte %d", at+1)
}

// isFooter: the in-stream footer carries "footer": true.
func (l *layer1Line) isFooter() bool { return string(l.val(footerField)) == "true" }

// record checks the parsed line against schema v1 and fills rec; arrays
// and strings are stored only when full is set (the stream check reads
// the step alone). why says what is wrong: a missing field, a wrong type,
// an unknown schema. The indices are Layer1Fields' order;
// TestLayer1RecordRoundTrip sets every field to a distinct value and
// reads it back.
func (l *layer1Line) record(rec *Layer1Record, full bool) (why string) {
	for i, f := range Layer1Fields {
		raw := l.val(i)
		if raw == nil {
			return "lacks required field " + f.Name
		}
		// integers and integer arrays were typed while scanning
		if typed := layer1Integer[i] || layer1IntArray[i]; typed && !l.isInt[i] || !typed && !hasType(raw, f.Type) {
			return fmt.Sprintf("field %s is %s, not %s", f.Name, describeJSON(raw), f.Type)
		}
	}
	v := func(i int) []byte { return l.val(i) }
	in := func(i int) int64 { return l.ints[i] }
	rec.Schema, rec.Step, rec.ModelExecuted = in(0), in(1), v(2)[0] == 't'
	rec.SubmitMonoNS, rec.CompleteMonoNS = in(3), in(4)
	rec.NumScheduledReqs, rec.NumPrefillReqs, rec.NumDecodeReqs, rec.PrefillTokens, rec.DecodeTokens = in(5), in(6), in(7), in(8), in(9)
	rec.NumWaitingReqs, rec.NumRunningReqs, rec.NumDeferredReqs, rec.NumPreemptions = in(13), in(14), in(15), in(16)
	if kv := v(17); full || len(kv) > 300 || bytes.ContainsAny(kv, "eE") {
		// a number without an exponent and of at most 300 digits is within
		// float64's range: only others need parsing when the value is not kept
		x, err := strconv.ParseFloat(string(kv), 64)
		if err != nil {
			return fmt.Sprintf("does not decode: field kv_cache_usage: number %s out of range", kv)
		}
		rec.KVCacheUsage = x
	}
	rec.PrefixCacheQueries, rec.PrefixCacheHits, rec.CUDAGraphHit = in(18), in(19), v(20)[0] == 't'
	rec.UnpaddedTokens, rec.BucketTokens, rec.PaddingTokens = in(22), in(23), in(24)
	if full {
		rec.ChunkSizeHist, rec.ContextLenHist = intArray(v(11)), intArray(v(12))
		if err := json.Unmarshal(v(10), &rec.ChunkedPrefillClass); err != nil {
			return "does not decode: field chunked_prefill_class: " + err.Error()
		}
		if err := json.Unmarshal(v(21), &rec.RuntimeMode); err != nil {
			return "does not decode: field runtime_mode: " + err.Error()
		}
	}
	if rec.Schema != Layer1SchemaVersion {
		return fmt.Sprintf("unknown schema %d (schema-v1 wants %d)", rec.Schema, Layer1SchemaVersion)
	}
	return ""
}

// runtimeMode is the record's runtime_mode, read from its span: vLLM's
// three names without an allocation, anything else decoded (a string
// record accepted).
func (l *layer1Line) runtimeMode() string {
	raw := l.val(21)
	for _, m := range [...]string{"FULL", "PIECEWISE", "NONE"} {
		if len(raw) == len(m)+2 && string(raw[1:len(raw)-1]) == m {
			return m
		}
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return string(raw)
	}
	return s
}

// hasType reports whether raw, one valid JSON value, is of the schema
// type typ: number, boolean or string (integers and integer arrays are
// typed while the line is scanned).
func hasType(raw []byte, typ string) bool {
	switch typ {
	case "number":
		c := raw[0]
		return c == '-' || (c >= '0' && c <= '9')
	case "boolean":
		return string(raw) == "true" || string(raw) == "false"
	case "string":
		return raw[0] == '"'
	}
	return false
}

// arrayItems yields the items of raw, a valid JSON array, as spans.
func arrayItems(raw []byte) func(func([]byte) bool) {
	return func(yield func([]byte) bool) {
		if len(raw) == 0 || raw[0] != '[' {
			return
		}
		i := jsonscan.SkipSpace(raw, 1)
		for i < len(raw) && raw[i] != ']' {
			j := jsonscan.Skip(raw, i)
			if j < 0 || !yield(raw[i:j]) {
				return
			}
			i = jsonscan.SkipSpace(raw, j)
			if i < len(raw) && raw[i] == ',' {
				i = jsonscan.SkipSpace(raw, i+1)
			}
		}
	}
}

// intArray decodes an array hasType accepted as integer-array.
func intArray(raw []byte) []int64 {
	out := []int64{}
	for x := range arrayItems(raw) {
		n, _ := jsonscan.Int(x)
		out = append(out, n)
	}
	return out
}

func describeJSON(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "empty"
	}
	switch c := raw[0]; {
	case c == 'n':
		return "null"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == '"':
		return "a string"
	case c == '[':
		return "an array (not of integers)"
	case c == '{':
		return "an object"
	case bytes.ContainsAny(raw, ".eE"):
		return "a non-integer number " + string(raw)
	default:
		return "the number " + string(raw)
	}
}

// ReadLayer1Records reads the data lines of a schema-v1 stream, in file
// order, for the checks that use the records' figures (warm-up
// stabilization, recovery). The footer line is skipped; a line that is not
// schema-v1, or a partial last line, is an error: the caller fails the
// stream as the Layer-1 check would.
func ReadLayer1Records(path string) ([]Layer1Record, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open Layer-1 stream: %w", err)
	}
	defer fh.Close()
	lr := newLineReader(fh)
	var recs []Layer1Record
	var l layer1Line
	for n := 1; ; n++ {
		line, err := lr.next()
		if len(line) > 0 && line[len(line)-1] != '\n' && (len(trimSpace(line)) > 0 || lr.tailText) {
			return recs, fmt.Errorf("%s ends in a partial line", path)
		}
		if lr.over {
			return recs, fmt.Errorf("%s line %d: longer than the %d MiB a line may hold", path, n, maxLine>>20)
		}
		if t := trimSpace(line); len(t) > 0 {
			if why := l.parse(t); why != "" {
				return recs, fmt.Errorf("%s line %d: %s", path, n, why)
			}
			if !l.isFooter() {
				var rec Layer1Record
				if why := l.record(&rec, true); why != "" {
					return recs, fmt.Errorf("%s line %d: %s", path, n, why)
				}
				recs = append(recs, rec)
			}
		}
		if errors.Is(err, io.EOF) {
			return recs, nil
		}
		if err != nil {
			return recs, fmt.Errorf("read %s: %w", path, err)
		}
	}
}

// maxLine bounds a Layer-1 line. A schema-v1 record is a few hundred
// bytes; a longer line is not held in memory but counted as one that
// does not decode (its bytes are read and dropped up to its newline).
const maxLine = 64 << 20

// lineReader yields a stream's lines, each with its newline (the last may
// lack it), without copying a line that fits its 1 MiB buffer: a slice is
// valid until the next call. A line over maxLine comes back as its first
// bytes, with over set and n its whole length.
type lineReader struct {
	br   *bufio.Reader
	long []byte
	over bool  // the last line was longer than maxLine
	n    int64 // the last line's length in bytes
	// tailText: the part of an over-long line not held has a byte other
	// than JSON whitespace
	tailText bool
}

func newLineReader(r io.Reader) *lineReader { return &lineReader{br: bufio.NewReaderSize(r, 1<<20)} }

func (lr *lineReader) next() ([]byte, error) {
	line, err := lr.br.ReadSlice('\n')
	lr.over, lr.tailText, lr.n = false, false, int64(len(line))
	if err != bufio.ErrBufferFull {
		return line, err
	}
	lr.long = append(lr.long[:0], line...)
	for err == bufio.ErrBufferFull {
		line, err = lr.br.ReadSlice('\n')
		lr.n += int64(len(line))
		if len(lr.long)+len(line) > maxLine {
			lr.over = true
			lr.tailText = lr.tailText || len(trimSpace(line)) > 0
			continue
		}
		lr.long = append(lr.long, line...)
	}
	if lr.over && len(line) > 0 && line[len(line)-1] == '\n' {
		lr.long = append(lr.long, '\n') // it ends: a complete line, too long to read
	}
	return lr.long, err
}

// trimSpace trims JSON's whitespace (space, tab, CR, LF) from both ends of
// a line, and nothing else: a form feed or a no-break space is not JSON
// whitespace, so a line holding one outside its object does not decode.
func trimSpace(p []byte) []byte {
	lo, hi := 0, len(p)
	for lo < hi && isJSONSpace(p[lo]) {
		lo++
	}
	for hi > lo && isJSONSpace(p[hi-1]) {
		hi--
	}
	return p[lo:hi]
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
