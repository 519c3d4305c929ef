package phasefile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestWriteAppendsWholeLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "phases.jsonl")
	n := 7
	want := []Line{
		{Phase: Warmup, T: "2026-01-01T00:00:00Z", MonoNS: 1},
		{Phase: Clean, T: "2026-01-01T00:00:01Z", MonoNS: 2, Index: 1},
		{Phase: Done, T: "2026-01-01T00:00:02Z", MonoNS: 3, Successes: &n},
	}
	// Two writers in turn: a restarted client appends, never truncates.
	for _, part := range [][]Line{want[:1], want[1:]} {
		w, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range part {
			if err := w.Write(l); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Whole lines and nothing else, in the format the controller reads.
	lines := `{"phase":"warmup","t":"2026-01-01T00:00:00Z","mono_ns":1}
{"phase":"clean","t":"2026-01-01T00:00:01Z","mono_ns":2,"index":1}
{"phase":"done","t":"2026-01-01T00:00:02Z","mono_ns":3,"successes":7}
`
	if string(data) != lines {
		t.Fatalf("file holds %q, want %q", data, lines)
	}
	if got, err := Parse(data); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("read back %+v, %v; want %+v", got, err, want)
	}
}

func TestNilWriterWritesNothing(t *testing.T) {
	w, err := Open("")
	if w != nil || err != nil {
		t.Fatalf("Open(\"\") = %v, %v; want nil, nil", w, err)
	}
	if err := w.Write(Line{Phase: Warmup}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenFailsOnMissingDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "phases.jsonl")
	if w, err := Open(path); err == nil {
		w.Close()
		t.Fatal("Open in a missing directory succeeded")
	}
}

func TestWriteAfterCloseFails(t *testing.T) {
	w, err := Open(filepath.Join(t.TempDir(), "phases.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := w.Write(Line{Phase: Drain}); err == nil {
		t.Fatal("Write after Close succeeded")
	}
}

// TestParse: blank lines are passed over; a line that is not a Line's
// JSON fails the parse, named by its number.
func TestParse(t *testing.T) {
	got, err := Parse([]byte("{\"phase\":\"warmup\",\"t\":\"x\",\"mono_ns\":1}\n\n  \n{\"phase\":\"clean\",\"t\":\"y\",\"mono_ns\":2,\"index\":1}\n"))
	want := []Line{{Phase: Warmup, T: "x", MonoNS: 1}, {Phase: Clean, T: "y", MonoNS: 2, Index: 1}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Parse = %+v, %v; want %+v", got, err, want)
	}
	if got, err := Parse(nil); err != nil || len(got) != 0 {
		t.Fatalf("Parse(nil) = %+v, %v; want no lines", got, err)
	}
	for _, bad := range []string{"{\"phase\":\"warmup\"}\n{\"phase\":\n", "{\"phase\":\"warmup\"}\n{\"mono_ns\":\"1\"}"} {
		if _, err := Parse([]byte(bad)); err == nil || !strings.HasPrefix(err.Error(), "line 2: ") {
			t.Errorf("Parse(%q) error %v, want one naming line 2", bad, err)
		}
	}
}

// TestReadFile: ReadFile reads back what a Writer wrote; a file that is
// not there, or holds a bad line, is an error naming the file.
func TestReadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "phases.jsonl")
	if _, err := ReadFile(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	w, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []Line{{Phase: Warmup, T: "x", MonoNS: 1}, {Phase: Clean, T: "y", MonoNS: 2, Index: 1}}
	if err := errors.Join(w.Write(want[0]), w.Write(want[1]), w.Close()); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadFile(path); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ReadFile = %+v, %v; want %+v", got, err, want)
	}
	if err := os.WriteFile(path, []byte("{\"phase\":1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(path); err == nil || !strings.HasPrefix(err.Error(), path+": line 1: ") {
		t.Errorf("bad line: %v", err)
	}
}
