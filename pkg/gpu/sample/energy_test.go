package sample

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"warden/pkg/gpu"
)

const sec = int64(time.Second)

// near compares joules computed from exact binary fractions; the tolerance
// only forgives the last bit.
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// ramp is 100 W at 0 s, 200 W at 1 s and 2 s, 100 W at 3 s: 500 J.
var ramp = []Point{{0, 100}, {1 * sec, 200}, {2 * sec, 200}, {3 * sec, 100}}

func TestTrapezoidJ(t *testing.T) {
	for _, tc := range []struct {
		name   string
		points []Point
		want   float64
	}{
		{"none", nil, 0},
		{"one", []Point{{5, 300}}, 0},
		{"ramp", ramp, 500},
		{"uneven steps", []Point{{0, 100}, {sec / 4, 100}, {2 * sec, 300}}, 25 + 350},
		{"two at one moment", []Point{{0, 100}, {sec, 100}, {sec, 500}, {2 * sec, 500}}, 100 + 500},
	} {
		got, err := TrapezoidJ(tc.points)
		if err != nil || !near(got, tc.want) {
			t.Errorf("%s: TrapezoidJ = %v, %v; want %v J", tc.name, got, err, tc.want)
		}
	}
	if _, err := TrapezoidJ([]Point{{sec, 1}, {0, 1}}); !errors.Is(err, ErrUnordered) {
		t.Errorf("TrapezoidJ of points going back = %v, want ErrUnordered", err)
	}
}

func TestIntegrateJ(t *testing.T) {
	for _, tc := range []struct {
		name   string
		idle   float64
		t0, t1 int64
		want   float64
	}{
		// P(0.5 s) = P(2.5 s) = 150 W: 87.5 + 200 + 87.5 J, less 50 W for 2 s.
		{"inside, interpolated ends", 50, sec / 2, 5 * sec / 2, 375 - 100},
		{"on samples", 0, sec, 2 * sec, 200},
		{"whole span", 100, 0, 3 * sec, 500 - 300},
		{"below idle counts negative", 250, sec, 2 * sec, 200 - 250},
		{"empty interval", 10, sec / 4, sec / 4, 0},
		{"between two samples", 0, sec / 4, 3 * sec / 4, (125 + 175) / 2 * 0.5},
	} {
		got, err := IntegrateJ(ramp, tc.idle, tc.t0, tc.t1)
		if err != nil || !near(got, tc.want) {
			t.Errorf("%s: IntegrateJ = %v, %v; want %v J", tc.name, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name   string
		points []Point
		t0, t1 int64
		want   error
	}{
		{"starts before the samples", ramp, -1, sec, ErrNotCovered},
		{"ends after the samples", ramp, 0, 3*sec + 1, ErrNotCovered},
		{"no samples", nil, 0, 0, ErrNotCovered},
		{"unordered", []Point{{0, 1}, {2 * sec, 1}, {sec, 1}}, 0, sec, ErrUnordered},
	} {
		if _, err := IntegrateJ(tc.points, 0, tc.t0, tc.t1); !errors.Is(err, tc.want) {
			t.Errorf("%s: IntegrateJ error %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := IntegrateJ(ramp, 0, 2*sec, sec); err == nil {
		t.Error("IntegrateJ over an interval that ends before it starts succeeded")
	}
}

func pw(w float64) *float64 { return &w }

// rampRecords holds GPU 0 on the ramp and GPU 1 at a constant 300 W, with
// a failed sample and energy records in between that must not count.
func rampRecords() []Record {
	var recs []Record
	for k, p := range ramp {
		recs = append(recs, Record{MonoNS: p.MonoNS, GPUs: []gpu.Reading{
			{Index: 0, PowerW: pw(p.PowerW)},
			{Index: 1, PowerW: pw(300)},
		}})
		if k == 1 {
			recs = append(recs,
				Record{MonoNS: p.MonoNS + sec/2, Error: "nvml: no answer within the deadline"},
				Record{Kind: KindEnergy, MonoNS: p.MonoNS + sec/2, GPUs: []gpu.Reading{{Index: 0, PowerW: pw(9999)}}},
			)
		}
	}
	return recs
}

func TestEnergyPerRequest(t *testing.T) {
	recs := rampRecords()
	idle := map[int]float64{0: 50, 1: 100}
	// GPU 0: 275 J as in TestIntegrateJ; GPU 1: (300 - 100) W for 2 s.
	got, err := EnergyPerRequest(recs, idle, sec/2, 5*sec/2, 3)
	if err != nil || !near(got, (275.0+400)/3) {
		t.Fatalf("EnergyPerRequest = %v, %v; want 225 J", got, err)
	}
	only1, err := EnergyPerRequest(recs, map[int]float64{1: 100}, sec/2, 5*sec/2, 4)
	if err != nil || !near(only1, 100) {
		t.Fatalf("EnergyPerRequest of GPU 1 alone = %v, %v; want 400 J / 4", only1, err)
	}
	if got, err := EnergyPerRequest(recs, idle, sec/2, 5*sec/2, 0); err != nil || !math.IsNaN(got) {
		t.Fatalf("EnergyPerRequest with no success = %v, %v; want NaN (N/A) and no error", got, err)
	}
	if _, err := EnergyPerRequest(recs, map[int]float64{0: 50, 2: 50}, sec/2, 5*sec/2, 3); !errors.Is(err, ErrNotCovered) {
		t.Fatalf("EnergyPerRequest naming an unsampled GPU = %v, want ErrNotCovered", err)
	}
	if _, err := EnergyPerRequest(recs, idle, sec/2, 5*sec/2, -1); err == nil {
		t.Fatal("EnergyPerRequest with -1 successes succeeded")
	}
	if _, err := EnergyPerRequest(recs, nil, sec/2, 5*sec/2, 1); err == nil {
		t.Fatal("EnergyPerRequest with no GPUs succeeded")
	}
	series := Series(recs)
	if len(series[0]) != 4 || len(series[1]) != 4 {
		t.Fatalf("Series = %v: want the 4 good samples per GPU, not the failed or energy records", series)
	}
}

func TestReadRecords(t *testing.T) {
	good := `{"time":"2025-01-01T00:00:00Z","mono_ns":5,"took_ns":1,"gpus":[{"index":0,"uuid":"GPU-a","numa_node":-1,"power_w":100}]}` + "\n" +
		`{"kind":"energy","time":"2025-01-01T00:00:01Z","mono_ns":6,"took_ns":1,"gpus":[{"index":0,"uuid":"GPU-a","numa_node":-1,"energy_mj":7}]}` + "\n"
	recs, err := ReadRecords(strings.NewReader(good + `{"time":"2025-01-01T00:00:02Z","mono_ns":7,"gp`))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].MonoNS != 5 || *recs[0].GPUs[0].PowerW != 100 || recs[1].Kind != KindEnergy || *recs[1].GPUs[0].EnergyMJ != 7 {
		t.Fatalf("ReadRecords = %+v: want the two whole lines, the cut one skipped", recs)
	}
	if _, err := ReadRecords(strings.NewReader("{bad\n" + good)); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("ReadRecords of a bad first line = %v, want an error naming line 1", err)
	}
}

// seqReader answers each Sample with the next of its powers, per GPU.
type seqReader struct {
	powers [][]float64 // [read][gpu]
	n      int
}

func (s *seqReader) Sample(indices []int) ([]gpu.Reading, error) {
	if s.n >= len(s.powers) {
		return nil, errors.New("no more readings")
	}
	p := s.powers[s.n]
	s.n++
	var out []gpu.Reading
	for i, g := range indices {
		w := p[i]
		out = append(out, gpu.Reading{Index: g, PowerW: &w})
	}
	return out, nil
}

// The idle power is read over the settle period, its lowest reading kept:
// a card cooling from the run before draws less at the end; without a
// period the readings given are the answer. The waits are the test's.
func TestIdlePowerSettles(t *testing.T) {
	w := func(v float64) *float64 { return &v }
	first := []gpu.Reading{{Index: 0, PowerW: w(127)}, {Index: 3, PowerW: w(90)}}
	var waited []time.Duration
	wait := func(_ context.Context, d time.Duration) error { waited = append(waited, d); return nil }
	r := &seqReader{powers: [][]float64{{118, 91}, {101, 89.5}, {96, 90}}}
	got := IdlePower(context.Background(), Settle{Reader: r, GPUs: []int{0, 3}, For: 2500 * time.Millisecond, Wait: wait}, first)
	if got[0] != 96 || got[3] != 89.5 || len(got) != 2 {
		t.Fatalf("idle %v", got)
	}
	if fmt.Sprint(waited) != "[1s 1s 500ms]" {
		t.Fatalf("waits %v", waited)
	}
	if got := IdlePower(context.Background(), Settle{Reader: r, GPUs: []int{0, 3}}, first); got[0] != 127 || got[3] != 90 {
		t.Fatalf("without a period: %v", got)
	}
	// a stop ends the settle with what was read
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := IdlePower(ctx, Settle{Reader: r, GPUs: []int{0, 3}, For: time.Hour}, first); got[0] != 127 {
		t.Fatalf("stopped: %v", got)
	}
}
