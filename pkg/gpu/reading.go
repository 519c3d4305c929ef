package gpu

import (
	"math/bits"
	"strconv"
)

// Fields selects what a read asks of a GPU. Index and UUID are always read.
type Fields uint32

// The fields a read can ask for.
const (
	// Memory is MemoryUsedMiB and MemoryTotalMiB.
	Memory Fields = 1 << iota
	// Processes is Procs: the compute and graphics processes and their
	// memory.
	Processes
	// Clocks is SMClockMHz and MemClockMHz.
	Clocks
	// ClockReasons is ClockEventReasons and ClockEventReasonNames.
	ClockReasons
	// Power is PowerW and PowerLimitW.
	Power
	// Temperature is TemperatureC.
	Temperature
	// Energy is EnergyMJ. It is slow through NVML (milliseconds per GPU).
	Energy
	// MIG is MIGMode. It costs about 0.1 ms per GPU through NVML.
	MIG
	// Topology is Name, PCIBusID, CPUAffinity and NUMANode, which do not
	// change while the driver is loaded.
	Topology
)

// Fast is what a periodic sample reads: each field costs microseconds.
const Fast = Memory | Clocks | ClockReasons | Power | Temperature

// Sampled is what the 1 Hz sampler reads: the fast fields and the
// processes (NVML's process queries cost microseconds too), so that a
// process that comes and goes between the gates is seen.
const Sampled = Fast | Processes

// All is every field.
const All = Fast | Processes | Energy | MIG | Topology

// MIG modes, as NVML reports them.
const (
	MIGDisabled = 0
	MIGEnabled  = 1
)

// Proc is a compute or graphics process on a GPU.
type Proc struct {
	PID int `json:"pid"`
	// UID is the real uid of the process, -1 when it cannot be read (a
	// process in another pid namespace, or gone).
	UID int `json:"uid"`
	// UsedMiB is the GPU memory the process holds, -1 when the driver does
	// not say.
	UsedMiB int `json:"used_mib"`
}

// State is what the gates judge a GPU by: its memory in use and the
// compute processes holding it, read at one moment (a backend's Snapshot).
// Unlike a Reading, every field is present.
type State struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	// UsedMiB is the memory in use, NVML's v2 figure: 0 on an idle GPU.
	UsedMiB int `json:"used_mib"`
	// Procs are the compute processes on the GPU; empty when none.
	Procs []Proc `json:"procs,omitempty"`
}

// Reading is one GPU at one moment. Pointer and slice fields are nil when
// they were not asked for or are not supported by the device; see the
// package documentation.
type Reading struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`

	// Topology.
	Name     string `json:"name,omitempty"`
	PCIBusID string `json:"pci_bus_id,omitempty"`
	// CPUAffinity lists the CPUs close to the GPU, ascending.
	CPUAffinity []int `json:"cpu_affinity,omitempty"`
	// NUMANode is the GPU's NUMA node, -1 when unknown.
	NUMANode int `json:"numa_node"`

	// Memory. Used is NVML's v2 figure, 0 on an idle GPU (it leaves out
	// the memory the driver reserves).
	MemoryUsedMiB  *int `json:"memory_used_mib,omitempty"`
	MemoryTotalMiB *int `json:"memory_total_mib,omitempty"`

	// Processes. In JSON an empty list and an absent one look the same.
	Procs []Proc `json:"procs,omitempty"`

	// Clocks, current.
	SMClockMHz  *int `json:"sm_clock_mhz,omitempty"`
	MemClockMHz *int `json:"mem_clock_mhz,omitempty"`

	// ClockEventReasons is NVML's bitmask of why clocks are below their
	// maximum; ClockEventReasonNames decodes it (ReasonNames).
	ClockEventReasons     *uint64  `json:"clock_event_reasons,omitempty"`
	ClockEventReasonNames []string `json:"clock_event_reason_names,omitempty"`

	// Power draw and the enforced power limit.
	PowerW      *float64 `json:"power_w,omitempty"`
	PowerLimitW *float64 `json:"power_limit_w,omitempty"`

	TemperatureC *int `json:"temperature_c,omitempty"`

	// EnergyMJ is the total energy counter in millijoules.
	EnergyMJ *uint64 `json:"energy_mj,omitempty"`

	// MIGMode is the current MIG mode (MIGDisabled, MIGEnabled).
	MIGMode *int `json:"mig_mode,omitempty"`
}

// Clock-event reason bits, as nvml.h defines them (nvmlClocksEventReason*).
const (
	ReasonGpuIdle                   uint64 = 0x1
	ReasonApplicationsClocksSetting uint64 = 0x2
	ReasonSwPowerCap                uint64 = 0x4
	ReasonHwSlowdown                uint64 = 0x8
	ReasonSyncBoost                 uint64 = 0x10
	ReasonSwThermalSlowdown         uint64 = 0x20
	ReasonHwThermalSlowdown         uint64 = 0x40
	ReasonHwPowerBrakeSlowdown      uint64 = 0x80
	ReasonDisplayClockSetting       uint64 = 0x100
	ReasonBoardLimit                uint64 = 0x200
	ReasonReliability               uint64 = 0x400
)

var reasonNames = [...]string{
	"gpu_idle",
	"applications_clocks_setting",
	"sw_power_cap",
	"hw_slowdown",
	"sync_boost",
	"sw_thermal_slowdown",
	"hw_thermal_slowdown",
	"hw_power_brake_slowdown",
	"display_clock_setting",
	"board_limit",
	"reliability",
}

// ReasonNames decodes a clock-event reason bitmask into names, lowest bit
// first. A bit nvml.h does not define is named "bit_N". No bit set gives
// nil: nothing holds the clocks down.
func ReasonNames(mask uint64) []string {
	var names []string
	for mask != 0 {
		b := bits.TrailingZeros64(mask)
		mask &^= 1 << b
		if b < len(reasonNames) {
			names = append(names, reasonNames[b])
		} else {
			names = append(names, "bit_"+strconv.Itoa(b))
		}
	}
	return names
}
