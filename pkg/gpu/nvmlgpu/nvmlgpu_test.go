package nvmlgpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"warden/internal/cpulist"
	"warden/pkg/gpu"
	"warden/pkg/gpu/sample"
)

var (
	_ sample.Reader       = (*Backend)(nil)
	_ sample.EnergyReader = (*Backend)(nil)
)

var allIndices = []int{0, 1, 2, 3, 4, 5, 6, 7}

// fakeSysfs builds a sysfs tree with the host's possible CPUs and a NUMA
// node per PCI device (bus id in sysfs form).
func fakeSysfs(t *testing.T, possible string, numa map[string]string) string {
	t.Helper()
	root := t.TempDir()
	cpuDir := filepath.Join(root, "devices", "system", "cpu")
	if err := os.MkdirAll(cpuDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cpuDir, "possible"), []byte(possible+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for id, node := range numa {
		dir := filepath.Join(root, "bus", "pci", "devices", id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "numa_node"), []byte(node+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestInfoReadsEveryField(t *testing.T) {
	h := newMockHost(8)
	g := h.gpus[3]
	g.usedBytes = 20480 << 20
	g.procs = []nvml.ProcessInfo{
		{Pid: uint32(os.Getpid()), UsedGpuMemory: 20000 << 20},
		{Pid: 1 << 30, UsedGpuMemory: math.MaxUint64}, // no such process; memory not available
	}
	g.smMHz, g.reasons = 1980, nvml.ClocksEventReasonSwPowerCap|nvml.ClocksThrottleReasonHwThermalSlowdown
	g.powerMW, g.tempC, g.energyMJ = 612345, 67, 987654321
	g.migMode = nvml.DEVICE_MIG_ENABLE
	sysfs := fakeSysfs(t, "0-191", map[string]string{
		"0000:1b:00.0": "1",  // GPU 3: 0x18+3
		"0000:1c:00.0": "-1", // GPU 4: sysfs does not know
	})
	b := openMock(t, h, WithSysfs(sysfs))

	rs, err := b.Info(allIndices)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 8 {
		t.Fatalf("Info read %d GPUs, want 8", len(rs))
	}
	r := rs[3]
	if r.Index != 3 || r.UUID != g.uuid || r.Name != "NVIDIA H200" || r.PCIBusID != "00000000:1B:00.0" {
		t.Errorf("identity = %d %q %q %q", r.Index, r.UUID, r.Name, r.PCIBusID)
	}
	if r.NUMANode != 1 || rs[4].NUMANode != -1 || rs[0].NUMANode != -1 {
		t.Errorf("NUMA nodes = %d, %d, %d; want 1 from sysfs, -1 where sysfs says -1, -1 where it has no entry", r.NUMANode, rs[4].NUMANode, rs[0].NUMANode)
	}
	if g.affinityNumCPUsSeen != 192 {
		t.Errorf("GetCpuAffinity asked for %d CPUs, want the 192 possible ones", g.affinityNumCPUsSeen)
	}
	if !slices.Equal(r.CPUAffinity, cpuRange(0, 47)) || !slices.Equal(rs[7].CPUAffinity, cpuRange(48, 95)) {
		t.Errorf("CPU affinity = %s and %s, want 0-47 and 48-95", cpulist.Format(r.CPUAffinity), cpulist.Format(rs[7].CPUAffinity))
	}
	wantInt := func(name string, got *int, want int) {
		t.Helper()
		if got == nil || *got != want {
			t.Errorf("%s = %v, want %d", name, deref(got), want)
		}
	}
	wantInt("MemoryUsedMiB", r.MemoryUsedMiB, 20480)
	wantInt("MemoryTotalMiB", r.MemoryTotalMiB, h200TotalMiB)
	wantInt("SMClockMHz", r.SMClockMHz, 1980)
	wantInt("MemClockMHz", r.MemClockMHz, 3201)
	wantInt("TemperatureC", r.TemperatureC, 67)
	wantInt("MIGMode", r.MIGMode, gpu.MIGEnabled)
	wantInt("idle MemoryUsedMiB", rs[0].MemoryUsedMiB, 0)
	if r.PowerW == nil || *r.PowerW != 612.345 || r.PowerLimitW == nil || *r.PowerLimitW != 700 {
		t.Errorf("power = %v W of %v W, want 612.345 of 700", deref(r.PowerW), deref(r.PowerLimitW))
	}
	if r.EnergyMJ == nil || *r.EnergyMJ != 987654321 {
		t.Errorf("EnergyMJ = %v, want 987654321", deref(r.EnergyMJ))
	}
	if r.ClockEventReasons == nil || *r.ClockEventReasons != 0x44 ||
		!slices.Equal(r.ClockEventReasonNames, []string{"sw_power_cap", "hw_thermal_slowdown"}) {
		t.Errorf("reasons = %v %q, want 0x44 [sw_power_cap hw_thermal_slowdown]", deref(r.ClockEventReasons), r.ClockEventReasonNames)
	}
	wantProcs := []gpu.Proc{{PID: os.Getpid(), UID: os.Getuid(), UsedMiB: 20000}, {PID: 1 << 30, UID: -1, UsedMiB: -1}}
	if !slices.Equal(r.Procs, wantProcs) {
		t.Errorf("Procs = %+v, want %+v", r.Procs, wantProcs)
	}
	if rs[0].Procs == nil || len(rs[0].Procs) != 0 {
		t.Errorf("idle GPU Procs = %#v, want an empty, present list", rs[0].Procs)
	}
	if rs[0].ClockEventReasonNames[0] != "gpu_idle" {
		t.Errorf("idle GPU reasons = %q, want gpu_idle", rs[0].ClockEventReasonNames)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return "absent"
	}
	return *p
}

func TestFieldsSelectWhatIsRead(t *testing.T) {
	h := newMockHost(8)
	b := openMock(t, h)

	rs, err := b.Sample(allIndices)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.MemoryUsedMiB == nil || r.PowerW == nil || r.PowerLimitW == nil || r.SMClockMHz == nil ||
			r.MemClockMHz == nil || r.ClockEventReasons == nil || r.TemperatureC == nil {
			t.Errorf("Sample GPU %d lacks a fast field: %+v", r.Index, r)
		}
		if r.Procs == nil {
			t.Errorf("Sample GPU %d lacks its processes: %+v", r.Index, r)
		}
		if r.EnergyMJ != nil || r.MIGMode != nil || r.Name != "" || r.CPUAffinity != nil || r.NUMANode != -1 {
			t.Errorf("Sample GPU %d has a slow field: %+v", r.Index, r)
		}
		if r.UUID != h.gpus[r.Index].uuid {
			t.Errorf("Sample GPU %d UUID %q, want %q", r.Index, r.UUID, h.gpus[r.Index].uuid)
		}
	}
	for i, d := range h.devs {
		if n := len(d.GetTotalEnergyConsumptionCalls()) + len(d.GetMigModeCalls()) + len(d.GetCpuAffinityCalls()); n != 0 {
			t.Errorf("Sample made %d slow calls on GPU %d", n, i)
		}
	}

	rs, err = b.Energy([]int{5, 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].Index != 5 || rs[1].Index != 2 {
		t.Fatalf("Energy([5 2]) read %+v, want GPUs 5 then 2", rs)
	}
	for _, r := range rs {
		if r.EnergyMJ == nil || *r.EnergyMJ != h.gpus[r.Index].energyMJ {
			t.Errorf("Energy GPU %d = %v, want %d", r.Index, deref(r.EnergyMJ), h.gpus[r.Index].energyMJ)
		}
		if r.PowerW != nil || r.MemoryUsedMiB != nil {
			t.Errorf("Energy GPU %d read more than energy: %+v", r.Index, r)
		}
	}
	if n := len(h.devs[5].GetPowerUsageCalls()); n != 1 {
		t.Errorf("GetPowerUsage called %d times on GPU 5, want 1 (the Sample)", n)
	}
}

func TestNotSupportedLeavesFieldAbsent(t *testing.T) {
	notSupported := nvml.ERROR_NOT_SUPPORTED
	for _, tc := range []struct {
		name   string
		break_ func(h *mockHost)
		absent func(r gpu.Reading) bool
	}{
		{"energy", func(h *mockHost) {
			h.devs[2].GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) { return 0, notSupported }
		}, func(r gpu.Reading) bool { return r.EnergyMJ == nil }},
		{"MIG", func(h *mockHost) {
			h.devs[2].GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, notSupported }
		}, func(r gpu.Reading) bool { return r.MIGMode == nil }},
		{"memory clock", func(h *mockHost) {
			h.devs[2].GetClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
				if c == nvml.CLOCK_MEM {
					return 0, notSupported
				}
				return 1410, nvml.SUCCESS
			}
		}, func(r gpu.Reading) bool { return r.MemClockMHz == nil && r.SMClockMHz != nil && *r.SMClockMHz == 1410 }},
		{"power limit", func(h *mockHost) {
			h.devs[2].GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 0, notSupported }
		}, func(r gpu.Reading) bool { return r.PowerLimitW == nil && r.PowerW != nil }},
		{"temperature", func(h *mockHost) {
			h.devs[2].GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 0, notSupported }
		}, func(r gpu.Reading) bool { return r.TemperatureC == nil }},
		{"clock-event reasons, missing function", func(h *mockHost) {
			h.devs[2].GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return 0, nvml.ERROR_FUNCTION_NOT_FOUND }
		}, func(r gpu.Reading) bool { return r.ClockEventReasons == nil && r.ClockEventReasonNames == nil }},
		{"CPU affinity", func(h *mockHost) {
			h.devs[2].GetCpuAffinityFunc = func(int) ([]uint, nvml.Return) { return nil, notSupported }
		}, func(r gpu.Reading) bool { return r.CPUAffinity == nil && r.PCIBusID != "" }},
		{"processes", func(h *mockHost) {
			h.devs[2].GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, notSupported }
			h.devs[2].GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, notSupported }
		}, func(r gpu.Reading) bool { return r.Procs == nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newMockHost(8)
			tc.break_(h)
			b := openMock(t, h)
			rs, err := b.Info(allIndices)
			if err != nil {
				t.Fatalf("Info with %s not supported: %v", tc.name, err)
			}
			if !tc.absent(rs[2]) {
				t.Errorf("GPU 2 reading %+v: want %s absent, the rest present", rs[2], tc.name)
			}
			if tc.absent(rs[1]) {
				t.Errorf("GPU 1 reading %+v: %s absent on a GPU that supports it", rs[1], tc.name)
			}
		})
	}
}

func TestOtherErrorsFailTheRead(t *testing.T) {
	h := newMockHost(8)
	h.devs[6].GetPowerUsageFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST }
	b := openMock(t, h)
	rs, err := b.Sample(allIndices)
	if !errors.Is(err, nvml.ERROR_GPU_IS_LOST) || rs != nil {
		t.Fatalf("Sample with GPU 6 lost = %v, %v; want no readings and ERROR_GPU_IS_LOST", rs, err)
	}
	if !strings.Contains(err.Error(), "GPU 6 power") {
		t.Errorf("error %q does not say which GPU and what", err)
	}
	if _, err := b.Sample([]int{0, 9}); !errors.Is(err, nvml.ERROR_INVALID_ARGUMENT) {
		t.Errorf("Sample of GPU 9 of 8: %v, want ERROR_INVALID_ARGUMENT", err)
	}
	if _, err := b.Sample([]int{0, 1}); err != nil {
		t.Errorf("Sample of healthy GPUs after failures: %v", err)
	}
}

func TestHungCallTimesOut(t *testing.T) {
	h := newMockHost(8)
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // ends the stuck goroutine even when the test fails
	entered := make(chan struct{}, 1)
	h.devs[4].GetPowerUsageFunc = func() (uint32, nvml.Return) {
		entered <- struct{}{}
		<-release
		return 250000, nvml.SUCCESS
	}
	b, err := Open(h.lib, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}

	if _, err := b.Sample(allIndices); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Sample with GPU 4 hung = %v, want ErrTimeout", err)
	}
	<-entered
	// While the hung call has not returned, NVML is not called again.
	for _, read := range []func() error{
		func() error { _, err := b.Sample([]int{0}); return err },
		func() error { _, err := b.Snapshot([]int{0}); return err },
		func() error { _, err := b.Count(); return err },
	} {
		if err := read(); !errors.Is(err, ErrTimeout) {
			t.Errorf("read while a call is stuck = %v, want ErrTimeout", err)
		}
	}
	if n := len(h.devs[0].GetPowerUsageCalls()); n != 1 {
		t.Errorf("GPU 0 power read %d times, want 1: calls while stuck must not reach NVML", n)
	}

	// Once NVML answers, the backend reads again.
	unblock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rs, err := b.Sample([]int{4})
		if err == nil {
			if rs[0].PowerW == nil || *rs[0].PowerW != 250 {
				t.Fatalf("GPU 4 power after release = %v, want 250", deref(rs[0].PowerW))
			}
			break
		}
		if !errors.Is(err, ErrTimeout) || time.Now().After(deadline) {
			t.Fatalf("Sample after release: %v", err)
		}
		select {
		case <-entered: // the retry reached the mock again: NVML answered the first call
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestOpenFailsWithoutLibrary(t *testing.T) {
	h := newMockHost(1)
	h.lib.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
	if _, err := Open(h.lib, time.Minute); !errors.Is(err, nvml.ERROR_LIBRARY_NOT_FOUND) {
		t.Fatalf("Open without the library = %v, want ERROR_LIBRARY_NOT_FOUND", err)
	}
}

func TestThrottleReasonsOnOlderDrivers(t *testing.T) {
	h := newMockHost(2)
	h.ext.LookupSymbolFunc = func(s string) error {
		if s == eventReasonsSymbol {
			return errors.New("undefined symbol")
		}
		return nil
	}
	for _, d := range h.devs {
		// With the real library, calling the missing symbol would crash.
		d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
		d.GetCurrentClocksThrottleReasonsFunc = func() (uint64, nvml.Return) { return nvml.ClocksThrottleReasonSwThermalSlowdown, nvml.SUCCESS }
	}
	b := openMock(t, h)
	rs, err := b.Sample([]int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.ClockEventReasons == nil || *r.ClockEventReasons != gpu.ReasonSwThermalSlowdown {
			t.Errorf("GPU %d reasons = %v, want sw_thermal_slowdown from the throttle-reasons call", r.Index, deref(r.ClockEventReasons))
		}
	}
}

func TestSnapshot(t *testing.T) {
	h := newMockHost(8)
	h.gpus[1].usedBytes = 1000 << 20
	h.gpus[1].procs = []nvml.ProcessInfo{{Pid: uint32(os.Getpid()), UsedGpuMemory: 1000 << 20}}
	b := openMock(t, h)
	got, err := b.Snapshot([]int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	want := []gpu.State{
		{Index: 0, UUID: h.gpus[0].uuid},
		{Index: 1, UUID: h.gpus[1].uuid, UsedMiB: 1000, Procs: []gpu.Proc{{PID: os.Getpid(), UID: os.Getuid(), UsedMiB: 1000}}},
	}
	if len(got) != 2 || got[0].Index != 0 || got[0].UUID != want[0].UUID || got[0].UsedMiB != 0 || len(got[0].Procs) != 0 ||
		got[1].Index != 1 || got[1].UUID != want[1].UUID || got[1].UsedMiB != 1000 || !slices.Equal(got[1].Procs, want[1].Procs) {
		t.Fatalf("Snapshot = %+v, want %+v", got, want)
	}

	h.devs[0].GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) { return nvml.Memory_v2{}, nvml.ERROR_NOT_SUPPORTED }
	if _, err := b.Snapshot([]int{0}); !errors.Is(err, nvml.ERROR_NOT_SUPPORTED) {
		t.Fatalf("Snapshot without memory info = %v, want ERROR_NOT_SUPPORTED: the gates cannot judge such a GPU", err)
	}
}

func TestSysfsBusIDAndNUMA(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:18:00.0": "0000:18:00.0",
		"00000000:9B:00.0": "0000:9b:00.0",
		"0000:18:00.0":     "0000:18:00.0",
		"00010000:18:00.0": "00010000:18:00.0", // a domain that does not fit in four digits is left alone
	} {
		if got := sysfsBusID(in); got != want {
			t.Errorf("sysfsBusID(%q) = %q, want %q", in, got, want)
		}
	}
	root := fakeSysfs(t, "0-3", map[string]string{"0000:9b:00.0": "1", "0000:9c:00.0": "junk"})
	for id, want := range map[string]int{"00000000:9B:00.0": 1, "00000000:9C:00.0": -1, "00000000:9D:00.0": -1, "": -1, "../../x": -1} {
		if got := numaNode(root, id); got != want {
			t.Errorf("numaNode(%q) = %d, want %d", id, got, want)
		}
	}
	if n := possibleCPUs(root); n < 4 {
		t.Errorf("possibleCPUs = %d, want at least the 4 sysfs lists", n)
	}
}

func TestMaskCPUs(t *testing.T) {
	words := []uint{1<<0 | 1<<63, 0, 1 << 1}
	if got, want := maskCPUs(words), []int{0, 63, 129}; !slices.Equal(got, want) {
		t.Fatalf("maskCPUs = %v, want %v", got, want)
	}
}

func TestReasonBitsMatchNVML(t *testing.T) {
	for _, c := range []struct{ ours, nvml uint64 }{
		{gpu.ReasonGpuIdle, nvml.ClocksEventReasonGpuIdle},
		{gpu.ReasonApplicationsClocksSetting, nvml.ClocksEventReasonApplicationsClocksSetting},
		{gpu.ReasonSwPowerCap, nvml.ClocksEventReasonSwPowerCap},
		{gpu.ReasonHwSlowdown, nvml.ClocksThrottleReasonHwSlowdown},
		{gpu.ReasonSyncBoost, nvml.ClocksEventReasonSyncBoost},
		{gpu.ReasonSwThermalSlowdown, nvml.ClocksEventReasonSwThermalSlowdown},
		{gpu.ReasonHwThermalSlowdown, nvml.ClocksThrottleReasonHwThermalSlowdown},
		{gpu.ReasonHwPowerBrakeSlowdown, nvml.ClocksThrottleReasonHwPowerBrakeSlowdown},
		{gpu.ReasonDisplayClockSetting, nvml.ClocksEventReasonDisplayClockSetting},
		{gpu.ReasonBoardLimit, nvml.ClocksEventReasonBoardLimit},
		{gpu.ReasonReliability, nvml.ClocksEventReasonReliability},
	} {
		if c.ours != c.nvml {
			t.Errorf("reason bit %#x, nvml.h says %#x", c.ours, c.nvml)
		}
	}
	if gpu.MIGDisabled != nvml.DEVICE_MIG_DISABLE || gpu.MIGEnabled != nvml.DEVICE_MIG_ENABLE {
		t.Error("MIG mode constants differ from nvml.h")
	}
}

// openReal opens the real library, skipping the test where NVML does not
// initialize (no driver, no GPU).
func openReal(t testing.TB) (*Backend, []int) {
	t.Helper()
	b, err := Open(nil, 10*time.Second)
	if err != nil {
		t.Skipf("no NVML here: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("close NVML: %v", err)
		}
	})
	n, err := b.Count()
	if err != nil {
		t.Fatal(err)
	}
	indices := make([]int, n)
	for i := range indices {
		indices[i] = i
	}
	return b, indices
}

func TestRealNVML(t *testing.T) {
	b, indices := openReal(t)
	if len(indices) == 0 {
		t.Skip("NVML sees no GPU")
	}
	rs, err := b.Info(indices)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		t.Logf("GPU %d %s %q bus %s NUMA %d CPUs %s: memory %v/%v MiB, %d procs, SM %v MHz, mem %v MHz, reasons %q, %v W of %v W, %v C, energy %v mJ, MIG %v",
			r.Index, r.UUID, r.Name, r.PCIBusID, r.NUMANode, cpulist.Format(r.CPUAffinity), deref(r.MemoryUsedMiB), deref(r.MemoryTotalMiB),
			len(r.Procs), deref(r.SMClockMHz), deref(r.MemClockMHz), r.ClockEventReasonNames, deref(r.PowerW), deref(r.PowerLimitW),
			deref(r.TemperatureC), deref(r.EnergyMJ), deref(r.MIGMode))
		if !strings.HasPrefix(r.UUID, "GPU-") {
			t.Errorf("GPU %d UUID %q does not start with GPU-", r.Index, r.UUID)
		}
		if r.MemoryTotalMiB == nil || *r.MemoryTotalMiB <= 0 || r.MemoryUsedMiB == nil || *r.MemoryUsedMiB > *r.MemoryTotalMiB {
			t.Errorf("GPU %d memory %v of %v MiB", r.Index, deref(r.MemoryUsedMiB), deref(r.MemoryTotalMiB))
		}
		if r.PCIBusID == "" || r.Name == "" {
			t.Errorf("GPU %d has no name or bus id", r.Index)
		}
	}
	// The energy counter does not go backwards.
	e0, err := b.Energy(indices)
	if err != nil {
		t.Fatal(err)
	}
	e1, err := b.Energy(indices)
	if err != nil {
		t.Fatal(err)
	}
	for k := range e0 {
		if e0[k].EnergyMJ != nil && (e1[k].EnergyMJ == nil || *e1[k].EnergyMJ < *e0[k].EnergyMJ) {
			t.Errorf("GPU %d energy went from %d to %v mJ", e0[k].Index, *e0[k].EnergyMJ, deref(e1[k].EnergyMJ))
		}
	}
}

// benchReads times read of indices on be, one call an iteration.
func benchReads(b *testing.B, be *Backend, indices []int, read func(*Backend, []int) ([]gpu.Reading, error)) {
	for b.Loop() {
		if _, err := read(be, indices); err != nil {
			b.Fatal(err)
		}
	}
}

// benchReal times read of every GPU NVML sees.
func benchReal(b *testing.B, read func(*Backend, []int) ([]gpu.Reading, error)) {
	be, indices := openReal(b)
	b.ReportMetric(float64(len(indices)), "gpus")
	benchReads(b, be, indices, read)
}

func BenchmarkSampleMock(b *testing.B) {
	benchReads(b, openMock(b, newMockHost(8)), allIndices, (*Backend).Sample)
}

func BenchmarkEnergyMock(b *testing.B) {
	benchReads(b, openMock(b, newMockHost(8)), allIndices, (*Backend).Energy)
}

func BenchmarkSampleReal(b *testing.B) { benchReal(b, (*Backend).Sample) }

func BenchmarkEnergyReal(b *testing.B) { benchReal(b, (*Backend).Energy) }

func BenchmarkInfoReal(b *testing.B) { benchReal(b, (*Backend).Info) }

// TestRealSampler samples every GPU every 10 ms through NVML and compares
// the integrated power with the energy counters.
func TestRealSampler(t *testing.T) {
	b, indices := openReal(t)
	if len(indices) == 0 {
		t.Skip("NVML sees no GPU")
	}
	path := filepath.Join(t.TempDir(), "gpu.jsonl")
	s, err := sample.New(sample.Config{Reader: b, GPUs: indices, Interval: 10 * time.Millisecond, Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		recs, err := sample.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) >= 200 || time.Now().After(deadline) {
			break
		}
		<-time.After(10 * time.Millisecond)
	}
	sum, err := s.Stop()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d samples over %s, %d failed, %d missed; read time mean %s, max %s, total %s",
		sum.Samples, sum.Last.Sub(sum.First), sum.Failed, sum.Missed, sum.MeanReadTime, sum.MaxReadTime, sum.ReadTime)
	if sum.Samples < 100 || sum.Failed != 0 {
		t.Fatalf("%d samples, %d failed: want at least 100, none failed", sum.Samples, sum.Failed)
	}
	for _, g := range sum.GPUs {
		t.Logf("GPU %d: mean %.1f W, max %.1f W, integrated %.2f J, counter %v J", g.Index, g.MeanPowerW, g.MaxPowerW, g.EnergyJ, deref(g.CounterEnergyJ))
		if g.PowerSamples != sum.Samples || g.EnergyJ <= 0 || g.CounterEnergyJ == nil || *g.CounterEnergyJ < 0 {
			t.Errorf("GPU %d summary %+v", g.Index, g)
		}
	}
}

// TestComputeAndGraphicsProcesses: a reading lists the compute and the
// graphics processes, each pid once with the larger memory figure; a
// query one GPU does not support leaves the other's answer.
func TestComputeAndGraphicsProcesses(t *testing.T) {
	h := newMockHost(2)
	h.gpus[0].procs = []nvml.ProcessInfo{{Pid: 101, UsedGpuMemory: 100 << 20}, {Pid: 102, UsedGpuMemory: 10 << 20}}
	h.gpus[0].graphics = []nvml.ProcessInfo{{Pid: 102, UsedGpuMemory: 30 << 20}, {Pid: 103, UsedGpuMemory: math.MaxUint64}}
	h.gpus[1].graphics = []nvml.ProcessInfo{{Pid: 201, UsedGpuMemory: 5 << 20}}
	h.devs[1].GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
	b := openMock(t, h)
	rs, err := b.Sample([]int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	got := func(r gpu.Reading) string {
		var parts []string
		for _, p := range r.Procs {
			parts = append(parts, fmt.Sprintf("%d:%d", p.PID, p.UsedMiB))
		}
		return strings.Join(parts, " ")
	}
	if g := got(rs[0]); g != "101:100 102:30 103:-1" {
		t.Errorf("GPU 0 processes %q", g)
	}
	if g := got(rs[1]); g != "201:5" {
		t.Errorf("GPU 1 processes %q", g)
	}
	h.devs[0].GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_UNKNOWN }
	if _, err := b.Sample([]int{0}); err == nil || !strings.Contains(err.Error(), "graphics processes") {
		t.Errorf("a failing graphics query: %v", err)
	}
}
