package connlimit

import (
	"net"
	"path/filepath"
	"testing"
)

// accepted starts an accept loop on l and returns the channel of what it
// accepts; the loop ends when l is closed.
func accepted(t *testing.T, l net.Listener) <-chan net.Conn {
	ch := make(chan net.Conn, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			ch <- c
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
	})
	return ch
}

// TestListenerCap: with a cap of 2 and 5 clients connected, 2 are
// accepted and the slots are full; closing one accepted connection lets
// exactly one more in; Close ends an Accept waiting for a slot.
func TestListenerCap(t *testing.T) {
	inner, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	l := Listener(inner, 2).(*listener)
	ch := accepted(t, l)
	for range 5 {
		c, err := net.Dial("unix", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first, second := <-ch, <-ch
	if len(l.slots) != 2 {
		t.Fatalf("%d slots taken with 2 accepted", len(l.slots))
	}
	select {
	case <-ch:
		t.Fatal("a third connection was accepted with both slots taken")
	default:
	}
	first.Close()
	first.Close() // a second close gives back nothing more
	third := <-ch
	if len(l.slots) != 2 {
		t.Fatalf("%d slots taken after one closed and one more accepted", len(l.slots))
	}
	second.Close()
	third.Close()
	<-ch
}

// TestReserveRefusesATightLimit: a limit below the listeners' caps plus
// the reserve is refused, naming both; one above is the limit.
func TestReserveRefusesATightLimit(t *testing.T) {
	lim, err := Reserve(0, 1)
	if err != nil || lim < 1 {
		t.Fatalf("Reserve(0, 1) = %d, %v", lim, err)
	}
	if _, err := Reserve(int(lim), 1); err == nil {
		t.Fatalf("Reserve with caps equal to the limit %d passed", lim)
	}
}

// TestServerTimeouts: every timeout is set, so no connection waits forever.
func TestServerTimeouts(t *testing.T) {
	s := Server(nil)
	if s.ReadHeaderTimeout <= 0 || s.ReadTimeout <= 0 || s.WriteTimeout <= 0 || s.IdleTimeout <= 0 {
		t.Fatalf("timeouts %v %v %v %v", s.ReadHeaderTimeout, s.ReadTimeout, s.WriteTimeout, s.IdleTimeout)
	}
}
