// Package budget is the campaign's GPU-hour accounting. It is pure: it
// computes costs, reservations and refusals from figures it is given and
// does no I/O. The durable ledger lives in pkg/state; this package decides.
//
// All amounts are GPU-seconds. A reservation is made before a wave
// launches, from the protocol's conservative expected durations; a charge
// is the real GPU time of an attempt, from server start to confirmed
// cleanup, for every attempt whatever its end. Prior consumption (GPU time
// spent before the campaign, declared by the protocol) counts as a charge.
package budget

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Account is the state of a budget.
type Account struct {
	CapGPUSeconds      float64 // the cap
	ConsumedGPUSeconds float64 // prior consumption plus every charge
	ReservedGPUSeconds float64 // reservations of runs not yet charged
}

// Hours converts GPU-seconds to GPU-hours.
func Hours(gpuSeconds float64) float64 { return gpuSeconds / 3600 }

// Seconds converts GPU-hours to GPU-seconds.
func Seconds(gpuHours float64) float64 { return gpuHours * 3600 }

// Remaining is what is left under the cap after consumption and
// reservations; negative when the cap is already passed.
func (a Account) Remaining() float64 {
	return a.CapGPUSeconds - a.ConsumedGPUSeconds - a.ReservedGPUSeconds
}

// Item is one run of a wave: its GPUs and conservative duration.
type Item struct {
	Run       string
	GPUs      int
	ExpectedS float64
}

// Cost is the conservative reservation of a wave.
func Cost(items []Item) float64 {
	var sum float64
	for _, it := range items {
		sum += float64(it.GPUs) * it.ExpectedS
	}
	return sum
}

// ErrRefused is returned (wrapped in *Refusal) when a wave's reservation
// would pass the cap.
var ErrRefused = errors.New("budget refused")

// Refusal says why a wave was refused, with the figures.
type Refusal struct {
	Account Account
	Want    float64 // the wave's reservation
	Runs    []string
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("budget refused: consumed %.3f + reserved %.3f + wave %.3f GPU-hours would pass the cap of %.3f (runs %s)",
		Hours(r.Account.ConsumedGPUSeconds), Hours(r.Account.ReservedGPUSeconds), Hours(r.Want), Hours(r.Account.CapGPUSeconds), strings.Join(r.Runs, ", "))
}

func (r *Refusal) Unwrap() error { return ErrRefused }

// Figures are the refusal's numbers in GPU-hours, for records.
func (r *Refusal) Figures() map[string]float64 {
	return map[string]float64{
		"cap_gpu_hours":      Hours(r.Account.CapGPUSeconds),
		"consumed_gpu_hours": Hours(r.Account.ConsumedGPUSeconds),
		"reserved_gpu_hours": Hours(r.Account.ReservedGPUSeconds),
		"wave_gpu_hours":     Hours(r.Want),
	}
}

// Reserve checks a wave against the account. It returns the reservation
// to record, or a *Refusal when consumed + reserved + the wave would pass
// the cap. Reaching the cap exactly is allowed.
func (a Account) Reserve(items []Item) (float64, error) {
	want := Cost(items)
	if a.ConsumedGPUSeconds+a.ReservedGPUSeconds+want > a.CapGPUSeconds {
		runs := make([]string, len(items))
		for i, it := range items {
			runs[i] = it.Run
		}
		return 0, &Refusal{Account: a, Want: want, Runs: runs}
	}
	return want, nil
}

// Charge is the GPU time of an attempt that held gpus GPUs from start to
// end. A zero start (the server never started) charges nothing; an end
// before the start charges nothing rather than a negative amount.
func Charge(gpus int, start, end time.Time) float64 {
	if start.IsZero() || !end.After(start) || gpus <= 0 {
		return 0
	}
	return float64(gpus) * end.Sub(start).Seconds()
}
