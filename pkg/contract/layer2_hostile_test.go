package contract

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// repeatGzip is a valid gzip of head, then mib MiB of the byte unit, then
// tail, built without compressing the MiBs one by one: a MiB compressed
// after a flush, behind other copies of unit, is a byte-aligned block that
// decodes the same wherever it is repeated behind them.
func repeatGzip(t *testing.T, head string, unit byte, mib int, tail string) []byte {
	t.Helper()
	chunk := bytes.Repeat([]byte{unit}, 1<<20)
	var comp bytes.Buffer
	fw, _ := flate.NewWriter(&comp, flate.BestCompression)
	fw.Write([]byte(head))
	fw.Write(chunk)
	fw.Flush()
	a := comp.Len()
	fw.Write(chunk)
	fw.Flush()
	b := comp.Len()
	fw.Write([]byte(tail))
	fw.Close()
	c := comp.Bytes()
	out := bytes.NewBuffer([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff})
	out.Write(c[:b])
	crc := crc32.Update(0, crc32.IEEETable, []byte(head))
	crc = crc32.Update(crc, crc32.IEEETable, chunk)
	crc = crc32.Update(crc, crc32.IEEETable, chunk)
	for range mib - 2 {
		out.Write(c[a:b])
		crc = crc32.Update(crc, crc32.IEEETable, chunk)
	}
	out.Write(c[b:])
	crc = crc32.Update(crc, crc32.IEEETable, []byte(tail))
	size := uint32(len(head) + len(tail) + mib<<20) // mod 2^32, as gzip's ISIZE
	out.Write(binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, crc), size))
	return out.Bytes()
}

// layer2Bounded runs the Layer-2 check on one trace file and returns its
// result and the bytes it allocated.
func layer2Bounded(t *testing.T, gz []byte) (Result, uint64) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rank0_w0.pt.trace.json.gz"), gz, 0o644); err != nil {
		t.Fatal(err)
	}
	o := DefaultLayer2()
	o.Windows = 1
	g := runtime.NumGoroutine()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r := Layer2Dir(dir, o)
	runtime.ReadMemStats(&after)
	// the check's own goroutines end before it returns; the runtime's
	// finalizer and cleanup goroutines count while they run, so a GC
	// meanwhile can show one more for a moment: wait for it, with a
	// deadline
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(10 * time.Second); n > g && time.Now().Before(deadline); n = runtime.NumGoroutine() {
		time.Sleep(time.Millisecond)
	}
	if n > g {
		t.Errorf("%d goroutines 10 s after the check, %d before", n, g)
	}
	return r, after.TotalAlloc - before.TotalAlloc
}

// TestLayer2HostileTraces: a small gzip that inflates to a flood of
// whitespace, or to one enormous string, is read in bounded memory: the
// whitespace streams through, the string is refused once it passes the
// 16 MiB a value may hold, without inflating the rest.
func TestLayer2HostileTraces(t *testing.T) {
	cases := []struct {
		name             string
		head, tail       string
		unit             byte
		mib              int
		detail           string
		maxAlloc, maxGzK int
	}{
		// 64 MiB of spaces, a 64 KB gzip: no JSON object at all
		{name: "only whitespace", unit: ' ', mib: 64, detail: "the trace is not a JSON object", maxAlloc: 24 << 20, maxGzK: 80},
		// valid JSON: the whitespace lies between the events
		{name: "whitespace between events", head: `{"traceEvents":[`, tail: `]}`, unit: '\n', mib: 64, detail: "ProfilerSteps []", maxAlloc: 24 << 20, maxGzK: 80},
		// whitespace inside one event makes it a value over the bound
		{name: "whitespace inside an event", head: `{"traceEvents":[{"ph":`, tail: `"X"}]}`, unit: ' ', mib: 64, detail: "no valid JSON value ends within 16 MiB", maxAlloc: 96 << 20, maxGzK: 80},
		// a 3 MB gzip of one 3 GiB string
		{name: "3 GiB string", head: `{"traceEvents":[{"ph":"X","name":"`, tail: `"}]}`, unit: 'x', mib: 3 << 10, detail: "no valid JSON value ends within 16 MiB", maxAlloc: 96 << 20, maxGzK: 3200},
		{name: "64 MiB top-level string", head: `{"deviceProperties":"`, tail: `","traceEvents":[]}`, unit: 'x', mib: 64, detail: "no valid JSON value ends within 16 MiB", maxAlloc: 96 << 20, maxGzK: 80},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			gz := repeatGzip(t, tc.head, tc.unit, tc.mib, tc.tail)
			if len(gz) > tc.maxGzK<<10 {
				t.Fatalf("the gzip is %d bytes", len(gz))
			}
			r, alloc := layer2Bounded(t, gz)
			if r.Verdict != "fail" || !strings.Contains(r.Detail, tc.detail) {
				t.Fatalf("got %s %q, want a fail naming %q", r.Verdict, r.Detail, tc.detail)
			}
			if alloc > uint64(tc.maxAlloc) {
				t.Errorf("the check allocated %d MiB, more than %d MiB", alloc>>20, tc.maxAlloc>>20)
			}
		})
	}
}

// TestLayer2StreamEnd: the gzip is read to its end (a broken checksum is
// a gunzip error) and only whitespace may follow the trace object.
func TestLayer2StreamEnd(t *testing.T) {
	good := repeatGzip(t, `{"traceEvents":[]}`, ' ', 2, "\n")
	badCRC := bytes.Clone(good)
	badCRC[len(badCRC)-8] ^= 0xff
	cases := []struct {
		name   string
		gz     []byte
		detail string
	}{
		{"a well-formed empty trace", good, "ProfilerSteps []"},
		{"broken checksum", badCRC, "gunzip: gzip: invalid checksum"},
		{"truncated gzip", good[:len(good)-12], "gunzip: unexpected EOF"},
		{"data after the object", repeatGzip(t, `{"traceEvents":[]}`, ' ', 2, `{}`), "parse: data after the trace object at byte 2097171"},
		{"two objects, no whitespace", repeatGzip(t, `{"traceEvents":[]}{}`, ' ', 2, ""), "parse: data after the trace object at byte 19"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := layer2Bounded(t, tc.gz)
			if r.Verdict != "fail" || !strings.Contains(r.Detail, tc.detail) {
				t.Fatalf("got %s %q, want a fail naming %q", r.Verdict, r.Detail, tc.detail)
			}
		})
	}
}

// TestLayer2StraySyntax: a byte that cannot begin a value where an event
// should be is a syntax error at once, named by its offset.
func TestLayer2StraySyntax(t *testing.T) {
	r, _ := layer2Bounded(t, repeatGzip(t, `{"traceEvents":[`+"\n,", ' ', 2, `{}]}`))
	if want := "parse: invalid JSON at byte 18 of the trace"; r.Verdict != "fail" || !strings.Contains(r.Detail, want) {
		t.Fatalf("got %s %q, want a fail naming %q", r.Verdict, r.Detail, want)
	}
}
