package sample

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"warden/pkg/safefile"
)

// Point is one GPU's power at one moment.
type Point struct {
	// MonoNS is the moment on CLOCK_MONOTONIC, in nanoseconds.
	MonoNS int64
	PowerW float64
}

// ErrNotCovered is returned when a GPU's samples do not span the interval
// to integrate over: none before its start or none after its end.
var ErrNotCovered = errors.New("samples do not cover the interval")

// ErrUnordered is returned when a GPU's points go back in time.
var ErrUnordered = errors.New("samples out of time order")

// trapezoid is the energy in joules between two points, power varying
// linearly from one to the other.
func trapezoid(a, b Point) float64 {
	return (a.PowerW + b.PowerW) / 2 * float64(b.MonoNS-a.MonoNS) / 1e9
}

// TrapezoidJ integrates power over the points, in time order, by the
// trapezoidal rule, in joules. Fewer than two points give 0.
func TrapezoidJ(points []Point) (float64, error) {
	if err := checkOrder(points); err != nil {
		return 0, err
	}
	var e float64
	for k := 1; k < len(points); k++ {
		e += trapezoid(points[k-1], points[k])
	}
	return e, nil
}

// IntegrateJ integrates P(t) - idleW over [t0, t1] (CLOCK_MONOTONIC
// nanoseconds), in joules, by the trapezoidal rule on the points, power
// interpolated linearly at t0 and t1. The points must be in time order and
// span the interval (ErrNotCovered otherwise). The result is signed: power
// below idle counts negative, so noise around idle averages out instead of
// adding up.
func IntegrateJ(points []Point, idleW float64, t0, t1 int64) (float64, error) {
	if t1 < t0 {
		return 0, fmt.Errorf("integrate power over [%d, %d] ns: the interval ends before it starts", t0, t1)
	}
	if err := checkOrder(points); err != nil {
		return 0, err
	}
	if len(points) == 0 || points[0].MonoNS > t0 || points[len(points)-1].MonoNS < t1 {
		return 0, fmt.Errorf("integrate power over [%d, %d] ns: %w", t0, t1, ErrNotCovered)
	}
	clipped := []Point{{MonoNS: t0, PowerW: powerAt(points, t0)}}
	for _, p := range points {
		if p.MonoNS > t0 && p.MonoNS < t1 {
			clipped = append(clipped, p)
		}
	}
	clipped = append(clipped, Point{MonoNS: t1, PowerW: powerAt(points, t1)})
	e, err := TrapezoidJ(clipped)
	if err != nil {
		return 0, err
	}
	return e - idleW*float64(t1-t0)/1e9, nil
}

// checkOrder returns ErrUnordered when the points go back in time.
func checkOrder(points []Point) error {
	for k := 1; k < len(points); k++ {
		if points[k].MonoNS < points[k-1].MonoNS {
			return fmt.Errorf("integrate power: point %d at %d ns after one at %d ns: %w", k, points[k].MonoNS, points[k-1].MonoNS, ErrUnordered)
		}
	}
	return nil
}

// powerAt interpolates the power at t, which the points span.
func powerAt(points []Point, t int64) float64 {
	k := sort.Search(len(points), func(k int) bool { return points[k].MonoNS >= t })
	if points[k].MonoNS == t || k == 0 {
		return points[k].PowerW
	}
	a, b := points[k-1], points[k]
	return a.PowerW + (b.PowerW-a.PowerW)*float64(t-a.MonoNS)/float64(b.MonoNS-a.MonoNS)
}

// Series gathers each GPU's power points from records, in record order:
// samples without an error, of GPUs whose power was read.
func Series(records []Record) map[int][]Point {
	series := map[int][]Point{}
	for _, rec := range records {
		if rec.Kind != KindSample || rec.Error != "" {
			continue
		}
		for _, r := range rec.GPUs {
			if r.PowerW != nil {
				series[r.Index] = append(series[r.Index], Point{MonoNS: rec.MonoNS, PowerW: *r.PowerW})
			}
		}
	}
	return series
}

// EnergyPerRequest is the methodology's dynamic energy per successful
// request, in joules:
//
//	E_req = Σ_g ∫_{t0}^{t1} (P_g(t) − P_idle,g) dt / N_success
//
// over the GPUs g that are the keys of idleW, each with its own idle power,
// from the power samples in records (IntegrateJ for each GPU; t0 and t1 on
// CLOCK_MONOTONIC, as MonoNS). With no successful request the figure is
// not defined: the result is NaN (N/A), with no error. Every GPU named must
// have samples spanning [t0, t1] (ErrNotCovered).
func EnergyPerRequest(records []Record, idleW map[int]float64, t0, t1 int64, nSuccess int) (float64, error) {
	if nSuccess < 0 {
		return 0, fmt.Errorf("energy per request: %d successes", nSuccess)
	}
	if len(idleW) == 0 {
		return 0, errors.New("energy per request: no GPUs (no idle powers)")
	}
	series := Series(records)
	var total float64
	for g, idle := range idleW {
		e, err := IntegrateJ(series[g], idle, t0, t1)
		if err != nil {
			return 0, fmt.Errorf("energy per request, GPU %d: %w", g, err)
		}
		total += e
	}
	if nSuccess == 0 {
		return math.NaN(), nil
	}
	return total / float64(nSuccess), nil
}

// ReadRecords decodes a samples file. A last line without its newline (a
// write cut by a crash) that does not decode is skipped; any other line that
// does not decode is an error.
func ReadRecords(r io.Reader) ([]Record, error) {
	br := bufio.NewReader(r)
	var recs []Record
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("read samples: %w", err)
		}
		atEOF := err != nil
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			var rec Record
			if derr := json.Unmarshal(trimmed, &rec); derr != nil {
				if atEOF {
					break // cut short
				}
				return nil, fmt.Errorf("read samples: line %d: %w", n, derr)
			}
			recs = append(recs, rec)
		}
		if atEOF {
			break
		}
	}
	return recs, nil
}

// ReadFile decodes the samples file at path (ReadRecords).
func ReadFile(path string) ([]Record, error) {
	f, err := safefile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read samples: %w", err)
	}
	defer f.Close()
	recs, err := ReadRecords(f)
	if err != nil {
		return nil, fmt.Errorf("samples file %s: %w", path, err)
	}
	return recs, nil
}
