package launch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// ServerPorts is the range [lo, hi) a server's port is chosen from when
// the protocol says port: auto: below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range) when there is room, above it otherwise.
// The kernel gives ephemeral ports to outgoing connections (a client's,
// srun's to slurmd), and one of those could take a chosen port between
// its choice and the server's bind.
func ServerPorts() (lo, hi int) {
	elo, ehi := EphemeralPorts()
	if elo-10000 >= 2000 {
		return 10000, elo
	}
	return ehi + 1, 65536
}

// EphemeralPorts is the kernel's ephemeral range [lo, hi], both ends
// included, as net.ipv4.ip_local_port_range says (32768-60999, Linux's
// default, when it cannot be read).
func EphemeralPorts() (lo, hi int) {
	lo, hi = 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if a, err := strconv.Atoi(f[0]); err == nil {
				lo = a
			}
			if z, err := strconv.Atoi(f[1]); err == nil {
				hi = z
			}
		}
	}
	return lo, hi
}

// FreePort returns a port of ServerPorts that is free on the loopback now
// and not in used.
func FreePort(used map[int]bool) (int, error) {
	lo, hi := ServerPorts()
	return FreePortIn(lo, hi, used)
}

// FreePortIn returns a port of [lo, hi) that is free on the loopback now
// and not in used.
func FreePortIn(lo, hi int, used map[int]bool) (int, error) {
	for tries := 0; tries < 1000; tries++ {
		p := lo + rand.IntN(hi-lo)
		if used[p] {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue // taken
		}
		l.Close()
		return p, nil
	}
	return 0, fmt.Errorf("no free port in %d-%d after 1000 tries", lo, hi-1)
}

// PortHolders names the processes listening on port, for a message: each
// pid with its name and its command line where it can be read, and the
// first pid (0 when none is known). "" when no socket listens on it; a
// listener no readable process holds (another user's, another PID
// namespace's) is said to be one whose holder cannot be told.
func PortHolders(port int) (string, int) {
	pids, err := ListenerPIDs(port)
	switch {
	case errors.Is(err, ErrNoListener):
		return "", 0
	case err != nil:
		return "its holder cannot be told (" + err.Error() + ")", 0
	}
	parts := make([]string, len(pids))
	for i, pid := range pids {
		parts[i] = fmt.Sprintf("pid %d (%s", pid, commOf(pid))
		if cmd := cmdlineOf(pid); cmd != "" {
			parts[i] += ", command " + cmd
		}
		parts[i] += ")"
	}
	return "held by " + strings.Join(parts, ", "), pids[0]
}

// AwaitPortFree waits, on the clock after gives, for port to be free, as
// free tells: it looks after each wait of steps in turn and returns as
// soon as the port is free, or after the last step, or when ctx ends. It
// returns how long it waited by the steps and whether the port was free.
func AwaitPortFree(ctx context.Context, port int, steps []time.Duration, after func(time.Duration) <-chan time.Time, free func(int) bool) (time.Duration, bool) {
	var waited time.Duration
	for _, d := range steps {
		select {
		case <-ctx.Done():
			return waited, false
		case <-after(d):
		}
		waited += d
		if free(port) {
			return waited, true
		}
	}
	return waited, false
}
