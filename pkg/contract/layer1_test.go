package contract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// l1 builds a Layer-1 stream and its sidecar in memory.
type l1 struct {
	steps    []int64
	footer   bool
	partial  bool
	badLine  bool
	sidecar  map[string]any // nil: default from the steps
	noSide   bool
	wall     time.Time
	interval float64
}

func (c l1) build() (stream, sidecar []byte) {
	var b bytes.Buffer
	for _, s := range c.steps {
		b.Write(l1Line(s, 1000+s))
	}
	if c.badLine {
		b.WriteString("{\"step\": 99, \"x\": }\n")
	}
	n := int64(len(c.steps))
	last := int64(-1)
	if n > 0 {
		last = c.steps[n-1]
	}
	if c.footer {
		fmt.Fprintf(&b, `{"footer":true,"encoded_records":%d,"written_records":%d,"dropped_records":0,"last_step_index":%d,"step_count":%d}`+"\n", n, n, last, n)
	}
	if c.partial {
		b.WriteString(`{"step":12345,"sub`)
	}
	if c.noSide {
		return b.Bytes(), nil
	}
	if c.interval == 0 {
		c.interval = 1
	}
	side := map[string]any{"encoded_records": n, "written_records": n, "dropped_records": 0, "last_step_index": last,
		"wall_time_unix_ns": c.wall.UnixNano(), "flush_interval_s": c.interval, "final": c.footer}
	for k, v := range c.sidecar {
		side[k] = v
	}
	sb, _ := json.Marshal(side)
	return b.Bytes(), sb
}

// write writes the stream to dir/s.jsonl and its sidecar beside it; it
// returns the stream's path and bytes.
func (c l1) write(t *testing.T, dir string) (path string, stream []byte) {
	t.Helper()
	stream, side := c.build()
	path = filepath.Join(dir, "s.jsonl")
	if err := os.WriteFile(path, stream, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".footer.json", side, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, stream
}

// l1Record is a schema-v1 record of step i submitted at submit.
func l1Record(i, submit int64) Layer1Record {
	return Layer1Record{Schema: 1, Step: i, ModelExecuted: true, SubmitMonoNS: submit, CompleteMonoNS: submit + 1000,
		NumScheduledReqs: 2, NumDecodeReqs: 2, DecodeTokens: 2, ChunkedPrefillClass: "none", ChunkSizeHist: []int64{0, 0},
		ContextLenHist: []int64{2, 0}, NumRunningReqs: 2, KVCacheUsage: 0.25, CUDAGraphHit: true, RuntimeMode: "FULL",
		UnpaddedTokens: 2, BucketTokens: 4, PaddingTokens: 2}
}

// l1Line is the JSON line of l1Record(i, submit).
func l1Line(i, submit int64) []byte {
	b, _ := json.Marshal(l1Record(i, submit))
	return append(b, '\n')
}

func steps(lo, hi int64) []int64 {
	var s []int64
	for i := lo; i <= hi; i++ {
		s = append(s, i)
	}
	return s
}

func TestLayer1(t *testing.T) {
	sig := time.Date(2026, 7, 13, 10, 0, 0, 0, time.UTC)
	kill := sig.Add(3 * time.Second)
	sigs := []Signal{
		{At: sig.Add(-time.Hour), Role: "client", Target: "pid", Signal: "SIGTERM"},
		{At: sig, Role: "server", Target: "pid", Signal: "SIGTERM"},
		{At: kill, Role: "server", Target: "group", Signal: "SIGKILL"},
	}
	graceful := sigs[:2]
	fresh := kill.Add(-500 * time.Millisecond)
	cases := []struct {
		name    string
		c       l1
		sigs    []Signal
		noSigs  bool
		verdict string
		detail  string
	}{
		{name: "clean close", c: l1{steps: steps(0, 99), footer: true, wall: sig.Add(2 * time.Second)}, verdict: "pass"},
		{name: "clean close needs no signals", c: l1{steps: steps(0, 99), footer: true, wall: sig}, noSigs: true, verdict: "pass"},
		{name: "hard kill, fresh checkpoint", c: l1{steps: steps(0, 99), wall: fresh}, verdict: "pass"},
		{name: "hard kill, within tolerance", c: l1{steps: steps(0, 99), wall: kill.Add(-1050 * time.Millisecond)}, verdict: "pass", detail: "tolerance"},
		// the age runs from the SIGKILL, not the SIGTERM: 1.2 s before
		// the kill is stale although it is 1.8 s after the SIGTERM
		{name: "hard kill, stale checkpoint", c: l1{steps: steps(0, 99), wall: kill.Add(-1200 * time.Millisecond)}, verdict: "fail", detail: "older than the server's SIGKILL"},
		{name: "hard kill, checkpoint fresh at the SIGTERM only", c: l1{steps: steps(0, 99), wall: sig.Add(-500 * time.Millisecond)}, verdict: "fail", detail: "older than the server's SIGKILL"},
		{name: "graceful stop without footer", c: l1{steps: steps(0, 99), wall: sig.Add(-100 * time.Millisecond)}, sigs: graceful, verdict: "fail", detail: "no in-stream footer after a graceful stop"},
		{name: "hard kill without signals file", c: l1{steps: steps(0, 99), wall: fresh}, noSigs: true, verdict: "error", detail: "no recorded signal times"},
		{name: "no footer and no server signal", c: l1{steps: steps(0, 99), wall: fresh}, sigs: sigs[:1], verdict: "error", detail: "external kill cannot be timed"},
		{name: "drops", c: l1{steps: steps(0, 99), footer: true, wall: sig, sidecar: map[string]any{"encoded_records": 102, "dropped_records": 2}}, verdict: "fail", detail: "dropped_records 2"},
		{name: "unbalanced", c: l1{steps: steps(0, 99), wall: fresh, sidecar: map[string]any{"encoded_records": 101}}, verdict: "fail", detail: "unbalanced"},
		{name: "gap", c: l1{steps: append(steps(0, 49), steps(51, 100)...), footer: true, wall: sig}, verdict: "fail", detail: "missing between"},
		{name: "duplicate", c: l1{steps: append(steps(0, 49), steps(49, 98)...), footer: true, wall: sig}, verdict: "fail", detail: "duplicate"},
		{name: "partial line", c: l1{steps: steps(0, 99), wall: fresh}, verdict: "fail"},
		{name: "undecodable line", c: l1{steps: steps(0, 99), badLine: true, wall: fresh}, verdict: "fail", detail: "do not decode"},
		{name: "count differs from sidecar", c: l1{steps: steps(0, 99), wall: fresh, sidecar: map[string]any{"written_records": 90, "encoded_records": 90, "last_step_index": 89}}, verdict: "fail", detail: "written_records 90"},
		{name: "last step differs", c: l1{steps: steps(0, 99), wall: fresh, sidecar: map[string]any{"last_step_index": 98}}, verdict: "fail", detail: "last_step_index 98"},
		{name: "no sidecar", c: l1{steps: steps(0, 99), footer: true, noSide: true}, verdict: "fail", detail: "sidecar missing"},
		{name: "sidecar lacks a field", c: l1{steps: steps(0, 99), wall: fresh, sidecar: map[string]any{"final": nil}}, verdict: "fail", detail: "lacks [final]"},
		{name: "footer but sidecar not final", c: l1{steps: steps(0, 99), footer: true, wall: sig, sidecar: map[string]any{"final": false}}, verdict: "fail", detail: "not final"},
		{name: "final sidecar without footer", c: l1{steps: steps(0, 99), wall: fresh, sidecar: map[string]any{"final": true}}, verdict: "fail", detail: "no in-stream footer"},
		{name: "empty stream", c: l1{wall: fresh}, verdict: "fail", detail: "no data lines"},
	}
	cases[13].c.partial = true
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stream, side := tc.c.build()
			ss := sigs
			if tc.sigs != nil {
				ss = tc.sigs
			}
			r := Layer1(bytes.NewReader(stream), side, ss, !tc.noSigs, DefaultLayer1)
			if r.Verdict != tc.verdict || !strings.Contains(r.Detail, tc.detail) {
				t.Fatalf("got %s %q, want %s containing %q; figures %v", r.Verdict, r.Detail, tc.verdict, tc.detail, r.Figures)
			}
		})
	}
}

func TestLayer1Figures(t *testing.T) {
	sig := time.Date(2026, 7, 13, 10, 0, 0, 0, time.UTC)
	stream, side := l1{steps: steps(5, 104), wall: sig.Add(-1050 * time.Millisecond)}.build()
	r := Layer1(bytes.NewReader(stream), side, []Signal{{At: sig, Role: "server", Target: "group", Signal: "SIGKILL"}}, true, DefaultLayer1)
	if r.Verdict != "pass" {
		t.Fatal(r)
	}
	want := map[string]float64{"records": 100, "first_step": 5, "last_step": 104, "written_records": 100, "footer": 0, "hard_kill": 1, "checkpoint_age_s": 1.05}
	for k, v := range want {
		if d := r.Figures[k] - v; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s = %v, want %v", k, r.Figures[k], v)
		}
	}
	if u := r.Figures["tolerance_used_ms"]; u < 49.99 || u > 50.01 {
		t.Errorf("tolerance_used_ms %v", u)
	}
}

func TestLayer1Files(t *testing.T) {
	dir := t.TempDir()
	p, _ := l1{steps: steps(0, 9), footer: true, wall: time.Now()}.write(t, dir)
	r := Layer1Files(p, "", "", DefaultLayer1)
	if r.Verdict != "pass" {
		t.Fatal(r)
	}
	if g := r.Gate("layer1", time.Now()); g.Gate != "validator:layer1" || !g.Passed() || g.Figures["records"] != 10 {
		t.Fatalf("gate %+v", g)
	}
	if r := Layer1Files(filepath.Join(dir, "none.jsonl"), "", "", DefaultLayer1); r.Verdict != "error" {
		t.Fatalf("missing stream: %v", r)
	}
	if r := Layer1Files(p, "", filepath.Join(dir, "signals.json"), DefaultLayer1); r.Verdict != "error" {
		t.Fatalf("missing signals file: %v", r)
	}
}

// TestLayer1Schema: every data line must decode as a schema-v1 record
// (every field present, each of its type, schema 1); fields the schema
// does not name are allowed.
func TestLayer1Schema(t *testing.T) {
	base := map[string]any{}
	json.Unmarshal(l1Line(5, 1005), &base)
	cases := []struct {
		name   string
		edit   func(m map[string]any)
		detail string // "" for a pass
	}{
		{name: "valid", edit: func(map[string]any) {}},
		{name: "unknown field allowed", edit: func(m map[string]any) { m["spec_decode_tokens"] = 3 }},
		{name: "integer for a number", edit: func(m map[string]any) { m["kv_cache_usage"] = 1 }},
		{name: "missing field", edit: func(m map[string]any) { delete(m, "num_waiting_reqs") }, detail: "lacks required field num_waiting_reqs"},
		{name: "missing step", edit: func(m map[string]any) { delete(m, "step") }, detail: "lacks required field step"},
		{name: "null", edit: func(m map[string]any) { m["prefill_tokens"] = nil }, detail: "field prefill_tokens is null, not integer"},
		{name: "string for an integer", edit: func(m map[string]any) { m["decode_tokens"] = "2" }, detail: "field decode_tokens is a string, not integer"},
		{name: "fraction for an integer", edit: func(m map[string]any) { m["submit_mono_ns"] = 1.5 }, detail: "field submit_mono_ns is a non-integer number 1.5, not integer"},
		{name: "integer for a boolean", edit: func(m map[string]any) { m["model_executed"] = 1 }, detail: "field model_executed is the number 1, not boolean"},
		{name: "number for a string", edit: func(m map[string]any) { m["runtime_mode"] = 2 }, detail: "field runtime_mode is the number 2, not string"},
		{name: "histogram of floats", edit: func(m map[string]any) { m["chunk_size_hist"] = []any{1, 0.5} }, detail: "field chunk_size_hist is an array (not of integers), not integer-array"},
		{name: "histogram as object", edit: func(m map[string]any) { m["context_len_hist"] = map[string]any{"16": 1} }, detail: "field context_len_hist is an object, not integer-array"},
		{name: "unknown schema", edit: func(m map[string]any) { m["schema"] = 2 }, detail: "unknown schema 2"},
	}
	sig := time.Date(2026, 7, 13, 10, 0, 0, 0, time.UTC)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := map[string]any{}
			for k, v := range base {
				m[k] = v
			}
			tc.edit(m)
			line, _ := json.Marshal(m)
			var b bytes.Buffer
			for i := int64(0); i < 5; i++ {
				b.Write(l1Line(i, 1000+i))
			}
			b.Write(append(line, '\n'))
			fmt.Fprintf(&b, `{"footer":true,"encoded_records":6,"written_records":6,"dropped_records":0,"last_step_index":5,"step_count":6}`+"\n")
			side := fmt.Sprintf(`{"encoded_records":6,"written_records":6,"dropped_records":0,"last_step_index":5,"wall_time_unix_ns":%d,"flush_interval_s":1,"final":true}`, sig.UnixNano())
			r := Layer1(&b, []byte(side), nil, false, DefaultLayer1)
			if tc.detail == "" {
				if r.Verdict != "pass" || r.Figures["schema_errors"] != 0 {
					t.Fatalf("got %s %q", r.Verdict, r.Detail)
				}
				return
			}
			if r.Verdict != "fail" || r.Figures["schema_errors"] != 1 || !strings.Contains(r.Detail, "line 6, not a schema-v1 data line: "+tc.detail) {
				t.Fatalf("got %s %q (schema_errors %v), want a fail naming %q", r.Verdict, r.Detail, r.Figures["schema_errors"], tc.detail)
			}
		})
	}
}

// TestLayer1SchemaDoc: docs/validators.md's schema table lists exactly
// Layer1Fields, in order, with their types.
func TestLayer1SchemaDoc(t *testing.T) {
	b, err := os.ReadFile("../../docs/validators.md")
	if err != nil {
		t.Fatal(err)
	}
	_, tbl, ok := strings.Cut(string(b), "<!-- layer1-schema-v1 -->")
	if !ok {
		t.Fatal("docs/validators.md has no <!-- layer1-schema-v1 --> table")
	}
	tbl, _, _ = strings.Cut(tbl, "<!-- /layer1-schema-v1 -->")
	var got []Layer1Field
	for _, line := range strings.Split(tbl, "\n") {
		cols := strings.Split(line, "|")
		if len(cols) < 4 || !strings.HasPrefix(strings.TrimSpace(cols[1]), "`") {
			continue
		}
		got = append(got, Layer1Field{Name: strings.Trim(strings.TrimSpace(cols[1]), "`"), Type: strings.TrimSpace(cols[2])})
	}
	if fmt.Sprint(got) != fmt.Sprint(Layer1Fields) {
		t.Fatalf("docs list\n%v\nthe schema is\n%v", got, Layer1Fields)
	}
}

// TestLayer1RecordRoundTrip: every field of a record, each set to a
// distinct value, reads back from its line through the stream reader.
func TestLayer1RecordRoundTrip(t *testing.T) {
	var want Layer1Record
	rv := reflect.ValueOf(&want).Elem()
	for i := range rv.NumField() {
		switch f := rv.Field(i); f.Kind() {
		case reflect.Int64:
			f.SetInt(int64(1000 + i))
		case reflect.Float64:
			f.SetFloat(float64(i) + 0.5)
		case reflect.Bool:
			f.SetBool(i%2 == 0)
		case reflect.String:
			f.SetString(fmt.Sprintf("s\"%d\u00e9", i))
		case reflect.Slice:
			f.Set(reflect.ValueOf([]int64{int64(i), -1, 1 << 62}))
		}
	}
	want.Schema = 1
	for _, b := range []bool{true, false} { // the booleans both ways
		want.ModelExecuted, want.CUDAGraphHit = b, !b
		line, _ := json.Marshal(want)
		p := filepath.Join(t.TempDir(), "s.jsonl")
		os.WriteFile(p, append(line, '\n'), 0o644)
		recs, err := ReadLayer1Records(p)
		if err != nil || len(recs) != 1 || !reflect.DeepEqual(recs[0], want) {
			t.Fatalf("read back %+v, %v; want %+v", recs, err, want)
		}
	}
}

// TestLayer1LineSyntax: a line is one strict JSON object, read in one
// pass; keys match exactly; a repeated key's last value counts.
func TestLayer1LineSyntax(t *testing.T) {
	good := strings.TrimSuffix(string(l1Line(5, 1005)), "}\n")
	cases := []struct {
		name, line, detail string // detail "" for a pass
	}{
		{name: "escaped key", line: strings.Replace(good, `"step":5`, `"\u0073tep":5`, 1) + "}"},
		{name: "unknown nested field", line: good + `,"extra":{"a":[1,{"b":null}],"c":"\n"}}`},
		{name: "other-case key is unknown", line: good + `,"Step":"x"}`},
		{name: "repeated key, last wins", line: strings.Replace(good, `"step":5`, `"step":"x","step":5`, 1) + "}"},
		{name: "repeated key, last is wrong", line: good + `,"step":1.5}`, detail: "field step is a non-integer number 1.5"},
		{name: "invalid unknown field", line: good + `,"extra":[1,]}`, detail: "does not decode"},
		{name: "bad escape", line: good + `,"extra":"\x"}`, detail: "does not decode"},
		{name: "trailing garbage", line: good + `}}`, detail: "does not decode"},
		{name: "two objects", line: good + `}{}`, detail: "does not decode"},
		{name: "number out of range", line: strings.Replace(good, `"kv_cache_usage":0.25`, `"kv_cache_usage":1e400`, 1) + "}", detail: "out of range"},
		{name: "integer out of range", line: strings.Replace(good, `"decode_tokens":2`, `"decode_tokens":9223372036854775808`, 1) + "}", detail: "field decode_tokens is the number"},
		{name: "array", line: `[1]`, detail: "not a JSON object"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { checkSixthLine(t, tc.line, tc.detail) })
	}
}

// checkSixthLine checks a clean-closed stream of six steps whose sixth
// line (step 5) is line: detail "" wants a pass, else a fail at line 6
// whose detail names detail.
func checkSixthLine(t *testing.T, line, detail string) {
	t.Helper()
	var b bytes.Buffer
	for i := int64(0); i < 5; i++ {
		b.Write(l1Line(i, 1000+i))
	}
	b.WriteString(line + "\n")
	fmt.Fprintf(&b, `{"footer":true,"encoded_records":6,"written_records":6,"dropped_records":0,"last_step_index":5,"step_count":6}`+"\n")
	sig := time.Date(2026, 7, 13, 10, 0, 0, 0, time.UTC)
	side := fmt.Sprintf(`{"encoded_records":6,"written_records":6,"dropped_records":0,"last_step_index":5,"wall_time_unix_ns":%d,"flush_interval_s":1,"final":true}`, sig.UnixNano())
	r := Layer1(bytes.NewReader(b.Bytes()), []byte(side), nil, false, DefaultLayer1)
	if detail == "" {
		if r.Verdict != "pass" {
			t.Fatalf("got %s %q", r.Verdict, r.Detail)
		}
		return
	}
	if r.Verdict != "fail" || !strings.Contains(r.Detail, "line 6") || !strings.Contains(r.Detail, detail) {
		t.Fatalf("got %s %q, want a fail at line 6 naming %q", r.Verdict, r.Detail, detail)
	}
}

// TestLayer1LongLine: a line longer than the reader's buffer is read whole.
func TestLayer1LongLine(t *testing.T) {
	var b bytes.Buffer
	line := strings.TrimSuffix(string(l1Line(0, 1000)), "}\n") + `,"pad":"` + strings.Repeat("x", 3<<20) + `"}` + "\n"
	b.WriteString(line)
	b.Write(l1Line(1, 1001))
	b.WriteString(`{"footer":true,"encoded_records":2,"written_records":2,"dropped_records":0,"last_step_index":1,"step_count":2}` + "\n")
	side := fmt.Sprintf(`{"encoded_records":2,"written_records":2,"dropped_records":0,"last_step_index":1,"wall_time_unix_ns":%d,"flush_interval_s":1,"final":true}`, time.Now().UnixNano())
	if r := Layer1(&b, []byte(side), nil, false, DefaultLayer1); r.Verdict != "pass" || r.Figures["records"] != 2 {
		t.Fatalf("got %s %q %v", r.Verdict, r.Detail, r.Figures)
	}
}

// refLayer1 is the reading of one line through encoding/json: the object
// decoded into a map of raw values (exact keys, a repeated key's last
// value), then each schema field's type checked on its value.
func refLayer1(line []byte) (object, schemaOK bool, step int64) {
	var keys map[string]json.RawMessage
	if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &keys) != nil {
		return false, false, 0
	}
	for _, f := range Layer1Fields {
		raw, ok := keys[f.Name]
		if !ok {
			return true, false, 0
		}
		var ok2 bool
		switch f.Type {
		case "integer":
			var n int64
			ok2 = !bytes.ContainsAny(raw, ".eE") && json.Unmarshal(raw, &n) == nil && raw[0] != 'n'
		case "number":
			var x float64
			ok2 = raw[0] != 'n' && json.Unmarshal(raw, &x) == nil
		case "boolean":
			ok2 = string(raw) == "true" || string(raw) == "false"
		case "string":
			ok2 = raw[0] == '"'
		case "integer-array":
			var xs []json.RawMessage
			ok2 = raw[0] == '[' && json.Unmarshal(raw, &xs) == nil
			for _, x := range xs {
				var n int64
				ok2 = ok2 && !bytes.ContainsAny(x, ".eE") && x[0] != 'n' && json.Unmarshal(x, &n) == nil
			}
		}
		if !ok2 {
			return true, false, 0
		}
	}
	json.Unmarshal(keys["step"], &step)
	var schema int64
	json.Unmarshal(keys["schema"], &schema)
	return true, schema == 1, step
}

// FuzzLayer1Line: the one-pass reader agrees with encoding/json on
// whether a line is a JSON object, whether it is a schema-v1 data line,
// and its step.
func FuzzLayer1Line(f *testing.F) {
	good := l1Line(5, 1005)
	f.Add(bytes.TrimSpace(good))
	f.Add([]byte(strings.Replace(string(bytes.TrimSpace(good)), `"step":5`, `"\u0073tep":5,"step":6`, 1)))
	f.Add([]byte(strings.Replace(string(bytes.TrimSpace(good)), `"kv_cache_usage":0.25`, `"kv_cache_usage":1e400`, 1)))
	f.Add([]byte(strings.Replace(string(bytes.TrimSpace(good)), `"decode_tokens":2`, `"decode_tokens":-9223372036854775808`, 1)))
	f.Add([]byte(`{"footer":true}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		line = trimSpace(line)
		object, schemaOK, step := refLayer1(line)
		var l layer1Line
		why := l.parse(line)
		if (why == "") != object {
			t.Fatalf("%q: parse says %q, encoding/json object %v", line, why, object)
		}
		if !object {
			return
		}
		var rec Layer1Record
		why = l.record(&rec, true)
		if (why == "") != schemaOK || schemaOK && rec.Step != step {
			t.Fatalf("%q: record says %q step %d, encoding/json schema-v1 %v step %d", line, why, rec.Step, schemaOK, step)
		}
		// the stream check's reading (strings, arrays and the number not
		// kept) gives the same verdict
		var quick Layer1Record
		if qwhy := l.record(&quick, false); qwhy != why || quick.Step != rec.Step {
			t.Fatalf("%q: the stream check says %q step %d, the full reading %q step %d", line, qwhy, quick.Step, why, rec.Step)
		}
	})
}
