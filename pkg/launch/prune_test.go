package launch

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// TestPruneEmpty: the empty leaves a dead controller left are removed, a
// leaf holding a process stays, and the campaign root stays.
func TestPruneEmpty(t *testing.T) {
	l := newLauncher(t, true)
	m := l.Cgroups
	for _, name := range []string{"r1.a1.server", "r1.a1.client"} {
		if _, err := m.NewLeaf(name); err != nil {
			t.Fatal(err)
		}
	}
	p, err := l.Start(Spec{Argv: []string{"/bin/sleep", "60"}, Cgroup: "r2.a1.server"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
		<-p.Done()
	})
	removed, err := m.PruneEmpty(context.Background())
	slices.Sort(removed)
	if err != nil || !slices.Equal(removed, []string{"r1.a1.client", "r1.a1.server"}) {
		t.Fatalf("removed %v, %v", removed, err)
	}
	for name, want := range map[string]bool{"r1.a1.server": false, "r1.a1.client": false, "r2.a1.server": true} {
		if _, err := os.Stat(filepath.Join(m.Root(), name)); (err == nil) != want {
			t.Errorf("leaf %s exists %v, want %v", name, err == nil, want)
		}
	}
	if !dirExists(m.Root()) {
		t.Fatal("the campaign root was removed")
	}
}
