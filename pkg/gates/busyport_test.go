package gates

import (
	"net"
	"strings"
	"testing"
	"time"
)

// TestPortFreeNamesTheHolder (issue 39, friction 4): a busy port's
// verdict names the process holding it, as the listener code describes
// it, and records its pid.
func TestPortFreeNamesTheHolder(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	asked := 0
	who := func(p int) (string, int) {
		if asked++; p != port {
			t.Fatalf("asked about port %d", p)
		}
		return `held by pid 4242 (python3, command "python3 -m http.server")`, 4242
	}
	v := PortFree(port, time.Now(), who)
	if v.Passed() || asked != 1 || !strings.HasSuffix(v.Detail, `; held by pid 4242 (python3, command "python3 -m http.server")`) || v.Figures["holder_pid"] != 4242 {
		t.Fatalf("busy port: %+v", v)
	}
	// a holder that cannot be told leaves no pid, and the bind's error stands
	v = PortFree(port, time.Now(), func(int) (string, int) { return "its holder cannot be told (no readable process holds it)", 0 })
	if _, ok := v.Figures["holder_pid"]; ok || !strings.Contains(v.Detail, "is in use: ") || !strings.HasSuffix(v.Detail, "cannot be told (no readable process holds it)") {
		t.Fatalf("holder unknown: %+v", v)
	}
}
