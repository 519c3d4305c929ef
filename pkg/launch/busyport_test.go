package launch

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// TestPortHolders (issue 39, friction 4): the process holding a busy
// port is named, with its pid, its name and its command line; a free
// port has none.
func TestPortHolders(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	who, pid := PortHolders(port)
	want := fmt.Sprintf("held by pid %d (%s, command \"%s ", os.Getpid(), commOf(os.Getpid()), os.Args[0])
	if pid != os.Getpid() || !strings.HasPrefix(who, want) {
		t.Fatalf("holders of a port this process listens on: %q (pid %d), want %s...", who, pid, want)
	}
	l.Close()
	if who, pid := PortHolders(port); who != "" || pid != 0 {
		t.Fatalf("holders of a free port: %q (pid %d)", who, pid)
	}
}

// TestAwaitPortFree: the wait before the rerun follows its steps on the
// clock it is given (no test sleeps), returns as soon as the port is
// free, at the last step when it never is, and at once when the context
// ends.
func TestAwaitPortFree(t *testing.T) {
	steps := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
	var asked []time.Duration
	after := func(d time.Duration) <-chan time.Time {
		asked = append(asked, d)
		ch := make(chan time.Time, 1)
		ch <- time.Time{}
		return ch
	}
	looks := 0
	freeAfter := func(n int) func(int) bool {
		looks = 0
		return func(p int) bool {
			if p != 8000 {
				t.Fatalf("looked at port %d", p)
			}
			looks++
			return looks >= n
		}
	}
	if waited, free := AwaitPortFree(context.Background(), 8000, steps, after, freeAfter(2)); !free || waited != 3*time.Second || len(asked) != 2 {
		t.Fatalf("free at the second look: waited %s, free %v, waits %v", waited, free, asked)
	}
	asked = nil
	if waited, free := AwaitPortFree(context.Background(), 8000, steps, after, freeAfter(99)); free || waited != 15*time.Second || len(asked) != 4 || looks != 4 {
		t.Fatalf("never free: waited %s, free %v, waits %v, looks %d", waited, free, asked, looks)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	never := func(time.Duration) <-chan time.Time { return nil }
	if waited, free := AwaitPortFree(ctx, 8000, steps, never, freeAfter(1)); free || waited != 0 {
		t.Fatalf("context ended: waited %s, free %v", waited, free)
	}
}
