package loadgen

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// TestScanLineAgreesWithJSON: a line scanLine reads gives what
// encoding/json gives, prompt offset included; the lines whose meaning
// depends on encoding/json's rules (case-folded or escaped keys, repeated
// keys, escaped strings, null prompts, other number forms) are left to it.
func TestScanLineAgreesWithJSON(t *testing.T) {
	for _, tc := range []struct {
		line string
		fast bool
	}{
		{`{"id":"P01-000001","prompt_token_ids":[1,2,3],"input_tokens":3,"output_tokens":64,"arrival":"steady"}`, true},
		{` { "id" : "a", "prompt" : "say \"hi\"\n", "input_tokens" : 2, "output_tokens" : 1, "arrival" : "burst:8", "prefix_group": {"x": [1]} } `, true},
		{`{"id":"a","prompt":"x","input_tokens":-1,"output_tokens":0,"arrival":"steady"}`, true},
		{`{"id":"a","prompt":"x","input_tokens":1,"arrival":"steady"}`, true},
		{`{"ID":"a","prompt":"x","input_tokens":1,"output_tokens":1,"arrival":"steady"}`, false},
		{`{"id":"a","Prompt_Token_IDs":[1],"input_tokens":1,"output_tokens":1,"arrival":"steady"}`, false},
		{`{"i\u0064":"a","prompt":"x","input_tokens":1,"output_tokens":1,"arrival":"steady"}`, false},
		{`{"id":"a","prompt_token_idſ":[1],"input_tokens":1,"output_tokens":1,"arrival":"steady"}`, false},
		{`{"id":"a","id":"b","prompt":"x","input_tokens":1,"output_tokens":1,"arrival":"steady"}`, false},
		{`{"id":"a\u0041","prompt":"x","input_tokens":1,"output_tokens":1,"arrival":"steady"}`, false},
		{`{"id":"a","prompt":null,"prompt_token_ids":[1],"input_tokens":1,"output_tokens":1,"arrival":"steady"}`, false},
		{`{"id":"a","prompt":"x","input_tokens":1.0,"output_tokens":1,"arrival":"steady"}`, false},
		{`{"id":"a","prompt":"x","input_tokens":null,"output_tokens":1,"arrival":"steady"}`, false},
		{`{"id":"a","prompt":"x","input_tokens":99999999999,"output_tokens":1,"arrival":"steady"}`, false},
		{`{"id":7,"prompt":"x","input_tokens":1,"output_tokens":1,"arrival":"steady"}`, false},
		{`{"id":"a","prompt":"x","input_tokens":1,"output_tokens":1,"arrival":"steady"} {}`, false},
		{`{"id":"a","prompt":"x",}`, false},
		{`[1]`, false},
	} {
		l, off, ok := scanLine([]byte(tc.line))
		if ok != tc.fast {
			t.Errorf("%s: scanned %v, want %v", tc.line, ok, tc.fast)
		}
		if !ok {
			continue
		}
		want, err := decodeLineJSON([]byte(tc.line))
		if err != nil {
			t.Errorf("%s: scanned, but encoding/json refuses it: %v", tc.line, err)
			continue
		}
		if !reflect.DeepEqual(l, want) {
			t.Errorf("%s: scanned %+v, encoding/json %+v", tc.line, l, want)
		}
		tokenIDs := len(want.PromptTokenIDs) > 0
		raw := want.Prompt
		if tokenIDs {
			raw = want.PromptTokenIDs
		}
		if wantOff, n, err := promptSpan([]byte(tc.line), want, tokenIDs); err != nil || off != wantOff || !bytes.Equal([]byte(tc.line)[off:off+n], raw) {
			t.Errorf("%s: prompt at %d, want %d (%v)", tc.line, off, wantOff, err)
		}
	}
}

// BenchmarkDecodeLine: one synthetic manifest line (a 64-id prompt) read
// by scanLine and by encoding/json.
func BenchmarkDecodeLine(b *testing.B) {
	line := []byte(`{"id":"P01-000001","prompt_token_ids":[` + string(bytes.Repeat([]byte("31415,"), 63)) +
		`31415],"input_tokens":64,"output_tokens":64,"arrival":"steady"}`)
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			if _, _, _, err := decodeLine(line); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		for b.Loop() {
			if _, err := decodeLineJSON(line); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestManifestLongLines: lines longer than the reader's 1 MiB buffer,
// between short ones, are read whole, and their prompts read back.
func TestManifestLongLines(t *testing.T) {
	long := strings.Repeat("7,", 700_000) + "7"
	p := writeManifest(t,
		`{"id":"a","prompt_token_ids":[1],"input_tokens":1,"output_tokens":1,"arrival":"steady"}`,
		`{"id":"b","prompt_token_ids":[`+long+`],"input_tokens":700001,"output_tokens":1,"arrival":"steady"}`,
		`{"id":"c","prompt_token_ids":[2,3],"input_tokens":2,"output_tokens":1,"arrival":"steady"}`,
		`{"id":"d","prompt_token_ids":[`+long+`],"input_tokens":700001,"output_tokens":1,"arrival":"steady"}`)
	m, err := OpenManifest(p)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for i, want := range []string{"[1]", "[" + long + "]", "[2,3]", "[" + long + "]"} {
		if raw, err := m.prompt(i); err != nil || string(raw) != want {
			t.Fatalf("prompt %d: %d bytes (%v), want %d", i, len(raw), err, len(want))
		}
	}
}
