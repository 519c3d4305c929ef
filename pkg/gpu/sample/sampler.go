package sample

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"warden/pkg/gpu"
)

// Reader reads what a sample reads of GPUs (gpu.Sampled: the fast fields
// and the processes). nvmlgpu.Backend and fakegpu.Backend satisfy it.
type Reader interface {
	Sample(indices []int) ([]gpu.Reading, error)
}

// EnergyReader reads the energy counters of GPUs. A Reader that is also an
// EnergyReader has its counters read at the start and the end of sampling.
type EnergyReader interface {
	Energy(indices []int) ([]gpu.Reading, error)
}

// Record kinds.
const (
	// KindSample is a periodic read of the fast fields.
	KindSample = ""
	// KindEnergy is a read of the energy counters.
	KindEnergy = "energy"
)

// Record is one line of a samples file.
type Record struct {
	// Kind is KindSample or KindEnergy.
	Kind string `json:"kind,omitempty"`
	// Time is when the read began.
	Time time.Time `json:"time"`
	// MonoNS is Time on this host's CLOCK_MONOTONIC, in nanoseconds.
	MonoNS int64 `json:"mono_ns"`
	// TookNS is how long the read took.
	TookNS int64         `json:"took_ns"`
	GPUs   []gpu.Reading `json:"gpus,omitempty"`
	// Error is the read's error; GPUs is empty then.
	Error string `json:"error,omitempty"`
}

// Config says what to sample, how often, and where to write.
type Config struct {
	// Reader reads the GPUs. Required.
	Reader Reader
	// GPUs are the indices of the GPUs to read. Required.
	GPUs []int
	// Interval is the time between the starts of two samples. Required.
	Interval time.Duration
	// Path is the file the records are appended to; it is created if
	// missing. Required.
	Path string
	// Now reads the clock; nil is time.Now.
	Now func() time.Time
	// Watch, when set, is called in the sampling goroutine with every
	// periodic sample whose read succeeded (its GPUs hold the processes
	// read), after the record is written. It must return promptly: the
	// next sample waits for it. The runner watches it for processes that
	// are not the attempt's.
	Watch func(Record)

	// ticks replaces the ticker in tests.
	ticks <-chan time.Time
}

// GPUSummary is what the samples of one GPU add up to.
type GPUSummary struct {
	Index int
	// PowerSamples counts the samples that had the GPU's power.
	PowerSamples int
	MeanPowerW   float64
	MaxPowerW    float64
	// EnergyJ is the trapezoidal integral of the sampled power, from the
	// first sample to the last.
	EnergyJ float64
	// CounterEnergyJ is the difference of the energy counter between the
	// start and the end, nil when it was not read.
	CounterEnergyJ *float64
}

// Summary is the account of one sampling, returned by Stop.
type Summary struct {
	// Samples counts the samples taken, failed ones included.
	Samples int
	// Failed counts the samples whose read returned an error.
	Failed int
	// Missed counts the samples whose read took longer than the interval.
	Missed int
	// ReadTime is the wall time spent in the Reader's Sample calls: the
	// sampler's own cost. MeanReadTime and MaxReadTime are per sample.
	ReadTime     time.Duration
	MeanReadTime time.Duration
	MaxReadTime  time.Duration
	// First and Last are the times of the first and the last sample.
	First, Last time.Time
	// GPUs follows Config.GPUs.
	GPUs []GPUSummary
}

// ErrState is returned by Start on a sampler already started, and by Stop
// on one not running.
var ErrState = errors.New("sampler not in the state the call needs")

// Sampler samples GPUs into a file. Make one with New, run it with Start,
// end it with Stop.
type Sampler struct {
	cfg Config

	mu sync.Mutex // guards state transitions: cancel, started, stopped
	// cancel ends the loop; nil before Start.
	cancel  context.CancelFunc
	stopped bool
	wg      sync.WaitGroup

	// Owned by the loop goroutine while it runs; read by Stop after wg.Wait.
	file     *os.File
	w        *bufio.Writer
	writeErr error
	base     time.Time // first clock read
	monoBase int64     // CLOCK_MONOTONIC at base
	sum      Summary
	accs     []powerAcc
	pos      map[int]int // GPU index -> position in cfg.GPUs
	energy0  []gpu.Reading
	energy1  []gpu.Reading
}

// powerAcc accumulates one GPU's power samples.
type powerAcc struct {
	n        int
	sum, max float64
	energyJ  float64
	last     Point
}

// New checks the configuration and returns a sampler ready to Start.
func New(cfg Config) (*Sampler, error) {
	switch {
	case cfg.Reader == nil:
		return nil, errors.New("new sampler: no reader")
	case len(cfg.GPUs) == 0:
		return nil, errors.New("new sampler: no GPUs")
	case cfg.Interval <= 0:
		return nil, fmt.Errorf("new sampler: interval %s, want > 0", cfg.Interval)
	case cfg.Path == "":
		return nil, errors.New("new sampler: no output path")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Sampler{cfg: cfg, pos: map[int]int{}, accs: make([]powerAcc, len(cfg.GPUs))}
	for k, i := range cfg.GPUs {
		if _, dup := s.pos[i]; dup {
			return nil, fmt.Errorf("new sampler: GPU %d named twice", i)
		}
		s.pos[i] = k
	}
	return s, nil
}

// Start opens the output file for appending and starts sampling in a
// goroutine of its own, which ends on Stop or when ctx is done; either way
// call Stop to close the file and get the summary.
func (s *Sampler) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		return fmt.Errorf("start sampler %s: already started: %w", s.cfg.Path, ErrState)
	}
	f, err := os.OpenFile(s.cfg.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("start sampler: %w", err)
	}
	s.file = f
	s.w = newWriter(f)
	var ticker *time.Ticker
	ticks := s.cfg.ticks
	if ticks == nil {
		ticker = time.NewTicker(s.cfg.Interval)
		ticks = ticker.C
	}
	ctx, s.cancel = context.WithCancel(ctx)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if ticker != nil {
			defer ticker.Stop()
		}
		s.run(ctx, ticks)
	}()
	return nil
}

// Stop ends sampling (after one last sample), waits for the goroutine,
// fsyncs and closes the file and returns the summary. The error is the
// first failure to write the file, or ErrState when the sampler was not
// started or is already stopped.
func (s *Sampler) Stop() (Summary, error) { return s.stop(true) }

// StopUnsynced is Stop without the file's fsync, for a caller that makes
// the file durable itself next (with the attempt's other evidence).
func (s *Sampler) StopUnsynced() (Summary, error) { return s.stop(false) }

func (s *Sampler) stop(sync bool) (Summary, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel == nil || s.stopped {
		return Summary{}, fmt.Errorf("stop sampler %s: %w", s.cfg.Path, ErrState)
	}
	s.stopped = true
	s.cancel()
	s.wg.Wait()

	err := s.writeErr
	if ferr := s.w.Flush(); err == nil && ferr != nil {
		err = fmt.Errorf("flush samples %s: %w", s.cfg.Path, ferr)
	}
	if sync {
		if serr := s.file.Sync(); err == nil && serr != nil {
			err = fmt.Errorf("sync samples %s: %w", s.cfg.Path, serr)
		}
	}
	if cerr := s.file.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close samples %s: %w", s.cfg.Path, cerr)
	}
	return s.summary(), err
}

// newWriter buffers the file; each record is flushed whole.
func newWriter(f *os.File) *bufio.Writer { return bufio.NewWriterSize(f, 64<<10) }

// run is the sampling goroutine.
func (s *Sampler) run(ctx context.Context, ticks <-chan time.Time) {
	er, hasEnergy := s.cfg.Reader.(EnergyReader)
	if hasEnergy {
		s.energy0 = s.readEnergy(er)
	}
	s.take()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-ticks:
		}
		s.take()
	}
	if hasEnergy {
		s.energy1 = s.readEnergy(er)
	}
}

// now reads the clock and places the time on CLOCK_MONOTONIC.
func (s *Sampler) now() (time.Time, int64) {
	t := s.cfg.Now()
	if s.base.IsZero() {
		s.base = t
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err == nil {
			s.monoBase = ts.Nano()
		}
	}
	return t, s.monoBase + int64(t.Sub(s.base))
}

// take reads one sample, writes it and adds it to the summary.
func (s *Sampler) take() {
	start, mono := s.now()
	rs, err := s.cfg.Reader.Sample(s.cfg.GPUs)
	end, _ := s.now()
	took := end.Sub(start)

	rec := Record{Time: start, MonoNS: mono, TookNS: int64(took), GPUs: rs}
	sum := &s.sum
	if sum.Samples == 0 {
		sum.First = start
	}
	sum.Last = start
	sum.Samples++
	sum.ReadTime += took
	sum.MaxReadTime = max(sum.MaxReadTime, took)
	if took > s.cfg.Interval {
		sum.Missed++
	}
	if err != nil {
		sum.Failed++
		rec.GPUs, rec.Error = nil, err.Error()
	} else {
		for _, r := range rs {
			k, ok := s.pos[r.Index]
			if !ok || r.PowerW == nil {
				continue
			}
			s.accs[k].add(Point{MonoNS: mono, PowerW: *r.PowerW})
		}
	}
	s.write(rec)
	if err == nil && s.cfg.Watch != nil {
		s.cfg.Watch(rec)
	}
}

// readEnergy reads the energy counters and writes them as a record.
func (s *Sampler) readEnergy(er EnergyReader) []gpu.Reading {
	start, mono := s.now()
	rs, err := er.Energy(s.cfg.GPUs)
	end, _ := s.now()
	rec := Record{Kind: KindEnergy, Time: start, MonoNS: mono, TookNS: int64(end.Sub(start)), GPUs: rs}
	if err != nil {
		rec.GPUs, rec.Error = nil, err.Error()
	}
	s.write(rec)
	return rec.GPUs
}

// write appends one record and flushes it. After the first failure it
// writes nothing more; Stop returns that failure.
func (s *Sampler) write(rec Record) {
	if s.writeErr != nil {
		return
	}
	line, err := json.Marshal(rec)
	if err != nil {
		s.writeErr = fmt.Errorf("encode sample: %w", err)
		return
	}
	line = append(line, '\n')
	if _, err := s.w.Write(line); err != nil {
		s.writeErr = fmt.Errorf("write samples %s: %w", s.cfg.Path, err)
		return
	}
	if err := s.w.Flush(); err != nil {
		s.writeErr = fmt.Errorf("write samples %s: %w", s.cfg.Path, err)
	}
}

func (a *powerAcc) add(p Point) {
	if a.n > 0 {
		a.energyJ += trapezoid(a.last, p)
	}
	a.n++
	a.sum += p.PowerW
	if a.n == 1 || p.PowerW > a.max {
		a.max = p.PowerW
	}
	a.last = p
}

// summary completes the counts. It runs after the loop has ended.
func (s *Sampler) summary() Summary {
	sum := s.sum
	if sum.Samples > 0 {
		sum.MeanReadTime = sum.ReadTime / time.Duration(sum.Samples)
	}
	sum.GPUs = make([]GPUSummary, len(s.cfg.GPUs))
	for k, i := range s.cfg.GPUs {
		a := s.accs[k]
		g := GPUSummary{Index: i, PowerSamples: a.n, MaxPowerW: a.max, EnergyJ: a.energyJ}
		if a.n > 0 {
			g.MeanPowerW = a.sum / float64(a.n)
		}
		e0, ok0 := energyOf(s.energy0, i)
		e1, ok1 := energyOf(s.energy1, i)
		if ok0 && ok1 {
			j := (float64(e1) - float64(e0)) / 1000
			g.CounterEnergyJ = &j
		}
		sum.GPUs[k] = g
	}
	return sum
}

func energyOf(rs []gpu.Reading, index int) (uint64, bool) {
	for _, r := range rs {
		if r.Index == index && r.EnergyMJ != nil {
			return *r.EnergyMJ, true
		}
	}
	return 0, false
}
