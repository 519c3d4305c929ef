package campaigndir

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warden/internal/boltfault"
	"warden/internal/testutil/testtree"
	"warden/pkg/dirlayout"
	"warden/pkg/state"
)

// TestCheckDatabaseKeepsTheDamagedFile: a damaged or empty state
// database is refused with a *DamagedError naming it and the copy kept
// beside it, which holds the damaged bytes; checking again keeps no
// second copy of the same content, and nothing else in the directory
// changes.
func TestCheckDatabaseKeepsTheDamagedFile(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string)
		want   string
	}{
		{"page header bit", func(t *testing.T, path string) {
			if err := boltfault.FlipHeaderBit(path, 0, boltfault.FieldFlags); err != nil {
				t.Fatal(err)
			}
		}, "neither branch nor leaf"},
		{"empty", func(t *testing.T, path string) {
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
		}, "the file is empty (0 bytes)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, _ := created(t)
			if err := CheckDatabase(dir); err != nil {
				t.Fatalf("the database as created: %v", err)
			}
			path := dirlayout.State(dir)
			tc.damage(t, path)
			damaged, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			before := testtree.Snapshot(t, dir)
			var kept string
			for i := range 2 {
				err := CheckDatabase(dir)
				var de *DamagedError
				if !errors.As(err, &de) || !errors.Is(err, state.ErrCorrupt) || de.Path != path || de.KeepErr != nil ||
					!strings.Contains(err.Error(), path+" is damaged or empty") || !strings.Contains(err.Error(), "a copy is kept as "+de.Kept) ||
					!strings.Contains(err.Error(), tc.want) {
					t.Fatalf("check %d: %v; want a *DamagedError naming %s, its copy and %q", i+1, err, path, tc.want)
				}
				if i == 1 && de.Kept != kept {
					t.Fatalf("the second check kept %s, the first %s: two copies of one content", de.Kept, kept)
				}
				kept = de.Kept
				after := testtree.Snapshot(t, dir)
				name, _ := filepath.Rel(dir, kept)
				if filepath.Dir(kept) != dir || !strings.HasPrefix(name, dirlayout.StateFile+DamagedSuffix) || !bytes.Equal(after[name], damaged) {
					t.Fatalf("check %d: the copy %s does not hold the damaged file", i+1, kept)
				}
				delete(after, name)
				if len(after) != len(before) {
					t.Errorf("check %d: %d entries beside the copy, %d before", i+1, len(after), len(before))
				}
				for p, b := range before {
					if a, ok := after[p]; !ok || !bytes.Equal(a, b) {
						t.Errorf("check %d changed %s", i+1, p)
					}
				}
			}
		})
	}
}

// TestKeepDamagedNeverOverwrites: a copy is kept under a name of its own
// time and never over an existing file; a copy of the same content
// already kept is returned instead of a new one, but not an unfinished
// copy (.tmp), nor one of other content.
func TestKeepDamagedNeverOverwrites(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	if err := os.WriteFile(path, []byte("damaged"), 0o600); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 7, 13, 10, 15, 0, 0, time.UTC)
	name := func(at time.Time) string { return path + DamagedSuffix + at.Format("20060102T150405.000000000Z") }
	// another content under the name this copy would take
	if err := os.WriteFile(name(at), []byte("earlier"), 0o600); err != nil {
		t.Fatal(err)
	}
	if kept, err := KeepDamaged(path, at); err == nil || !errors.Is(err, fs.ErrExist) {
		t.Fatalf("KeepDamaged over an existing name: %q, %v; want refused", kept, err)
	}
	if b, _ := os.ReadFile(name(at)); string(b) != "earlier" {
		t.Fatalf("the existing %s now holds %q", name(at), b)
	}
	// an unfinished copy of the same content is no copy
	if err := os.WriteFile(name(at.Add(time.Second))+".tmp", []byte("damaged"), 0o600); err != nil {
		t.Fatal(err)
	}
	later := at.Add(2 * time.Second)
	kept, err := KeepDamaged(path, later)
	if err != nil || kept != name(later) {
		t.Fatalf("KeepDamaged: %q, %v; want %s", kept, err, name(later))
	}
	if b, _ := os.ReadFile(kept); string(b) != "damaged" {
		t.Fatalf("the copy holds %q", b)
	}
	if again, err := KeepDamaged(path, at.Add(time.Hour)); err != nil || again != kept {
		t.Fatalf("KeepDamaged of the same content again: %q, %v; want %s", again, err, kept)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 4 {
		t.Fatalf("the directory holds %v; want state.db, the existing name, the .tmp and one copy", ents)
	}
}
