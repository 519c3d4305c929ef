package gates

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"warden/pkg/gpu"
)

func TestPreflight(t *testing.T) {
	now := time.Now()
	idle := []gpu.State{{Index: 0}, {Index: 1}}
	if v := Preflight(idle, 0, 1000, now); !v.Passed() {
		t.Fatalf("idle GPUs failed: %+v", v)
	}
	busy := []gpu.State{{Index: 0}, {Index: 1, UsedMiB: 2048, Procs: []gpu.Proc{{PID: 42, UID: 1001, UsedMiB: 2048}}}}
	v := Preflight(busy, 0, 1000, now)
	if v.Passed() || !v.Foreign() || !strings.Contains(v.Detail, "GPU 1: another user's process (pid 42, uid 1001) holds 2048 MiB") {
		t.Fatalf("foreign process not caught: %+v", v)
	}
	own := []gpu.State{{Index: 0, UsedMiB: 10, Procs: []gpu.Proc{{PID: 7, UID: 1000, UsedMiB: 10}}}}
	if v := Preflight(own, 0, 1000, now); v.Passed() || v.Foreign() {
		t.Fatalf("own leftover: %+v", v)
	}
	if v := Preflight([]gpu.State{{Index: 0, UsedMiB: 600}}, 615, 0, now); !v.Passed() {
		t.Fatalf("memory within baseline failed: %+v", v)
	}
	if v := Preflight([]gpu.State{{Index: 0, UsedMiB: 700}}, 615, 0, now); v.Passed() {
		t.Fatalf("memory over baseline passed: %+v", v)
	}
}

func TestPortFree(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if v := PortFree(port, time.Now(), nil); v.Passed() || !strings.Contains(v.Detail, strconv.Itoa(port)) {
		t.Fatalf("busy port passed: %+v", v)
	}
	l.Close()
	if v := PortFree(port, time.Now(), nil); !v.Passed() {
		t.Fatalf("free port failed: %+v", v)
	}
}

func TestCleanup(t *testing.T) {
	now := time.Now()
	if v := Cleanup(nil, []gpu.State{{Index: 0}}, 0, 200*time.Millisecond, now); !v.Passed() || v.Figures["cleanup_s"] != 0.2 {
		t.Fatalf("clean attempt: %+v", v)
	}
	v := Cleanup([]int{99}, []gpu.State{{Index: 0, UsedMiB: 512, Procs: []gpu.Proc{{PID: 99, UsedMiB: 512}}}}, 0, time.Second, now)
	if v.Passed() || !strings.Contains(v.Detail, "processes still alive: [99]") || !strings.Contains(v.Detail, "pid 99 512 MiB") {
		t.Fatalf("leftover passed: %+v", v)
	}
}
