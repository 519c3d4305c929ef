package views

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"warden/pkg/api"
	"warden/pkg/state"
)

// hostile is recorded text that rewrites a terminal: it retitles the
// window, clears the screen, and overwrites "stopped ..." with "complete".
const hostile = "stopped\x1b]0;owned\a\x1b[2J\r\x1b[Kcomplete\n\u009b31m\u202eevil\xff"

// assertSafe fails unless out holds no byte a terminal acts on but the
// views' own newlines and tabs: no C0 control, DEL, C1 control, bidi or
// other format character, nor invalid UTF-8.
func assertSafe(t *testing.T, what, out string) {
	t.Helper()
	for i, r := range out {
		bad := r == utf8.RuneError || (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || (r >= 0x80 && !unicode.IsPrint(r) && r != ' ')
		if bad {
			t.Fatalf("%s: rune %U at byte %d reaches the terminal:\n%q", what, r, i, out)
		}
	}
	if !strings.Contains(out, `\x1b]0;owned\a\x1b[2J\r\x1b[Kcomplete\n\u009b31m\u202eevil\xff`) {
		t.Fatalf("%s: the hostile text is not shown escaped:\n%q", what, out)
	}
}

// TestEsc: every rune that is not printable is written out; printable
// text, including non-ASCII letters, spaces and backslashes, is kept.
func TestEsc(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, ok":      "plain text, ok",
		"naïve café 日本 \\x":   "naïve café 日本 \\x",
		"a\tb\nc\rd":          `a\tb\nc\rd`,
		"\x1b[2J\x07\x7f\x00": `\x1b[2J\a\x7f\x00`,
		"\u0085\u009b\u200b":  `\u0085\u009b\u200b`,
		"\u202eabc\u2066":     `\u202eabc\u2066`,
		"\xff\xfe ok":         `\xff\xfe ok`,
		"\U000e0001":          `\U000e0001`,
	} {
		if got := Esc(in); got != want {
			t.Errorf("Esc(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestEscaped: a document's every string is escaped, through slices,
// maps, pointers and interfaces; the original is left as it was.
func TestEscaped(t *testing.T) {
	type doc struct {
		S  string
		P  *string
		L  []string
		M  map[string]string
		A  any
		B  []byte
		hi string
	}
	s := "p\x1b"
	d := doc{S: "s\x1b", P: &s, L: []string{"l\x1b"}, M: map[string]string{"k\x1b": "v\x1b"}, A: "a\x1b", B: []byte("b\x1b"), hi: "h\x1b"}
	e := Escaped(d)
	if e.S != `s\x1b` || *e.P != `p\x1b` || e.L[0] != `l\x1b` || e.M[`k\x1b`] != `v\x1b` || e.A != `a\x1b` || string(e.B) != "b\x1b" || e.hi != "h\x1b" {
		t.Fatalf("escaped %+v", e)
	}
	if d.S != "s\x1b" || s != "p\x1b" || d.L[0] != "l\x1b" || d.M["k\x1b"] != "v\x1b" {
		t.Fatalf("the original changed: %+v", d)
	}
}

// TestViewsEscapeRecordedText: a validator detail of ESC ]0;...BEL,
// ESC [2J, CR ESC [K rewrote the operator's screen. ctlq status, runs,
// show (with its stderr tails and sanity blocks) and events print every
// recorded string escaped.
func TestViewsEscapeRecordedText(t *testing.T) {
	var b bytes.Buffer
	PrintStatus(&b, api.Status{Campaign: api.CampaignStatus{ID: hostile, State: "stopped", StopReason: state.StopReason(hostile), StopDetail: hostile},
		Current: []api.Current{{Run: hostile, State: hostile, Slot: hostile}}, Amendments: []api.AmendmentBrief{{ID: hostile, Text: hostile}}})
	assertSafe(t, "status", b.String())

	b.Reset()
	if err := PrintRuns(&b, []api.RunBrief{{ID: hostile, State: hostile, Attempts: []api.AttemptBrief{{N: 1, State: "failed", Reason: hostile}}}}); err != nil {
		t.Fatal(err)
	}
	assertSafe(t, "runs", b.String())

	b.Reset()
	PrintEvent(&b, state.Event{Seq: 1, Run: hostile, Attempt: 1, From: hostile, To: hostile, Reason: hostile, Message: hostile})
	assertSafe(t, "events", b.String())

	b.Reset()
	PrintRun(&b, api.RunDetail{Run: state.Run{ID: hostile, Kind: hostile, Cell: hostile}, State: hostile,
		Attempts: []state.Attempt{{RunID: hostile, N: 1, State: state.Failed, Reason: state.Reason(hostile), Dir: "/nowhere/" + hostile,
			Procs: []state.Proc{{Role: hostile, Argv: []string{hostile}}}, Exits: []state.Exit{{Role: hostile, Signal: hostile}}}},
		Events: []state.Event{{Run: hostile, Attempt: 1, To: hostile, Message: hostile}},
		Gates:  []state.GateVerdict{{Gate: hostile, Attempt: 1, Verdict: hostile, Detail: hostile, Figures: map[string]float64{hostile: 1}}}})
	PrintStderrTails(&b, []StderrTail{{Attempt: 1, Role: hostile, File: hostile, Note: hostile, Lines: []string{hostile, "ok"}}})
	assertSafe(t, "show", b.String())

	// a sanity block is read from the attempt's own file
	b.Reset()
	printSanity(&b, json.RawMessage(`{"schema":"s\u001b[2J","verdict":"fail","red_flags":["f: \u001b]0;owned\u0007"],"families":[{"name":"\r\u001b[Kcomplete"}]}`))
	if out := b.String(); strings.ContainsAny(out, "\x1b\r\a") || !strings.Contains(out, `RED FLAG f: \x1b]0;owned\a`) || !strings.Contains(out, `\r\x1b[Kcomplete`) {
		t.Fatalf("sanity block:\n%q", out)
	}
}

// TestConsoleLogEscapes: the controller's log at a terminal repeats
// recorded text in its messages and fields: escaped too.
func TestConsoleLogEscapes(t *testing.T) {
	var b bytes.Buffer
	log := zerolog.New(ConsoleLog(&b, "15:04:05", true))
	text := strings.TrimSuffix(hostile, "\xff") // a JSON log line holds no invalid UTF-8
	log.Warn().Str("detail", text).Str(text, "v").Err(errors.New(text)).Msg(text)
	out := b.String()
	if strings.Count(out, `\x1b]0;owned\a\x1b[2J\r\x1b[Kcomplete\n\u009b31m\u202eevil`) != 4 {
		t.Fatalf("the message, the field's name and value and the error are not all escaped:\n%q", out)
	}
	for i, r := range out {
		if (r < 0x20 && r != '\n') || r == 0x7f || (r >= 0x80 && !unicode.IsPrint(r)) {
			t.Fatalf("rune %U at byte %d reaches the terminal:\n%q", r, i, out)
		}
	}
}
