package state_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"warden/internal/boltfault"
	"warden/pkg/state"
)

// headerFlips are single-bit flips in a page header: byte offset in the
// header and bit. Every one of them, in any page in use, is refused.
var headerFlips = []struct {
	name string
	off  int64
	bit  uint
}{
	{"id bit 0", boltfault.FieldID, 0},
	{"id bit 33", boltfault.FieldID + 4, 1},
	{"flags bit 0", boltfault.FieldFlags, 0},
	{"flags bit 4", boltfault.FieldFlags, 4},
	{"count bit 0", boltfault.FieldCount, 0},
	{"count bit 3", boltfault.FieldCount, 3},
	{"overflow bit 0", boltfault.FieldOverflow, 0},
	{"overflow bit 20", boltfault.FieldOverflow + 2, 4},
}

// TestDamagedPageHeaderRefused: a campaign database with free pages and
// pages of every kind; one bit flipped in the header of any branch or
// leaf page in use makes both opens refuse it as corrupt, and neither
// changes a byte of the file.
func TestDamagedPageHeaderRefused(t *testing.T) {
	s, path := newCampaign(t, 300)
	for i := range 40 {
		run := fmt.Sprintf("r%03d", i)
		if _, err := s.NewAttempt(run, "", nil); err != nil {
			t.Fatal(err)
		}
		drive(t, s, run, 1, happyPath)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	pages, err := boltfault.TreePages(path)
	if err != nil {
		t.Fatal(err)
	}
	var branches int
	for _, p := range pages {
		if !p.Leaf {
			branches++
		}
	}
	if len(pages) < 10 || branches == 0 {
		t.Fatalf("%d tree pages, %d branches: the fixture is too small to test", len(pages), branches)
	}
	clean, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		for _, fl := range headerFlips {
			if err := boltfault.FlipBit(path, p.Offset+fl.off, fl.bit); err != nil {
				t.Fatal(err)
			}
			damaged, _ := os.ReadFile(path)
			for _, readOnly := range []bool{true, false} {
				var st *state.Store
				var err error
				if readOnly {
					st, err = state.OpenReadOnly(path, time.Second)
				} else {
					st, err = state.Open(path, state.Options{})
				}
				if err == nil {
					st.Close()
				}
				if !errors.Is(err, state.ErrCorrupt) {
					t.Fatalf("page %d, %s, read-only %v: %v, want ErrCorrupt", p.ID, fl.name, readOnly, err)
				}
				if now, _ := os.ReadFile(path); !bytes.Equal(now, damaged) {
					t.Fatalf("page %d, %s, read-only %v: the open changed the file", p.ID, fl.name, readOnly)
				}
			}
			if err := boltfault.FlipBit(path, p.Offset+fl.off, fl.bit); err != nil {
				t.Fatal(err)
			}
		}
	}
	if now, _ := os.ReadFile(path); !bytes.Equal(now, clean) {
		t.Fatal("the file is not restored")
	}
	st, err := state.OpenReadOnly(path, time.Second)
	if err != nil {
		t.Fatalf("the restored file: %v", err)
	}
	st.Close()
}

// TestEmptyDatabaseRefused: a state.db of 0 bytes (what a crash can leave)
// is refused by both opens and stays 0 bytes: a read-write open never makes
// a fresh database over it.
func TestEmptyDatabaseRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := state.OpenReadOnly(path, time.Second); !errors.Is(err, state.ErrCorrupt) {
		t.Fatalf("read-only: %v, want ErrCorrupt", err)
	}
	if _, err := state.Open(path, state.Options{}); !errors.Is(err, state.ErrCorrupt) {
		t.Fatalf("read-write: %v, want ErrCorrupt", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
		t.Fatalf("after the opens: %v, %v", fi, err)
	}
}

// TestNegativeSchemaVersion: both opens call a schema version of -1
// corrupt, with the same words.
func TestNegativeSchemaVersion(t *testing.T) {
	s, path := newCampaign(t, 2)
	s.Close()
	rawUpdate(t, path, func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("meta")).Put([]byte("schema_version"), []byte("-1"))
	})
	_, roErr := state.OpenReadOnly(path, time.Second)
	_, rwErr := state.Open(path, state.Options{})
	if !errors.Is(roErr, state.ErrCorrupt) || !errors.Is(rwErr, state.ErrCorrupt) {
		t.Fatalf("read-only: %v; read-write: %v; want ErrCorrupt for both", roErr, rwErr)
	}
	if !bytes.Contains([]byte(roErr.Error()), []byte("schema_version -1 is negative")) ||
		!bytes.Contains([]byte(rwErr.Error()), []byte("schema_version -1 is negative")) {
		t.Fatalf("messages differ: %q, %q", roErr, rwErr)
	}
}
