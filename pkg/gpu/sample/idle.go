package sample

import (
	"context"
	"math"
	"time"

	"warden/pkg/atomicfile"
	"warden/pkg/gpu"
)

// Settle is how the idle power of an attempt's GPUs is read: before its
// server starts, and after a settle. A GPU warm from the run before it
// draws more than its idle power for tens of seconds (on the H200 phase 3,
// 127 W read at once against a loaded mean of 120 W: a negative dynamic
// energy), so the idle power is read over a period and the lowest reading
// kept: a card that cools draws less and less, and what it draws at the
// end of the period is the closest to its idle level the period shows.
type Settle struct {
	// Reader reads the GPUs (the sampler's fast fields).
	Reader Reader
	// GPUs are the indices read.
	GPUs []int
	// For is the settle period; 0 keeps the readings given.
	For time.Duration
	// Every is the time between reads; 0 is one second.
	Every time.Duration
	// Wait waits d or until ctx ends; nil is a timer.
	Wait func(ctx context.Context, d time.Duration) error
}

// IdlePower is each GPU's idle power in watts: the lowest of the power in
// first (readings already taken) and in the readings taken every Every
// over For. A read that fails, or a GPU that reports no power, adds
// nothing; a GPU without any power reading is absent. The end of ctx ends
// the settle early, with what was read.
func IdlePower(ctx context.Context, s Settle, first []gpu.Reading) map[int]float64 {
	out := map[int]float64{}
	note := func(rs []gpu.Reading) {
		for _, r := range rs {
			if r.PowerW == nil {
				continue
			}
			if w, ok := out[r.Index]; !ok || *r.PowerW < w {
				out[r.Index] = *r.PowerW
			}
		}
	}
	note(first)
	every := s.Every
	if every <= 0 {
		every = time.Second
	}
	wait := s.Wait
	if wait == nil {
		wait = sleepCtx
	}
	for left := s.For; left > 0; left -= every {
		if wait(ctx, min(every, left)) != nil {
			break
		}
		if rs, err := s.Reader.Sample(s.GPUs); err == nil {
			note(rs)
		}
	}
	return out
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// EnergyFile is energy.json of an attempt: the energy per successful
// request, for the sanity block to judge (seed 002: "non-negative ...
// counters"; a negative energy per request, an idle power read above the
// run's, is a red flag). EnergyPerRequestJ is nil when there is none (no
// success: N/A; or Why says why it could not be computed).
type EnergyFile struct {
	EnergyPerRequestJ *float64 `json:"energy_per_request_j"`
	Why               string   `json:"why,omitempty"`
}

// WriteEnergy writes the energy per request e (NaN: none), or why err
// kept it from being computed, to path atomically.
func WriteEnergy(path string, e float64, err error, opts ...atomicfile.Option) error {
	var f EnergyFile
	switch {
	case err != nil:
		f.Why = err.Error()
	case !math.IsNaN(e):
		f.EnergyPerRequestJ = &e
	}
	return atomicfile.WriteJSON(path, f, 0o644, opts...)
}
