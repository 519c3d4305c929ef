package budget

import (
	"errors"
	"testing"
	"time"
)

func TestReserve(t *testing.T) {
	cap := Seconds(16.0)
	prior := Seconds(3.964)
	cases := []struct {
		name     string
		reserved float64
		items    []Item
		ok       bool
	}{
		{"fits", 0, []Item{{"a", 1, 488}, {"b", 2, 488}}, true},
		{"exactly at the cap", 0, []Item{{"a", 1, cap - prior}}, true},
		{"one second over", 0, []Item{{"a", 1, cap - prior + 1}}, false},
		{"reservations count", cap - prior - 100, []Item{{"a", 1, 101}}, false},
		{"empty wave", cap - prior, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := Account{CapGPUSeconds: cap, ConsumedGPUSeconds: prior, ReservedGPUSeconds: tc.reserved}
			got, err := a.Reserve(tc.items)
			if tc.ok {
				if err != nil || got != Cost(tc.items) {
					t.Fatalf("Reserve = %v, %v; want %v", got, err, Cost(tc.items))
				}
				return
			}
			var r *Refusal
			if !errors.Is(err, ErrRefused) || !errors.As(err, &r) || r.Want != Cost(tc.items) {
				t.Fatalf("Reserve = %v, %v; want a refusal for %v", got, err, Cost(tc.items))
			}
			if f := r.Figures(); f["cap_gpu_hours"] != 16.0 {
				t.Fatalf("figures %v", f)
			}
		})
	}
}

func TestCharge(t *testing.T) {
	t0 := time.Date(2026, 7, 13, 0, 0, 0, 0, time.UTC)
	if got := Charge(2, t0, t0.Add(90*time.Second)); got != 180 {
		t.Fatalf("Charge = %v, want 180", got)
	}
	if got := Charge(1, time.Time{}, t0); got != 0 {
		t.Fatalf("charge without a start = %v", got)
	}
	if got := Charge(1, t0, t0.Add(-time.Second)); got != 0 {
		t.Fatalf("charge for a negative interval = %v", got)
	}
	if a := (Account{CapGPUSeconds: 100, ConsumedGPUSeconds: 30, ReservedGPUSeconds: 20}); a.Remaining() != 50 {
		t.Fatalf("Remaining = %v", a.Remaining())
	}
}
