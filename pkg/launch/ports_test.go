package launch

import (
	"net"
	"strconv"
	"testing"
)

// FreePort chooses outside the ephemeral range, a port free now and not
// one of those already used.
func TestFreePort(t *testing.T) {
	lo, hi := ServerPorts()
	if hi-lo < 1000 {
		t.Fatalf("server port range %d-%d", lo, hi)
	}
	used := map[int]bool{}
	for range 8 {
		p, err := FreePort(used)
		if err != nil {
			t.Fatal(err)
		}
		if p < lo || p >= hi || used[p] {
			t.Fatalf("port %d: outside %d-%d or used already", p, lo, hi)
		}
		used[p] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d not free: %v", p, err)
		}
		l.Close()
	}
}
