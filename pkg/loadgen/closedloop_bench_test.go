package loadgen

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// benchServerEnv, set in the environment of this test binary, makes it a
// paced stream server (pacedServe) instead of running tests: the closed
// loop benchmark's server runs in a process of its own, so that the CPU
// the benchmark reads from getrusage is the client's alone.
const benchServerEnv = "WARDEN_LOADGEN_BENCH_SERVER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(benchServerEnv); spec != "" {
		if err := pacedServe(spec); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// pacedServe is the benchmark's server: spec is "PORTFILE TOKENS
// INTERVAL_MS". Each request is answered by TOKENS completion chunks,
// INTERVAL_MS apart, each its own write of chunked coding, then the usage
// chunk and [DONE] in one write and the last chunk in another, as uvicorn
// writes them. It serves until its parent closes its standard input.
func pacedServe(spec string) error {
	var portFile string
	var tokens int
	var ms float64
	if _, err := fmt.Sscan(spec, &portFile, &tokens, &ms); err != nil {
		return fmt.Errorf("%s=%q: %w", benchServerEnv, spec, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { // ends the process when the parent is gone
		_, _ = os.Stdin.Read(make([]byte, 1))
		ln.Close()
	}()
	if err := os.WriteFile(portFile, []byte(strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)), 0o600); err != nil {
		return err
	}
	interval := time.Duration(ms * float64(time.Millisecond))
	head, tok, tail := streamWrites(tokens)
	for {
		c, err := ln.Accept()
		if err != nil {
			return nil
		}
		go func() {
			defer c.Close()
			br := bufio.NewReader(c)
			for readRequest(br) {
				writes := append(append([][]byte{head}, repeat(tok, tokens)...), tail, []byte("0\r\n\r\n"))
				for i, w := range writes {
					if i > 0 && i <= tokens {
						time.Sleep(interval)
					}
					if _, err := c.Write(w); err != nil {
						return
					}
				}
			}
		}()
	}
}

// streamWrites renders a streamed completion of tokens token chunks as
// a benchmark's server writes it: the response head, one token chunk and
// the usage chunk with [DONE], each in chunked coding (the last chunk
// is the caller's).
func streamWrites(tokens int) (head, tok, tail []byte) {
	chunk := func(s string) []byte { return fmt.Appendf(nil, "%x\r\n%s\r\n", len(s), s) }
	head = []byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
	tok = chunk("data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\" tok\",\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n")
	tail = chunk(fmt.Sprintf("data: {\"id\":\"cmpl-1\",\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\ndata: [DONE]\n\n", tokens, tokens+4))
	return head, tok, tail
}

func repeat(b []byte, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = b
	}
	return out
}

// readRequest reads one request's head and Content-Length body; false at
// the connection's end or on a request without a length.
func readRequest(br *bufio.Reader) bool {
	n := -1
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return false
		}
		if v, ok := strings.CutPrefix(strings.ToLower(string(line)), "content-length:"); ok {
			n, _ = strconv.Atoi(strings.TrimSpace(v))
		}
		if len(line) <= 2 {
			break
		}
	}
	_, err := br.Discard(n)
	return n >= 0 && err == nil
}

// benchServerCPUs, when set, is the CPU list (taskset -c) the benchmark's
// server runs on, such as 1 when the benchmark runs on CPU 0.
const benchServerCPUs = "WARDEN_LOADGEN_BENCH_SERVER_CPUS"

// startPacedServer runs pacedServe in a child process of this test binary
// and returns its URL; the child ends with the benchmark.
func startPacedServer(b *testing.B, tokens int, ms float64) string {
	dir := b.TempDir()
	portFile := filepath.Join(dir, "port")
	// This binary under another name, so that a profiler tells the
	// server's samples from the client's by command name.
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	server := filepath.Join(dir, "paced-server")
	if err := os.Symlink(self, server); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(server)
	if cpus := os.Getenv(benchServerCPUs); cpus != "" {
		cmd = exec.Command("taskset", "-c", cpus, server)
	}
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %g", benchServerEnv, portFile, tokens, ms))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if port, err := os.ReadFile(portFile); err == nil && len(port) > 0 {
			return "http://127.0.0.1:" + string(port)
		}
		if time.Now().After(deadline) {
			b.Fatal("the paced server wrote no port")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// cpuNS is the process's user + system CPU time so far.
func cpuNS(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkClosedLoop is the client's cost of a closed loop: streams
// workers each sending its next request as soon as the last one ended,
// b.N requests in all, each answered with 16 token chunks 5 ms apart by a
// server in another process. It reports the client's CPU time (user +
// system, getrusage) and heap allocations per request: h1 on the run's
// own HTTP/1.1 connections, net-http through net/http's transport (what
// an https server gets). Give -benchtime a count (-benchtime 20000x) to
// compare runs; the figure includes the dial of each stream's first
// connection.
func BenchmarkClosedLoop(b *testing.B) {
	url := startPacedServer(b, 16, 5)
	clock, err := NewClock()
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"model":"m","prompt":[1,2,3,4],"max_tokens":16,"stream":true}`)
	for _, streams := range []int{256, 1024} {
		for _, path := range []string{"h1", "net-http"} {
			b.Run(fmt.Sprintf("streams=%d/%s", streams, path), func(b *testing.B) {
				tr := newTransport(streams)
				defer tr.CloseIdleConnections()
				s := &sender{client: newClient(tr), url: url, clock: clock, itl: func(int64, int64) {}}
				if path == "h1" {
					s.conns, _ = newH1Pool(url, streams)
					defer s.conns.closeIdle()
				}
				closedLoop(b, s, body, streams)
			})
		}
	}
}

// closedLoop runs b.N requests over streams workers and reports the
// per-request figures.
func closedLoop(b *testing.B, s *sender, body []byte, streams int) {
	var left atomic.Int64
	left.Store(int64(b.N))
	var failed atomic.Int64
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	mallocs := ms.Mallocs
	cpu := cpuNS(b)
	b.ResetTimer()
	var wg sync.WaitGroup
	for range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				if o := s.send(context.Background(), body, expect{output: 16, exact: true}); o.class != Success {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	cpu = cpuNS(b) - cpu
	runtime.ReadMemStats(&ms)
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d requests failed", n, b.N)
	}
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/req")
	b.ReportMetric(float64(ms.Mallocs-mallocs)/float64(b.N), "allocs/req")
}
