package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"warden/pkg/provenance"
)

// Hostile provenance inputs at start (issue 10, items 3, 4 and 12): special
// and huge files are refused by name without hanging, a refused or failed
// start leaves nothing behind, and copies are kept by content so that two
// paths never share one.

// withProvenance appends a provenance section listing paths to the
// protocol file proto.
func withProvenance(t *testing.T, proto string, paths ...string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("provenance:\n")
	for _, p := range paths {
		fmt.Fprintf(&b, "  - {path: %q, role: helper}\n", p)
	}
	f, err := os.OpenFile(proto, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(b.String()); err != nil {
		t.Fatal(err)
	}
}

// requireNothingLeft fails unless the campaign directory is as it was
// before a failed start: absent, or (existed) present and empty.
func (c *campaign) requireNothingLeft(existed bool) {
	c.t.Helper()
	ents, err := os.ReadDir(c.dir)
	switch {
	case !existed && !errors.Is(err, os.ErrNotExist):
		c.t.Fatalf("a failed start left %s (%v, %v)", c.dir, ents, err)
	case existed && (err != nil || len(ents) != 0):
		c.t.Fatalf("a failed start left %s as %v (%v); want it existing and empty", c.dir, ents, err)
	}
}

// A FIFO, /dev/zero, a missing file and a file over the default limit
// (4 GiB; sparse, so it costs nothing) as provenance inputs: start is
// refused promptly, naming the file and why, and leaves nothing; the
// directory given, new or existing and empty, takes the next start.
func TestStartRefusesBadProvenance(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	fifo := filepath.Join(src, "client.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(src, "huge.bin")
	if f, err := os.Create(huge); err != nil {
		t.Fatal(err)
	} else if err := errors.Join(f.Truncate(provenance.DefaultMaxFileBytes+1), f.Close()); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(src, "helper.py")
	if err := os.WriteFile(good, []byte("print('ok')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		want       []string
		existed    bool
	}{
		{"fifo", fifo, []string{fifo + " is not a regular file", "FIFO"}, false},
		{"dev-zero", "/dev/zero", []string{"/dev/zero is not a regular file", "character device"}, true},
		{"missing", filepath.Join(src, "gone.py"), []string{filepath.Join(src, "gone.py"), "does not exist"}, false},
		{"over-limit", huge, []string{huge + " is 4294967297 bytes", "limit of 4294967296 bytes (4 GiB)"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCampaign(t)
			if tc.existed {
				if err := os.Mkdir(c.dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			bad := writeProtocol(t, scenario{})
			withProvenance(t, bad, good, tc.path)
			out, code := c.startBounded(bad)
			if code == 0 {
				t.Fatalf("start with %s as a provenance file succeeded:\n%s", tc.path, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Fatalf("start with %s: exit %d, output lacks %q:\n%s", tc.path, code, w, out)
				}
			}
			c.requireNothingLeft(tc.existed)

			fixed := writeProtocol(t, scenario{})
			withProvenance(t, fixed, good)
			c.runForeground(fixed)
			requireFinal(t, c)
		})
	}
}

// A start that fails after it made the directory (here the fake GPUs
// cannot be set up: gpus.json is a dangling link) removes what it made:
// the new directory, or the contents of an existing empty one.
func TestFailedStartRemovesWhatItMade(t *testing.T) {
	t.Parallel()
	for _, existed := range []bool{false, true} {
		t.Run(fmt.Sprintf("existed=%v", existed), func(t *testing.T) {
			t.Parallel()
			c := newCampaign(t)
			c.dir = filepath.Join(t.TempDir(), "new", "camp") // a parent to create too
			if existed {
				if err := os.MkdirAll(c.dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			gpus := t.TempDir()
			if err := os.Symlink(filepath.Join(gpus, "nowhere"), filepath.Join(gpus, "gpus.json")); err != nil {
				t.Fatal(err)
			}
			proto := writeProtocol(t, scenario{})
			out, code := c.startBounded(proto, "--fake-gpus", gpus)
			if code == 0 || !strings.Contains(out, "fake GPUs") {
				t.Fatalf("start with a broken fake GPU directory: exit %d:\n%s", code, out)
			}
			c.requireNothingLeft(existed)
			if !existed {
				if _, err := os.Stat(filepath.Dir(c.dir)); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("the parent the start created is left: %v", err)
				}
			}
			c.runForeground(proto)
			requireFinal(t, c)
		})
	}
}

// Two inputs whose old flattened copy names collide (/x/a/b_c and
// /x/a_b/c) get a copy each, and the index maps each path to its own
// hash. With one deleted, resume is refused and points at that file's own
// copy; restored from it, the campaign completes.
func TestProvenanceCopiesByContent(t *testing.T) {
	t.Parallel()
	x := t.TempDir()
	p1 := filepath.Join(x, "a", "b_c")
	p2 := filepath.Join(x, "a_b", "c")
	for p, content := range map[string]string{p1: "first\n", p2: "second\n"} {
		if err := errors.Join(os.MkdirAll(filepath.Dir(p), 0o755), os.WriteFile(p, []byte(content), 0o644)); err != nil {
			t.Fatal(err)
		}
	}
	sum1, sum2 := sha256File(t, p1), sha256File(t, p2)
	c := newCampaign(t)
	proto := writeProtocol(t, scenario{patterns: 2, measureS: "2"})
	withProvenance(t, proto, p1, p2)
	c.startDetached(proto, "auto")
	c.waitMeasuring()
	c.killController()

	index, err := provenance.Read(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range index {
		got[e.Path] = e.SHA256
		if cp, ok := provenance.CopyOf(c.dir, e); !ok || sha256File(t, cp) != e.SHA256 {
			t.Fatalf("copy of %s: %q %v", e.Path, cp, ok)
		}
	}
	if got[p1] != sum1 || got[p2] != sum2 {
		t.Fatalf("index %v; want %s -> %s and %s -> %s", got, p1, sum1, p2, sum2)
	}

	if err := os.Remove(p1); err != nil {
		t.Fatal(err)
	}
	out, code := c.controller("resume", "-d", c.dir, "--foreground")
	copy1 := filepath.Join(c.dir, provenance.SubDir, provenance.Files, sum1)
	want := "restore " + p1 + " from its copy " + copy1
	if code == 0 || !strings.Contains(out, want) || strings.Contains(out, sum2) {
		t.Fatalf("resume without %s: exit %d; want a refusal with %q and no mention of the other file's hash:\n%s", p1, code, want, tail(out, 2000))
	}
	b, err := os.ReadFile(copy1)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p1, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := c.controller("resume", "-d", c.dir, "--foreground"); code != 0 {
		t.Fatalf("resume after restoring from the copy exited %d:\n%s", code, tail(out, 3000))
	}
	requireFinal(t, c)
}
