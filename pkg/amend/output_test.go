package amend

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestResultWriteText(t *testing.T) {
	long := json.RawMessage(`"` + strings.Repeat("x", 80) + `"`)
	r := Result{Amendment: "A-P3-5", Status: "recorded; the running controller takes it at its next scheduling decision", Diff: Diff{
		Before: "0123456789abcdef0123", After: "fedcba",
		Changed: []RunChange{{Run: "p1.saturation", Fields: []FieldDiff{{Field: "drain_allowance_s", Old: json.RawMessage("288"), New: json.RawMessage("600")}}}},
		Fields:  []FieldDiff{{Field: "classes.standard.drain_allowance_s", Old: json.RawMessage("120"), New: long}},
		Totals:  []FieldDiff{{Field: "gpu_hours_estimate", Old: json.RawMessage("10.029"), New: json.RawMessage("10.5")}},
	}}
	var buf bytes.Buffer
	r.WriteText(&buf)
	want := "amendment A-P3-5: protocol 0123456789ab -> fedcba\n" +
		"  drain_allowance_s: 288 -> 600 (run p1.saturation)\n" +
		"  classes.standard.drain_allowance_s: 120 -> \"" + strings.Repeat("x", 66) + "...\n" +
		"  gpu_hours_estimate: 10.029 -> 10.5\n" +
		r.Status + "\n"
	if buf.String() != want {
		t.Errorf("got\n%s\nwant\n%s", buf.String(), want)
	}
	buf.Reset()
	Result{Amendment: "A-1", Status: "shown, not recorded (--yes records it)", Diff: Diff{Before: "abc", After: "abc"}}.WriteText(&buf)
	if want := "amendment A-1: protocol abc -> abc\n  no change to the plan\nshown, not recorded (--yes records it)\n"; buf.String() != want {
		t.Errorf("no change: got\n%s\nwant\n%s", buf.String(), want)
	}
}

func TestWriteReadjudicated(t *testing.T) {
	var buf bytes.Buffer
	WriteReadjudicated(&buf, "A-P3-5", []Readjudicated{{Run: "p1.sat", Attempt: 2, Old: "failed", OldReason: "drain-watchdog", New: "complete", Detail: "drain 288.6 s within 600 s"}})
	if want := "p1.sat attempt 2: failed drain-watchdog -> complete (drain 288.6 s within 600 s)\n"; buf.String() != want {
		t.Errorf("got %q, want %q", buf.String(), want)
	}
	buf.Reset()
	WriteReadjudicated(&buf, "A-P3-5", nil)
	if want := "no recorded verdict changes under amendment A-P3-5\n"; buf.String() != want {
		t.Errorf("got %q, want %q", buf.String(), want)
	}
}
