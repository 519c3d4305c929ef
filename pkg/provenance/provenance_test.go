package provenance

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func writeFile(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
}

// requireEmpty fails unless dir holds nothing: a refused Record wrote nothing.
func requireEmpty(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Fatalf("%s holds %v after a refusal; want nothing", dir, ents)
	}
}

// clientAndSecret writes two inputs under src: a client (client.py) and
// a private manifest in a private directory (private/P10.jsonl).
func clientAndSecret(t *testing.T, src string) (client, secret string) {
	t.Helper()
	client = filepath.Join(src, "client.py")
	writeFile(t, client, []byte("print('v1')\n"), 0o644)
	privDir := filepath.Join(src, "private")
	os.Mkdir(privDir, 0o700)
	secret = filepath.Join(privDir, "P10.jsonl")
	writeFile(t, secret, []byte(`{"prompt":"secret"}`), 0o600)
	return client, secret
}

func TestRecordAndVerify(t *testing.T) {
	src := t.TempDir()
	camp := t.TempDir()
	client, secret := clientAndSecret(t, src)

	entries, err := Record(camp, []Entry{{Path: client, Role: "client"}, {Path: secret, Role: "manifest", Private: true}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if entries[0].SHA256 != sum([]byte("print('v1')\n")) {
		t.Fatalf("hash %q", entries[0].SHA256)
	}
	if cp, ok := CopyOf(camp, entries[0]); !ok || cp != filepath.Join(camp, SubDir, Files, entries[0].SHA256) {
		t.Fatalf("public file's copy: %q %v", cp, ok)
	}
	if _, err := os.Stat(filepath.Join(camp, SubDir, Files, entries[1].SHA256)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("private file copied: %v", err)
	}
	if cp, ok := CopyOf(camp, entries[1]); ok {
		t.Fatalf("private file has a copy %s", cp)
	}
	if err := Verify(camp); err != nil {
		t.Fatalf("unchanged files: %v", err)
	}
	writeFile(t, client, []byte("print('v2')\n"), 0o644)
	err = Verify(camp)
	var ce *ChangedError
	if !errors.Is(err, ErrChanged) || !errors.As(err, &ce) || ce.Path != client || ce.Recorded != entries[0].SHA256 || ce.Now == "" || ce.Now == ce.Recorded {
		t.Fatalf("changed client: %v", err)
	}
	if !strings.Contains(err.Error(), entries[0].SHA256) {
		t.Fatalf("error lacks the recorded hash: %v", err)
	}
}

func TestPrivatePermissions(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	f := filepath.Join(dir, "x.jsonl")
	os.WriteFile(f, []byte("x"), 0o644)
	if _, err := Record(t.TempDir(), []Entry{{Path: f, Role: "manifest", Private: true}}, Options{}); err == nil || !strings.Contains(err.Error(), "0600") {
		t.Fatalf("loose file accepted: %v", err)
	}
	os.Chmod(f, 0o600)
	if _, err := Record(t.TempDir(), []Entry{{Path: f, Role: "manifest", Private: true}}, Options{}); err == nil || !strings.Contains(err.Error(), "0700") {
		t.Fatalf("loose directory accepted: %v", err)
	}
}

// Special files as inputs: each is refused by name and kind, without
// blocking (the call returning is the assertion: a FIFO with no writer
// blocks an ordinary open for good), and nothing is written. A link to a
// regular file is accepted.
func TestRefusesNonRegularInputs(t *testing.T) {
	src := t.TempDir()
	fifo := filepath.Join(src, "client.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(src, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	linkToFIFO := filepath.Join(src, "link-to-fifo")
	if err := os.Symlink(fifo, linkToFIFO); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, kind string }{
		{fifo, "FIFO"},
		{"/dev/zero", "character device"},
		{src, "directory"},
		{sock, "socket"},
		{linkToFIFO, "FIFO"},
	} {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			camp := t.TempDir()
			_, err := Record(camp, []Entry{{Path: tc.path, Role: "client"}}, Options{})
			var nr *NotRegularError
			if !errors.Is(err, ErrNotRegular) || !errors.As(err, &nr) || nr.Path != tc.path || nr.Kind != tc.kind ||
				!strings.Contains(err.Error(), tc.path+" ") || !strings.Contains(err.Error(), "not a regular file") {
				t.Fatalf("Record(%s) = %v; want a refusal naming it as a %s", tc.path, err, tc.kind)
			}
			requireEmpty(t, camp)
		})
	}

	regular := filepath.Join(src, "client.py")
	writeFile(t, regular, []byte("print(1)\n"), 0o644)
	link := filepath.Join(src, "client-link.py")
	if err := os.Symlink(regular, link); err != nil {
		t.Fatal(err)
	}
	camp := t.TempDir()
	es, err := Record(camp, []Entry{{Path: link, Role: "client"}}, Options{})
	if err != nil || es[0].SHA256 != sum([]byte("print(1)\n")) || es[0].Path != link {
		t.Fatalf("a link to a regular file: %+v %v", es, err)
	}
}

// Resume meets an input replaced by a FIFO: Verify names it without
// opening it.
func TestVerifyRefusesNonRegular(t *testing.T) {
	src := t.TempDir()
	camp := t.TempDir()
	client := filepath.Join(src, "client.py")
	writeFile(t, client, []byte("print(1)\n"), 0o644)
	if _, err := Record(camp, []Entry{{Path: client, Role: "client"}}, Options{}); err != nil {
		t.Fatal(err)
	}
	os.Remove(client)
	if err := syscall.Mkfifo(client, 0o644); err != nil {
		t.Fatal(err)
	}
	err := Verify(camp)
	var nr *NotRegularError
	if !errors.As(err, &nr) || nr.Path != client || nr.Kind != "FIFO" {
		t.Fatalf("Verify with a FIFO in place of %s: %v", client, err)
	}
}

// sparseFile makes a file of size bytes that is all hole but for a few
// bytes at the start and the end.
func sparseFile(t *testing.T, path string, size int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("head"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("tail"), size-4); err != nil {
		t.Fatal(err)
	}
}

func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// A sparse input over the limit is refused at once, naming the limit,
// and nothing is written; under the limit it is copied, hashed equal to
// the input, and stays sparse.
func TestSizeLimitAndSparseCopy(t *testing.T) {
	src := t.TempDir()
	big := filepath.Join(src, "weights.bin")
	const size = 64 << 20
	sparseFile(t, big, size)

	camp := t.TempDir()
	_, err := Record(camp, []Entry{{Path: big, Role: "mapping"}}, Options{MaxFileBytes: 1 << 20})
	var tl *TooLargeError
	if !errors.Is(err, ErrTooLarge) || !errors.As(err, &tl) || tl.Limit != 1<<20 || tl.Size != size ||
		!strings.Contains(err.Error(), big) || !strings.Contains(err.Error(), "1048576 bytes (1 MiB)") {
		t.Fatalf("a %d-byte file over a 1 MiB limit: %v", size, err)
	}
	requireEmpty(t, camp)

	es, err := Record(camp, []Entry{{Path: big, Role: "mapping"}}, Options{MaxFileBytes: 128 << 20})
	if err != nil {
		t.Fatal(err)
	}
	in, err := HashFile(big)
	if err != nil {
		t.Fatal(err)
	}
	cp, ok := CopyOf(camp, es[0])
	if !ok {
		t.Fatal("no copy")
	}
	out, err := HashFile(cp)
	if err != nil || out != in || es[0].SHA256 != in {
		t.Fatalf("copy hash %s (%v), input %s, recorded %s", out, err, in, es[0].SHA256)
	}
	if fi, _ := os.Stat(cp); fi.Size() != size || fi.Mode().Perm() != 0o444 {
		t.Fatalf("copy %s: size %d mode %v", cp, fi.Size(), fi.Mode())
	}
	if a := allocated(t, cp); a > size/16 {
		t.Fatalf("copy of a sparse file allocates %d bytes of %d: copied dense", a, size)
	}
	t.Logf("sparse input %d bytes (%d allocated) copied with %d allocated", size, allocated(t, big), allocated(t, cp))
}

// Two paths that flatten to one name (/x/a/b_c and /x/a_b/c) with
// different contents get two copies, and the index maps each to its own;
// two paths with one content share one copy.
func TestCopiesDoNotCollide(t *testing.T) {
	x := t.TempDir()
	p1 := filepath.Join(x, "a", "b_c")
	p2 := filepath.Join(x, "a_b", "c")
	p3 := filepath.Join(x, "same-as-b_c")
	if legacyCopyName(p1) != legacyCopyName(p2) {
		t.Fatal("test bug: the paths do not collide under the old naming")
	}
	writeFile(t, p1, []byte("one\n"), 0o644)
	writeFile(t, p2, []byte("two\n"), 0o644)
	writeFile(t, p3, []byte("one\n"), 0o644)
	camp := t.TempDir()
	if _, err := Record(camp, []Entry{{Path: p1, Role: "helper"}, {Path: p2, Role: "helper"}, {Path: p3, Role: "helper"}}, Options{}); err != nil {
		t.Fatal(err)
	}
	index, err := Read(camp)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{p1: "one\n", p2: "two\n", p3: "one\n"}
	if len(index) != len(want) {
		t.Fatalf("index %+v", index)
	}
	for _, e := range index {
		cp, ok := CopyOf(camp, e)
		b, err := os.ReadFile(cp)
		if !ok || err != nil || string(b) != want[e.Path] || e.SHA256 != sum([]byte(want[e.Path])) {
			t.Fatalf("%s: sha256 %s, copy %s holds %q (%v); want %q", e.Path, e.SHA256, cp, b, err, want[e.Path])
		}
	}
	copies, _ := os.ReadDir(filepath.Join(camp, SubDir, Files))
	if len(copies) != 2 {
		t.Fatalf("copies %v; want one per content", copies)
	}
}

// An input that changes between hashing and copying is refused naming
// both hashes, and no copy is kept under either.
func TestChangedWhileCopying(t *testing.T) {
	src := t.TempDir()
	f := filepath.Join(src, "client.py")
	writeFile(t, f, []byte("v1\n"), 0o644)
	hashed, err := Hash([]Entry{{Path: f, Role: "client"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, f, []byte("v2\n"), 0o644)
	camp := t.TempDir()
	err = Write(camp, hashed, Options{})
	var ce *ChangedError
	if !errors.As(err, &ce) || ce.Recorded != sum([]byte("v1\n")) || ce.Now != sum([]byte("v2\n")) {
		t.Fatalf("Write after a change: %v", err)
	}
	requireEmpty(t, filepath.Join(camp, SubDir, Files))
	if _, err := os.Stat(filepath.Join(camp, SubDir, SumFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("index written after a refused copy: %v", err)
	}
}

// SHA256SUMS: the lines of older campaigns read as before (and their
// flattened copies are found when they still hold the recorded content);
// paths and roles with tabs, newlines and backslashes round-trip.
func TestSumsFormat(t *testing.T) {
	camp := t.TempDir()
	dir := filepath.Join(camp, SubDir)
	a, b := sum([]byte("a")), sum([]byte("b"))
	old := a + "  /x/a/b_c\tclient\n" + b + "  /x/a_b/c\thelper\n" + b + "  /p/secret\\name.jsonl\tmanifest private\n"
	writeFile(t, filepath.Join(dir, SumFile), []byte(old), 0o444)
	// the old flattened copy: the second path's content overwrote the first's
	writeFile(t, filepath.Join(dir, Files, "x_a_b_c"), []byte("b"), 0o444)
	es, err := Read(camp)
	if err != nil {
		t.Fatal(err)
	}
	wantOld := []Entry{{Path: "/x/a/b_c", Role: "client", SHA256: a}, {Path: "/x/a_b/c", Role: "helper", SHA256: b}, {Path: `/p/secret\name.jsonl`, Role: "manifest", Private: true, SHA256: b}}
	if !slices.Equal(es, wantOld) {
		t.Fatalf("old index read as %+v; want %+v", es, wantOld)
	}
	if cp, ok := CopyOf(camp, es[0]); ok {
		t.Fatalf("old collided copy %s offered for %s, whose content it does not hold", cp, es[0].Path)
	}
	if cp, ok := CopyOf(camp, es[1]); !ok || cp != filepath.Join(dir, Files, "x_a_b_c") {
		t.Fatalf("old copy of %s: %q %v", es[1].Path, cp, ok)
	}

	odd := []Entry{{Path: "/x/tab\there", Role: "client", SHA256: a}, {Path: "/x/new\nline\\back", Role: "a role", Private: true, SHA256: b}, {Path: "/x/plain", Role: "helper", SHA256: b}}
	var buf bytes.Buffer
	for _, e := range odd {
		writeSumLine(&buf, e)
	}
	if n := strings.Count(buf.String(), "\n"); n != len(odd) {
		t.Fatalf("%d lines for %d entries:\n%s", n, len(odd), buf.String())
	}
	writeFile(t, filepath.Join(dir, SumFile), buf.Bytes(), 0o444)
	if es, err = Read(camp); err != nil || !slices.Equal(es, odd) {
		t.Fatalf("round trip: %#v %v; want %#v", es, err, odd)
	}
}

const memChildEnv = "PROVENANCE_MEMORY_CHILD"

// The child half of TestMemoryBounded: records the file named in the
// environment and prints the time taken and the peak resident memory.
func TestMemoryChild(t *testing.T) {
	in := os.Getenv(memChildEnv)
	if in == "" {
		t.Skip("run by TestMemoryBounded")
	}
	start := time.Now()
	if _, err := Record(os.Getenv(memChildEnv+"_CAMP"), []Entry{{Path: in, Role: "mapping"}}, Options{}); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			fmt.Printf("MEMCHILD elapsed=%s hwm=%s\n", elapsed.Round(time.Millisecond), strings.TrimSpace(v))
		}
	}
}

// Hashing and copying a 256 MiB input keeps the peak resident memory of a
// fresh process far below the file's size (the old code held it whole).
func TestMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 512 MiB")
	}
	const size = 256 << 20
	src := t.TempDir()
	in := filepath.Join(src, "weights.bin")
	f, err := os.Create(in)
	if err != nil {
		t.Fatal(err)
	}
	block := make([]byte, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range block {
		block[i] = byte(rng.UintN(255) + 1) // no zero blocks: the copy is dense
	}
	for i := 0; i < size/len(block); i++ {
		block[0] = byte(i) | 1
		if _, err := f.Write(block); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	camp := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMemoryChild$", "-test.v")
	cmd.Env = append(os.Environ(), memChildEnv+"="+in, memChildEnv+"_CAMP="+camp)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var elapsed, hwm string
	for _, l := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(l, "MEMCHILD "); ok {
			fmt.Sscanf(rest, "elapsed=%s hwm=%s", &elapsed, &hwm)
		}
	}
	kib, err := strconv.ParseInt(hwm, 10, 64)
	if err != nil {
		t.Fatalf("child printed no peak memory:\n%s", out)
	}
	t.Logf("hash + copy of %d MiB: %s, peak RSS (VmHWM) %d KiB", size>>20, elapsed, kib)
	if kib > 48<<10 {
		t.Fatalf("peak RSS %d KiB recording a %d MiB file; want under 48 MiB", kib, size>>20)
	}
	want, _ := HashFile(in)
	if got, err := HashFile(filepath.Join(camp, SubDir, Files, want)); err != nil || got != want {
		t.Fatalf("copy hash %s %v; want %s", got, err, want)
	}
}

// VerifyOnly checks the entries it keeps and no other.
func TestVerifyOnly(t *testing.T) {
	dir, camp := t.TempDir(), t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, p := range []string{a, b} {
		if err := os.WriteFile(p, []byte("before "+p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Record(camp, []Entry{{Path: a, Role: "protocol"}, {Path: b, Role: "manifest"}}, Options{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{a, b} {
		if err := os.WriteFile(p, []byte("after"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	err := VerifyOnly(camp, func(e Entry) bool { return e.Role != "protocol" })
	if err == nil || !strings.Contains(err.Error(), b+" changed") || strings.Contains(err.Error(), a+" changed") {
		t.Fatalf("VerifyOnly: %v", err)
	}
	if err := Verify(camp); err == nil || !strings.Contains(err.Error(), a+" changed") {
		t.Fatalf("Verify: %v", err)
	}
}

// A file whose hash the protocol freezes: Hash (and so Record, at start
// and amend) refuses another hash, naming where it is frozen and both
// hashes, before anything is written; the frozen file is recorded.
func TestFrozenHash(t *testing.T) {
	src := t.TempDir()
	client, _ := clientAndSecret(t, src)
	want := sum([]byte("print('v1')\n"))
	other := strings.Repeat("ab", 32)
	camp := t.TempDir()
	_, err := Record(camp, []Entry{{Path: client, Role: "client", Frozen: other, FrozenAt: "p.yaml:8:50"}}, Options{})
	var fe *FrozenError
	if !errors.Is(err, ErrFrozen) || !errors.As(err, &fe) || fe.Now != want || fe.Frozen != other ||
		err.Error() != "provenance: p.yaml:8:50: "+client+" has sha256 "+want+"; the protocol freezes "+other {
		t.Fatalf("another hash: %v", err)
	}
	if _, err := os.Stat(filepath.Join(camp, SubDir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused record wrote %v", err)
	}
	entries, err := Record(camp, []Entry{{Path: client, Role: "client", Frozen: want, FrozenAt: "p.yaml:8:50"}}, Options{})
	if err != nil || entries[0].SHA256 != want {
		t.Fatalf("the frozen hash: %v %+v", err, entries)
	}
}

// Model shards: the files of a directory that match a glob, each hashed
// once and recorded with its size and modification time, never copied; a
// Verify of unchanged shards reads none of them (a shard made unreadable
// with its size and time kept still verifies), a changed one is hashed
// again and refused; a later record takes the cache's hash.
func TestShards(t *testing.T) {
	model := t.TempDir()
	for _, n := range []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "config.json"} {
		writeFile(t, filepath.Join(model, n), []byte("weights of "+n), 0o644)
	}
	shards, err := Shards(model, "*.safetensors", "model", false)
	if err != nil || len(shards) != 2 || !shards[0].Shard || filepath.Base(shards[1].Path) != "model-00002-of-00002.safetensors" {
		t.Fatalf("shards %+v %v", shards, err)
	}
	if _, err := Shards(model, "*.bin", "model", false); err == nil || !strings.Contains(err.Error(), `matches "*.bin"`) {
		t.Fatalf("no match: %v", err)
	}
	camp := t.TempDir()
	rec, err := Record(camp, shards, Options{MaxFileBytes: 1})
	if err != nil {
		t.Fatalf("shards are not held to the copy limit: %v", err)
	}
	if rec[0].SHA256 != sum([]byte("weights of model-00001-of-00002.safetensors")) || rec[0].Size != 43 || rec[0].MTimeNS == 0 {
		t.Fatalf("record %+v", rec[0])
	}
	if ents, _ := os.ReadDir(filepath.Join(camp, SubDir, Files)); len(ents) != 0 {
		t.Fatalf("shards copied: %v", ents)
	}
	back, err := Read(camp)
	if err != nil || !slices.Equal(back, rec) {
		t.Fatalf("index read back %+v, %v; want %+v", back, err, rec)
	}
	// unchanged size and time: not read (bytes changed under the same
	// size and time pass: the record is taken, as documented)
	writeFile(t, shards[0].Path, []byte("WEIGHTS OF MODEL-00001-OF-00002.SAFETENSORS"), 0o644)
	mt := time.Unix(0, rec[0].MTimeNS)
	if err := os.Chtimes(shards[0].Path, mt, mt); err != nil {
		t.Fatal(err)
	}
	if err := Verify(camp); err != nil {
		t.Fatalf("unchanged size and time: %v", err)
	}
	if again, err := Hash(shards, Options{Cache: back}); err != nil || again[1].SHA256 != rec[1].SHA256 {
		t.Fatalf("from the cache: %+v %v", again, err)
	}
	// a shard rewritten (same size, new time): hashed again, refused
	writeFile(t, shards[1].Path, []byte("weights of model-00002-of-00002.safetensorz"), 0o644)
	os.Chtimes(shards[1].Path, time.Now().Add(time.Hour), time.Now().Add(time.Hour))
	var ce *ChangedError
	if err := Verify(camp); !errors.As(err, &ce) || ce.Path != shards[1].Path || ce.Now == "" {
		t.Fatalf("a changed shard: %v", err)
	}
}
