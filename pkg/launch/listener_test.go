package launch

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func listenLoopback(t *testing.T, network, addr string) int {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("cannot listen on %s %s here: %v", network, addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

func TestListenerPIDsFindsTheHolder(t *testing.T) {
	for _, c := range []struct{ network, addr string }{{"tcp4", "127.0.0.1:0"}, {"tcp6", "[::1]:0"}} {
		t.Run(c.network, func(t *testing.T) {
			port := listenLoopback(t, c.network, c.addr)
			pids, err := ListenerPIDs(port)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(pids, []int{os.Getpid()}) {
				t.Fatalf("ListenerPIDs(%d) = %v, want this process %d", port, pids, os.Getpid())
			}
		})
	}
}

func TestListenerPIDsNothingListens(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	if pids, err := ListenerPIDs(port); !errors.Is(err, ErrNoListener) {
		t.Fatalf("ListenerPIDs of a closed port = %v, %v; want ErrNoListener", pids, err)
	}
}

// A connected socket on the port is not a listener: a client of the port
// is never taken for its owner.
func TestListenerPIDsIgnoresConnections(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ln.Close() // the accepted socket still has local port `port`, in state ESTABLISHED
	if pids, err := ListenerPIDs(port); !errors.Is(err, ErrNoListener) {
		t.Fatalf("ListenerPIDs with only connections on the port = %v, %v; want ErrNoListener", pids, err)
	}
}

func TestParseListenLine(t *testing.T) {
	const listen = "   1: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 123456 1 0000000000000000 100 0 0 10 0"
	const est = "   2: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 123457 1 0000000000000000 20 4 30 10 -1"
	const v6 = "   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 99 1 0000000000000000 100 0 0 10 0"
	for _, c := range []struct {
		line   string
		port   int
		ino    uint64
		ok     bool
		broken bool
	}{
		{listen, 8080, 123456, true, false},
		{listen, 8081, 0, false, false},
		{est, 8080, 0, false, false},
		{v6, 8080, 99, true, false},
		{"   1: 0100007F:1F90 00000000:0000 0A", 8080, 0, false, true},
		{"   1: 0100007F 00000000:0000 0A 0 0 0 0 0 1", 8080, 0, false, true},
		{"   1: 0100007F:1F90 00000000:0000 0A 0 0 0 0 0 x", 8080, 0, false, true},
	} {
		ino, ok, err := parseListenLine(c.line, c.port)
		if (err != nil) != c.broken || ok != c.ok || ino != c.ino {
			t.Errorf("parseListenLine(%q, %d) = %d, %v, %v; want %d, %v, broken %v", c.line, c.port, ino, ok, err, c.ino, c.ok, c.broken)
		}
	}
}

func TestCheckListenerServerAndImpostor(t *testing.T) {
	l := newLauncher(t, false)
	dir := t.TempDir()
	p := start(t, l, childSpec(t, "serve", dir))
	pid, port := waitReady(t, filepath.Join(dir, "ready"))
	owners, err := CheckListener(port, InAttempt(p.Identity, p.Leaf()))
	if err != nil {
		t.Fatalf("the attempt's own server: %v", err)
	}
	if !slices.Equal(owners, []int{pid}) {
		t.Fatalf("owners = %v, want the server %d", owners, pid)
	}
	// this test process is no part of the child's tree: an impostor
	other := listenLoopback(t, "tcp4", "127.0.0.1:0")
	_, err = CheckListener(other, InAttempt(p.Identity, p.Leaf()))
	var imp *ImpostorError
	if !errors.As(err, &imp) || imp.PID != os.Getpid() || imp.Port != other {
		t.Fatalf("CheckListener of a port this process holds = %v, want an impostor error naming pid %d", err, os.Getpid())
	}
	if _, err := CheckListener(other, func(int) (bool, error) { return false, errors.New("unreadable") }); err == nil || errors.As(err, &imp) {
		t.Fatalf("a membership that cannot be told = %v, want an error that is not a verdict", err)
	}
}

// A server that double-forks into a session of its own is outside the
// group and the session; its cgroup still holds it, and only then does it
// count as the attempt's.
func TestCheckListenerDaemonizedServer(t *testing.T) {
	for _, cgroups := range []bool{false, true} {
		name := "no-cgroups"
		if cgroups {
			name = "cgroups"
		}
		t.Run(name, func(t *testing.T) {
			p, dir := startChild(t, cgroups, "serve-daemon", "daemon")
			pid, port := waitReady(t, filepath.Join(dir, "ready.g"))
			id, err := Lookup(pid, nil)
			if err != nil {
				t.Fatal(err)
			}
			killOnCleanup(t, id)
			// the double fork's middle process exits after starting it:
			// until then the daemon is still a descendant of the server
			ctx, cancel := context.WithTimeout(context.Background(), waitLong)
			defer cancel()
			if err := pollUntil(ctx, func() (bool, error) { st, err := readStat(pid); return err == nil && st.PPID == os.Getpid(), err }); err != nil {
				t.Fatalf("the daemon was not reparented to the test process: %v", err)
			}
			_, err = CheckListener(port, InAttempt(p.Identity, p.Leaf()))
			var imp *ImpostorError
			switch {
			case cgroups && err != nil:
				t.Fatalf("a daemon its cgroup holds: %v", err)
			case !cgroups && (!errors.As(err, &imp) || imp.PID != pid):
				t.Fatalf("a daemon outside group, session and tree, without cgroups = %v, want an impostor error naming %d", err, pid)
			}
		})
	}
}

// IsAdopted: an escaped descendant reparented to this process (the
// subreaper) and carrying the marker is ours; another marker, a process
// that is not our child, or a gone one is not.
func TestIsAdopted(t *testing.T) {
	l := newLauncher(t, false)
	dir := t.TempDir()
	start(t, l, childSpec(t, "escape", dir, "WARDEN_TEST_MARK=attempt-1"))
	gpid, gid := waitGrandchild(t, dir)
	killOnCleanup(t, gid)
	// the orphan's parent exits once it started it: wait for the reparenting
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if err := pollUntil(ctx, func() (bool, error) { st, err := readStat(gpid); return err == nil && st.PPID == os.Getpid(), err }); err != nil {
		t.Fatalf("the escaped grandchild was not reparented to the test process: %v", err)
	}
	if !IsAdopted(gpid, "WARDEN_TEST_MARK=attempt-1") {
		t.Fatal("an adopted, marked escapee is not found ours")
	}
	if IsAdopted(gpid, "WARDEN_TEST_MARK=attempt-2") {
		t.Fatal("another attempt's marker matched")
	}
	if IsAdopted(os.Getpid(), "WARDEN_TEST_MARK=attempt-1") || IsAdopted(1, "WARDEN_TEST_MARK=attempt-1") {
		t.Fatal("a process that is not our child was found ours")
	}
}

func TestDescendsFrom(t *testing.T) {
	l := newLauncher(t, false)
	dir := t.TempDir()
	p := start(t, l, childSpec(t, "threads", dir))
	waitReady(t, filepath.Join(dir, "ready"))
	gpid, _ := waitReady(t, filepath.Join(dir, "ready.g"))
	if !DescendsFrom(gpid, p.PID) || !DescendsFrom(gpid, os.Getpid()) {
		t.Fatalf("grandchild %d is not found a descendant of its parent %d and of the test process", gpid, p.PID)
	}
	if DescendsFrom(p.PID, gpid) || DescendsFrom(os.Getpid(), p.PID) || DescendsFrom(1<<30, p.PID) {
		t.Fatal("an ancestor, or a pid that does not exist, was found a descendant")
	}
}
