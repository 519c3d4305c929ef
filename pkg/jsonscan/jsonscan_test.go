package jsonscan

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

var samples = []string{
	`{}`, `[]`, `""`, `0`, `-0`, `1.5e10`, `-1E-2`, `true`, `false`, `null`, ` {"a" : [1, 2.0, {"b":null}] } `,
	`{"id":"cmpl-1","choices":[{"index":0,"text":" tok","logprobs":null,"finish_reason":null}],"usage":null}`,
	`"\u00e9\n\"\\\/\b\f\r\t"`, "\"\xff\xfe\"", `[[[[]]]]`, `{"a":{"b":{"c":[true,false,null]}}}`,
	// invalid
	``, ` `, `{`, `}`, `[`, `{"a"}`, `{"a":}`, `{"a":1,}`, `[1,]`, `[,1]`, `{,}`, `01`, `-`, `1.`, `.5`, `1e`, `1e+`, `+1`,
	`tru`, `nul`, `truex`, `"abc`, `"\x"`, `"\u12"`, `"\u12G4"`, "\"a\x01b\"", `{"a":1}x`, `{"a":1}{}`, `{a:1}`,
	`{"a":1 "b":2}`, `"abcdefghijklmnop\"qrstuvwxyz"`, `"abcdefgh\u0041ijklmnopq"`, "\"abcdefghijklm\x1fnop\"", `"abcdefghijklmnopqrstuvwxyz\`, `[1 2]`, `NaN`, `Infinity`, `0x10`, `{"a":[}`, `"\`, `{"\u0061":1}`, `[-]`, `[1e5,-0.0e-0]`,
}

func TestValidAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range samples {
		if got, want := Valid([]byte(s)), json.Valid([]byte(s)); got != want {
			t.Errorf("Valid(%q) = %v, encoding/json says %v", s, got, want)
		}
	}
	deep := strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)
	if Valid([]byte(deep)) {
		t.Errorf("nesting deeper than %d accepted", MaxDepth)
	}
	if ok := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth); !Valid([]byte(ok)) {
		t.Errorf("nesting of %d refused", MaxDepth)
	}
}

func FuzzValid(f *testing.F) {
	for _, s := range samples {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		if got, want := Valid(p), json.Valid(p); got != want {
			t.Fatalf("Valid(%q) = %v, encoding/json says %v", p, got, want)
		}
		end, v, isInt := Number(p, 0)
		if end != SkipNumber(p, 0) {
			t.Fatalf("Number(%q) ends at %d, SkipNumber at %d", p, end, SkipNumber(p, 0))
		}
		if end > 0 {
			if iv, iok := Int(p[:end]); iok != isInt || iv != v {
				t.Fatalf("Number(%q) = %d, %v; Int says %d, %v", p, v, isInt, iv, iok)
			}
		}
	})
}

func TestInt(t *testing.T) {
	for _, s := range []string{"0", "-0", "7", "-7", "9223372036854775807", "-9223372036854775808", "9223372036854775808",
		"-9223372036854775809", "99999999999999999999", "01", "-", "", "1.0", "1e3", "+1", "12a", "-0.5", "123456789012345678901.5e3", "18446744073709551616"} {
		v, ok := Int([]byte(s))
		w, err := strconv.ParseInt(s, 10, 64)
		want := err == nil && s[0] != '+' && !(len(strings.TrimPrefix(s, "-")) > 1 && strings.TrimPrefix(s, "-")[0] == '0')
		if ok != want || ok && v != w {
			t.Errorf("Int(%q) = %d, %v; want %d, %v", s, v, ok, w, want)
		}
		// Number scans as SkipNumber does and parses what it scanned as
		// Int does.
		end, nv, nok := Number([]byte(s), 0)
		if end != SkipNumber([]byte(s), 0) {
			t.Errorf("Number(%q) ends at %d, SkipNumber at %d", s, end, SkipNumber([]byte(s), 0))
		}
		if end > 0 {
			iv, iok := Int([]byte(s[:end]))
			if nok != iok || nv != iv {
				t.Errorf("Number(%q) = %d, %v; Int of %q = %d, %v", s, nv, nok, s[:end], iv, iok)
			}
		}
	}
}

// TestMembersItems: the walkers see every member and item, and refuse
// what Valid refuses.
func TestMembersItems(t *testing.T) {
	p := []byte(`{"a" : 1, "b\"":[true, {"c":null}], "d":"x"}`)
	var got []string
	if end := Members(p, 0, func(k, v []byte) { got = append(got, string(k)+"="+string(v)) }); end != len(p) {
		t.Fatalf("end %d", end)
	}
	if s := strings.Join(got, " "); s != `a=1 b\"=[true, {"c":null}] d="x"` {
		t.Fatalf("members %s", s)
	}
	got = nil
	q := []byte(`[1, "x" ,{}]`)
	if end := Items(q, 0, func(v []byte) { got = append(got, string(v)) }); end != len(q) || strings.Join(got, "|") != `1|"x"|{}` {
		t.Fatalf("items %v end %d", got, end)
	}
	for _, s := range samples {
		p := []byte(strings.TrimSpace(s))
		if len(p) > 0 && p[0] == '{' {
			ok := Members(p, 0, func(_, _ []byte) {}) == len(p)
			if ok != json.Valid(p) {
				t.Errorf("Members(%q) valid %v", s, ok)
			}
		}
		if len(p) > 0 && p[0] == '[' {
			ok := Items(p, 0, func([]byte) {}) == len(p)
			if ok != json.Valid(p) && !strings.Contains(s, strings.Repeat("[", 100)) {
				t.Errorf("Items(%q) valid %v", s, ok)
			}
		}
	}
}

// checkIntArray: IntArray ends where Skip does and says whether every item
// is what Int accepts.
func checkIntArray(t *testing.T, p []byte) {
	t.Helper()
	if len(p) == 0 || p[0] != '[' {
		return
	}
	end, all := IntArray(p, 0)
	if want := Skip(p, 0); end != want {
		t.Fatalf("IntArray(%q) ends at %d, Skip at %d", p, end, want)
	}
	if end < 0 {
		return
	}
	want := true
	Items(p, 0, func(v []byte) {
		if _, ok := Int(v); !ok {
			want = false
		}
	})
	if all != want {
		t.Fatalf("IntArray(%q) all-integer %v, Int on each item says %v", p, all, want)
	}
}

func TestIntArray(t *testing.T) {
	for _, s := range []string{`[]`, `[ ]`, `[0]`, `[1, -2 ,3]`, `[1.0]`, `[1e3]`, `[9223372036854775808]`, `[-9223372036854775808]`,
		`["1"]`, `[[1]]`, `[1,]`, `[,1]`, `[1 2]`, `[01]`, `[-]`, `[`, `[1`, `[1,`, `[null]`, `[true,1]`, `[1,{"a":[2]}]`} {
		checkIntArray(t, []byte(s))
	}
}

func FuzzIntArray(f *testing.F) {
	for _, s := range []string{`[1,2]`, `[1.5]`, `[[1],2]`, `[-0, 9223372036854775807]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) { checkIntArray(t, p) })
}
