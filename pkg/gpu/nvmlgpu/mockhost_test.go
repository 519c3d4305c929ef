package nvmlgpu

import (
	"fmt"
	"math/bits"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// mockGPU is what one mock H200 answers. Tests change it between reads.
type mockGPU struct {
	uuid, name, busID   string
	usedBytes, total    uint64
	procs               []nvml.ProcessInfo
	graphics            []nvml.ProcessInfo // graphics processes: NVML answers them apart
	smMHz, memMHz       uint32
	reasons             uint64
	powerMW, limitMW    uint32
	tempC               uint32
	energyMJ            uint64
	migMode             int
	affinity            []int
	affinityNumCPUsSeen int
}

// mockHost is an 8-GPU H200 host built from go-nvml's generated mocks, in
// the shape of go-nvml's mock/dgxh200 server (which needs
// github.com/google/uuid, a module this repository does not require).
type mockHost struct {
	lib  *mock.Interface
	ext  *mock.ExtendedInterface
	devs []*mock.Device
	gpus []*mockGPU
}

const h200TotalMiB = 143771

func newMockHost(n int) *mockHost {
	h := &mockHost{ext: &mock.ExtendedInterface{LookupSymbolFunc: func(string) error { return nil }}}
	for i := 0; i < n; i++ {
		g := &mockGPU{
			uuid:     fmt.Sprintf("GPU-00000000-0000-0000-0000-%012d", i),
			name:     "NVIDIA H200",
			busID:    fmt.Sprintf("00000000:%02X:00.0", 0x18+i),
			total:    h200TotalMiB << 20,
			smMHz:    345,
			memMHz:   3201,
			reasons:  nvml.ClocksEventReasonGpuIdle,
			powerMW:  75123,
			limitMW:  700000,
			tempC:    31,
			energyMJ: 1_000_000 * uint64(i+1),
			migMode:  nvml.DEVICE_MIG_DISABLE,
		}
		if i < n/2 {
			g.affinity = cpuRange(0, 47)
		} else {
			g.affinity = cpuRange(48, 95)
		}
		h.gpus = append(h.gpus, g)
		h.devs = append(h.devs, newMockDevice(g))
	}
	h.lib = &mock.Interface{
		InitFunc:       func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:   func() nvml.Return { return nvml.SUCCESS },
		ExtensionsFunc: func() nvml.ExtendedInterface { return h.ext },
		DeviceGetCountFunc: func() (int, nvml.Return) {
			return len(h.devs), nvml.SUCCESS
		},
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(h.devs) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return h.devs[i], nvml.SUCCESS
		},
	}
	return h
}

func newMockDevice(g *mockGPU) *mock.Device {
	return &mock.Device{
		GetUUIDFunc: func() (string, nvml.Return) { return g.uuid, nvml.SUCCESS },
		GetNameFunc: func() (string, nvml.Return) { return g.name, nvml.SUCCESS },
		GetPciInfoFunc: func() (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			for i := 0; i < len(g.busID); i++ {
				p.BusId[i] = int8(g.busID[i])
			}
			return p, nvml.SUCCESS
		},
		GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
			return nvml.Memory_v2{Total: g.total, Used: g.usedBytes, Free: g.total - g.usedBytes}, nvml.SUCCESS
		},
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			return g.procs, nvml.SUCCESS
		},
		GetGraphicsRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			return g.graphics, nvml.SUCCESS
		},
		GetClockInfoFunc: func(c nvml.ClockType) (uint32, nvml.Return) {
			switch c {
			case nvml.CLOCK_SM:
				return g.smMHz, nvml.SUCCESS
			case nvml.CLOCK_MEM:
				return g.memMHz, nvml.SUCCESS
			}
			return 0, nvml.ERROR_INVALID_ARGUMENT
		},
		GetCurrentClocksEventReasonsFunc: func() (uint64, nvml.Return) { return g.reasons, nvml.SUCCESS },
		GetPowerUsageFunc:                func() (uint32, nvml.Return) { return g.powerMW, nvml.SUCCESS },
		GetEnforcedPowerLimitFunc:        func() (uint32, nvml.Return) { return g.limitMW, nvml.SUCCESS },
		GetTemperatureFunc: func(s nvml.TemperatureSensors) (uint32, nvml.Return) {
			if s != nvml.TEMPERATURE_GPU {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return g.tempC, nvml.SUCCESS
		},
		GetTotalEnergyConsumptionFunc: func() (uint64, nvml.Return) { return g.energyMJ, nvml.SUCCESS },
		GetMigModeFunc:                func() (int, int, nvml.Return) { return g.migMode, g.migMode, nvml.SUCCESS },
		GetCpuAffinityFunc: func(numCPUs int) ([]uint, nvml.Return) {
			g.affinityNumCPUsSeen = numCPUs
			words := make([]uint, (numCPUs+bits.UintSize-1)/bits.UintSize)
			for _, c := range g.affinity {
				if c/bits.UintSize >= len(words) {
					continue // NVML fills only the words it is given
				}
				words[c/bits.UintSize] |= 1 << (c % bits.UintSize)
			}
			return words, nvml.SUCCESS
		},
	}
}

func cpuRange(lo, hi int) []int {
	var cpus []int
	for c := lo; c <= hi; c++ {
		cpus = append(cpus, c)
	}
	return cpus
}

// openMock opens a Backend on the host with a generous deadline: these
// tests are about the readings, not about time.
func openMock(t testing.TB, h *mockHost, opts ...Option) *Backend {
	t.Helper()
	b, err := Open(h.lib, 30*time.Second, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
