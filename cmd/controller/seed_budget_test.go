package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"warden/pkg/state"
)

// A wave reserves its runs' bounds by default (seed 002, A-P3-4: "refuses
// to launch if the wave's conservative reservation would exceed" the cap):
// a cap the nominal cost fits but the bounds do not stops the campaign
// before anything starts.
func TestConservativeReservationRefusedWhereNominalFits(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	// one run: expected 10 s, bounds 10 (ready) + 20 (deadline: 10 + the
	// 10 s watchdog) + 2 + 1 (graces) + 10 (cleanup) = 43 GPU-s; the cap
	// 0.005 GPU-hours = 18 GPU-s
	proto := writeProtocol(t, scenario{capGPUHours: "0.005"})
	// plan says so with its exit code (and start refuses it): the first
	// wave would be refused
	out, code := c.controller("plan", "-f", proto, "-o", "json")
	if code != exitOverBudget {
		t.Fatalf("plan exit %d, want %d:\n%s", code, exitOverBudget, out)
	}
	out = out[:strings.LastIndex(out, "}")+1] // the plan, before the refusal's line
	var p struct {
		Totals struct {
			Reserve              string  `json:"reserve"`
			GPUHoursEstimate     float64 `json:"gpu_hours_estimate"`
			ConservativeGPUHours float64 `json:"conservative_gpu_hours"`
			ReservationFits      bool    `json:"reservation_fits"`
		} `json:"totals"`
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	if p.Totals.Reserve != "bounds" || math.Round(p.Totals.GPUHoursEstimate*3600) != 10 || math.Round(p.Totals.ConservativeGPUHours*3600) != 43 || p.Totals.ReservationFits {
		t.Fatalf("totals %+v", p.Totals)
	}
	if out, code := c.controller("start", "-f", proto, "-d", c.dir, "--gpu-backend", "fake", "--foreground", "--allow-over-budget"); code != 0 {
		t.Fatalf("start --allow-over-budget: exit %d:\n%s", code, tail(out, 3000))
	}
	s := c.store()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignStopped || cp.StopReason != state.StopBudget || !strings.Contains(cp.StopDetail, "budget refused") {
		t.Fatalf("campaign %s %s %s", cp.State, cp.StopReason, cp.StopDetail)
	}
	if got := math.Round(cp.StopFigures["wave_gpu_hours"] * 3600); got != 43 {
		t.Fatalf("wave reservation %v GPU-s, want 43 (the bounds)", got)
	}
	if as := c.attempts(s, "p1.saturation"); len(as) != 0 {
		t.Fatalf("attempts %+v", as)
	}
}
