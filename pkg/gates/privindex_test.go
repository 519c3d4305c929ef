package gates

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// words is a vocabulary for text that looks like prompts: many repeats of
// short pieces, so near-misses of every length are common.
var words = strings.Fields("the of and to in is that for it as with was on be by at this " +
	"patient note summary contract clause letter translate list every name value model " +
	"résumé café 東京 🍣 \"quoted\" new\nline tab\there <tag> & more don't")

func prose(rng *rand.Rand, n int) []byte {
	var b []byte
	for len(b) < n {
		b = append(b, words[rng.IntN(len(words))]...)
		b = append(b, ' ')
	}
	return b[:n]
}

// TestPrivateIndexGuarantee plants, in artifacts of random text, a run of
// exactly L bytes taken from a random offset of a random private value,
// at a random offset of the artifact: always found, naming that value.
// A run of L-1 bytes planted the same way, in text that shares no
// L-byte run with the values, is never reported. Checked for several L.
func TestPrivateIndexGuarantee(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, L := range []int{MinLeakBytesFloor, 17, 31, DefaultMinLeakBytes, 49, 100} {
		vals := make([][]byte, 40)
		for i := range vals {
			vals[i] = prose(rng, L+rng.IntN(400))
		}
		x := index(t, L, vals...)
		if x.Values() != len(vals) || x.stride != L-x.w+1 || x.stride < 1 {
			t.Fatalf("L %d: %d values, window %d stride %d", L, x.Values(), x.w, x.stride)
		}
		for round := range 400 {
			vi := rng.IntN(len(vals))
			v := vals[vi]
			n := L
			if round%2 == 1 {
				n = L - 1
			}
			off := rng.IntN(len(v) - n + 1)
			piece := v[off : off+n]
			// Control bytes around it occur in no value, so the
			// piece cannot grow into a longer common run.
			noise := func(k int) []byte {
				b := make([]byte, k)
				for i := range b {
					b[i] = byte(1 + rng.IntN(8))
				}
				return b
			}
			art := bytes.Join([][]byte{noise(rng.IntN(300)), piece, noise(rng.IntN(300))}, nil)
			var got []int
			x.Scan(art, func(value int) { got = append(got, value) })
			if n == L {
				ok := false
				for _, g := range got {
					// the piece may occur in another value too; it must be
					// reported for one that holds it
					ok = ok || bytes.Contains(vals[g], piece)
				}
				if !ok {
					t.Fatalf("L %d round %d: a run of %d bytes of value %d at %d not found (got %v)", L, round, n, vi, off, got)
				}
			} else if len(got) > 0 {
				t.Fatalf("L %d round %d: a run of %d bytes reported as a leak of %v", L, round, n, got)
			}
		}
	}
}

// TestPrivateIndexBounds: a run that crosses from one value into the next
// is not a leak of either; a value exactly L long is found whole; an
// index of nothing finds nothing.
func TestPrivateIndexBounds(t *testing.T) {
	a := bytes.Repeat([]byte("a"), 30)
	b := bytes.Repeat([]byte("b"), 30)
	x := index(t, 48, a, b, []byte("0123456789012345678901234567890123456789abcdefgh"))
	var got []int
	x.Scan(append(append([]byte{}, a...), b...), func(v int) { got = append(got, v) })
	if len(got) != 0 || x.Values() != 0 && x.Short() != 2 {
		t.Fatalf("across values: %v (values %d short %d)", got, x.Values(), x.Short())
	}
	x.Scan([]byte("..0123456789012345678901234567890123456789abcdefgh.."), func(v int) { got = append(got, v) })
	if len(got) != 1 || got[0] != 0 {
		t.Fatalf("a value of exactly L: %v", got)
	}
	empty := index(t, 48)
	empty.Scan(bytes.Repeat([]byte("x"), 1000), func(int) { t.Fatal("empty index found something") })
	if _, err := NewIndexBuilder(15).Build(); err == nil {
		t.Fatal("a leak length below the floor was accepted")
	}
}

// TestPrivacyScanPlanted plants a run of L bytes from the middle of a
// value, raw and escaped as Go and Python write JSON, at random places of
// files small enough to parse and large enough to stream (across chunk
// boundaries): found every time; L-1 bytes: never.
func TestPrivacyScanPlanted(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	vals := make([][]byte, 20)
	for i := range vals {
		vals[i] = prose(rng, 200+rng.IntN(200))
	}
	x := index(t, DefaultMinLeakBytes, vals...)
	forms := []func([]byte) []byte{
		func(b []byte) []byte { return b },
		func(b []byte) []byte { return jsonEscape(b, false, false) },
		func(b []byte) []byte { return jsonEscape(b, true, false) },
		func(b []byte) []byte { return jsonEscape(b, false, true) },
		// as Python's repr writes a str holding both quotes
		func(b []byte) []byte {
			return []byte(strings.NewReplacer("\\", "\\\\", "\n", "\\n", "\t", "\\t", "'", "\\'", "é", "\\xe9").Replace(string(b)))
		},
	}
	for round := range 100 {
		vi := rng.IntN(len(vals))
		n := DefaultMinLeakBytes - round%2
		off := rng.IntN(len(vals[vi]) - n + 1)
		piece := forms[round/2%len(forms)](vals[vi][off : off+n])
		size := 100 + rng.IntN(3000)
		if round%4 >= 2 {
			size = chunkSize + rng.IntN(200000)
		}
		at := rng.IntN(size)
		// \x01 (in no value) keeps the piece from growing into the filler
		data := bytes.Join([][]byte{filler(at), {1}, piece, {1}, filler(size - at)}, nil)
		dir := tree(t, map[string][]byte{"server.log": data})
		v := PrivacyScan(dir, forbidden, x, nil, 1<<20, time.Now())
		if n == DefaultMinLeakBytes && (v.Verdict != Fail || !strings.Contains(v.Detail, x.ID(vi))) {
			t.Fatalf("round %d: %d bytes at %d of a %d-byte file, form %d: %s %s", round, n, at, len(data), round/2%len(forms), v.Verdict, v.Detail)
		}
		if n < DefaultMinLeakBytes && v.Verdict != Pass {
			t.Fatalf("round %d: %d bytes: %s %s", round, n, v.Verdict, v.Detail)
		}
	}
}

func TestUnescaper(t *testing.T) {
	in := `a\"b\\c\n\t\u0001 \u00e9 \ud83c\udf63 \ud83c x \q \u12 it\'s \xe9\xa0 \x4 end\`
	want := "a\"b\\c\n\t\x01 é 🍣 \uFFFD x \\q \\u12 it's é\u00a0 \\x4 end\\"
	var u unescaper
	if got := string(u.decode(nil, []byte(in), true)); got != want {
		t.Fatalf("whole: %q, want %q", got, want)
	}
	// Any split into pieces decodes the same.
	for cut := range len(in) + 1 {
		var u unescaper
		got := u.decode(nil, []byte(in[:cut]), false)
		got = u.decode(got, []byte(in[cut:]), true)
		if string(got) != want {
			t.Fatalf("cut at %d: %q, want %q", cut, got, want)
		}
	}
}

// TestPrivateIndexP10Scale builds the index of a generated private source
// the size of the P10 source (36.5M input tokens, about 150 MB of text:
// WARDEN_PRIVACY_BENCH_MB sets the size; unset, the test is skipped) and
// scans a 256 MB artifact with one planted leak. It prints the time of
// each step and the peak resident memory (VmHWM) of the test process.
func TestPrivateIndexP10Scale(t *testing.T) {
	mb, _ := strconv.Atoi(os.Getenv("WARDEN_PRIVACY_BENCH_MB"))
	if mb <= 0 {
		t.Skip("set WARDEN_PRIVACY_BENCH_MB (150 for the P10 source) to run")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "p10.jsonl")
	rng := rand.New(rand.NewPCG(11, 12))
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var secret []byte
	total := 0
	for i := 0; total < mb<<20; i++ {
		p := prose(rng, 1000+rng.IntN(8000)) // prompts of ~250-2250 tokens
		if i == 1000 {
			secret = bytes.Clone(p[300 : 300+DefaultMinLeakBytes])
		}
		line, _ := json.Marshal(map[string]any{"id": i, "prompt": string(p), "max_tokens": 512})
		w.Write(append(line, '\n'))
		total += len(p)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	runtime.GC()
	hwm0 := vmHWM(t)
	t0 := time.Now()
	x, err := IndexPrivate([]string{src}, DefaultMinLeakBytes)
	if err != nil {
		t.Fatal(err)
	}
	build := time.Since(t0)
	hwmIndex := vmHWM(t)
	art := filepath.Join(dir, "artifacts")
	if err := os.MkdirAll(art, 0o755); err != nil {
		t.Fatal(err)
	}
	af, err := os.Create(filepath.Join(art, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := filler(1 << 20)
	for i := range 256 {
		if i == 200 {
			af.Write(secret) // the leak, 200 MB in
		}
		af.Write(chunk)
	}
	if err := af.Close(); err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	v := PrivacyScan(art, forbidden, x, nil, 64<<20, time.Now())
	scan := time.Since(t1)
	if v.Verdict != Fail {
		t.Fatalf("the planted leak was not found: %s %s", v.Verdict, v.Detail)
	}
	fmt.Printf("privacy index: %d MB of private text in %d values (%d windows), built in %.2f s; "+
		"scan of 256 MB: %.2f s (%.0f MB/s); VmHWM before %d MB, after building %d MB, after the scan %d MB\n",
		x.Bytes()>>20, x.Values(), x.Windows(), build.Seconds(), scan.Seconds(), 256/scan.Seconds(),
		hwm0>>10, hwmIndex>>10, vmHWM(t)>>10)
	runtime.KeepAlive(x)
}

// vmHWM is the peak resident set of this process in KiB.
func vmHWM(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			return n
		}
	}
	t.Fatal("no VmHWM")
	return 0
}
