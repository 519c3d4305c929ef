package contract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"warden/pkg/jsonscan"
)

// reorder rewrites a JSON object's members in the order perm gives.
func reorder(t *testing.T, obj []byte, perm func([]string) []string) string {
	t.Helper()
	var ms []string
	if end := jsonscan.Members(obj, 0, func(k, v []byte) { ms = append(ms, `"`+string(k)+`":`+string(v)) }); end != len(obj) {
		t.Fatalf("not an object: %s", obj)
	}
	return "{" + strings.Join(perm(ms), ",") + "}"
}

// TestLayer1ScannerEdges: the one-pass reader of a line is exact where a
// reader that looks for a key's bytes would not be: escaped strings,
// nested objects, members in any order, numbers in exponent form, NUL
// bytes, whitespace that JSON does not allow.
func TestLayer1ScannerEdges(t *testing.T) {
	whole := string(bytes.TrimSpace(l1Line(5, 1005)))
	good := strings.TrimSuffix(whole, "}")
	rep := func(old, new string) string { return strings.Replace(whole, old, new, 1) }
	cases := []struct {
		name, line, detail string // detail "" for a pass
	}{
		{name: "escapes in string values", line: rep(`"runtime_mode":"FULL"`, `"runtime_mode":"FU\u004cL"`)},
		{name: "escaped quotes and braces in a string", line: rep(`"chunked_prefill_class":"none"`, `"chunked_prefill_class":"n\"o}n{e\\"`)},
		{name: "a key's bytes inside a string", line: good + `,"extra":"}\",\"step\":\"x"}`},
		{name: "nested step and footer are not the line's", line: good + `,"extra":{"step":"x","footer":true,"schema":2}}`},
		{name: "deep nesting", line: good + `,"extra":` + strings.Repeat(`[{"a":`, 200) + "1" + strings.Repeat("}]", 200) + "}"},
		{name: "members in reverse order", line: reorder(t, []byte(whole), func(m []string) []string { slices.Reverse(m); return m })},
		{name: "members sorted by name", line: reorder(t, []byte(whole), func(m []string) []string { slices.Sort(m); return m })},
		{name: "exponent for a number", line: rep(`"kv_cache_usage":0.25`, `"kv_cache_usage":2.5E-1`)},
		{name: "negative zero for an integer", line: rep(`"num_preemptions":0`, `"num_preemptions":-0`)},
		{name: "CR before the newline", line: whole + "\r"},
		{name: "exponent for an integer", line: rep(`"step":5`, `"step":5e0`), detail: "field step is a non-integer number 5e0, not integer"},
		{name: "exponent for the schema", line: rep(`"schema":1`, `"schema":1E0`), detail: "field schema is a non-integer number 1E0"},
		{name: "exponent in a histogram", line: rep(`"chunk_size_hist":[0,0]`, `"chunk_size_hist":[0,1E2]`), detail: "field chunk_size_hist is an array (not of integers)"},
		{name: "nested array in a histogram", line: rep(`"chunk_size_hist":[0,0]`, `"chunk_size_hist":[0,[1]]`), detail: "field chunk_size_hist is an array (not of integers)"},
		{name: "huge exponent", line: rep(`"kv_cache_usage":0.25`, `"kv_cache_usage":1`+strings.Repeat("0", 400)), detail: "out of range"},
		{name: "NUL in a string", line: rep(`"FULL"`, "\"FU\x00LL\""), detail: "does not decode"},
		{name: "NUL after the object", line: whole + "\x00", detail: "does not decode"},
		{name: "NUL line", line: "\x00", detail: "not a JSON object"},
		{name: "form feed after the object", line: whole + "\f", detail: "does not decode"},
		{name: "no-break space before the object", line: "\u00a0" + whole, detail: "not a JSON object"},
		{name: "vertical tab between members", line: rep(`,"step"`, ",\v\"step\""), detail: "does not decode"},
		{name: "unterminated string", line: good + `,"extra":"abc}`, detail: "does not decode"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { checkSixthLine(t, tc.line, tc.detail) })
	}
}

// TestLayer1TruncatedLast: a last line cut short fails the stream, with or
// without its newline, and is not counted as a record.
func TestLayer1TruncatedLast(t *testing.T) {
	var b bytes.Buffer
	for i := int64(0); i < 5; i++ {
		b.Write(l1Line(i, 1000+i))
	}
	cut := l1Line(5, 1005)[:60]
	for _, tail := range []string{"", "\n"} {
		st := append(bytes.Clone(b.Bytes()), append(bytes.Clone(cut), tail...)...)
		side := `{"encoded_records":5,"written_records":5,"dropped_records":0,"last_step_index":4,"wall_time_unix_ns":1,"flush_interval_s":1,"final":false}`
		r := Layer1(bytes.NewReader(st), []byte(side), nil, false, DefaultLayer1)
		want := "ends in a partial JSON line"
		if tail != "" {
			want = "1 line(s) do not decode (first: line 6"
		}
		if r.Verdict != "fail" || !strings.Contains(r.Detail, want) || r.Figures["records"] != 5 {
			t.Errorf("tail %q: got %s %q %v, want a fail naming %q", tail, r.Verdict, r.Detail, r.Figures, want)
		}
	}
}

// TestLayer1OverlongLine: a line longer than a line may be (64 MiB) is not
// held; it is a line that does not decode, even when its first 64 MiB
// would, and the lines after it are read as usual. ReadLayer1Records
// refuses it.
func TestLayer1OverlongLine(t *testing.T) {
	var b bytes.Buffer
	b.Write(l1Line(0, 1000))
	long := strings.TrimSuffix(string(bytes.TrimSpace(l1Line(1, 1001))), "}") + `,"pad":"` + strings.Repeat("x", maxLine) + `"}` + "\n"
	b.WriteString(long)
	b.Write(l1Line(1, 1001))
	b.WriteString(`{"footer":true,"encoded_records":2,"written_records":2,"dropped_records":0,"last_step_index":1,"step_count":2}` + "\n")
	side := `{"encoded_records":2,"written_records":2,"dropped_records":0,"last_step_index":1,"wall_time_unix_ns":1,"flush_interval_s":1,"final":true}`
	r := Layer1(bytes.NewReader(b.Bytes()), []byte(side), nil, false, DefaultLayer1)
	want := fmt.Sprintf("first: line 2, does not decode: longer than the %d MiB a line may hold", maxLine>>20)
	if r.Verdict != "fail" || !strings.Contains(r.Detail, want) || r.Figures["records"] != 2 || r.Figures["bytes"] != float64(b.Len()) {
		t.Fatalf("got %s %q %v, want a fail naming %q", r.Verdict, r.Detail, r.Figures, want)
	}
	p := filepath.Join(t.TempDir(), "s.jsonl")
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadLayer1Records(p); err == nil || !strings.Contains(err.Error(), "line 2: longer than") {
		t.Fatalf("ReadLayer1Records: %v", err)
	}
	// the same line last, without its newline: a partial line
	st := append(l1Line(0, 1000), strings.TrimSuffix(long, "\n")...)
	side = `{"encoded_records":1,"written_records":1,"dropped_records":0,"last_step_index":0,"wall_time_unix_ns":1,"flush_interval_s":1,"final":false}`
	if r := Layer1(bytes.NewReader(st), []byte(side), nil, false, DefaultLayer1); r.Verdict != "fail" || !strings.Contains(r.Detail, "partial JSON line") {
		t.Fatalf("unterminated: got %s %q", r.Verdict, r.Detail)
	}
}

// TestLayer1ReorderedFooter: the footer's members in any order.
func TestLayer1ReorderedFooter(t *testing.T) {
	var b bytes.Buffer
	for i := int64(0); i < 6; i++ {
		b.Write(l1Line(i, 1000+i))
	}
	b.WriteString(`{"step_count":6,"last_step_index":5,"dropped_records":0,"written_records":6,"encoded_records":6,"footer":true}` + "\n")
	side, _ := json.Marshal(map[string]any{"encoded_records": 6, "written_records": 6, "dropped_records": 0, "last_step_index": 5, "wall_time_unix_ns": 1, "flush_interval_s": 1, "final": true})
	if r := Layer1(&b, side, nil, false, DefaultLayer1); r.Verdict != "pass" || r.Figures["footer"] != 1 {
		t.Fatalf("got %s %q", r.Verdict, r.Detail)
	}
}

// serialScan is the stream read on one goroutine, line after line: what
// the batched read must find.
func serialScan(t *testing.T, st []byte) streamScan {
	t.Helper()
	var s streamScan
	lr := newLineReader(bytes.NewReader(st))
	var l layer1Line
	var rec Layer1Record
	for {
		line, err := lr.next()
		s.bytes += lr.n
		switch {
		case len(line) > 0 && line[len(line)-1] == '\n':
			s.lines++
			if lr.over {
				s.apply(s.lines, lineResult{kind: lineBad, why: fmt.Sprintf("does not decode: longer than the %d MiB a line may hold", maxLine>>20)})
			} else {
				s.apply(s.lines, classify(trimSpace(line), &l, &rec))
			}
		case len(trimSpace(line)) > 0 || lr.tailText:
			s.partial = true
		}
		if err != nil {
			return s
		}
	}
}

// TestLayer1BatchedScan: the stream read in batches on several
// goroutines finds what one pass line after line finds, with the lines
// that matter (bad lines, footers, a line longer than a batch, blank
// lines) on either side of batch boundaries.
func TestLayer1BatchedScan(t *testing.T) {
	long := strings.TrimSuffix(string(bytes.TrimSpace(l1Line(7, 7))), "}") + `,"pad":"` + strings.Repeat("y", 3*batchBytes) + `"}` + "\n"
	footer := `{"footer":true,"encoded_records":9,"written_records":9,"dropped_records":0,"last_step_index":8,"step_count":9}` + "\n"
	specials := []string{"{bad\n", "\n", footer, long, "[1]\n", footer, `{"schema":2}` + "\n"}
	for seed := range 4 {
		var b bytes.Buffer
		step := int64(0)
		for i := 0; b.Len() < 5*batchBytes; i++ {
			if i%(600+seed*50) == 599 {
				b.WriteString(specials[(i/600+seed)%len(specials)])
				continue
			}
			b.Write(l1Line(step, 1000+step))
			step++
		}
		if seed%2 == 1 {
			b.WriteString(`{"step":12345,"sub`) // a partial last line
		}
		got, err := scanStream(bytes.NewReader(b.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		if want := serialScan(t, b.Bytes()); !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d: batched %+v\nserial %+v", seed, summary(got), summary(want))
		}
		if got.lines < 3000 || got.badLines == 0 || got.footer == nil {
			t.Fatalf("seed %d: %d lines, %d bad: the stream does not exercise the batches", seed, got.lines, got.badLines)
		}
	}
}

func summary(s streamScan) string {
	return fmt.Sprintf("bytes %d lines %d data %d bad %d schema %d first %d %q partial %v footer %v at %d after %d last %d steps %d neg %d",
		s.bytes, s.lines, s.data, s.badLines, s.schemaErrs, s.firstBad, s.firstBadWhy, s.partial, s.footer != nil, s.footerLine, s.afterFooter, s.lastStep, len(s.steps), s.negativeStep)
}
