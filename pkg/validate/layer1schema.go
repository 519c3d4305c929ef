package validate

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

// decodeLayer1Line checks one data line, already split into its keys,
// against schema v1 and decodes it. why says what is wrong: a missing
// field, a wrong type, an unknown schema.
func decodeLayer1Line(line []byte, keys map[string]json.RawMessage) (rec Layer1Record, why string) {
	for _, f := range Layer1Fields {
		raw, ok := keys[f.Name]
		if !ok {
			return rec, "lacks required field " + f.Name
		}
		if !hasType(raw, f.Type) {
			return rec, fmt.Sprintf("field %s is %s, not %s", f.Name, describeJSON(raw), f.Type)
		}
	}
	if err := json.Unmarshal(line, &rec); err != nil {
		return rec, "does not decode: " + err.Error()
	}
	if rec.Schema != Layer1SchemaVersion {
		return rec, fmt.Sprintf("unknown schema %d (schema-v1 wants %d)", rec.Schema, Layer1SchemaVersion)
	}
	return rec, ""
}

// hasType reports whether the JSON value raw is of the schema type typ.
func hasType(raw json.RawMessage, typ string) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return false
	}
	switch typ {
	case "integer":
		return isInt(raw)
	case "number":
		c := raw[0]
		return c == '-' || (c >= '0' && c <= '9')
	case "boolean":
		return string(raw) == "true" || string(raw) == "false"
	case "string":
		return raw[0] == '"'
	case "integer-array":
		var xs []json.RawMessage
		if raw[0] != '[' || json.Unmarshal(raw, &xs) != nil {
			return false
		}
		for _, x := range xs {
			if !isInt(bytes.TrimSpace(x)) {
				return false
			}
		}
		return true
	}
	return false
}

// isInt: an integer literal within int64, as msgspec's int takes.
func isInt(raw []byte) bool {
	if bytes.ContainsAny(raw, ".eE") {
		return false
	}
	_, err := strconv.ParseInt(string(raw), 10, 64)
	return err == nil
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
	br := bufio.NewReaderSize(fh, 1<<20)
	var recs []Layer1Record
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] != '\n' && len(bytes.TrimSpace(line)) > 0 {
			return recs, fmt.Errorf("%s ends in a partial line", path)
		}
		if t := bytes.TrimSpace(line); len(t) > 0 {
			var keys map[string]json.RawMessage
			if jerr := json.Unmarshal(t, &keys); jerr != nil {
				return recs, fmt.Errorf("%s line %d does not decode: %v", path, n, jerr)
			}
			if !isFooter(keys) {
				rec, why := decodeLayer1Line(t, keys)
				if why != "" {
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

// isFooter: the in-stream footer carries "footer": true.
func isFooter(keys map[string]json.RawMessage) bool {
	raw, ok := keys["footer"]
	return ok && string(bytes.TrimSpace(raw)) == "true"
}
