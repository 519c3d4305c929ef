package fakegpu

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"warden/pkg/gpu"
)

// testClock is a clock the test moves. It is safe for concurrent use.
type testClock struct{ ns atomic.Int64 }

func newTestClock() *testClock {
	c := &testClock{}
	c.ns.Store(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *testClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *testClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
func (c *testClock) tickEachRead(d time.Duration) func() time.Time {
	return func() time.Time { return time.Unix(0, c.ns.Add(int64(d))) }
}

func newHostWith(t *testing.T, devices []Device, opts ...OpenOption) (string, *Backend) {
	t.Helper()
	dir := t.TempDir()
	if err := InitWith(dir, devices); err != nil {
		t.Fatal(err)
	}
	b, err := Open(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return dir, b
}

func claimSelf(t *testing.T, dir string, gpuIdx, uid, mib int) {
	t.Helper()
	start, err := StartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if err := ClaimFor(dir, gpuIdx, os.Getpid(), start, uid, mib); err != nil {
		t.Fatal(err)
	}
}

func intOf(p *int) int {
	if p == nil {
		return -999
	}
	return *p
}

func floatOf(p *float64) float64 {
	if p == nil {
		return -999
	}
	return *p
}

func TestReadingFollowsClaims(t *testing.T) {
	dir, b := newHostWith(t, []Device{
		{TotalMiB: 143771, CPUs: "0-15,64-79", NUMANode: 0},
		{TotalMiB: 143771, CPUs: "16-31", NUMANode: 1},
		{TotalMiB: 143771, NUMANode: -1},
	})
	claimSelf(t, dir, 2, 4242, 40000) // 75 + 800 W: held at the limit
	child := startClaimingChild(t, dir, 1, 10000)

	rs, err := b.Info([]int{0, 1, 2})
	if err != nil {
		t.Fatal(err)
	}
	type figures struct {
		used, sm, temp int
		power          float64
		reasons        []string
		procs          []gpu.Proc
	}
	want := []figures{
		{0, IdleSMClockMHz, 33, 75, []string{"gpu_idle"}, []gpu.Proc{}},
		{10000, BusySMClockMHz, 43, 275, nil, []gpu.Proc{{PID: child.cmd.Process.Pid, UID: os.Getuid(), UsedMiB: 10000}}},
		{40000, BusySMClockMHz, 65, 700, []string{"sw_power_cap"}, []gpu.Proc{{PID: os.Getpid(), UID: 4242, UsedMiB: 40000}}},
	}
	for k, r := range rs {
		w := want[k]
		got := figures{intOf(r.MemoryUsedMiB), intOf(r.SMClockMHz), intOf(r.TemperatureC), floatOf(r.PowerW), r.ClockEventReasonNames, r.Procs}
		if got.used != w.used || got.sm != w.sm || got.temp != w.temp || got.power != w.power ||
			!slices.Equal(got.reasons, w.reasons) || !slices.Equal(got.procs, w.procs) || got.procs == nil {
			t.Errorf("GPU %d = %+v, want %+v", k, got, w)
		}
		if intOf(r.MemoryTotalMiB) != 143771 || intOf(r.MemClockMHz) != MemClockMHz || floatOf(r.PowerLimitW) != PowerLimitW ||
			intOf(r.MIGMode) != gpu.MIGDisabled || r.ClockEventReasons == nil || r.EnergyMJ == nil || r.Name != DeviceName {
			t.Errorf("GPU %d constant fields: %+v", k, r)
		}
	}
	if !slices.Equal(rs[0].CPUAffinity, append(cpuSeq(0, 15), cpuSeq(64, 79)...)) || rs[0].NUMANode != 0 ||
		!slices.Equal(rs[1].CPUAffinity, cpuSeq(16, 31)) || rs[1].NUMANode != 1 ||
		rs[2].CPUAffinity != nil || rs[2].NUMANode != -1 {
		t.Errorf("topology = %v/%d, %v/%d, %v/%d", rs[0].CPUAffinity, rs[0].NUMANode, rs[1].CPUAffinity, rs[1].NUMANode, rs[2].CPUAffinity, rs[2].NUMANode)
	}

	// The claimer dies: GPU 1 is idle again.
	if err := child.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	child.wait(t)
	rs, err = b.Sample([]int{1})
	if err != nil {
		t.Fatal(err)
	}
	r := rs[0]
	if intOf(r.MemoryUsedMiB) != 0 || floatOf(r.PowerW) != IdlePowerW || intOf(r.SMClockMHz) != IdleSMClockMHz {
		t.Errorf("GPU 1 after its claimer died: %d MiB, %v W, %d MHz; want idle", intOf(r.MemoryUsedMiB), floatOf(r.PowerW), intOf(r.SMClockMHz))
	}
	if r.Procs == nil || len(r.Procs) != 0 {
		t.Errorf("Sample after the claimer died: processes %v, want an empty list", r.Procs)
	}
	if r.EnergyMJ != nil || r.MIGMode != nil || r.CPUAffinity != nil || r.Name != "" || r.NUMANode != -1 {
		t.Errorf("Sample read more than the sampled fields: %+v", r)
	}
}

func cpuSeq(lo, hi int) []int {
	var cpus []int
	for c := lo; c <= hi; c++ {
		cpus = append(cpus, c)
	}
	return cpus
}

func TestEnergyIntegratesPower(t *testing.T) {
	clock := newTestClock()
	dir, b := newHostWith(t, []Device{{TotalMiB: 1000}, {TotalMiB: 1000}}, WithClock(clock.Now))
	energy := func(b *Backend, gpuIdx int) uint64 {
		t.Helper()
		rs, err := b.Energy([]int{gpuIdx})
		if err != nil {
			t.Fatal(err)
		}
		if rs[0].EnergyMJ == nil || rs[0].PowerW != nil {
			t.Fatalf("Energy read %+v, want the energy alone", rs[0])
		}
		return *rs[0].EnergyMJ
	}

	if e := energy(b, 0); e != 0 {
		t.Fatalf("first energy read = %d mJ, want 0: the counter starts there", e)
	}
	claimSelf(t, dir, 0, os.Getuid(), 10000) // 275 W
	clock.Advance(2 * time.Second)
	if e := energy(b, 0); e != 550_000 {
		t.Fatalf("after 2 s at 275 W: %d mJ, want 550000", e)
	}
	claimSelf(t, dir, 0, os.Getuid(), 0) // idle: 75 W
	clock.Advance(1500 * time.Millisecond)
	if e := energy(b, 0); e != 550_000+112_500 {
		t.Fatalf("after 1.5 s more at 75 W: %d mJ, want 662500", e)
	}

	// Another reader of the same host, as another process would be,
	// continues the same counter.
	other, err := Open(dir, WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	if e := energy(other, 0); e != 662_500+75_000 {
		t.Fatalf("second reader after 1 s at 75 W: %d mJ, want 737500", e)
	}

	// A clock that goes back adds nothing, and the counter does not drop.
	clock.Advance(-time.Hour)
	if e := energy(b, 0); e != 737_500 {
		t.Fatalf("after the clock went back: %d mJ, want 737500", e)
	}
	clock.Advance(time.Hour + 10*time.Microsecond + 999) // 999 ns short of one more microsecond
	if e, wantNJ := energy(b, 0), uint64(737_500_000_000+75_000*10); e != wantNJ/1e6 {
		t.Fatalf("after 10 us: %d mJ, want %d", e, wantNJ/1e6)
	}
	var rec energyRecord
	data, err := os.ReadFile(filepath.Join(dir, energyDir, "0.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.NJ != 737_500_000_000+750_000 || rec.AtUnixNS != clock.Now().UnixNano()-999 {
		t.Fatalf("counter file %+v: want 737500750000 nJ up to %d (the partial microsecond kept for later)", rec, clock.Now().UnixNano()-999)
	}

	// GPU 1 was never read: its counter starts now.
	if e := energy(b, 1); e != 0 {
		t.Fatalf("GPU 1 first energy read = %d mJ, want 0", e)
	}
}

// TestEnergyConcurrentReadersLoseNothing reads one counter from several
// goroutines with a clock that moves 1 ms on every read: only when every
// update sees the one before it is the total 275 W times (reads - 1) ms.
func TestEnergyConcurrentReadersLoseNothing(t *testing.T) {
	clock := newTestClock()
	dir := t.TempDir()
	if err := InitWith(dir, []Device{{TotalMiB: 1000}}); err != nil {
		t.Fatal(err)
	}
	claimSelf(t, dir, 0, os.Getuid(), 10000)
	const readers, reads = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := Open(dir, WithClock(clock.tickEachRead(time.Millisecond)))
			if err != nil {
				errs <- err
				return
			}
			var last uint64
			for range reads {
				rs, err := b.Energy([]int{0})
				if err != nil {
					errs <- err
					return
				}
				if *rs[0].EnergyMJ < last {
					errs <- errors.New("energy counter decreased")
					return
				}
				last = *rs[0].EnergyMJ
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	b, err := Open(dir, WithClock(clock.tickEachRead(time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := b.Energy([]int{0})
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(275 * readers * reads); *rs[0].EnergyMJ != want {
		t.Fatalf("energy after %d reads 1 ms apart at 275 W = %d mJ, want %d", readers*reads+1, *rs[0].EnergyMJ, want)
	}
}

func TestInitWith(t *testing.T) {
	for _, tc := range []struct {
		name    string
		devices []Device
	}{
		{"no devices", nil},
		{"no memory", []Device{{TotalMiB: 0}}},
		{"bad CPU list", []Device{{TotalMiB: 1, CPUs: "0-x"}}},
		{"bad NUMA node", []Device{{TotalMiB: 1, NUMANode: -2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := InitWith(dir, tc.devices); err == nil {
				t.Fatal("InitWith succeeded")
			}
			if _, err := os.Stat(filepath.Join(dir, devicesFile)); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("a refused InitWith left gpus.json: %v", err)
			}
		})
	}

	dir, b := newHostWith(t, []Device{{Index: 7, UUID: "GPU-given", Name: "Fake B200", TotalMiB: 180000, CPUs: "0-3", NUMANode: 1}, {TotalMiB: 5}})
	d0, _ := b.Device(0)
	d1, _ := b.Device(1)
	if d0 != (Device{Index: 0, UUID: "GPU-given", Name: "Fake B200", TotalMiB: 180000, CPUs: "0-3", NUMANode: 1}) {
		t.Errorf("Device(0) = %+v", d0)
	}
	if d1.Index != 1 || d1.Name != DeviceName || d1.TotalMiB != 5 || d1.NUMANode != 0 || len(d1.UUID) < len("GPU-fake-1-") {
		t.Errorf("Device(1) = %+v", d1)
	}
	if err := InitWith(dir, []Device{{TotalMiB: 1}}); !errors.Is(err, fs.ErrExist) {
		t.Errorf("second InitWith = %v, want fs.ErrExist", err)
	}

	// A gpus.json from before CPUs and NUMA nodes: no CPUs, node -1.
	old := t.TempDir()
	doc := `{"schema":1,"devices":[{"index":0,"uuid":"GPU-old","name":"Fake H200","total_mib":143771}]}`
	if err := os.WriteFile(filepath.Join(old, devicesFile), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	ob, err := Open(old)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := ob.Info([]int{0})
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].NUMANode != -1 || rs[0].CPUAffinity != nil || rs[0].UUID != "GPU-old" {
		t.Errorf("old host reading %+v: want NUMA -1, no CPUs", rs[0])
	}
	if d, _ := ob.Device(0); d.NUMANode != -1 {
		t.Errorf("old host Device(0).NUMANode = %d, want -1", d.NUMANode)
	}
	if _, err := ob.Sample([]int{1}); !errors.Is(err, ErrNoDevice) {
		t.Errorf("Sample of GPU 1 of 1 = %v, want ErrNoDevice", err)
	}
}

func TestSnapshotForGates(t *testing.T) {
	dir, b := newHost(t, 2)
	if b.Name() != "fake" {
		t.Errorf("Name() = %q", b.Name())
	}
	claimSelf(t, dir, 1, 4242, 300)
	got, err := b.Snapshot([]int{1, 0})
	if err != nil {
		t.Fatal(err)
	}
	d0, _ := b.Device(0)
	d1, _ := b.Device(1)
	if len(got) != 2 || got[0].Index != 1 || got[0].UUID != d1.UUID || got[0].UsedMiB != 300 ||
		!slices.Equal(got[0].Procs, []gpu.Proc{{PID: os.Getpid(), UID: 4242, UsedMiB: 300}}) ||
		got[1].Index != 0 || got[1].UUID != d0.UUID || got[1].UsedMiB != 0 || len(got[1].Procs) != 0 {
		t.Fatalf("Snapshot = %+v", got)
	}
}

// BenchmarkSample reads the fast fields of 8 fake GPUs, one holding a claim.
func BenchmarkSample(b *testing.B) {
	dir, be := newHost(b, 8)
	if err := Claim(dir, 3, 1000); err != nil {
		b.Fatal(err)
	}
	indices := []int{0, 1, 2, 3, 4, 5, 6, 7}
	for b.Loop() {
		if _, err := be.Sample(indices); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEnergy reads the energy counters of 8 fake GPUs: a locked
// update in place per GPU.
func BenchmarkEnergy(b *testing.B) {
	_, be := newHost(b, 8)
	indices := []int{0, 1, 2, 3, 4, 5, 6, 7}
	for b.Loop() {
		if _, err := be.Energy(indices); err != nil {
			b.Fatal(err)
		}
	}
}

// A throttle set on a fake GPU is in its clock-event reasons, beside the
// ones its load gives, until it is cleared; another GPU is untouched, and
// an unknown GPU is refused.
func TestThrottle(t *testing.T) {
	dir, b := newHostWith(t, []Device{{TotalMiB: 1000, NUMANode: -1}, {TotalMiB: 1000, NUMANode: -1}})
	if err := SetThrottle(dir, 1, gpu.ReasonHwThermalSlowdown|gpu.ReasonHwPowerBrakeSlowdown); err != nil {
		t.Fatal(err)
	}
	rs, err := b.Read([]int{0, 1}, gpu.ClockReasons)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rs[0].ClockEventReasonNames, []string{"gpu_idle"}) ||
		!slices.Equal(rs[1].ClockEventReasonNames, []string{"gpu_idle", "hw_thermal_slowdown", "hw_power_brake_slowdown"}) {
		t.Fatalf("reasons %v and %v", rs[0].ClockEventReasonNames, rs[1].ClockEventReasonNames)
	}
	if err := SetThrottle(dir, 1, 0); err != nil {
		t.Fatal(err)
	}
	if rs, err = b.Read([]int{1}, gpu.ClockReasons); err != nil || *rs[0].ClockEventReasons != gpu.ReasonGpuIdle {
		t.Fatalf("cleared: %v %v", rs, err)
	}
	if err := SetThrottle(dir, 2, gpu.ReasonHwSlowdown); !errors.Is(err, ErrNoDevice) {
		t.Fatalf("an unknown GPU: %v", err)
	}
}
