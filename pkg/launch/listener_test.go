package launch

import (
	"context"
	"encoding/binary"
	"errors"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
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

// A listening socket several processes hold (children that inherited
// it) names every holder, however the scan splits the processes.
func TestListenerPIDsFindsEveryHolder(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := []int{os.Getpid()}
	for range 3 {
		cmd := exec.Command("sleep", "60")
		cmd.ExtraFiles = []*os.File{f}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		want = append(want, cmd.Process.Pid)
	}
	slices.Sort(want)
	pids, err := ListenerPIDs(ln.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pids, want) {
		t.Fatalf("ListenerPIDs = %v, want the test process and its three children %v", pids, want)
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

// The kernel's dump of its listening sockets and its socket tables name
// the same sockets; where the dump fails, the tables answer.
func TestListenerPIDsDumpAndTables(t *testing.T) {
	for _, c := range []struct {
		network, addr string
		family        uint8
		table         string
	}{{"tcp4", "127.0.0.1:0", unix.AF_INET, "net/tcp"}, {"tcp6", "[::1]:0", unix.AF_INET6, "net/tcp6"}} {
		t.Run(c.network, func(t *testing.T) {
			port := listenLoopback(t, c.network, c.addr)
			dumped, err := diagListening(c.family, port)
			if err != nil {
				t.Skipf("no sock_diag dump here: %v", err)
			}
			tables := map[uint64]bool{}
			if err := listeningInodes(filepath.Join(procRoot, c.table), port, tables); err != nil {
				t.Fatal(err)
			}
			if len(dumped) != 1 || !maps.Equal(dumped, tables) {
				t.Fatalf("the dump names %v, the table %v: want the one listening socket in both", dumped, tables)
			}
			old := diagListening
			diagListening = func(uint8, int) (map[uint64]bool, error) { return nil, errors.New("no sock_diag") }
			defer func() { diagListening = old }()
			pids, err := ListenerPIDs(port)
			if err != nil || !slices.Equal(pids, []int{os.Getpid()}) {
				t.Fatalf("ListenerPIDs(%d) without the dump = %v, %v; want this process %d from the tables", port, pids, err, os.Getpid())
			}
		})
	}
}

// A dump whose answers are cut short or carry the kernel's error is an
// error, never an empty (nothing listens) answer.
func TestDiagMessagesBroken(t *testing.T) {
	msg := func(typ uint16, seq uint32, body []byte) []byte {
		b := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(body))
		binary.NativeEndian.PutUint32(b[0:], uint32(unix.SizeofNlMsghdr+len(body)))
		binary.NativeEndian.PutUint16(b[4:], typ)
		binary.NativeEndian.PutUint32(b[8:], seq)
		return append(b, body...)
	}
	sock := make([]byte, diagMsgLen)
	binary.BigEndian.PutUint16(sock[diagMsgPortOff:], 8080)
	binary.NativeEndian.PutUint32(sock[diagMsgInoOff:], 4242)
	errno := binary.NativeEndian.AppendUint32(nil, ^uint32(0)) // -EPERM, as the kernel writes it
	for _, c := range []struct {
		name    string
		b       []byte
		done    bool
		inodes  int
		wantErr bool
	}{
		{"a socket then done", append(msg(unix.SOCK_DIAG_BY_FAMILY, 7, sock), msg(unix.NLMSG_DONE, 7, make([]byte, 4))...), true, 1, false},
		{"another request's answer", msg(unix.SOCK_DIAG_BY_FAMILY, 8, sock), false, 0, false},
		{"the kernel's error", msg(unix.NLMSG_ERROR, 7, errno), false, 0, true},
		{"a short socket", msg(unix.SOCK_DIAG_BY_FAMILY, 7, sock[:diagMsgLen-1]), false, 0, true},
		{"a length past the datagram", msg(unix.SOCK_DIAG_BY_FAMILY, 7, sock)[:unix.SizeofNlMsghdr+8], false, 0, true},
	} {
		inodes := map[uint64]bool{}
		done, err := diagMessages(c.b, 7, 8080, inodes)
		if done != c.done || len(inodes) != c.inodes || (err != nil) != c.wantErr {
			t.Errorf("%s: done %v, inodes %v, err %v; want done %v, %d inodes, error %v", c.name, done, inodes, err, c.done, c.inodes, c.wantErr)
		}
		if c.inodes == 1 && !inodes[4242] {
			t.Errorf("%s: inodes %v, want 4242", c.name, inodes)
		}
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
