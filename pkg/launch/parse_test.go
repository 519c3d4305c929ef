package launch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseStat(t *testing.T) {
	// 52 fields as Linux 6.x writes them; field 22 (start time) is 98765.
	tail := " S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 4 0 98765 1000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
	for _, tc := range []struct {
		name, comm string
	}{
		{"plain", "sleep"},
		{"spaces", "my server"},
		{"parens", "a) (b"},
		{"trailing paren and state-like text", "x) Z 9 9 9 ("},
		{"empty", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := parseStat([]byte("4321 (" + tc.comm + ")" + tail))
			if err != nil {
				t.Fatal(err)
			}
			want := procStat{PID: 4321, Comm: tc.comm, State: 'S', PPID: 1, PGRP: 1234, Session: 1234, StartTime: 98765}
			if st != want {
				t.Errorf("parseStat = %+v, want %+v", st, want)
			}
		})
	}
	for _, bad := range []string{
		"",
		"4321 sleep S 1 2 3",
		"4321 (sleep) S 1 1234 1234", // truncated
		"x (sleep)" + tail,           // bad pid
		"4321 (sleep) S one 1234 1234" + tail[10:],  // bad ppid
		"4321 (sleep) SS 1 1234 1234 0" + tail[14:], // bad state
	} {
		if st, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("parseStat(%q) = %+v, want an error", bad, st)
		}
	}
}

func TestLookupSelf(t *testing.T) {
	id, err := Lookup(os.Getpid(), nil)
	if err != nil {
		t.Fatal(err)
	}
	boot, err := ReadBootID()
	if err != nil {
		t.Fatal(err)
	}
	if id.PID != os.Getpid() || id.StartTime == 0 || id.BootID != boot {
		t.Errorf("Lookup(self) = %+v", id)
	}
	again, err := Lookup(os.Getpid(), nil)
	if err != nil || again != id {
		t.Errorf("second Lookup = %+v, %v; want %+v", again, err, id)
	}
	if alive, err := id.Alive(nil); err != nil || !alive {
		t.Errorf("Alive(self) = %v, %v", alive, err)
	}
}

func TestFindCgroup2(t *testing.T) {
	for _, tc := range []struct {
		name, mountinfo, mount, root string
	}{
		{"hybrid", "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n" +
			"31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n" +
			"40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n",
			"/sys/fs/cgroup/unified", "/"},
		{"unified with optional fields", "29 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 master:1 - cgroup2 cgroup2 rw,nsdelegate\n",
			"/sys/fs/cgroup", "/"},
		{"escaped path and non-root mount", "29 23 0:26 /a\\040b /mnt/c\\040g rw - cgroup2 none rw\n",
			"/mnt/c g", "/a b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "mountinfo")
			if err := os.WriteFile(path, []byte(tc.mountinfo), 0o644); err != nil {
				t.Fatal(err)
			}
			mount, root, err := findCgroup2(path)
			if err != nil || mount != tc.mount || root != tc.root {
				t.Errorf("findCgroup2 = %q, %q, %v; want %q, %q", mount, root, err, tc.mount, tc.root)
			}
		})
	}
	path := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(path, []byte("31 30 0:28 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := findCgroup2(path); err == nil {
		t.Error("findCgroup2 without a cgroup2 line succeeded")
	}
}

func TestParseCgroupFile(t *testing.T) {
	for in, want := range map[string]string{
		"0::/\n": "/",
		"9:name=systemd:/\n4:memory:/x\n0::/user.slice/session-1.scope\n": "/user.slice/session-1.scope",
		"0::/a/b (deleted)\n": "/a/b",
	} {
		got, ok := parseCgroupFile([]byte(in))
		if !ok || got != want {
			t.Errorf("parseCgroupFile(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	if _, ok := parseCgroupFile([]byte("4:memory:/x\n")); ok {
		t.Error("parseCgroupFile without a 0:: line succeeded")
	}
}

func TestRelativeTo(t *testing.T) {
	for _, tc := range []struct {
		path, base, want string
		ok               bool
	}{
		{"/a/b", "/", "/a/b", true},
		{"/a/b", "/a", "/b", true},
		{"/a", "/a", "/", true},
		{"/ab", "/a", "", false},
		{"/b", "/a", "", false},
	} {
		got, ok := relativeTo(tc.path, tc.base)
		if got != tc.want || ok != tc.ok {
			t.Errorf("relativeTo(%q, %q) = %q, %v; want %q, %v", tc.path, tc.base, got, ok, tc.want, tc.ok)
		}
	}
}

func TestNewManagerFallbacks(t *testing.T) {
	if _, err := NewManager("bad/name"); err == nil {
		t.Error("NewManager accepted a name with a slash")
	}
	dir := t.TempDir()
	mi := filepath.Join(dir, "mountinfo")
	if err := os.WriteFile(mi, []byte("40 30 0:37 / "+dir+" rw - cgroup2 cgroup2 rw\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	noV2 := filepath.Join(dir, "cgroup")
	if err := os.WriteFile(noV2, []byte("4:memory:/x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := newManager("x", mi, noV2)
	if err != nil {
		t.Fatal(err)
	}
	if m.Available() || !strings.Contains(m.Mode(), "no cgroup v2") {
		t.Errorf("manager without a 0:: line: Available %v, Mode %q", m.Available(), m.Mode())
	}
	var nilManager *Manager
	if nilManager.Available() || nilManager.Root() != "" || !strings.Contains(nilManager.Mode(), "process groups") {
		t.Errorf("nil manager: Available %v Root %q Mode %q", nilManager.Available(), nilManager.Root(), nilManager.Mode())
	}
	if _, err := m.NewLeaf("leaf"); err == nil {
		t.Error("NewLeaf on an unavailable manager succeeded")
	}
}

func TestDedupEnv(t *testing.T) {
	got := dedupEnv([]string{"A=1", "B=2", "A=3", "C", "C=4"})
	want := []string{"B=2", "A=3", "C=4"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("dedupEnv = %q, want %q", got, want)
	}
}
