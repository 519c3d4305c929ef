package gates_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"warden/pkg/gates"
	"warden/pkg/gpu"
	"warden/pkg/gpu/nvmlgpu"
)

// host is go-nvml's mock of an 8-GPU H200 host, with memory, processes
// and CPU affinity set per GPU by the test.
type host struct {
	srv   *server.Server
	used  map[int]uint64 // bytes used per GPU (v2: 0 when idle)
	procs map[int][]nvml.ProcessInfo
	aff   map[int][]uint // CPU affinity words per GPU
}

func newHost(t *testing.T) *host {
	t.Helper()
	h := &host{srv: dgxh200.New(), used: map[int]uint64{}, procs: map[int][]nvml.ProcessInfo{}, aff: map[int][]uint{}}
	for i, d := range h.srv.Devices {
		dev := d.(*server.Device)
		dev.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
			return nvml.Memory_v2{Total: 143771 << 20, Used: h.used[i], Free: 143771<<20 - h.used[i]}, nvml.SUCCESS
		}
		dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return h.procs[i], nvml.SUCCESS }
		dev.GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
		dev.GetCpuAffinityFunc = func(n int) ([]uint, nvml.Return) {
			w := h.aff[i]
			if w == nil {
				return nil, nvml.ERROR_NOT_SUPPORTED
			}
			return append(w, make([]uint, max(0, n-len(w)))...)[:n], nvml.SUCCESS
		}
	}
	return h
}

func (h *host) backend(t *testing.T) *nvmlgpu.Backend {
	t.Helper()
	b, err := nvmlgpu.Open(h.srv, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The gates that read GPUs, fed through the NVML backend from go-nvml's
// H200 mock: preflight, cleanup and CPU locality, each passing and failing.
func TestGatesOnNVMLMock(t *testing.T) {
	h := newHost(t)
	b := h.backend(t)
	now := time.Now()
	own := os.Getuid()

	snap, err := b.Snapshot([]int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if v := gates.Preflight(snap, 0, own, now); !v.Passed() {
		t.Fatalf("idle H200s fail preflight: %+v", v)
	}

	// a process of ours left on GPU 1 holds 20 GiB
	h.used[1] = 20 << 30
	h.procs[1] = []nvml.ProcessInfo{{Pid: uint32(os.Getpid()), UsedGpuMemory: 20 << 30}}
	snap, _ = b.Snapshot([]int{0, 1})
	v := gates.Preflight(snap, 0, own, now)
	if v.Passed() || v.Foreign() || v.Figures["gpu1_used_mib"] != 20480 || !strings.Contains(v.Detail, "GPU 1") {
		t.Fatalf("busy GPU passed preflight: %+v", v)
	}
	c := gates.Cleanup([]int{os.Getpid()}, snap, 0, 2*time.Second, now)
	if c.Passed() || !strings.Contains(c.Detail, "20480 MiB used") {
		t.Fatalf("cleanup with memory held passed: %+v", c)
	}
	// a pid that is not on this host reads as another user's (uid -1)
	h.procs[1] = []nvml.ProcessInfo{{Pid: 1 << 30, UsedGpuMemory: 20 << 30}}
	snap, _ = b.Snapshot([]int{1})
	if v := gates.Preflight(snap, 0, own, now); v.Passed() || !v.Foreign() {
		t.Fatalf("foreign process not reported: %+v", v)
	}
	// released: cleanup passes
	h.used[1], h.procs[1] = 0, nil
	snap, _ = b.Snapshot([]int{0, 1})
	if c := gates.Cleanup(nil, snap, 0, 200*time.Millisecond, now); !c.Passed() {
		t.Fatalf("cleanup of idle GPUs failed: %+v", c)
	}

	// CPU locality: GPU 0 local to CPUs 0-19 (the seed's CPU map)
	h.aff[0] = []uint{1<<20 - 1}
	infos, err := b.Read([]int{0}, gpu.Topology)
	if err != nil {
		t.Fatal(err)
	}
	aff := map[int][]int{0: infos[0].CPUAffinity}
	if v := gates.CPULocal([]int{0, 1, 2, 19}, aff, now); !v.Passed() {
		t.Fatalf("local CPUs failed: %+v (affinity %v)", v, infos[0].CPUAffinity)
	}
	if v := gates.CPULocal([]int{18, 19, 20, 21}, aff, now); v.Verdict != gates.Fail {
		t.Fatalf("non-local CPUs passed: %+v", v)
	}
	// unknown affinity is an error, not a pass
	infos, _ = b.Read([]int{2}, gpu.Topology)
	if v := gates.CPULocal([]int{40}, map[int][]int{2: infos[0].CPUAffinity}, now); v.Verdict != gates.Error {
		t.Fatalf("unknown affinity: %+v", v)
	}
}
