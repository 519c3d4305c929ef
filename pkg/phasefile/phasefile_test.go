package phasefile

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
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
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []Line
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		got = append(got, l)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read back %+v, want %+v", got, want)
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
