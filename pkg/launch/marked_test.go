package launch

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestHasEntry(t *testing.T) {
	env := []byte("A=1\x00K=/run/a\x00XK=/run/b\x00LAST=x")
	for _, tc := range []struct {
		entry string
		want  bool
	}{
		{"A=1", true},
		{"K=/run/a", true},
		{"LAST=x", true}, // no NUL after the last entry
		{"K=/run", false},
		{"K=/run/a/b", false},
		{"K=/run/b", false}, // only XK has it
		{"=1", false},
		{"A=", false},
	} {
		if got := hasEntry(env, tc.entry); got != tc.want {
			t.Errorf("hasEntry(%q) = %v, want %v", tc.entry, got, tc.want)
		}
	}
}

func TestMarked(t *testing.T) {
	l := newLauncher(t, false)
	base := t.TempDir()
	marker := "LAUNCH_TEST_MARK=" + base
	// startChild starts this binary in mode with extra environment entries
	// and waits until it (and its grandchild, for forkn) is ready.
	startChild := func(name, mode string, env ...string) *Proc {
		dir := filepath.Join(base, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		p := start(t, l, childSpec(t, mode, dir, env...))
		waitReady(t, filepath.Join(dir, "ready"))
		return p
	}
	marked := startChild("marked", "sleep", marker)
	startChild("unmarked", "sleep")
	startChild("longer", "sleep", marker+"-longer")
	startChild("prefix", "sleep", "LAUNCH_TEST_MARK="+base[:len(base)-1])
	startChild("otherkey", "sleep", "X"+marker)
	// A marked child whose marked grandchild is not our child.
	parent := startChild("parent", "forkn", marker, envN+"=1")
	gpid, _ := waitReady(t, filepath.Join(base, "parent", "ready.g0"))
	gid, err := Lookup(gpid, nil)
	if err != nil {
		t.Fatal(err)
	}

	// the kernel's children lists name this process's children, as a scan
	// of every process's parent does
	listed, err := childPIDs()
	scanned, serr := scanProcs(func(s procStat) bool { return s.PPID == os.Getpid() })
	if err != nil || serr != nil || !slices.Equal(listed, pidsOf(scanned)) {
		t.Errorf("children listed %v (%v), scanned %v (%v)", listed, err, pidsOf(scanned), serr)
	}
	unreadable := func() ([]int, error) { return nil, os.ErrPermission }
	changing := func() func() ([]int, error) {
		n := 0
		return func() ([]int, error) { n++; return listed[:len(listed)-n%2], nil }
	}()
	for _, tc := range []struct {
		scope    Scope
		want     []Identity
		children func() ([]int, error) // nil: the kernel's lists
	}{
		{AllProcesses, []Identity{marked.Identity, parent.Identity, gid}, nil},
		{Children, []Identity{marked.Identity, parent.Identity}, nil},
		// lists that cannot be read, or that change between two reads: the scan
		{Children, []Identity{marked.Identity, parent.Identity}, unreadable},
		{Children, []Identity{marked.Identity, parent.Identity}, changing},
	} {
		if tc.children != nil {
			readChildPIDs = tc.children
		}
		got, err := Marked(nil, marker, tc.scope)
		readChildPIDs = childPIDs
		if err != nil {
			t.Fatal(err)
		}
		byPID := func(a, b Identity) int { return a.PID - b.PID }
		slices.SortFunc(got, byPID)
		slices.SortFunc(tc.want, byPID)
		if !slices.Equal(got, tc.want) {
			t.Errorf("Marked(scope %d) = %v, want %v", tc.scope, got, tc.want)
		}
	}
	if ids, err := Adopted(nil, marker); err != nil || !slices.Contains(ids, marked.Identity) || slices.Contains(ids, gid) {
		t.Errorf("Adopted = %v, %v; want the children only", ids, err)
	}
	if ids, err := Marked(fakeBoot("boot-x"), marker, Children); err != nil || len(ids) != 2 || ids[0].BootID != "boot-x" {
		t.Errorf("Marked with a boot id source = %v, %v; want identities in boot-x", ids, err)
	}
	for _, bad := range []string{"", "KEY", "=value", "K=a\x00b"} {
		if _, err := Marked(nil, bad, AllProcesses); err == nil {
			t.Errorf("Marked(%q) accepted a marker that is not KEY=value", bad)
		}
	}
}

// TestMarkedLeavesOutZombies runs Marked while a marked child has exited
// but is not yet reaped: Start's afterFork hook holds the reaper off.
func TestMarkedLeavesOutZombies(t *testing.T) {
	l := newLauncher(t, false)
	dir := t.TempDir()
	marker := "LAUNCH_TEST_MARK=" + dir
	var zombie int
	var ids []Identity
	var markedErr error
	l.afterFork = func(pid int) {
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		defer cancel()
		if err := pollUntil(ctx, func() (bool, error) {
			st, err := readStat(pid)
			return err == nil && st.State == 'Z', err
		}); err != nil {
			t.Errorf("pid %d did not become a zombie: %v", pid, err)
			return
		}
		zombie = pid
		ids, markedErr = Marked(nil, marker, AllProcesses)
	}
	p := start(t, l, childSpec(t, "exit3", dir, marker))
	waitDone(t, p)
	if zombie != p.PID {
		t.Fatalf("hook saw pid %d, want %d", zombie, p.PID)
	}
	if markedErr != nil || len(ids) != 0 {
		t.Errorf("Marked while pid %d was a zombie = %v, %v; want none", p.PID, ids, markedErr)
	}
}
