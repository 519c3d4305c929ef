package gates

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// found is what a verdict's detail names: each private value and each
// forbidden field, without where (the view a value is named in first may
// differ between a whole scan and one of changed lines).
func found(v Verdict) []string {
	var out []string
	for _, m := range regexp.MustCompile(`private value (\S+),|forbidden field "?([A-Za-z_]+)`).FindAllStringSubmatch(v.Detail, -1) {
		out = append(out, m[1]+m[2])
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func idOf(value string) string {
	sum := sha256.Sum256([]byte(value))
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// campaignFile is a scan of one file through a cache, as a campaign's own
// files are scanned after each attempt, beside a whole scan of the same
// content with no cache.
type campaignFile struct {
	t      *testing.T
	dir    string
	path   string
	cache  ScanCache
	idx    *PrivateIndex
	fields []string
	mtime  time.Time
}

func newCampaignFile(t *testing.T, idx *PrivateIndex) *campaignFile {
	dir := t.TempDir()
	return &campaignFile{t: t, dir: dir, path: filepath.Join(dir, "state.db"), idx: idx, fields: forbidden,
		mtime: time.Date(2026, 7, 12, 0, 0, 0, 0, time.UTC)}
}

// write puts data in the file, in place (the same inode), with a later
// modification time.
func (c *campaignFile) write(data []byte) {
	c.t.Helper()
	if err := os.WriteFile(c.path, data, 0o600); err != nil {
		c.t.Fatal(err)
	}
	c.mtime = c.mtime.Add(time.Second)
	if err := os.Chtimes(c.path, c.mtime, c.mtime); err != nil {
		c.t.Fatal(err)
	}
}

// scan returns the cached scan's verdict and the whole scan's.
func (c *campaignFile) scan() (cached, whole Verdict) {
	now := c.mtime
	cached = PrivacyScanCached(c.dir, c.fields, c.idx, nil, 1<<30, &c.cache, now)
	whole = PrivacyScan(c.dir, c.fields, c.idx, nil, 1<<30, now)
	return cached, whole
}

// jsonLines is n lines of JSON records, each about 100 bytes, some with
// escapes.
func jsonLines(r *rand.Rand, n int) []byte {
	var b bytes.Buffer
	for i := range n {
		note := fmt.Sprintf("record %d \"quoted\" \\ tab\t <%d>", i, r.IntN(1e6))
		raw, _ := json.Marshal(map[string]any{"seq": i, "note": note, "figures": []float64{r.Float64(), r.Float64()}})
		b.Write(raw)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// scannedJSONLines is a campaign file of n JSON lines (from seed), scanned
// once through its cache, and its content.
func scannedJSONLines(t *testing.T, seed uint64, n int) (*campaignFile, []byte) {
	c := newCampaignFile(t, nil)
	base := jsonLines(rand.New(rand.NewPCG(seed, seed+1)), n)
	c.write(base)
	c.scan()
	return c, base
}

// The scan of changed lines finds what a whole scan finds, for leaks put
// where the blocks meet, across them, in the decoded view and in a line
// that begins in an unchanged block; and it is what scanned the file
// (files_partial, bytes_unchanged), so the test is of it.
func TestPrivacyScanChangedLines(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	idx := index(t, DefaultMinLeakBytes, secrets...)
	base := jsonLines(r, 4*blockSize/100) // about four blocks
	half := len(secretASCII) / 2          // under the leak length: clean alone
	copy(base[2*blockSize-half:], secretASCII[:half])
	// the first line of a private value with a line break ends block 2
	quoteA, quoteB, _ := strings.Cut(secretQuote, "\n")
	copy(base[3*blockSize-len(quoteA)-1:], quoteA+"\n")
	// a line from block 0 into block 1, its last key clean
	line := []byte(`{"pad":"` + strings.Repeat("x", 200) + `","pr\u006fmpX":"x"}` + "\n")
	copy(base[bytes.LastIndexByte(base[:blockSize-100], '\n')+1:], line)
	escaped, _ := json.Marshal(secretQuote)
	cases := []struct {
		name string
		edit func(b []byte) []byte
		want []string
	}{
		{"private text appended", func(b []byte) []byte { return append(b, []byte(`{"note":"`+secretASCII+`"}`+"\n")...) }, []string{idOf(secretASCII)}},
		{"the rest of private text after its first half, which ends an unchanged block", func(b []byte) []byte {
			copy(b[2*blockSize:], secretASCII[half:])
			return b
		}, []string{idOf(secretASCII)}},
		{"its second line after it, in the next block", func(b []byte) []byte {
			copy(b[3*blockSize:], quoteB)
			return b
		}, []string{idOf(secretQuote)}},
		{"escaped private text across a block's start", func(b []byte) []byte {
			copy(b[4*blockSize-3:], escaped)
			return b
		}, []string{idOf(secretQuote)}},
		{"a forbidden key made in a line that begins in an unchanged block", func(b []byte) []byte {
			i := bytes.LastIndexByte(b, 'X')
			b[i] = 't' // "pr\u006fmpX" becomes "prompt", escaped
			return b
		}, []string{"prompt"}},
		{"a forbidden field in bytes, in place in the last block", func(b []byte) []byte {
			at := len(b) - 50
			return slices.Concat(b[:at], []byte(`"content" : 1`), b[at+13:])
		}, []string{"content"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCampaignFile(t, idx)
			c.write(base)
			if v, _ := c.scan(); v.Verdict != Pass {
				t.Fatalf("the clean file: %s %q", v.Verdict, v.Detail)
			}
			c.write(tc.edit(slices.Clone(base)))
			v, w := c.scan()
			if w.Verdict != Fail || !slices.Equal(found(w), tc.want) {
				t.Fatalf("the whole scan: %s %q, want %v found (the case is wrong)", w.Verdict, w.Detail, tc.want)
			}
			if v.Verdict != Fail || !slices.Equal(found(v), found(w)) {
				t.Errorf("the scan of changed lines: %s %q %v, want %v found as the whole scan found them (%q)", v.Verdict, v.Detail, v.Figures, found(w), w.Detail)
			}
			if v.Figures["files_partial"] != 1 || v.Figures["bytes_unchanged"] < blockSize {
				t.Errorf("the file was not scanned by its changed lines: %v", v.Figures)
			}
		})
	}
}

// A line number in a finding is counted from the file's start, as a whole
// scan counts it.
func TestPrivacyScanChangedLinesNumbersLines(t *testing.T) {
	c, base := scannedJSONLines(t, 3, 3*blockSize/100)
	c.write(append(slices.Clone(base), []byte("not json: \"generated_text\": here\n")...))
	v, w := c.scan()
	if v.Verdict != Fail || v.Detail != w.Detail || !strings.Contains(v.Detail, fmt.Sprintf("line %d,", bytes.Count(base, []byte("\n"))+1)) {
		t.Errorf("changed lines: %s %q; whole: %q", v.Verdict, v.Detail, w.Detail)
	}
}

// What is compared is the file it was: another inode, or a file that is
// now one JSON value (parsed whole for its keys), is scanned whole.
func TestPrivacyScanChangedLinesWholeWhenNotTheSame(t *testing.T) {
	c, base := scannedJSONLines(t, 5, 2*blockSize/100)
	// replaced by another file with the same bytes but a leak at its end
	tmp := c.path + ".new"
	if err := os.WriteFile(tmp, append(slices.Clone(base), []byte("\"messages\": []\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, c.path); err != nil {
		t.Fatal(err)
	}
	if v, _ := c.scan(); v.Verdict != Fail || v.Figures["files_partial"] != 0 {
		t.Errorf("a replaced file: %s %q %v, want fail, scanned whole", v.Verdict, v.Detail, v.Figures)
	}
	// one JSON value whose only forbidden key is escaped, deep in a block
	// that does not change
	c = newCampaignFile(t, nil)
	val := []byte(`{"a":"` + strings.Repeat("y", blockSize) + `", "pr\u006fmpt": 1, "b":"` + strings.Repeat("z", blockSize) + `"` + "\n")
	c.write(val) // not JSON yet: the object is not closed
	if v, _ := c.scan(); v.Verdict != Pass {
		t.Fatalf("an unclosed object: %s %q", v.Verdict, v.Detail)
	}
	c.write(append(slices.Clone(val), '}', '\n'))
	if v, w := c.scan(); w.Verdict != Fail || v.Verdict != Fail || v.Figures["files_partial"] != 0 {
		t.Errorf("now one JSON value: cached %s %q %v, whole %s %q", v.Verdict, v.Detail, v.Figures, w.Verdict, w.Detail)
	}
}

// Random edits of a file of JSON lines and binary pages, each scanned
// through the cache and whole: the verdicts and what they name agree every
// time, and most scans were of changed lines.
func TestPrivacyScanChangedLinesAgreesWithWhole(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const secretPath = `C:\Users\alice\Documents\clinical-notes\patient-4471.txt`
	idx := index(t, DefaultMinLeakBytes, append(slices.Clone(secrets), []byte(secretPath))...)
	c := newCampaignFile(t, idx)
	// JSON lines, a zero page, a run of backslashes, binary bytes
	data := jsonLines(r, blockSize/100)
	data = append(data, make([]byte, blockSize)...)
	data = append(data, bytes.Repeat([]byte{'\\'}, 700)...)
	for range blockSize {
		data = append(data, byte(r.IntN(256)))
	}
	data = append(data, jsonLines(r, blockSize/200)...)
	c.write(data)
	c.scan()
	leaks := [][]byte{[]byte(secretASCII), []byte(secretUni), []byte(`{"content":1}` + "\n"), []byte(`{"x":{"m\u0065ssages":2}}` + "\n"),
		[]byte(`"prompt" :`), []byte(secretPath)}
	for _, v := range []string{secretQuote, secretUni, secretPath} {
		q, _ := json.Marshal(v)
		leaks = append(leaks, q, bytes.ReplaceAll(q, []byte(`\\`), []byte(`\u005c`)))
	}
	partial, fails := 0, 0
	for i := range 200 {
		next := slices.Clone(data)
		switch k := r.IntN(4); {
		case k == 0: // lines appended
			next = append(next, jsonLines(r, 1+r.IntN(50))...)
		case k == 1: // bytes overwritten in place, some of them backslashes
			at := r.IntN(len(next) - 64)
			for j := range 1 + r.IntN(64) {
				next[at+j] = byte(r.IntN(256))
				if r.IntN(3) == 0 {
					next[at+j] = '\\'
				}
			}
		default: // a leak put somewhere, often where two blocks meet
			leak := leaks[r.IntN(len(leaks))]
			at := r.IntN(len(next) - len(leak))
			if r.IntN(2) == 0 {
				at = max(0, min(len(next)-len(leak), (1+r.IntN(len(next)/blockSize))*blockSize-r.IntN(len(leak))))
			}
			copy(next[at:], leak)
		}
		c.write(next)
		v, w := c.scan()
		if v.Verdict != w.Verdict || !slices.Equal(found(v), found(w)) {
			t.Fatalf("edit %d: through the cache %s %q, whole %s %q", i, v.Verdict, v.Detail, w.Verdict, w.Detail)
		}
		if v.Figures["files_partial"] == 1 {
			partial++
		}
		if w.Verdict == Fail {
			fails++
			c.write(data) // back to the clean file, scanned whole next
			if v, _ := c.scan(); v.Verdict != Pass {
				t.Fatalf("edit %d undone: %s %q", i, v.Verdict, v.Detail)
			}
			continue
		}
		data = next
	}
	if partial < 60 || fails < 30 {
		t.Errorf("%d scans of changed lines, %d leaks found, of 200 edits: the test did not test what it says", partial, fails)
	}
}

// A line that changed is examined whole, from where it begins in a block
// that did not change (no private index: nothing widens the range).
func TestPrivacyScanChangedLinesExaminesWholeLines(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	c := newCampaignFile(t, nil)
	base := jsonLines(r, 2*blockSize/100)
	line := []byte(`{"pad":"` + strings.Repeat("x", 400) + `","pr\u006fmpX":"x"}` + "\n")
	copy(base[bytes.LastIndexByte(base[:blockSize-200], '\n')+1:], line)
	c.write(base)
	if v, _ := c.scan(); v.Verdict != Pass {
		t.Fatalf("the clean file: %s %q", v.Verdict, v.Detail)
	}
	base[bytes.LastIndexByte(base, 'X')] = 't'
	c.write(base)
	if v, w := c.scan(); v.Verdict != Fail || !slices.Equal(found(v), []string{"prompt"}) || v.Figures["files_partial"] != 1 {
		t.Errorf("changed lines: %s %q %v; whole: %s %q", v.Verdict, v.Detail, v.Figures, w.Verdict, w.Detail)
	}
}

// textLines is n lines of text that are not JSON, each about 60 bytes.
func textLines(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, "line %06d of a log that is not JSON, padded to length\n", i)
	}
	return b.Bytes()
}

// The decoded view of the changed bytes' reach: private text written all
// in \u00XX escapes (six raw bytes a byte) and completed by a change at a
// block's start is found, though its start is 282 bytes back in a block
// that did not change; and where escapes begin is read from the bytes
// before the range (a run of backslashes carries it) and after it (a change
// before a long run of backslashes changes what follows the run).
func TestPrivacyScanChangedLinesDecodedReach(t *testing.T) {
	tail := "is the code point, written in the clinical note of patient 4471"
	bs := strings.Repeat(`\`, 20)
	escaped := func(s string) string {
		var b strings.Builder
		for _, c := range []byte(s) {
			fmt.Fprintf(&b, `\u%04x`, c)
		}
		return b.String()
	}
	// a layout: text lines, then at least 600 bytes before block B begins
	layout := func(before, after string) ([]byte, int) {
		data := textLines(6 * blockSize / 60)
		b := 3 * blockSize
		copy(data[b-len(before):], before)
		copy(data[b:], after)
		return data, b
	}
	cases := []struct {
		name          string
		value         string
		before, after string // the base's bytes around block B
		edit          func(data []byte, b int)
	}{
		{"private text in \\u00XX escapes, completed at a block's start", secretASCII,
			"note: " + escaped(secretASCII[:47]), escaped("#"),
			func(data []byte, b int) { copy(data[b:], escaped(secretASCII[47:48])) }},
		{"the range begins in a run of backslashes: it is read from where escapes are in step", bs + "A" + tail[:40],
			strings.Repeat(`\`, 501) + "u0041" + tail[:19], strings.Repeat("X", 30),
			func(data []byte, b int) { copy(data[b:], tail[19:40]) }},
		{"a change before a run of backslashes longer than a block", bs + "A" + tail[:40],
			"", strings.Repeat(`\`, 5002) + "u0041" + tail[:40] + "\n",
			func(data []byte, b int) { data[b] = 'x' }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCampaignFile(t, index(t, DefaultMinLeakBytes, []byte(tc.value)))
			data, b := layout(tc.before, tc.after)
			if reach := newPrivacyScan(c.fields, c.idx, 1<<30).reach(); reach != 300 {
				t.Fatalf("reach %d: the layouts are drawn for 300 (6 x 48 + 12)", reach)
			}
			c.write(data)
			if v, w := c.scan(); v.Verdict != Pass || w.Verdict != Pass {
				t.Fatalf("the base: %s %q, whole %s %q", v.Verdict, v.Detail, w.Verdict, w.Detail)
			}
			tc.edit(data, b)
			c.write(data)
			v, w := c.scan()
			if w.Verdict != Fail {
				t.Fatalf("the whole scan: %s %q, want the private text found (the case is wrong)", w.Verdict, w.Detail)
			}
			if v.Verdict != Fail || v.Figures["files_partial"] != 1 || v.Figures["bytes_unchanged"] == 0 {
				t.Errorf("changed bytes: %s %q %v, want the private text found", v.Verdict, v.Detail, v.Figures)
			}
		})
	}
}

// A change that makes a line begin with '{' has the whole line parsed,
// though the range of the change ends long before the line does.
func TestPrivacyScanChangedLinesParsesALineMadeJSON(t *testing.T) {
	c := newCampaignFile(t, nil)
	data := textLines(4 * blockSize / 60)
	b := bytes.LastIndexByte(data[:blockSize], '\n') + 1
	line := `X"pad":"` + strings.Repeat("p", 2*blockSize) + `","pr\u006fmpt":1}` + "\n"
	data = slices.Concat(data[:b], []byte(line), data[b:])
	c.write(data)
	if v, _ := c.scan(); v.Verdict != Pass {
		t.Fatalf("the base: %s %q", v.Verdict, v.Detail)
	}
	data[b] = '{'
	c.write(data)
	if v, w := c.scan(); w.Verdict != Fail || v.Verdict != Fail || !slices.Equal(found(v), []string{"prompt"}) || v.Figures["files_partial"] != 1 {
		t.Errorf("changed bytes: %s %q %v; whole %s %q", v.Verdict, v.Detail, v.Figures, w.Verdict, w.Detail)
	}
}

// A change in a long binary stretch with few line breaks (a database's
// pages) has about its reach examined, not the stretch.
func TestPrivacyScanChangedLinesExaminesLittleOfBinary(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	c := newCampaignFile(t, index(t, DefaultMinLeakBytes, secrets...))
	data := make([]byte, 64*blockSize) // zero pages
	for i := 20 * blockSize; i < 24*blockSize; i++ {
		data[i] = byte(r.IntN(256))
	}
	c.write(data)
	c.scan()
	copy(data[30*blockSize+100:], `"generated_text" : 3`)
	c.write(data)
	v, w := c.scan()
	if v.Verdict != Fail || !slices.Equal(found(v), found(w)) || v.Figures["bytes_scanned"] > 2*blockSize {
		t.Errorf("changed bytes: %s %q %v; whole %s %q", v.Verdict, v.Detail, v.Figures, w.Verdict, w.Detail)
	}
}

// BenchmarkCampaignScan is the scan of a campaign's own files after an
// attempt: a 4 MiB database of which 36 pages changed and a log that grew
// by 3 KB, by changed blocks (changed) and, beside it, by lines (lines:
// each changed file read whole, the lines an earlier scan examined left
// out, private text searched in all of it), with and without a private
// index. bytes/op is what was examined.
func BenchmarkCampaignScan(b *testing.B) {
	r := rand.New(rand.NewPCG(13, 14))
	db := make([]byte, 1024*blockSize)
	for off := 0; off < len(db)/2; off += blockSize { // half the pages hold records
		copy(db[off+64:], jsonLines(r, 30))
	}
	log := textLines(4000)
	private := index(b, DefaultMinLeakBytes, secrets...)
	for _, bc := range []struct {
		name      string
		idx       *PrivateIndex
		linesOnly bool
	}{{"changed", nil, false}, {"lines", nil, true}, {"changed/private", private, false}, {"lines/private", private, true}} {
		b.Run(bc.name, func(b *testing.B) {
			dir := b.TempDir()
			dbPath, logPath := filepath.Join(dir, "state.db"), filepath.Join(dir, "controller.log")
			d, l := slices.Clone(db), slices.Clone(log)
			mt := time.Date(2026, 7, 12, 0, 0, 0, 0, time.UTC)
			write := func() {
				mt = mt.Add(time.Second)
				for p, data := range map[string][]byte{dbPath: d, logPath: l} {
					if err := os.WriteFile(p, data, 0o600); err != nil {
						b.Fatal(err)
					}
					if err := os.Chtimes(p, mt, mt); err != nil {
						b.Fatal(err)
					}
				}
			}
			cache := ScanCache{linesOnly: bc.linesOnly}
			write()
			PrivacyScanCached(dir, forbidden, bc.idx, nil, 64<<20, &cache, mt)
			scanned := 0.0
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				for range 36 {
					copy(d[r.IntN(len(d)/blockSize)*blockSize:], d[r.IntN(len(d)/blockSize)*blockSize:][:blockSize])
				}
				l = append(l, textLines(50)...)
				write()
				b.StartTimer()
				v := PrivacyScanCached(dir, forbidden, bc.idx, nil, 64<<20, &cache, mt)
				if v.Verdict != Pass {
					b.Fatalf("%s %q", v.Verdict, v.Detail)
				}
				scanned += v.Figures["bytes_scanned"]
			}
			b.ReportMetric(scanned/float64(b.N), "bytes/op")
		})
	}
}

// Scans of the same files through one cache at the same time (attempts of
// two slots ending together) agree, and share nothing they write (the race
// detector watches).
func TestPrivacyScanChangedLinesConcurrent(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	c := newCampaignFile(t, index(t, DefaultMinLeakBytes, secrets...))
	data := jsonLines(r, 8*blockSize/100)
	c.write(data)
	c.scan()
	for i := range 10 {
		data = append(data, jsonLines(r, 20)...)
		copy(data[r.IntN(len(data)-blockSize):], jsonLines(r, 5))
		c.write(data)
		verdicts := make([]Verdict, 4)
		var wg sync.WaitGroup
		for k := range verdicts {
			wg.Go(func() { verdicts[k] = PrivacyScanCached(c.dir, c.fields, c.idx, nil, 1<<30, &c.cache, c.mtime) })
		}
		wg.Wait()
		for k, v := range verdicts {
			if v.Verdict != Pass {
				t.Fatalf("edit %d, scan %d: %s %q", i, k, v.Verdict, v.Detail)
			}
		}
	}
}

// A file cut short at a block's end has its new last block examined: the
// escape the cut leaves unfinished is decoded otherwise than before (here
// it completes a private value whose start is escaped: found in neither
// view before the cut).
func TestPrivacyScanChangedLinesFileCutShort(t *testing.T) {
	prefix := `4471: the patient said "stop" at noon, code ` // 44 bytes: short of a leak alone
	value := prefix + `\u00`
	raw, _ := json.Marshal(prefix) // "note 4471: the patient said \"stop\" ..."
	raw = append(raw[1:len(raw)-1], `\u00`...)
	c := newCampaignFile(t, index(t, DefaultMinLeakBytes, []byte(value)))
	data := textLines(4 * blockSize / 60)
	cut := 2 * blockSize
	copy(data[cut-len(raw):], raw)
	copy(data[cut:], "41 and the rest of the line")
	c.write(data)
	if v, w := c.scan(); v.Verdict != Pass || w.Verdict != Pass {
		t.Fatalf("the base: %s %q, whole %s %q", v.Verdict, v.Detail, w.Verdict, w.Detail)
	}
	c.write(data[:cut])
	v, w := c.scan()
	if w.Verdict != Fail {
		t.Fatalf("the whole scan of the cut file: %s %q, want the private value found (the case is wrong)", w.Verdict, w.Detail)
	}
	if v.Verdict != Fail || v.Figures["files_partial"] != 1 {
		t.Errorf("cut short: %s %q %v, want the private value found", v.Verdict, v.Detail, v.Figures)
	}
}

// A file of megabytes is read and hashed in parts at once: its verdict,
// findings and figures are those of the same scan read whole on one
// goroutine (GOMAXPROCS 1), with leaks in every part; a leak alone across
// a boundary of the parts is found; and its cached scan after an edit in
// its last part finds the leak the edit made.
func TestPrivacyScanLargeFileInParts(t *testing.T) {
	data := textLines(3*parallelMin/56 + 1000) // 3.2 MiB: three parts
	for off := 200 << 10; off+len(secretASCII) < len(data); off += 300 << 10 {
		copy(data[off:], secretASCII)
	}
	c := newCampaignFile(t, index(t, DefaultMinLeakBytes, secrets...))
	c.write(data)
	scan := func(procs int) Verdict {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		return PrivacyScan(c.dir, c.fields, c.idx, nil, 1<<30, c.mtime)
	}
	procs := runtime.GOMAXPROCS(0)
	parts, whole := scan(8), scan(1)
	if runtime.GOMAXPROCS(0) != procs {
		t.Fatal("test bug: GOMAXPROCS was not restored")
	}
	if parts.Verdict != Fail || parts.Detail != whole.Detail || !maps.Equal(parts.Figures, whole.Figures) {
		t.Fatalf("in parts: %s %v %q\nwhole: %s %v %q", parts.Verdict, parts.Figures, parts.Detail, whole.Verdict, whole.Figures, whole.Detail)
	}
	// one leak alone across each boundary of the parts read
	func() {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
		n := partsOf(len(data))
		per := (len(data) + n - 1) / n
		for b := per; b < len(data); b += per {
			one := textLines(3*parallelMin/56 + 1000)
			copy(one[b-len(secretASCII)/2:], secretASCII)
			c.write(one)
			if v := PrivacyScan(c.dir, c.fields, c.idx, nil, 1<<30, c.mtime); v.Verdict != Fail {
				t.Errorf("a leak across byte %d of %d (%d parts): %s %q", b, len(one), n, v.Verdict, v.Detail)
			}
		}
	}()

	clean := textLines(3*parallelMin/56 + 1000)
	c.write(clean)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	if v, w := c.scan(); v.Verdict != Pass || w.Verdict != Pass {
		t.Fatalf("clean: %s %q, whole %s %q", v.Verdict, v.Detail, w.Verdict, w.Detail)
	}
	copy(clean[len(clean)-100<<10:], secretASCII)
	c.write(clean)
	v, w := c.scan()
	if v.Verdict != Fail || !slices.Equal(found(v), found(w)) || v.Figures["files_partial"] != 1 {
		t.Errorf("after an edit in the last part: %s %q %v; whole %s %q", v.Verdict, v.Detail, v.Figures, w.Verdict, w.Detail)
	}
}

// readAtParallel reads what a plain read does, in every part count, and
// reports a file cut short.
func TestReadAtParallel(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	data := make([]byte, 5*parallelMin+123)
	for i := range data {
		data[i] = byte(i * 7 / 13)
	}
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, n := range []int{parallelMin, 2*parallelMin + 1, len(data)} {
		buf := make([]byte, n)
		if whole, err := readAtParallel(f, buf); !whole || err != nil || !bytes.Equal(buf, data[:n]) {
			t.Fatalf("%d bytes: whole %v, %v, equal %v", n, whole, err, bytes.Equal(buf, data[:n]))
		}
	}
	if whole, err := readAtParallel(f, make([]byte, len(data)+1)); whole || err != nil {
		t.Fatalf("past the end: whole %v, %v; want a short read reported", whole, err)
	}
}
