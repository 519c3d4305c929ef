package sample

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"warden/pkg/gpu"
	"warden/pkg/gpu/fakegpu"
)

var (
	_ Reader       = (*fakegpu.Backend)(nil)
	_ EnergyReader = (*fakegpu.Backend)(nil)
)

// stepClock moves half a second every time it is read, so that each
// sample's start and end (the two reads the sampler makes) are known.
type stepClock struct{ ns atomic.Int64 }

const step = time.Second / 2

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func (c *stepClock) Now() time.Time {
	return epoch.Add(time.Duration(c.ns.Add(int64(step))))
}

func (c *stepClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// scriptReader answers call k from its script. Calls come from the
// sampler's goroutine alone.
type scriptReader struct {
	clock *stepClock
	calls atomic.Int32
	steps []scriptStep
}

type scriptStep struct {
	extra  time.Duration // the read takes this much longer than a step
	powers map[int]float64
	err    error
}

func (r *scriptReader) Sample(indices []int) ([]gpu.Reading, error) {
	k := int(r.calls.Add(1)) - 1
	if k >= len(r.steps) {
		return nil, errors.New("script ran out")
	}
	s := r.steps[k]
	r.clock.Advance(s.extra)
	if s.err != nil {
		return nil, s.err
	}
	var rs []gpu.Reading
	for _, i := range indices {
		rs = append(rs, gpu.Reading{Index: i, UUID: "GPU-script", NUMANode: -1, PowerW: pw(s.powers[i])})
	}
	return rs, nil
}

func monoNow(t *testing.T) int64 {
	t.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return ts.Nano()
}

func TestSamplerSummaryAndFile(t *testing.T) {
	clock := &stepClock{}
	reader := &scriptReader{clock: clock, steps: []scriptStep{
		{0, map[int]float64{0: 100, 1: 300}, nil},
		{3 * step, map[int]float64{0: 200, 1: 300}, nil}, // takes 2 s: missed
		{0, nil, errors.New("GPU lost")},
		{0, map[int]float64{0: 200, 1: 300}, nil},
		{0, map[int]float64{0: 100, 1: 300}, nil}, // the last sample, at Stop
	}}
	ticks := make(chan time.Time)
	path := filepath.Join(t.TempDir(), "gpu.jsonl")
	s, err := New(Config{Reader: reader, GPUs: []int{0, 1}, Interval: time.Second, Path: path, Now: clock.Now, ticks: ticks})
	if err != nil {
		t.Fatal(err)
	}
	before := monoNow(t)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		ticks <- time.Time{}
	}
	sum, err := s.Stop()
	after := monoNow(t)
	if err != nil {
		t.Fatal(err)
	}

	// Sample starts, from the first: 0, 1, 3.5, 4.5 and 5.5 s; reads took
	// 0.5, 2, 0.5, 0.5 and 0.5 s.
	if sum.Samples != 5 || sum.Failed != 1 || sum.Missed != 1 {
		t.Errorf("samples %d, failed %d, missed %d; want 5, 1, 1", sum.Samples, sum.Failed, sum.Missed)
	}
	if sum.ReadTime != 4*time.Second || sum.MeanReadTime != 800*time.Millisecond || sum.MaxReadTime != 2*time.Second {
		t.Errorf("read time %s, mean %s, max %s; want 4s, 800ms, 2s", sum.ReadTime, sum.MeanReadTime, sum.MaxReadTime)
	}
	if !sum.First.Equal(epoch.Add(step)) || sum.Last.Sub(sum.First) != 5500*time.Millisecond {
		t.Errorf("first %s, last %s; want %s and 5.5 s later", sum.First, sum.Last, epoch.Add(step))
	}
	// GPU 0: 100 W at 0 s, 200 W at 1 s and 4.5 s, 100 W at 5.5 s:
	// 150 + 700 + 150 J. GPU 1: 300 W for 5.5 s.
	want := []GPUSummary{
		{Index: 0, PowerSamples: 4, MeanPowerW: 150, MaxPowerW: 200, EnergyJ: 1000},
		{Index: 1, PowerSamples: 4, MeanPowerW: 300, MaxPowerW: 300, EnergyJ: 1650},
	}
	for k, g := range sum.GPUs {
		w := want[k]
		if g.Index != w.Index || g.PowerSamples != w.PowerSamples || !near(g.MeanPowerW, w.MeanPowerW) ||
			g.MaxPowerW != w.MaxPowerW || !near(g.EnergyJ, w.EnergyJ) || g.CounterEnergyJ != nil {
			t.Errorf("GPU summary %+v, want %+v", g, w)
		}
	}

	recs, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 5 {
		t.Fatalf("file holds %d records, want 5", len(recs))
	}
	offsets := []time.Duration{0, time.Second, 3500 * time.Millisecond, 4500 * time.Millisecond, 5500 * time.Millisecond}
	took := []time.Duration{step, 2 * time.Second, step, step, step}
	for k, rec := range recs {
		if rec.Kind != KindSample || time.Duration(rec.MonoNS-recs[0].MonoNS) != offsets[k] ||
			time.Duration(rec.TookNS) != took[k] || !rec.Time.Equal(epoch.Add(step+offsets[k])) {
			t.Errorf("record %d: kind %q, at +%s, took %s, time %s; want at +%s, took %s",
				k, rec.Kind, time.Duration(rec.MonoNS-recs[0].MonoNS), time.Duration(rec.TookNS), rec.Time, offsets[k], took[k])
		}
	}
	if recs[2].Error != "GPU lost" || recs[2].GPUs != nil || len(recs[1].GPUs) != 2 || *recs[1].GPUs[0].PowerW != 200 {
		t.Errorf("records 1 and 2: %+v, %+v", recs[1], recs[2])
	}
	if recs[0].MonoNS < before || recs[0].MonoNS > after {
		t.Errorf("first mono_ns %d outside [%d, %d]: not on CLOCK_MONOTONIC", recs[0].MonoNS, before, after)
	}
	// The file integrates to what the summary says.
	e0, err := TrapezoidJ(Series(recs)[0])
	if err != nil || !near(e0, 1000) {
		t.Errorf("energy of GPU 0 from the file = %v, %v; want 1000 J", e0, err)
	}
}

// energyScript adds energy counters to a scriptReader.
type energyScript struct {
	*scriptReader
	counters []uint64 // answered in turn, for every GPU
	calls    int
}

func (r *energyScript) Energy(indices []int) ([]gpu.Reading, error) {
	mj := r.counters[r.calls]
	r.calls++
	var rs []gpu.Reading
	for _, i := range indices {
		v := mj + uint64(i)
		rs = append(rs, gpu.Reading{Index: i, UUID: "GPU-script", NUMANode: -1, EnergyMJ: &v})
	}
	return rs, nil
}

func TestSamplerReadsEnergyCounters(t *testing.T) {
	clock := &stepClock{}
	reader := &energyScript{
		scriptReader: &scriptReader{clock: clock, steps: []scriptStep{
			{0, map[int]float64{3: 400}, nil},
			{0, map[int]float64{3: 400}, nil},
		}},
		counters: []uint64{1_000_000, 1_450_500},
	}
	path := filepath.Join(t.TempDir(), "gpu.jsonl")
	s, err := New(Config{Reader: reader, GPUs: []int{3}, Interval: time.Hour, Path: path, Now: clock.Now, ticks: make(chan time.Time)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	sum, err := s.Stop()
	if err != nil {
		t.Fatal(err)
	}
	g := sum.GPUs[0]
	if g.CounterEnergyJ == nil || *g.CounterEnergyJ != 450.5 {
		t.Fatalf("counter energy = %v, want 450.5 J", g.CounterEnergyJ)
	}
	// Energy read at 0, samples at 1 s and 2 s, energy at 3 s (each read
	// of the clock moves it half a second).
	if g.EnergyJ != 400 || sum.Samples != 2 {
		t.Fatalf("sampled energy %v J over %d samples, want 400 J over 2", g.EnergyJ, sum.Samples)
	}
	recs, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	kinds := []string{}
	for _, r := range recs {
		kinds = append(kinds, r.Kind)
	}
	if len(recs) != 4 || recs[0].Kind != KindEnergy || recs[3].Kind != KindEnergy || *recs[3].GPUs[0].EnergyMJ != 1_450_503 {
		t.Fatalf("record kinds %q, want energy, sample, sample, energy", kinds)
	}
}

// TestSamplerOnFakeGPUs samples the file-backed fake in real time and
// checks what does not depend on timing.
func TestSamplerOnFakeGPUs(t *testing.T) {
	dir := t.TempDir()
	if err := fakegpu.Init(dir, 2, 143771); err != nil {
		t.Fatal(err)
	}
	if err := fakegpu.Claim(dir, 0, 10000); err != nil { // 275 W while this process lives
		t.Fatal(err)
	}
	b, err := fakegpu.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "gpu.jsonl")
	s, err := New(Config{Reader: b, GPUs: []int{0, 1}, Interval: time.Millisecond, Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Let it take a few samples; the count is checked, not the time.
	deadline := time.Now().Add(30 * time.Second)
	for {
		recs, err := ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) >= 5 || time.Now().After(deadline) {
			break
		}
		<-time.After(time.Millisecond)
	}
	sum, err := s.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if sum.Samples < 4 || sum.Failed != 0 {
		t.Fatalf("samples %d, failed %d; want at least 4, none failed", sum.Samples, sum.Failed)
	}
	g0, g1 := sum.GPUs[0], sum.GPUs[1]
	if g0.MeanPowerW != 275 || g0.MaxPowerW != 275 || g1.MeanPowerW != fakegpu.IdlePowerW || g0.PowerSamples != sum.Samples {
		t.Fatalf("GPU summaries %+v, %+v; want 275 W and 75 W throughout", g0, g1)
	}
	span := sum.Last.Sub(sum.First).Seconds()
	if !near(g0.EnergyJ, 275*span) {
		t.Errorf("GPU 0 sampled energy %v J, want 275 W x %v s", g0.EnergyJ, span)
	}
	// The counters bracket the samples, so they count at least as much
	// (less at most a microsecond's rounding per read).
	if g0.CounterEnergyJ == nil || *g0.CounterEnergyJ < g0.EnergyJ-0.001 || g1.CounterEnergyJ == nil || *g1.CounterEnergyJ < g1.EnergyJ-0.001 {
		t.Fatalf("counter energy %v, %v J below the sampled %v, %v J", g0.CounterEnergyJ, g1.CounterEnergyJ, g0.EnergyJ, g1.EnergyJ)
	}
}

func TestSamplerAppends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpu.jsonl")
	for run := range 2 {
		clock := &stepClock{}
		reader := &scriptReader{clock: clock, steps: []scriptStep{
			{0, map[int]float64{0: float64(100 * (run + 1))}, nil},
			{0, map[int]float64{0: float64(100 * (run + 1))}, nil},
		}}
		s, err := New(Config{Reader: reader, GPUs: []int{0}, Interval: time.Hour, Path: path, Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var powers []float64
	for _, r := range recs {
		powers = append(powers, *r.GPUs[0].PowerW)
	}
	if len(powers) != 4 || powers[0] != 100 || powers[1] != 100 || powers[2] != 200 || powers[3] != 200 {
		t.Fatalf("powers in the file %v, want the first run's two lines then the second's", powers)
	}
}

func TestSamplerEndsWithItsContext(t *testing.T) {
	clock := &stepClock{}
	reader := &scriptReader{clock: clock, steps: []scriptStep{{0, map[int]float64{0: 1}, nil}, {0, map[int]float64{0: 1}, nil}}}
	s, err := New(Config{Reader: reader, GPUs: []int{0}, Interval: time.Hour, Path: filepath.Join(t.TempDir(), "s"), Now: clock.Now, ticks: make(chan time.Time)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	sum, err := s.Stop()
	if err != nil || sum.Samples != 2 {
		t.Fatalf("Stop after the context ended = %d samples, %v; want 2 (first and last)", sum.Samples, err)
	}
}

func TestSamplerStates(t *testing.T) {
	reader := &scriptReader{clock: &stepClock{}}
	for _, cfg := range []Config{
		{GPUs: []int{0}, Interval: time.Second, Path: "x"},
		{Reader: reader, Interval: time.Second, Path: "x"},
		{Reader: reader, GPUs: []int{0}, Path: "x"},
		{Reader: reader, GPUs: []int{0}, Interval: time.Second},
		{Reader: reader, GPUs: []int{0, 0}, Interval: time.Second, Path: "x"},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}

	s, err := New(Config{Reader: reader, GPUs: []int{0}, Interval: time.Hour, Path: filepath.Join(t.TempDir(), "s")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stop(); !errors.Is(err, ErrState) {
		t.Errorf("Stop before Start = %v, want ErrState", err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); !errors.Is(err, ErrState) {
		t.Errorf("second Start = %v, want ErrState", err)
	}
	if _, err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stop(); !errors.Is(err, ErrState) {
		t.Errorf("second Stop = %v, want ErrState", err)
	}

	missing, err := New(Config{Reader: reader, GPUs: []int{0}, Interval: time.Hour, Path: filepath.Join(t.TempDir(), "no", "such", "dir")})
	if err != nil {
		t.Fatal(err)
	}
	if err := missing.Start(context.Background()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Start into a missing directory = %v, want ErrNotExist", err)
	}
}

func TestSamplerReportsWriteFailure(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	clock := &stepClock{}
	reader := &scriptReader{clock: clock, steps: []scriptStep{{0, map[int]float64{0: 1}, nil}, {0, map[int]float64{0: 1}, nil}}}
	s, err := New(Config{Reader: reader, GPUs: []int{0}, Interval: time.Hour, Path: "/dev/full", Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	sum, err := s.Stop()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Stop after writing to a full device = %v, want ENOSPC", err)
	}
	if sum.Samples != 2 {
		t.Fatalf("samples %d, want 2: sampling goes on when writing fails", sum.Samples)
	}
}

// BenchmarkTake is the sampler's own cost per sample of 8 GPUs, with a
// reader that costs nothing: encoding and writing one line.
func BenchmarkTake(b *testing.B) {
	readings := make([]gpu.Reading, 8)
	for i := range readings {
		mib, mhz, c := 70000, 1980, 55
		mask := gpu.ReasonSwPowerCap
		readings[i] = gpu.Reading{Index: i, UUID: "GPU-0b4ba5e0-7c2c-6e5e-8b8a-1d5c6b5b7f1" + string(rune('0'+i)), NUMANode: -1,
			MemoryUsedMiB: &mib, MemoryTotalMiB: &mib, SMClockMHz: &mhz, MemClockMHz: &mhz, ClockEventReasons: &mask,
			ClockEventReasonNames: gpu.ReasonNames(mask), PowerW: pw(612.5), PowerLimitW: pw(700), TemperatureC: &c}
	}
	s, err := New(Config{Reader: constReader(readings), GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}, Interval: time.Hour, Path: filepath.Join(b.TempDir(), "s")})
	if err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(s.cfg.Path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	s.file = f
	s.w = newWriter(f)
	for b.Loop() {
		s.take()
	}
	if s.writeErr != nil {
		b.Fatal(s.writeErr)
	}
}

type constReader []gpu.Reading

func (r constReader) Sample([]int) ([]gpu.Reading, error) { return r, nil }

// TestSamplerRecordsProcesses: every sample of fake GPUs records the
// processes on them (pid, uid, MiB), in the file and to Watch; a claim
// that appears between two samples (another user's, written as its
// file) is in the second and not the first.
func TestSamplerRecordsProcesses(t *testing.T) {
	dir := t.TempDir()
	if err := fakegpu.Init(dir, 1, 143771); err != nil {
		t.Fatal(err)
	}
	b, err := fakegpu.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ticks := make(chan time.Time)
	seen := make(chan Record, 4)
	path := filepath.Join(t.TempDir(), "gpu.jsonl")
	s, err := New(Config{Reader: b, GPUs: []int{0}, Interval: time.Hour, Path: path, ticks: ticks, Watch: func(r Record) { seen <- r }})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	first := <-seen
	start, err := fakegpu.StartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if err := fakegpu.ClaimFor(dir, 0, os.Getpid(), start, 4242, 5000); err != nil {
		t.Fatal(err)
	}
	ticks <- time.Time{}
	second := <-seen
	if _, err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if len(first.GPUs) != 1 || first.GPUs[0].Procs == nil || len(first.GPUs[0].Procs) != 0 {
		t.Fatalf("first sample: %+v", first.GPUs)
	}
	want := gpu.Proc{PID: os.Getpid(), UID: 4242, UsedMiB: 5000}
	if len(second.GPUs) != 1 || len(second.GPUs[0].Procs) != 1 || second.GPUs[0].Procs[0] != want {
		t.Fatalf("second sample: %+v, want %+v", second.GPUs, want)
	}
	recs, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var inFile int
	for _, r := range recs {
		if r.Kind == KindSample && len(r.GPUs) == 1 && len(r.GPUs[0].Procs) == 1 && r.GPUs[0].Procs[0] == want {
			inFile++
		}
	}
	if inFile < 2 { // the second sample and the last one, at Stop
		t.Fatalf("%d records in the file hold the process, want 2: %+v", inFile, recs)
	}
}
