package main

import (
	"bytes"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	bolt "go.etcd.io/bbolt"

	"warden/internal/boltfault"
	"warden/internal/testutil/testtree"
	"warden/pkg/dirlayout"
	"warden/pkg/state"
)

// TestStatusRefusesDamagedDatabase: one bit flipped in the header of the
// root bucket's page (found from the meta page), or a state.db of 0 bytes:
// ctlq status exits 6 naming the file, without a Go panic, and writes
// nothing in the campaign directory.
func TestStatusRefusesDamagedDatabase(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string)
		want   string
	}{
		{"page header bit", func(t *testing.T, path string) {
			if err := boltfault.FlipHeaderBit(path, -1, boltfault.FieldCount); err != nil {
				t.Fatal(err)
			}
		}, "do not follow the previous ones"},
		{"empty file", func(t *testing.T, path string) {
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
		}, "the file is empty (0 bytes)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := campaignDir(t, state.CampaignStopped)
			path := dirlayout.State(dir)
			tc.damage(t, path)
			before := testtree.Snapshot(t, dir)
			for _, args := range [][]string{{"status"}, {"status", "-o", "json"}, {"runs"}} {
				out, code := run(t, append(args, "-d", dir)...)
				if code != exitDamaged || !strings.Contains(out, path+" is damaged or empty") ||
					!strings.Contains(out, tc.want) || strings.Contains(out, "goroutine") || strings.Contains(out, "panic") {
					t.Fatalf("ctlq %v: exit %d, want %d:\n%s", args, code, exitDamaged, out)
				}
			}
			if !maps.EqualFunc(before, testtree.Snapshot(t, dir), bytes.Equal) {
				t.Fatal("ctlq changed the campaign directory")
			}
		})
	}
}

// TestCampaignDirError: only a missing state.db means "not a campaign
// directory"; a directory ctlq may not read is permission denied. (Root
// reads any directory, so the permission case maps the error directly; a
// "directory" that is a file drives the same path through ctlq.)
func TestCampaignDirError(t *testing.T) {
	denied := campaignDirError("/c", &fs.PathError{Op: "stat", Path: "/c/state.db", Err: syscall.EACCES})
	if !strings.Contains(denied.Error(), "permission denied") || strings.Contains(denied.Error(), "not a campaign") {
		t.Fatalf("EACCES: %v", denied)
	}
	if missing := campaignDirError("/c", &fs.PathError{Op: "stat", Path: "/c/state.db", Err: syscall.ENOENT}); !strings.Contains(missing.Error(), "/c is not a campaign directory") {
		t.Fatalf("ENOENT: %v", missing)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, "status", "-d", file); code != exitOther || !strings.Contains(out, "not a directory") || strings.Contains(out, "not a campaign") {
		t.Fatalf("a file as DIR: exit %d:\n%s", code, out)
	}
}

// TestStatusNegativeSchemaVersion: a schema version of -1 is called
// corrupt (exit 6), never "open it read-write once".
func TestStatusNegativeSchemaVersion(t *testing.T) {
	dir := campaignDir(t, state.CampaignStopped)
	db, err := bolt.Open(dirlayout.State(dir), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("meta")).Put([]byte("schema_version"), []byte("-1"))
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	out, code := run(t, "status", "-d", dir)
	if code != exitDamaged || !strings.Contains(out, "schema_version -1 is negative") || strings.Contains(out, "read-write once") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}
