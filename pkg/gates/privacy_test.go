package gates

import (
	"bytes"
	"compress/gzip"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

var forbidden = []string{"prompt", "messages", "content", "generated_text"}

const (
	secretASCII = "Summarize the following clinical note for patient Alice Wong"
	secretQuote = "He said \"stop\"\nand left the room at noon <quietly>"
	secretUni   = "Résumé of naïve café owners: 東京の話 🍣 and more"
	secretShort = "Alice Wong" // under the leak length: not indexed
)

var secrets = [][]byte{[]byte(secretASCII), []byte(secretQuote), []byte(secretUni), []byte(secretShort)}

// index builds a PrivateIndex of values for leaks of minLen bytes.
func index(t testing.TB, minLen int, values ...[]byte) *PrivateIndex {
	t.Helper()
	b := NewIndexBuilder(minLen)
	for _, v := range values {
		b.Add(v)
	}
	x, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// tree writes files (slash-separated relative paths) under a new directory.
func tree(t *testing.T, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	for rel, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func gz(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// filler is n bytes of log-like text that holds nothing private.
func filler(n int) []byte {
	line := []byte("INFO 07-13 01:02:03 step=1234 batch=64 kv_usage=0.81 tokens=512\n")
	return bytes.Repeat(line, n/len(line)+1)[:n]
}

func jsonASCII(s string) string { return string(jsonEscape([]byte(s), true, false)) }
func jsonPlain(s string) string { return string(jsonEscape([]byte(s), false, false)) }

func TestPrivacyScan(t *testing.T) {
	now := time.Date(2026, 7, 13, 0, 0, 0, 0, time.UTC)
	const limit = 1 << 20
	big := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	sha := func(s string) string { return substringID([]byte(s)) }

	cases := []struct {
		name    string
		files   map[string][]byte
		setup   func(t *testing.T, dir string)
		skip    func(string) bool
		limit   int64
		verdict string
		figures map[string]float64
		detail  []string
		absent  []string
	}{
		{name: "clean attempt",
			files: map[string][]byte{
				"commands.log":       []byte("vllm serve --manifest /private/p10.jsonl sha256=ab12\n"),
				"client/result.json": []byte(`{"clean": {"completed_rps": 3.2, "prompt_tokens": 5120}, "kind": "prompt", "note": "prompt text is hashed"}`),
				"opprof/a.jsonl":     []byte("{\"step\":1}\n{\"step\":2}\n"),
			},
			verdict: Pass,
			figures: map[string]float64{"files_scanned": 3, "files_parsed": 2, "files_streamed": 0, "findings": 0, "private_values": 3, "private_values_short": 1, "min_leak_bytes": 48}},
		{name: "forbidden key deep in JSON",
			files:   map[string][]byte{"client/result.json": []byte(`{"requests": [{"id": 1}, {"id": 2, "prompt": "x"}]}`)},
			verdict: Fail, figures: map[string]float64{"findings": 1, "files_parsed": 1},
			detail: []string{`client/result.json: forbidden field "prompt" at $.requests[1].prompt`}},
		{name: "forbidden key in a JSON line",
			files:   map[string][]byte{"client/segments.jsonl": []byte("{\"seg\":0}\n{\"seg\":1,\"req\":{\"messages\":[]}}\n")},
			verdict: Fail, detail: []string{`client/segments.jsonl: forbidden field "messages" at line 2 $.req.messages`}},
		{name: "forbidden key in a log line, as bytes",
			files:   map[string][]byte{"server.log": []byte("INFO ok\nDEBUG body={\"generated_text\" :\t\"...\" (truncated\n")},
			verdict: Fail, detail: []string{`server.log: forbidden field "generated_text" (line 2, bytes)`}},
		{name: "field names in prose do not fail",
			files:   map[string][]byte{"server.log": []byte("content: disabled\nprompt caching on; \"messages\" were counted\n")},
			verdict: Pass},
		{name: "torn last JSON line",
			files:   map[string][]byte{"client/segments.jsonl": []byte("{\"seg\":0}\n{\"content\": \"abc")},
			verdict: Fail, detail: []string{`forbidden field "content" (line 2, bytes)`}},
		{name: "private substring in a log",
			files:   map[string][]byte{"client.log": []byte("request 17: " + secretASCII[:50] + secretASCII[50:] + "...\n")},
			verdict: Fail, figures: map[string]float64{"findings": 1},
			detail: []string{"client.log: private text (48+ bytes of private value " + sha(secretASCII) + ", raw bytes)"}},
		{name: "escaped substring in a parsed JSON value",
			files:   map[string][]byte{"analysis/sanity.json": []byte(`{"sample": "` + jsonPlain(secretQuote) + `"}`)},
			verdict: Fail, figures: map[string]float64{"findings": 1},
			detail: []string{"analysis/sanity.json: private text (48+ bytes of private value " + sha(secretQuote) + ", JSON-decoded)"}},
		{name: "ASCII-escaped substring in a streamed file",
			files:   map[string][]byte{"client/raw.jsonl": big(filler(limit), []byte(`{"x": "`+jsonASCII(secretUni)+`"}`+"\n"))},
			verdict: Fail, figures: map[string]float64{"files_streamed": 1, "files_parsed": 0},
			detail: []string{"client/raw.jsonl: private text (48+ bytes of private value " + sha(secretUni) + ", JSON-decoded)"}},
		{name: "short substrings are not used",
			files:   map[string][]byte{"client.log": []byte("patient " + secretShort + "\n")},
			verdict: Pass, figures: map[string]float64{"private_values_short": 1}},
		{name: "gzip trace with a forbidden key",
			files:   map[string][]byte{"traces/w0.pt.trace.json.gz": gz(t, []byte(`{"traceEvents": [{"name": "gemm", "args": {"content": "z"}}]}`))},
			verdict: Fail, figures: map[string]float64{"files_gzip": 1, "files_parsed": 1},
			detail: []string{`traces/w0.pt.trace.json.gz: forbidden field "content" at $.traceEvents[0].args.content`}},
		{name: "truncated gzip is searched as far as it goes",
			files: map[string][]byte{"traces/w1.pt.trace.json.gz": func() []byte {
				z := gz(t, big([]byte(secretASCII), filler(200000)))
				return z[:len(z)/2]
			}()},
			verdict: Fail, figures: map[string]float64{"files_gzip": 1, "files_gzip_truncated": 1, "files_unreadable": 0},
			detail: []string{"traces/w1.pt.trace.json.gz: private text (48+ bytes of private value " + sha(secretASCII) + ", raw bytes)"}},
		{name: "gzip magic without a gzip stream is searched as bytes",
			files:   map[string][]byte{"blob.bin": big([]byte{0x1f, 0x8b, 0x00}, []byte(secretASCII))},
			verdict: Fail, figures: map[string]float64{"files_gzip": 0},
			detail: []string{"blob.bin: private text (48+ bytes of private value " + sha(secretASCII) + ", raw bytes)"}},
		{name: "matches across the streaming chunk boundary",
			files: map[string][]byte{
				"a.log": big(filler(chunkSize-20), []byte(secretASCII), filler(limit)),
				"b.log": big(filler(chunkSize-70), []byte(`{"prompt"`+strings.Repeat(" ", 63)+`: 1}`), filler(limit)),
			},
			verdict: Fail, figures: map[string]float64{"files_streamed": 2, "findings": 2},
			detail: []string{"a.log: private text (48+ bytes of private value " + sha(secretASCII) + ", raw bytes)", `b.log: forbidden field "prompt" (bytes)`}},
		{name: "no parsing at limit 0: keys found as bytes",
			files:   map[string][]byte{"client/result.json": []byte(`{"a": {"prompt": 1}}`)},
			limit:   -1,
			verdict: Fail, figures: map[string]float64{"files_streamed": 1, "files_parsed": 0},
			detail: []string{`client/result.json: forbidden field "prompt" (bytes)`}},
		{name: "symbolic links are reported, not followed",
			files: map[string][]byte{"ok.log": []byte("fine\n")},
			setup: func(t *testing.T, dir string) {
				outside := tree(t, map[string][]byte{"p10.jsonl": []byte(`{"prompt": "` + secretASCII + `"}`)})
				if err := os.Symlink(filepath.Join(outside, "p10.jsonl"), filepath.Join(dir, "manifest.jsonl")); err != nil {
					t.Fatal(err)
				}
			},
			verdict: Pass, figures: map[string]float64{"symlinks": 1, "files_scanned": 1},
			detail: []string{"symbolic links not followed: manifest.jsonl"}},
		{name: "a FIFO is not opened",
			setup: func(t *testing.T, dir string) {
				if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			verdict: Pass, figures: map[string]float64{"irregular": 1, "files_scanned": 0},
			detail: []string{"not read: pipe"}},
		{name: "skipped directory",
			files:   map[string][]byte{"private/p10.jsonl": []byte(`{"prompt": "x"}`), "ok.log": []byte("fine\n")},
			skip:    func(rel string) bool { return rel == "private" },
			verdict: Pass, figures: map[string]float64{"files_skipped": 1, "files_scanned": 1}},
		{name: "findings beyond twenty are counted",
			files: func() map[string][]byte {
				m := map[string][]byte{}
				for i := range 25 {
					m["r"+strconv.Itoa(100+i)+".json"] = []byte(`{"content": 1}`)
				}
				return m
			}(),
			verdict: Fail, figures: map[string]float64{"findings": 25, "files_scanned": 25},
			detail: []string{"r100.json", "r119.json", "and 5 more"}, absent: []string{"r120.json"}},
		{name: "corrupt gzip cannot be certified",
			files: map[string][]byte{"traces/bad.json.gz": func() []byte {
				z := gz(t, filler(100000))
				for i := 20; i < len(z)-20; i += 7 {
					z[i] ^= 0x5a
				}
				return z
			}()},
			verdict: Error, figures: map[string]float64{"files_unreadable": 1},
			detail: []string{"could not scan: traces/bad.json.gz"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := tree(t, c.files)
			if c.setup != nil {
				c.setup(t, dir)
			}
			lim := int64(limit)
			if c.limit != 0 {
				lim = c.limit
			}
			v := PrivacyScan(dir, forbidden, index(t, DefaultMinLeakBytes, secrets...), c.skip, lim, now)
			if v.Verdict != c.verdict || v.Gate != "privacy" || !v.At.Equal(now) {
				t.Fatalf("got %s, want %s: %s\nfigures %v", v.Verdict, c.verdict, v.Detail, v.Figures)
			}
			for k, want := range c.figures {
				if got, ok := v.Figures[k]; !ok || got != want {
					t.Errorf("figure %s = %v (present %v), want %v", k, got, ok, want)
				}
			}
			if c.skip == nil {
				// Plain files: every byte is examined once.
				var total int
				plain := true
				for rel, b := range c.files {
					total += len(b)
					plain = plain && !strings.HasSuffix(rel, ".gz")
				}
				if plain && v.Figures["bytes_scanned"] != float64(total) {
					t.Errorf("bytes_scanned %v, want %d", v.Figures["bytes_scanned"], total)
				}
			}
			checkDetail(t, v.Detail, c.detail, c.absent)
			for _, s := range secrets {
				for _, form := range []string{string(s), string(s[:min(16, len(s))]), jsonPlain(string(s)), jsonASCII(string(s))} {
					if strings.Contains(v.Detail, form) {
						t.Fatalf("the detail reveals a private substring: %q", v.Detail)
					}
				}
			}
		})
	}
}

func TestPrivacyScanNotADirectory(t *testing.T) {
	now := time.Now()
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(dir, "missing"), file} {
		if v := PrivacyScan(p, forbidden, nil, nil, 1<<20, now); v.Verdict != Error {
			t.Errorf("%s: %+v, want error", p, v)
		}
	}
}

// TestStreamAgainstNaive compares the streaming search, at many chunk
// sizes, with a plain search of the whole content: a value is found
// exactly when some run of minLen of its bytes occurs in the content.
func TestStreamAgainstNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = `ab "::` // small, so near-misses are everywhere
	const minLen = MinLeakBytesFloor
	fieldRE := regexp.MustCompile(`"ab"[ \t\r\n]{0,64}:`)
	hits, fieldHits := 0, 0
	for round := range 300 {
		data := make([]byte, 50+rng.IntN(3000))
		for i := range data {
			data[i] = alphabet[rng.IntN(len(alphabet))]
		}
		var vals [][]byte
		for range 1 + rng.IntN(6) {
			v := make([]byte, minLen+rng.IntN(60))
			for i := range v {
				v[i] = alphabet[rng.IntN(len(alphabet))]
			}
			if n := minLen + rng.IntN(10); rng.IntN(2) == 0 && n < len(data) && n <= len(v) {
				at, to := rng.IntN(len(data)-n), rng.IntN(len(v)-n+1)
				copy(v[to:], data[at:at+n]) // a run of n bytes anywhere in the value
			}
			vals = append(vals, v)
		}
		x := index(t, minLen, vals...)
		s := newPrivacyScan([]string{"ab"}, x, 0)
		s.chunk = 1 + rng.IntN(200)
		s.seen = map[string]bool{}
		if err := s.stream(bytes.NewReader(data), "f"); err != nil {
			t.Fatal(err)
		}
		want := map[string]bool{}
		for i, v := range vals {
			for o := 0; o+minLen <= len(v); o++ {
				if bytes.Contains(data, v[o:o+minLen]) {
					want["f: private text (16+ bytes of private value "+x.ID(i)+", raw bytes)"] = true
					hits++
					break
				}
			}
		}
		if fieldRE.Match(data) {
			want[`f: forbidden field "ab" (bytes)`] = true
			fieldHits++
		}
		got := map[string]bool{}
		for _, f := range s.findings {
			got[f] = true
		}
		if len(got) != len(want) {
			t.Fatalf("round %d chunk %d: got %v, want %v", round, s.chunk, got, want)
		}
		for k := range want {
			if !got[k] {
				t.Fatalf("round %d chunk %d: missing %s; got %v", round, s.chunk, k, got)
			}
		}
		if s.fig["bytes_scanned"] != float64(len(data)) {
			t.Fatalf("bytes_scanned %v, want %d", s.fig["bytes_scanned"], len(data))
		}
	}
	if hits < 100 || fieldHits < 100 || fieldHits > 290 {
		t.Fatalf("the rounds did not exercise both outcomes: %d value hits, %d of 300 with the field", hits, fieldHits)
	}
}

func TestJSONEscape(t *testing.T) {
	cases := []struct {
		in                string
		ascii, html, want string
	}{
		{in: "a\"b\\c\n\t\x01", want: `a\"b\\c\n\t\u0001`},
		{in: "<é>", want: "<é>"},
		{in: "<é>", ascii: "y", want: `<\u00e9>`},
		{in: "<é>\u2028", html: "y", want: `\u003cé\u003e\u2028`},
		{in: "🍣", ascii: "y", want: `\ud83c\udf63`},
		{in: "a\xffb", ascii: "y", want: "a\xffb"},
	}
	for _, c := range cases {
		if got := string(jsonEscape([]byte(c.in), c.ascii != "", c.html != "")); got != c.want {
			t.Errorf("jsonEscape(%q, ascii %v, html %v) = %q, want %q", c.in, c.ascii != "", c.html != "", got, c.want)
		}
	}
}

// A file listed but gone when the scan opens it (a record the controller
// renamed into place beside the scan) is no longer in the directory: it is
// counted as vanished, not unreadable, and the scan passes.
func TestPrivacyScanVanishedFile(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a.json", "b.json", "c.json"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(`{"ok": 1}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// the walk lists the directory, then visits a.json first: b.json goes
	// between the listing and its opening
	gone := func(rel string) bool {
		if rel == "a.json" {
			os.Remove(filepath.Join(dir, "b.json"))
		}
		return false
	}
	v := PrivacyScan(dir, forbidden, nil, gone, 1<<20, time.Now())
	if v.Verdict != Pass || v.Figures["files_vanished"] != 1 || v.Figures["files_scanned"] != 2 || v.Figures["files_unreadable"] != 0 {
		t.Fatalf("verdict %s %q, figures %v: want pass with one vanished and two scanned", v.Verdict, v.Detail, v.Figures)
	}
}

// A file that changed since a clean cached scan has its changed and new
// lines examined as in a full scan, wherever they are; its unchanged lines
// were clean. A failed scan leaves the cache as it was.
func TestPrivacyScanCachedChangedLines(t *testing.T) {
	now := time.Date(2026, 7, 12, 0, 0, 0, 0, time.UTC)
	const l1, l2, l3 = `{"level":"info","msg":"run complete"}`, `{"level":"info","figures":{"a":1}}`, "plain text line"
	dir := tree(t, map[string][]byte{"controller.log": []byte(l1 + "\n" + l2 + "\n" + l3 + "\n")})
	log := filepath.Join(dir, "controller.log")
	var cache ScanCache
	x := index(t, DefaultMinLeakBytes, []byte(secretASCII), []byte(secretQuote))
	scan := func(content string) Verdict {
		t.Helper()
		if err := os.WriteFile(log, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return PrivacyScanCached(dir, forbidden, x, nil, 1<<20, &cache, now)
	}
	if v := scan(l1 + "\n" + l2 + "\n" + l3 + "\n"); v.Verdict != Pass || v.Figures["files_parsed"] != 1 {
		t.Fatalf("the clean log: %s %s %v", v.Verdict, v.Detail, v.Figures)
	}
	for _, c := range []struct{ name, content, detail string }{
		{"a line appended", l1 + "\n" + l2 + "\n" + l3 + "\n" + `{"prompt":"x"}` + "\n", `forbidden field "prompt" at line 4 $.prompt`},
		{"a line changed in the middle, its key escaped", l1 + "\n" + `{"deep":{"pro\u006dpt":1}}` + "\n" + l3 + "\n", `forbidden field "prompt" at line 2 $.deep.prompt`},
		{"a text line changed", l1 + "\n" + l2 + "\n" + `said "content": yes` + "\n", `forbidden field "content" (line 3, bytes)`},
		{"private text in an appended line", l1 + "\n" + l2 + "\n" + l3 + "\nnote: " + secretASCII + "\n", "private text (48+ bytes"},
	} {
		if v := scan(c.content); v.Verdict != Fail || !strings.Contains(v.Detail, c.detail) {
			t.Errorf("%s: %s %q, want fail naming %q", c.name, v.Verdict, v.Detail, c.detail)
		}
	}
	if v := scan(l3 + "\n" + l1 + "\n" + l2 + "\n"); v.Verdict != Pass || v.Figures["files_parsed"] != 1 {
		t.Errorf("the clean lines moved: %s %s %v", v.Verdict, v.Detail, v.Figures)
	}
	// the two lines of a private value, each clean alone, then side by side
	qa, qb, _ := strings.Cut(secretQuote, "\n")
	if v := scan(qa + "\n" + l1 + "\n" + qb + "\n"); v.Verdict != Pass {
		t.Fatalf("the halves apart: %s %s", v.Verdict, v.Detail)
	}
	if v := scan(qa + "\n" + qb + "\n"); v.Verdict != Fail || !strings.Contains(v.Detail, "private text (48+ bytes") {
		t.Errorf("the halves side by side, each line unchanged: %s %q, want the private text found", v.Verdict, v.Detail)
	}
}

// A file found clean is clean for what that scan looked for: unchanged, it
// is left out of a scan with the same fields and index, and scanned again
// when an amendment forbids another field or the private index is another.
func TestPrivacyScanCachedKnowsWhatItLookedFor(t *testing.T) {
	now := time.Date(2026, 7, 12, 0, 0, 0, 0, time.UTC)
	dir := tree(t, map[string][]byte{"result.json": []byte(`{"prompt":"x","note":"` + secretASCII + `"}` + "\n")})
	var cache ScanCache
	none := index(t, DefaultMinLeakBytes, []byte("a value that is nowhere in the file, long enough to index"))
	if v := PrivacyScanCached(dir, []string{"content"}, none, nil, 1<<20, &cache, now); v.Verdict != Pass || v.Figures["files_scanned"] != 1 {
		t.Fatalf("the first scan: %s %q %v, want pass", v.Verdict, v.Detail, v.Figures)
	}
	if v := PrivacyScanCached(dir, []string{"content"}, none, nil, 1<<20, &cache, now); v.Verdict != Pass || v.Figures["files_unchanged"] != 1 {
		t.Fatalf("the same scan again: %s %q %v, want pass with the file left out", v.Verdict, v.Detail, v.Figures)
	}
	if v := PrivacyScanCached(dir, []string{"content", "prompt"}, none, nil, 1<<20, &cache, now); v.Verdict != Fail || !strings.Contains(v.Detail, `forbidden field "prompt"`) {
		t.Errorf("a field forbidden since: %s %q %v, want fail naming prompt", v.Verdict, v.Detail, v.Figures)
	}
	x := index(t, DefaultMinLeakBytes, []byte(secretASCII))
	if v := PrivacyScanCached(dir, []string{"content"}, x, nil, 1<<20, &cache, now); v.Verdict != Fail || !strings.Contains(v.Detail, "private text") {
		t.Errorf("another private index: %s %q %v, want the private text found", v.Verdict, v.Detail, v.Figures)
	}
}
