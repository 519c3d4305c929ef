package campaigndir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warden/pkg/dirlayout"
	"warden/pkg/lockfile"
	"warden/pkg/provenance"
)

// notOwned asserts that err is a *NotOwnedError naming path, its problem
// containing problem and its fix containing fix.
func notOwned(t *testing.T, err error, path, problem, fix string) {
	t.Helper()
	var no *NotOwnedError
	if !errors.As(err, &no) {
		t.Fatalf("%v (%T), want a *NotOwnedError for %s", err, err, path)
	}
	if no.Path != path || !strings.Contains(no.Problem, problem) || !strings.Contains(no.Fix, fix) || !strings.Contains(err.Error(), path) {
		t.Fatalf("refusal %q (path %s, problem %q, fix %q), want %s: %q, fix %q", err, no.Path, no.Problem, no.Fix, path, problem, fix)
	}
}

// TestCheckOwned: a campaign directory is run only when it and every
// file that decides what it runs are the invoking user's and writable by
// no one else; each refusal names the file, what is wrong and the fix.
func TestCheckOwned(t *testing.T) {
	uid := os.Geteuid()
	dir, _ := created(t)
	amendPlan := filepath.Join(dir, provenance.SubDir, "amendments", "A-1", dirlayout.PlanFile)
	if err := os.MkdirAll(filepath.Dir(amendPlan), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(amendPlan, []byte("{}"), 0o444); err != nil {
		t.Fatal(err)
	}
	if err := CheckOwned(dir, uid); err != nil {
		t.Fatalf("the campaign its user made: %v", err)
	}

	// run by another user, everything here is someone else's
	notOwned(t, CheckOwned(dir, uid+1), dir, "owned by uid", "chown -R")

	files := []string{
		dirlayout.Settings(dir), dirlayout.Plan(dir), dirlayout.State(dir),
		filepath.Join(dir, provenance.SubDir, provenance.SumFile), filepath.Join(dir, provenance.SubDir), amendPlan,
	}
	for _, path := range append([]string{dir}, files...) {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			mode os.FileMode
			who  string
		}{{0o020, "writable by its group"}, {0o002, "writable by others"}, {0o022, "writable by its group and others"}} {
			if err := os.Chmod(path, fi.Mode().Perm()|c.mode); err != nil {
				t.Fatal(err)
			}
			notOwned(t, CheckOwned(dir, uid), path, c.who, "chmod go-w "+path)
			if err := os.Chmod(path, fi.Mode().Perm()); err != nil {
				t.Fatal(err)
			}
		}
	}

	// a link in a file's place: its target is anyone's
	plan := dirlayout.Plan(dir)
	elsewhere := filepath.Join(t.TempDir(), "plan.json")
	if err := os.Rename(plan, elsewhere); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, plan); err != nil {
		t.Fatal(err)
	}
	notOwned(t, CheckOwned(dir, uid), plan, "a symbolic link", "replace it")
	if err := os.Remove(plan); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(elsewhere, plan); err != nil {
		t.Fatal(err)
	}
	if err := CheckOwned(dir, uid); err != nil {
		t.Fatalf("restored: %v", err)
	}

	if uid != 0 {
		return // only root can give a file to another user
	}
	for _, path := range files {
		if err := os.Lchown(path, 65534, -1); err != nil {
			t.Fatal(err)
		}
		notOwned(t, CheckOwned(dir, uid), path, "owned by uid 65534, not by uid 0", "chown -R 0 "+dir)
		if err := os.Lchown(path, 0, -1); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLockRefusesAForeignCampaign: the controller's own take of a
// campaign (start --foreground, resume's daemon) refuses a directory
// others may write, before it takes the lock, and leaves its mode alone.
func TestLockRefusesAForeignCampaign(t *testing.T) {
	dir, _ := created(t)
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	_, err := Lock(dir)
	notOwned(t, err, dir, "writable by its group and others", "chmod go-w")
	if lockfile.Held(dirlayout.Lock(dir)) {
		t.Fatal("the lock was taken")
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o777 {
		t.Fatalf("mode %v, %v: a refused directory is left as it is", fi.Mode().Perm(), err)
	}
	if _, err := Readjudicate(dir, "A-1", nil); !errors.As(err, new(*NotOwnedError)) {
		t.Fatalf("readjudicate: %v, want a refusal", err)
	}
}

// TestCreateRefusesAForeignDirectory: start into an empty directory
// another user owns is refused before anything is written.
func TestCreateRefusesAForeignDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root can give a directory to another user")
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "protocols", "testdata", "mini.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	proto := filepath.Join(t.TempDir(), "mini.yaml")
	if err := os.WriteFile(proto, b, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "campaign")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, -1); err != nil {
		t.Fatal(err)
	}
	_, err = Create(proto, dir, StartOptions{Backend: "fake", Cgroups: "off", AllowOverBudget: true}, time.Now())
	notOwned(t, err, dir, "owned by uid 65534", "chown -R 0 "+dir)
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Fatalf("the refused directory holds %v (%v)", ents, err)
	}
}
