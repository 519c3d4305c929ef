package loadgen

import (
	"cmp"
	"fmt"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkReadFloor is the least CPU a client can spend per request of
// BenchmarkClosedLoop's load (the same paced server in another process, 16
// token chunks 5 ms apart, streams connections each sending its next
// request when the last response ended): no parsing, no records, no
// timestamps, only the request's write and the response's reads until the
// chunked coding's last chunk. goroutine reads each connection on a
// goroutine of its own through net.Conn (what the client does); epoll
// reads every connection from one goroutine's epoll loop with
// non-blocking reads, one read per readiness (no read that finds the
// socket empty, no goroutine parked and woken per chunk). It reports
// cpu-ns/req (getrusage, user + system) and, for epoll, reads/req: the
// floor against which the client's cpu-ns/req is judged.
func BenchmarkReadFloor(b *testing.B) {
	srv := startPacedServer(b, 16, 5)
	u, err := url.Parse(srv)
	if err != nil {
		b.Fatal(err)
	}
	body := `{"model":"m","prompt":[1,2,3,4],"max_tokens":16,"stream":true}`
	req := fmt.Appendf(nil, "POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", u.Host, len(body), body)
	for _, streams := range []int{256, 1024} {
		b.Run(fmt.Sprintf("streams=%d/goroutine", streams), func(b *testing.B) {
			floorLoop(b, streams, func(left *atomic.Int64) (int64, error) { return goroutineFloor(u.Host, req, streams, left) })
		})
		b.Run(fmt.Sprintf("streams=%d/epoll", streams), func(b *testing.B) {
			floorLoop(b, streams, func(left *atomic.Int64) (int64, error) { return epollFloor(u.Host, req, streams, left) })
		})
	}
}

// floorLoop runs b.N requests through read and reports the figures.
func floorLoop(b *testing.B, streams int, read func(left *atomic.Int64) (int64, error)) {
	var left atomic.Int64
	left.Store(int64(b.N))
	cpu := cpuNS(b)
	b.ResetTimer()
	reads, err := read(&left)
	b.StopTimer()
	cpu = cpuNS(b) - cpu
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/req")
	if reads > 0 {
		b.ReportMetric(float64(reads)/float64(b.N), "reads/req")
	}
}

// floorEnd is the end of a chunked body.
const floorEnd = "0\r\n\r\n"

// endsBody reports whether the bytes read so far end with the last chunk:
// tail keeps the last bytes read across reads.
func endsBody(tail *[len(floorEnd)]byte, p []byte) bool {
	for _, c := range p {
		copy(tail[:], tail[1:])
		tail[len(tail)-1] = c
	}
	return string(tail[:]) == floorEnd
}

// goroutineFloor reads streams connections, one goroutine each, until
// left runs out; it returns when every goroutine has ended.
func goroutineFloor(addr string, req []byte, streams int, left *atomic.Int64) (int64, error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed error
	fail := func(err error) {
		mu.Lock()
		failed = cmp.Or(failed, err)
		mu.Unlock()
	}
	for range streams {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return 0, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			buf := make([]byte, 4096)
			for left.Add(-1) >= 0 {
				if _, err := c.Write(req); err != nil {
					fail(err)
					return
				}
				var tail [len(floorEnd)]byte
				for {
					n, err := c.Read(buf)
					if err != nil {
						fail(err)
						return
					}
					if endsBody(&tail, buf[:n]) {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	return 0, failed
}

// epollFloor reads streams non-blocking sockets from one epoll loop until
// left runs out and every response begun has ended; it returns the reads.
func epollFloor(addr string, req []byte, streams int, left *atomic.Int64) (int64, error) {
	ta, err := net.ResolveTCPAddr("tcp4", addr)
	if err != nil {
		return 0, err
	}
	sa := &unix.SockaddrInet4{Port: ta.Port}
	copy(sa.Addr[:], ta.IP.To4())
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return 0, err
	}
	defer unix.Close(ep)
	tails := map[int32]*[len(floorEnd)]byte{}
	defer func() {
		for fd := range tails {
			unix.Close(int(fd))
		}
	}()
	open := 0
	for range streams {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return 0, err
		}
		tails[int32(fd)] = new([len(floorEnd)]byte)
		if err := unix.Connect(fd, sa); err != nil {
			return 0, err
		}
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
			return 0, err
		}
		if err := unix.SetNonblock(fd, true); err != nil {
			return 0, err
		}
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			return 0, err
		}
		if left.Add(-1) >= 0 {
			if _, err := unix.Write(fd, req); err != nil {
				return 0, err
			}
			open++
		}
	}
	evs := make([]unix.EpollEvent, 256)
	buf := make([]byte, 4096)
	var reads int64
	for open > 0 {
		m, err := unix.EpollWait(ep, evs, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return reads, err
		}
		for _, e := range evs[:m] {
			n, err := unix.Read(int(e.Fd), buf)
			reads++
			if err == unix.EAGAIN {
				continue
			}
			if err != nil || n == 0 {
				return reads, fmt.Errorf("read: %v (%d bytes)", err, n)
			}
			if !endsBody(tails[e.Fd], buf[:n]) {
				continue
			}
			open--
			if left.Add(-1) >= 0 {
				if _, err := unix.Write(int(e.Fd), req); err != nil {
					return reads, err
				}
				open++
			}
		}
	}
	return reads, nil
}
