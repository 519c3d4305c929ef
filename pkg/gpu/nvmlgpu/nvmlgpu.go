package nvmlgpu

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"warden/internal/cpulist"
	"warden/pkg/gpu"
)

// ErrTimeout is returned when NVML does not answer within the deadline, and
// by every call made while an earlier call that timed out has not returned.
var ErrTimeout = errors.New("nvml: no answer within the deadline")

// eventReasonsSymbol is the NVML function for clock-event reasons (driver
// 535 and later); older drivers have only the throttle-reasons one.
const eventReasonsSymbol = "nvmlDeviceGetCurrentClocksEventReasons"

// Backend reads GPUs through an nvml.Interface: the real library, or one
// of go-nvml's mock servers in tests.
type Backend struct {
	gpu.Views // Sample, Energy and Info: reads of b itself

	lib     nvml.Interface
	timeout time.Duration
	sysfs   string
	// numCPUs sizes the CPU-affinity mask: the host's possible CPUs.
	numCPUs int
	// eventReasons says whether the driver has eventReasonsSymbol.
	eventReasons bool
	// abandoned counts calls past their deadline that NVML has not
	// answered yet; while it is above zero, calls are refused.
	abandoned atomic.Int32
}

// Option adjusts a Backend at Open.
type Option func(*Backend)

// WithSysfs reads sysfs (NUMA nodes, possible CPUs) under root instead of
// /sys. Tests point it at a directory they build.
func WithSysfs(root string) Option {
	return func(b *Backend) { b.sysfs = root }
}

// Open initializes NVML, with timeout as the deadline of every later call.
// lib nil is the real library, which fails with ERROR_LIBRARY_NOT_FOUND
// where there is no driver.
func Open(lib nvml.Interface, timeout time.Duration, opts ...Option) (*Backend, error) {
	if lib == nil {
		lib = nvml.New()
	}
	b := &Backend{lib: lib, timeout: timeout, sysfs: "/sys"}
	b.Views = gpu.Views{Reader: b}
	for _, o := range opts {
		o(b)
	}
	b.numCPUs = possibleCPUs(b.sysfs)
	err := b.call(func() error {
		if ret := lib.Init(); ret != nvml.SUCCESS {
			return fmt.Errorf("nvml init: %w", ret)
		}
		b.eventReasons = lib.Extensions().LookupSymbol(eventReasonsSymbol) == nil
		return nil
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// Name is "nvml".
func (b *Backend) Name() string { return "nvml" }

// Close shuts NVML down.
func (b *Backend) Close() error {
	return b.call(func() error {
		if ret := b.lib.Shutdown(); ret != nvml.SUCCESS {
			return fmt.Errorf("nvml shutdown: %w", ret)
		}
		return nil
	})
}

// Count returns the number of GPUs NVML sees.
func (b *Backend) Count() (int, error) {
	var n int
	err := b.call(func() error {
		var ret nvml.Return
		n, ret = b.lib.DeviceGetCount()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("nvml device count: %w", ret)
		}
		return nil
	})
	return n, err
}

// Call states, for the goroutine and the caller to agree on who reports.
const (
	running int32 = iota
	answered
	abandoned
)

// call runs fn off the caller's goroutine with the deadline. fn must not
// touch anything the caller reads after a timeout.
func (b *Backend) call(fn func() error) error {
	if n := b.abandoned.Load(); n > 0 {
		return fmt.Errorf("nvml: %d earlier call(s) past the deadline have not returned: %w", n, ErrTimeout)
	}
	var state atomic.Int32
	done := make(chan error, 1) // buffered: the goroutine never blocks on it
	go func() {
		err := fn()
		if state.CompareAndSwap(running, answered) {
			done <- err
			return
		}
		b.abandoned.Add(-1) // the caller gave up on this call
	}()
	t := time.NewTimer(b.timeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		if state.CompareAndSwap(running, abandoned) {
			b.abandoned.Add(1)
			return fmt.Errorf("nvml: no answer within %s: %w", b.timeout, ErrTimeout)
		}
		return <-done // answered just as the deadline passed
	}
}

// Read reads the given fields of the GPUs with the given indices, in that
// order. A field the device does not support is left absent. The
// processes are the compute and graphics processes; the energy counters
// alone take milliseconds per GPU.
func (b *Backend) Read(indices []int, fields gpu.Fields) ([]gpu.Reading, error) {
	out := make([]gpu.Reading, 0, len(indices))
	err := b.call(func() error {
		for _, i := range indices {
			r, err := b.read(i, fields)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Snapshot reads memory used (v2: 0 on an idle GPU) and the compute
// processes of the GPUs with the given indices, for the gates. Either one
// unsupported is an error: the gates cannot judge a GPU without them.
func (b *Backend) Snapshot(indices []int) ([]gpu.State, error) {
	rs, err := b.Read(indices, gpu.Memory|gpu.Processes)
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		if r.MemoryUsedMiB == nil || r.Procs == nil {
			return nil, fmt.Errorf("nvml GPU %d: memory or processes: %w", r.Index, nvml.ERROR_NOT_SUPPORTED)
		}
	}
	return gpu.States(rs), nil
}

// supported sorts the answer of one NVML call for an optional field: true
// to use the value, false to leave the field absent, or an error.
func supported(i int, what string, ret nvml.Return) (bool, error) {
	switch ret {
	case nvml.SUCCESS:
		return true, nil
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND:
		return false, nil
	}
	return false, fmt.Errorf("nvml GPU %d %s: %w", i, what, ret)
}

func ptr[T any](v T) *T { return &v }

// read reads one GPU. It runs inside call.
func (b *Backend) read(i int, fields gpu.Fields) (gpu.Reading, error) {
	r := gpu.Reading{Index: i, NUMANode: -1}
	dev, ret := b.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return r, fmt.Errorf("nvml GPU %d handle: %w", i, ret)
	}
	if r.UUID, ret = dev.GetUUID(); ret != nvml.SUCCESS {
		return r, fmt.Errorf("nvml GPU %d uuid: %w", i, ret)
	}
	if fields&gpu.Topology != 0 {
		if err := b.readTopology(i, dev, &r); err != nil {
			return r, err
		}
	}
	if fields&gpu.Memory != 0 {
		mem, ret := dev.GetMemoryInfo_v2()
		if ok, err := supported(i, "memory", ret); err != nil {
			return r, err
		} else if ok {
			r.MemoryUsedMiB = ptr(int(mem.Used >> 20))
			r.MemoryTotalMiB = ptr(int(mem.Total >> 20))
		}
	}
	if fields&gpu.Processes != 0 {
		procs, err := runningProcs(i, dev)
		if err != nil {
			return r, err
		}
		r.Procs = procs
	}
	for _, step := range []struct {
		field gpu.Fields
		read  func(int, nvml.Device, *gpu.Reading) error
	}{
		{gpu.Clocks, readClocks}, {gpu.ClockReasons, b.readClockReasons}, {gpu.Power, readPower},
		{gpu.Temperature, readTemperature}, {gpu.Energy, readEnergy}, {gpu.MIG, readMIG},
	} {
		if fields&step.field != 0 {
			if err := step.read(i, dev, &r); err != nil {
				return r, err
			}
		}
	}
	return r, nil
}

// set stores v in *dst when NVML answered SUCCESS (ret) for the field
// what of GPU i, leaves the field absent when the device does not support
// it, and returns any other answer as an error.
func set[T any](i int, what string, ret nvml.Return, dst **T, v T) error {
	ok, err := supported(i, what, ret)
	if ok {
		*dst = &v
	}
	return err
}

func readClocks(i int, dev nvml.Device, r *gpu.Reading) error {
	sm, ret := dev.GetClockInfo(nvml.CLOCK_SM)
	if err := set(i, "SM clock", ret, &r.SMClockMHz, int(sm)); err != nil {
		return err
	}
	mem, ret := dev.GetClockInfo(nvml.CLOCK_MEM)
	return set(i, "memory clock", ret, &r.MemClockMHz, int(mem))
}

func (b *Backend) readClockReasons(i int, dev nvml.Device, r *gpu.Reading) error {
	var mask uint64
	var ret nvml.Return
	if b.eventReasons {
		mask, ret = dev.GetCurrentClocksEventReasons()
	} else {
		mask, ret = dev.GetCurrentClocksThrottleReasons()
	}
	ok, err := supported(i, "clock-event reasons", ret)
	if ok {
		r.ClockEventReasons = ptr(mask)
		r.ClockEventReasonNames = gpu.ReasonNames(mask)
	}
	return err
}

func readPower(i int, dev nvml.Device, r *gpu.Reading) error {
	mw, ret := dev.GetPowerUsage()
	if err := set(i, "power", ret, &r.PowerW, float64(mw)/1000); err != nil {
		return err
	}
	mw, ret = dev.GetEnforcedPowerLimit()
	return set(i, "power limit", ret, &r.PowerLimitW, float64(mw)/1000)
}

func readTemperature(i int, dev nvml.Device, r *gpu.Reading) error {
	c, ret := dev.GetTemperature(nvml.TEMPERATURE_GPU)
	return set(i, "temperature", ret, &r.TemperatureC, int(c))
}

func readEnergy(i int, dev nvml.Device, r *gpu.Reading) error {
	mj, ret := dev.GetTotalEnergyConsumption()
	return set(i, "energy", ret, &r.EnergyMJ, mj)
}

func readMIG(i int, dev nvml.Device, r *gpu.Reading) error {
	current, _, ret := dev.GetMigMode()
	return set(i, "MIG mode", ret, &r.MIGMode, current)
}

// runningProcs lists the compute and the graphics processes on a GPU
// (NVML's two queries), each pid once with the larger of its memory
// figures. nil when neither query is supported.
func runningProcs(i int, dev nvml.Device) ([]gpu.Proc, error) {
	var out []gpu.Proc
	seen := map[int]int{} // pid -> position in out
	answered := false
	for _, q := range []struct {
		what string
		get  func() ([]nvml.ProcessInfo, nvml.Return)
	}{{"compute processes", dev.GetComputeRunningProcesses}, {"graphics processes", dev.GetGraphicsRunningProcesses}} {
		procs, ret := q.get()
		ok, err := supported(i, q.what, ret)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		answered = true
		for _, p := range procs {
			used := -1
			if p.UsedGpuMemory != math.MaxUint64 { // NVML_VALUE_NOT_AVAILABLE
				used = int(p.UsedGpuMemory >> 20)
			}
			if k, dup := seen[int(p.Pid)]; dup {
				out[k].UsedMiB = max(out[k].UsedMiB, used)
				continue
			}
			seen[int(p.Pid)] = len(out)
			out = append(out, gpu.Proc{PID: int(p.Pid), UID: uidOf(int(p.Pid)), UsedMiB: used})
		}
	}
	if !answered {
		return nil, nil
	}
	if out == nil {
		out = []gpu.Proc{}
	}
	return out, nil
}

// readTopology fills the name, PCI bus id, CPU affinity and NUMA node.
func (b *Backend) readTopology(i int, dev nvml.Device, r *gpu.Reading) error {
	name, ret := dev.GetName()
	if ok, err := supported(i, "name", ret); err != nil {
		return err
	} else if ok {
		r.Name = name
	}
	pci, ret := dev.GetPciInfo()
	if ok, err := supported(i, "PCI info", ret); err != nil {
		return err
	} else if ok {
		r.PCIBusID = cString(pci.BusId[:])
		r.NUMANode = numaNode(b.sysfs, r.PCIBusID)
	}
	words, ret := dev.GetCpuAffinity(b.numCPUs)
	if ok, err := supported(i, "CPU affinity", ret); err != nil {
		return err
	} else if ok {
		r.CPUAffinity = maskCPUs(words)
	}
	return nil
}

// cString converts a NUL-terminated C char array.
func cString(cs []int8) string {
	b := make([]byte, 0, len(cs))
	for _, c := range cs {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

// maskCPUs lists the CPUs set in an affinity mask of machine words, CPU
// w*UintSize+j being bit j of word w.
func maskCPUs(words []uint) []int {
	var cpus []int
	for w, word := range words {
		for word != 0 {
			j := bits.TrailingZeros(word)
			word &^= 1 << j
			cpus = append(cpus, w*bits.UintSize+j)
		}
	}
	return cpus
}

// sysfsBusID turns NVML's bus id ("00000000:18:00.0") into the name sysfs
// gives the device ("0000:18:00.0").
func sysfsBusID(id string) string {
	id = strings.ToLower(id)
	if domain, rest, ok := strings.Cut(id, ":"); ok && len(domain) == 8 && strings.HasPrefix(domain, "0000") {
		id = domain[4:] + ":" + rest
	}
	return id
}

// numaNode reads the NUMA node of a PCI device from sysfs, -1 when it is
// not known.
func numaNode(sysfs, busID string) int {
	id := sysfsBusID(busID)
	if id == "" || strings.ContainsAny(id, "/") || id == "." || id == ".." {
		return -1
	}
	data, err := os.ReadFile(filepath.Join(sysfs, "bus", "pci", "devices", id, "numa_node"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// possibleCPUs counts the CPUs the host can have (highest possible CPU +
// 1), to size the affinity mask; the CPUs this process sees when sysfs
// does not say.
func possibleCPUs(sysfs string) int {
	data, err := os.ReadFile(filepath.Join(sysfs, "devices", "system", "cpu", "possible"))
	if err == nil {
		if cpus, err := cpulist.Parse(string(data)); err == nil && len(cpus) > 0 {
			return max(cpus[len(cpus)-1]+1, runtime.NumCPU())
		}
	}
	return runtime.NumCPU()
}

// uidOf reads the real uid of a host pid; -1 when it cannot be read (a
// process in another pid namespace, or gone).
func uidOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				uid, err := strconv.Atoi(f[0])
				if err == nil {
					return uid
				}
			}
		}
	}
	return -1
}
