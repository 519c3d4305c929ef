package contract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
)

var eventSamples = []string{
	`{"ph": "X", "cat": "kernel", "name": "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", "pid": 0, "tid": 7,
	  "ts": 5250970551512.112, "dur": 2.5, "args": {"External id": 1, "correlation": 4242, "grid": [1, 1, 1], "stream": 7}}`,
	`{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":453,"tid":453,"ts":1e3,"dur":-0,"args":{"correlation":-9223372036854775808}}`,
	`{"ph":"M","name":"process_name","pid":1,"args":{"name":"python"}}`,
	`{"name":"void f\u003cint\u003e(\"x\")\t\/\\","ph":"X","cat":"kernel"}`,
	`{"name":"\ud83d\ude00 pair, \ud83d lone, \udc00 low, \ud83d\u0041","ph":"X"}`,
	"{\"name\":\"caf\u00e9 ok\",\"ph\":\"X\"}",
	"{\"name\":\"bad \xff byte\",\"ph\":\"X\"}",
	"{\"name\":\"bad \xff and \\n\",\"ph\":\"X\"}",
	`{"ph":"X","name":null,"cat":null,"ts":null,"dur":null,"pid":null,"tid":null,"args":null}`,
	`{"ph":"X","args":{"correlation":1},"args":null}`,
	`{"ph":"X","args":{"correlation":1},"args":{"grid":[1]}}`,
	`{"ph":"X","args":{"correlation":1},"args":{"correlation":null}}`,
	`{"ph":"X","args":{"correlation":1.5}}`,
	`{"ph":"X","args":{"correlation":1e2}}`,
	`{"ph":"X","args":{"correlation":"7"}}`,
	`{"ph":"X","args":{"correlation":9223372036854775808}}`,
	`{"ph":"X","args":{"Correlation":3}}`,
	`{"ph":"X","args":{"correlation":3,"CORRELATION":4}}`,
	`{"ph":"X","args":{"\u0063orrelation":3}}`,
	`{"ph":"X","args":{"\u0063\u006Frrelatio\u006e":3,"correlation":4}}`,
	"{\"ph\":\"X\",\"args\":{\"corr\u212aelation\":3,\"correlation\u017f\":4}}",
	`{"ph":"X","args":5}`,
	`{"ph":"X","args":[]}`,
	`{"ph":"X","Args":{"correlation":3}}`,
	`{"PH":"X","Name":"n","CAT":"kernel","Ts":1,"DUR":2,"Pid":3,"TID":4}`,
	`{"ph":"X","name":"a","name":"b","ts":1,"ts":2}`,
	`{"\u0070h":"X","name":"esc key"}`,
	"{\"ph\":\"X\",\"t\u017f\":5}",
	`{"ph":"X","name":5}`,
	`{"ph":"X","ts":"5"}`,
	`{"ph":"X","ts":1e400}`,
	`{"ph":"X","dur":-1e-400}`,
	`{"ph":"X","ts":true}`,
	`{"ph":"X","pid":{"a": [1, 2]},"tid":"t 1"}`,
	`{"ph":1}`,
	`{}`, `null`, `5`, `"x"`, `[1]`, `true`,
	`{"ph":"X",}`, `{"ph":"X" "cat":"k"}`, `{"ph":"X","args":{"correlation":1,}}`, `{"ph":"X","args":{"a":}}`, `{"ph":"X"`, `{"ph"}`,
	`{"ph":"X","extra":{"name":7,"args":{"correlation":"no"}}}`,
}

// checkEvent: the one-pass reading of an event agrees with json.Unmarshal
// into rawEvent: the same verdict on the JSON, the same error or none,
// the same values.
func checkEvent(t *testing.T, p []byte) {
	t.Helper()
	p = trimSpace(p) // the window hands over a value without whitespace
	var s eventScan
	end := s.walk(p, 0)
	if valid := json.Valid(p); (end == len(p)) != valid {
		t.Fatalf("%q: walk ends at %d of %d, encoding/json valid %v", p, end, len(p), valid)
	}
	if end != len(p) {
		return
	}
	var got, want rawEvent
	gerr := s.decode(p, &got, eventNames{})
	werr := json.Unmarshal(p, &want)
	if fmt.Sprint(gerr) != fmt.Sprint(werr) {
		t.Fatalf("%q: error %v, encoding/json %v", p, gerr, werr)
	}
	if gerr != nil {
		return
	}
	same := got.Name == want.Name && got.Cat == want.Cat && got.Ph == want.Ph &&
		fmt.Sprint(got.Ts) == fmt.Sprint(want.Ts) && fmt.Sprint(got.Dur) == fmt.Sprint(want.Dur) &&
		bytes.Equal(got.Pid, want.Pid) && bytes.Equal(got.Tid, want.Tid) &&
		(got.Args.Correlation == nil) == (want.Args.Correlation == nil) &&
		(got.Args.Correlation == nil || *got.Args.Correlation == *want.Args.Correlation)
	if !same {
		t.Fatalf("%q:\n got %+v %s %s %v\nwant %+v %s %s %v", p, got, got.Pid, got.Tid, got.Args.Correlation, want, want.Pid, want.Tid, want.Args.Correlation)
	}
}

func TestTraceEventAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range eventSamples {
		checkEvent(t, []byte(s))
	}
}

func FuzzTraceEvent(f *testing.F) {
	for _, s := range eventSamples {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) { checkEvent(t, p) })
}

// TestExactFloat: the fast path gives ParseFloat's value or declines.
func TestExactFloat(t *testing.T) {
	for _, s := range []string{"0", "-0", "1", "5250970551512.112", "820630.965", "0.1", "-2.5", "9007199254740991", "9007199254740992",
		"123456789012345678901", "1.0000000000000000000001", "0.0000000000000000000001", "1e5", "3.4028234663852886e38", "-0.000", "00"} {
		want, err := strconv.ParseFloat(s, 64)
		if got, ok := exactFloat([]byte(s)); ok && (err != nil || math.Float64bits(got) != math.Float64bits(want)) {
			t.Errorf("exactFloat(%s) = %v, ParseFloat %v (%v)", s, got, want, err)
		}
	}
}

func FuzzExactFloat(f *testing.F) {
	f.Add(uint64(5250970551512112), uint8(3), false)
	f.Fuzz(func(t *testing.T, m uint64, frac uint8, neg bool) {
		s := strconv.FormatUint(m, 10)
		if k := int(frac % 30); k > 0 {
			s = strings.Repeat("0", max(0, k-len(s)+1)) + s
			s = s[:len(s)-k] + "." + s[len(s)-k:]
		}
		if neg {
			s = "-" + s
		}
		want, _ := strconv.ParseFloat(s, 64)
		if got, ok := exactFloat([]byte(s)); ok && math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("exactFloat(%s) = %v, ParseFloat %v", s, got, want)
		}
	})
}
