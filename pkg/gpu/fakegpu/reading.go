package fakegpu

import (
	"fmt"
	"strings"

	"warden/internal/cpulist"
	"warden/pkg/gpu"
)

// The fake's figures, derived from the memory live claims hold. They are
// plausible for an H200, not measured.
const (
	// IdlePowerW is the power of a GPU with no memory claimed.
	IdlePowerW = 75
	// PowerPerMiBW is the power each claimed MiB adds.
	PowerPerMiBW = 0.02
	// PowerLimitW is the enforced power limit; power never exceeds it, and
	// a GPU held at it reports the sw_power_cap clock-event reason.
	PowerLimitW = 700
	// BusySMClockMHz and IdleSMClockMHz are the SM clock with and without
	// claimed memory.
	BusySMClockMHz = 1980
	IdleSMClockMHz = 345
	// MemClockMHz is the memory clock, busy or idle.
	MemClockMHz = 3201
)

// powerMW is the power of a GPU with used MiB claimed, in milliwatts:
// IdlePowerW + PowerPerMiBW per MiB, at most PowerLimitW. Integer
// milliwatts keep the energy counter exact.
func powerMW(usedMiB int) int64 {
	return min(IdlePowerW*1000+20*int64(usedMiB), PowerLimitW*1000)
}

// temperatureC rises from 33 C idle to 65 C at the power limit.
func temperatureC(mw int64) int { return 30 + int(mw/20000) }

func ptr[T any](v T) *T { return &v }

// Read reads the given fields of the GPUs with the given indices, in that
// order. Every field is supported except the PCI bus id, which a fake GPU
// has not. The processes are the live claims. An energy read (Energy)
// updates the GPU's energy counter file: each adds the GPU's present power
// times the time since the counter's last update, so the counter never
// decreases; it starts at 0 on a GPU's first energy read.
func (b *Backend) Read(indices []int, fields gpu.Fields) ([]gpu.Reading, error) {
	out := make([]gpu.Reading, 0, len(indices))
	for _, i := range indices {
		r, err := b.read(i, fields)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// Snapshot reads memory used and the processes holding it, for the gates.
func (b *Backend) Snapshot(indices []int) ([]gpu.State, error) {
	rs, err := b.Read(indices, gpu.Memory|gpu.Processes)
	if err != nil {
		return nil, err
	}
	return gpu.States(rs), nil
}

// loadFields are the fields that depend on the claimed memory.
const loadFields = gpu.Memory | gpu.Processes | gpu.Clocks | gpu.ClockReasons | gpu.Power | gpu.Temperature | gpu.Energy

func (b *Backend) read(i int, fields gpu.Fields) (gpu.Reading, error) {
	d, err := b.Device(i)
	if err != nil {
		return gpu.Reading{}, err
	}
	r := gpu.Reading{Index: i, UUID: d.UUID, NUMANode: -1}
	if fields&gpu.Topology != 0 {
		r.Name = d.Name
		r.NUMANode = d.NUMANode
		cpus, err := parseAffinity(d.CPUs) // validated by Open
		if err != nil {
			return r, fmt.Errorf("fake GPU %d: %w", i, err)
		}
		r.CPUAffinity = cpus
	}
	if fields&gpu.MIG != 0 {
		r.MIGMode = ptr(gpu.MIGDisabled)
	}
	if fields&loadFields == 0 {
		return r, nil
	}
	procs, err := b.Processes(i)
	if err != nil {
		return r, err
	}
	used := 0
	for _, p := range procs {
		used += p.UsedMiB
	}
	mw := powerMW(used)
	if fields&gpu.Memory != 0 {
		r.MemoryUsedMiB = ptr(used)
		r.MemoryTotalMiB = ptr(d.TotalMiB)
	}
	if fields&gpu.Processes != 0 {
		r.Procs = make([]gpu.Proc, 0, len(procs))
		for _, p := range procs {
			r.Procs = append(r.Procs, gpu.Proc{PID: p.PID, UID: p.UID, UsedMiB: p.UsedMiB})
		}
	}
	if fields&gpu.Clocks != 0 {
		sm := IdleSMClockMHz
		if used > 0 {
			sm = BusySMClockMHz
		}
		r.SMClockMHz = ptr(sm)
		r.MemClockMHz = ptr(MemClockMHz)
	}
	if fields&gpu.ClockReasons != 0 {
		var mask uint64
		if used == 0 {
			mask |= gpu.ReasonGpuIdle
		}
		if mw >= PowerLimitW*1000 {
			mask |= gpu.ReasonSwPowerCap
		}
		t, err := b.throttle(i)
		if err != nil {
			return r, err
		}
		mask |= t
		r.ClockEventReasons = ptr(mask)
		r.ClockEventReasonNames = gpu.ReasonNames(mask)
	}
	if fields&gpu.Power != 0 {
		r.PowerW = ptr(float64(mw) / 1000)
		r.PowerLimitW = ptr(float64(PowerLimitW))
	}
	if fields&gpu.Temperature != 0 {
		r.TemperatureC = ptr(temperatureC(mw))
	}
	if fields&gpu.Energy != 0 {
		mj, err := b.advanceEnergy(i, mw)
		if err != nil {
			return r, err
		}
		r.EnergyMJ = ptr(mj)
	}
	return r, nil
}

// parseAffinity reads a fake device's CPU affinity: a CPU list, or blank
// for an affinity the device does not know (nil).
func parseAffinity(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	return cpulist.Parse(s)
}
