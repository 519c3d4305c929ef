package launch

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// A readiness probe only says that something answers on the port. The
// listener check says who: the processes that hold the TCP socket
// listening on it, read from the kernel's listening sockets (a sock_diag
// dump of the sockets in state LISTEN, sockdiag.go; where that fails, the
// socket tables /proc/net/tcp and /proc/net/tcp6) and their inodes, and
// from every process's descriptors (/proc/PID/fd links "socket:[INODE]").
// A server that binds late leaves its port free for another process to
// take after the preflight gate; the check tells the campaign's server
// from that impostor.

// ErrNoListener: no socket listens on the port.
var ErrNoListener = errors.New("no socket listens on the port")

// tcpListenState is the kernel's TCP_LISTEN in /proc/net/tcp's "st".
const tcpListenState = "0A"

// ListenerPIDs returns the processes that hold a TCP socket listening on
// port, on any local address, IPv4 or IPv6, sorted. It fails closed: a
// listening socket no readable process holds (another user's, with too
// few privileges; another PID namespace) is an error, not an empty
// answer; ErrNoListener when nothing listens.
func ListenerPIDs(port int) ([]int, error) {
	inodes := map[uint64]bool{}
	for _, t := range []struct {
		family uint8
		table  string
	}{{unix.AF_INET, "net/tcp"}, {unix.AF_INET6, "net/tcp6"}} {
		// the kernel's listening sockets alone; the whole table where
		// the dump fails (no sock_diag in this kernel or sandbox)
		if found, err := diagListening(t.family, port); err == nil {
			maps.Copy(inodes, found)
			continue
		}
		if err := listeningInodes(filepath.Join(procRoot, t.table), port, inodes); err != nil {
			return nil, err
		}
	}
	if len(inodes) == 0 {
		return nil, fmt.Errorf("port %d: %w", port, ErrNoListener)
	}
	pids, found, err := socketHolders(inodes)
	if err != nil {
		return nil, err
	}
	for ino := range inodes {
		if !found[ino] {
			return nil, fmt.Errorf("port %d: socket inode %d listens on it but no readable process holds it: its owner cannot be told", port, ino)
		}
	}
	return pids, nil
}

// listeningInodes adds the inodes of the table's LISTEN sockets on port.
// A missing table (no IPv6 in this kernel) holds none.
func listeningInodes(path string, port int, into map[uint64]bool) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the socket table: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	first := true
	for sc.Scan() {
		if first { // the header line
			first = false
			continue
		}
		ino, ok, err := parseListenLine(sc.Text(), port)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if ok {
			into[ino] = true
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return nil
}

// parseListenLine reads one line of /proc/net/tcp{,6}: "sl local_address
// rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
// ...", the local address ADDR:PORT in hex. It reports the inode of a
// LISTEN socket whose local port is port.
func parseListenLine(line string, port int) (uint64, bool, error) {
	f := strings.Fields(line)
	if len(f) < 10 {
		return 0, false, fmt.Errorf("a socket line of %d fields, want at least 10: %q", len(f), line)
	}
	if f[3] != tcpListenState {
		return 0, false, nil
	}
	i := strings.LastIndexByte(f[1], ':')
	if i < 0 {
		return 0, false, fmt.Errorf("local address %q has no port", f[1])
	}
	p, err := strconv.ParseUint(f[1][i+1:], 16, 16)
	if err != nil {
		return 0, false, fmt.Errorf("local address %q: %w", f[1], err)
	}
	if int(p) != port {
		return 0, false, nil
	}
	ino, err := strconv.ParseUint(f[9], 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("inode %q: %w", f[9], err)
	}
	return ino, true, nil
}

// socketHolders scans every process's descriptors for the inodes. A
// process that ends during the scan, or whose descriptors cannot be read,
// is passed over; what it held counts as not found. The processes are
// split among holderWorkers goroutines (a host runs thousands of
// descriptors; each is a readlink), all ended when it returns.
func socketHolders(inodes map[uint64]bool) ([]int, map[uint64]bool, error) {
	dir, err := os.Open(procRoot)
	if err != nil {
		return nil, nil, fmt.Errorf("list processes: %w", err)
	}
	names, err := dir.Readdirnames(-1)
	dir.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("list processes: %w", err)
	}
	var pids []int
	for _, n := range names {
		if pid, err := strconv.Atoi(n); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	type holder struct {
		pid    int
		inodes []uint64
	}
	workers := min(holderWorkers, runtime.GOMAXPROCS(0), len(pids)/holdersPerWorker+1)
	held := make([][]holder, workers)
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			buf, dents := make([]byte, 64), make([]byte, 8<<10)
			for {
				i := int(next.Add(1)) - 1
				if i >= len(pids) {
					return
				}
				if found := heldInodes(pids[i], inodes, buf, dents); len(found) > 0 {
					held[w] = append(held[w], holder{pids[i], found})
				}
			}
		})
	}
	wg.Wait()
	found := map[uint64]bool{}
	var out []int
	for _, hs := range held {
		for _, h := range hs {
			out = append(out, h.pid)
			for _, ino := range h.inodes {
				found[ino] = true
			}
		}
	}
	slices.Sort(out)
	return out, found, nil
}

// holderWorkers bounds the goroutines of a socket-holder scan;
// holdersPerWorker is how many processes a further one must have to take.
const (
	holderWorkers    = 8
	holdersPerWorker = 64
)

// heldInodes returns which of the inodes process pid holds a descriptor
// of: its descriptors listed through dents and read as links
// "socket:[INODE]" through buf, without building a path for each. A
// process whose descriptors cannot be read holds none.
func heldInodes(pid int, inodes map[uint64]bool, buf, dents []byte) []uint64 {
	// raw descriptors: an os.File would register each with the poller
	dfd, err := unix.Open(procRoot+"/"+strconv.Itoa(pid)+"/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(dfd)
	var found []uint64
	var names []string
	for {
		n, err := unix.ReadDirent(dfd, dents)
		if err != nil || n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(dents[:n], -1, names[:0])
		for _, fd := range names {
			n, err := unix.Readlinkat(dfd, fd, buf)
			if err != nil || n >= len(buf) {
				continue // gone, or longer than any socket link
			}
			link := buf[:n]
			if !bytes.HasPrefix(link, socketLink) || link[n-1] != ']' {
				continue
			}
			ino, err := strconv.ParseUint(string(link[len(socketLink):n-1]), 10, 64)
			if err == nil && inodes[ino] {
				found = append(found, ino)
			}
		}
	}
	return found
}

// socketLink begins the link of a socket's descriptor.
var socketLink = []byte("socket:[")

// ImpostorError names a listener that does not belong to the attempt:
// its pid, its name and its command line.
type ImpostorError struct {
	Port int
	PID  int
	Comm string
	// Cmdline is its command line, arguments joined by spaces, quoted as
	// Go quotes a string and cut to 256 bytes; "" when it cannot be read.
	Cmdline string
}

func (e *ImpostorError) Error() string {
	cmd := ""
	if e.Cmdline != "" {
		cmd = ", command " + e.Cmdline
	}
	return fmt.Sprintf("port %d is held by pid %d (%s%s), which is not the attempt's server or one of its processes: a port impostor", e.Port, e.PID, e.Comm, cmd)
}

// CheckListener fails unless every process listening on port belongs to
// the attempt, as belongs says; an *ImpostorError names the first that
// does not. It fails closed where the owner cannot be told.
func CheckListener(port int, belongs func(pid int) (bool, error)) ([]int, error) {
	pids, err := ListenerPIDs(port)
	if err != nil {
		return nil, err
	}
	for _, pid := range pids {
		ok, err := belongs(pid)
		if err != nil {
			return pids, fmt.Errorf("port %d: whether listener pid %d is the attempt's cannot be told: %w", port, pid, err)
		}
		if !ok {
			return pids, &ImpostorError{Port: port, PID: pid, Comm: commOf(pid), Cmdline: cmdlineOf(pid)}
		}
	}
	return pids, nil
}

// commOf is a process's name, for messages; "?" when gone.
func commOf(pid int) string {
	st, err := readStat(pid)
	if err != nil {
		return "?"
	}
	return st.Comm
}

// cmdlineOf is a process's command line for messages: quoted (no byte
// of it reaches a terminal raw), cut to 256 bytes; "" when it cannot be
// read.
func cmdlineOf(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(b) == 0 {
		return ""
	}
	b = bytes.TrimRight(b, "\x00")
	if len(b) > 256 {
		b = b[:256]
	}
	return strconv.Quote(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
}

// InAttempt is CheckListener's membership test for the attempt whose
// server is leader: a process of the group or session the leader leads, one of its
// descendants, or with cgroups (leaf not zero) one the leaf holds, so a
// server that double-forks into a session of its own still counts where
// its cgroup holds it. A process that is gone does not belong.
func InAttempt(leader Identity, leaf Leaf) func(pid int) (bool, error) {
	return func(pid int) (bool, error) {
		st, err := readStat(pid)
		if errors.Is(err, errNoProcess) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		// the leader leads its group or its session (Start): its id is
		// theirs; the controller's own session is not the attempt's
		if pid == leader.PID || st.PGRP == leader.PID || st.Session == leader.PID {
			return true, nil
		}
		if descends(st, leader.PID) {
			return true, nil
		}
		if !leaf.IsZero() {
			return leaf.holds(pid)
		}
		return false, nil
	}
}

// DescendsFrom reports whether the live process pid is a descendant of
// ancestor now: ancestor is on the chain of its parents. A process whose
// parent exited has been reparented and is no longer one (see IsAdopted).
func DescendsFrom(pid, ancestor int) bool {
	st, err := readStat(pid)
	return err == nil && !st.dead() && descends(st, ancestor)
}

// descends walks st's parents up to init, bounded, looking for ancestor.
func descends(st procStat, ancestor int) bool {
	for p, hops := st.PPID, 0; p > 1 && hops < 4096; hops++ {
		if p == ancestor {
			return true
		}
		up, err := readStat(p)
		if err != nil {
			return false
		}
		p = up.PPID
	}
	return false
}
