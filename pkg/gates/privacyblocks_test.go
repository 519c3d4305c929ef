package gates

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
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
	r := rand.New(rand.NewPCG(3, 4))
	c := newCampaignFile(t, nil)
	base := jsonLines(r, 3*blockSize/100)
	c.write(base)
	c.scan()
	c.write(append(slices.Clone(base), []byte("not json: \"generated_text\": here\n")...))
	v, w := c.scan()
	if v.Verdict != Fail || v.Detail != w.Detail || !strings.Contains(v.Detail, fmt.Sprintf("line %d,", bytes.Count(base, []byte("\n"))+1)) {
		t.Errorf("changed lines: %s %q; whole: %q", v.Verdict, v.Detail, w.Detail)
	}
}

// What is compared is the file it was: another inode, or a file that is
// now one JSON value (parsed whole for its keys), is scanned whole.
func TestPrivacyScanChangedLinesWholeWhenNotTheSame(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	c := newCampaignFile(t, nil)
	base := jsonLines(r, 2*blockSize/100)
	c.write(base)
	c.scan()
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
	idx := index(t, DefaultMinLeakBytes, secrets...)
	c := newCampaignFile(t, idx)
	data := jsonLines(r, blockSize/100)
	data = append(data, make([]byte, blockSize)...) // a zero page
	data = append(data, jsonLines(r, blockSize/200)...)
	c.write(data)
	c.scan()
	leaks := [][]byte{[]byte(secretASCII), []byte(secretUni), []byte(`{"content":1}` + "\n"), []byte(`{"x":{"m\u0065ssages":2}}` + "\n")}
	if q, err := json.Marshal(secretQuote); err == nil {
		leaks = append(leaks, q)
	}
	partial, fails := 0, 0
	for i := range 100 {
		next := slices.Clone(data)
		switch k := r.IntN(4); {
		case k == 0: // lines appended
			next = append(next, jsonLines(r, 1+r.IntN(50))...)
		case k == 1: // bytes overwritten in place
			at := r.IntN(len(next) - 64)
			for j := range 1 + r.IntN(64) {
				next[at+j] = byte(r.IntN(256))
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
	if partial < 30 || fails < 15 {
		t.Errorf("%d scans of changed lines, %d leaks found, of 100 edits: the test did not test what it says", partial, fails)
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
