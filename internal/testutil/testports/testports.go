// Package testports hands tests loopback ports for the servers they
// start, from Range: outside the kernel's ephemeral range, so that no
// outgoing connection (and no listener on port 0, such as a server's
// fallback) can be given one between the test's choice and the server's
// bind; and outside launch.ServerPorts, so that a controller under test
// choosing a port for port: auto never chooses one a test holds but has
// not bound yet (a bind probe sees such a port free).
//
// A port is handed out at most once in a process, so parallel tests of one
// package never share one, and never to two test processes at once: each
// port handed out is claimed with a POSIX record lock on its byte of one
// file in the temporary directory, held until the process exits (the
// kernel lets go of it however the process ends). go test runs packages in
// parallel, and a port another package's test holds but has not bound yet
// looks free to a bind probe.
package testports

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"warden/pkg/launch"
)

// LockFile is the file in os.TempDir() whose bytes claim the ports.
const LockFile = "warden-testports.lock"

var (
	mu     sync.Mutex
	handed = map[int]bool{} // every port this process handed out or found claimed
	lock   *os.File         // open for the life of the process: closing it would drop every claim
)

// Free returns n distinct loopback ports free now, none handed out before
// in this process nor claimed by another process that uses this package.
func Free(t testing.TB, n int) []int {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if lock == nil {
		f, err := os.OpenFile(filepath.Join(os.TempDir(), LockFile), os.O_RDWR|os.O_CREATE, 0o666)
		if err != nil {
			t.Fatalf("testports: the lock file: %v", err)
		}
		lock = f
	}
	var ports []int
	for len(ports) < n {
		lo, hi := Range()
		p, err := launch.FreePortIn(lo, hi, handed)
		if err != nil {
			t.Fatal(err)
		}
		handed[p] = true
		ok, err := claim(lock, p)
		if err != nil {
			t.Fatalf("testports: claim port %d: %v", p, err)
		}
		if ok {
			ports = append(ports, p)
		}
	}
	return ports
}

// Range is the range [lo, hi) ports are handed out from: the ports
// outside both the kernel's ephemeral range and launch.ServerPorts, when
// there are at least 1000 of them; launch.ServerPorts otherwise (a
// controller under test may then choose a port a test holds, and its port
// gate says so).
func Range() (lo, hi int) {
	elo, ehi := launch.EphemeralPorts()
	slo, shi := launch.ServerPorts()
	switch {
	case shi <= elo && 65536-(ehi+1) >= 1000: // server ports below: these above
		return ehi + 1, 65536
	case slo > ehi && elo-1024 >= 1000: // server ports above: these below
		return 1024, elo
	}
	return slo, shi
}

// claim takes the write lock on byte p of f without waiting: false when
// another process holds it.
func claim(f *os.File, p int) (bool, error) {
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: int64(p), Len: 1}
	switch err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk); err {
	case nil:
		return true, nil
	case syscall.EAGAIN, syscall.EACCES:
		return false, nil
	default:
		return false, fmt.Errorf("fcntl F_SETLK: %w", err)
	}
}
