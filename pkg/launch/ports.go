package launch

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// ServerPorts is the range [lo, hi) a server's port is chosen from when
// the protocol says port: auto: below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range) when there is room, above it otherwise.
// The kernel gives ephemeral ports to outgoing connections (a client's,
// srun's to slurmd), and one of those could take a chosen port between
// its choice and the server's bind.
func ServerPorts() (lo, hi int) {
	elo, ehi := 32768, 60999 // the kernel's default
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if a, err := strconv.Atoi(f[0]); err == nil {
				elo = a
			}
			if z, err := strconv.Atoi(f[1]); err == nil {
				ehi = z
			}
		}
	}
	if elo-10000 >= 2000 {
		return 10000, elo
	}
	return ehi + 1, 65536
}

// FreePort returns a port of ServerPorts that is free on the loopback now
// and not in used.
func FreePort(used map[int]bool) (int, error) {
	lo, hi := ServerPorts()
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
