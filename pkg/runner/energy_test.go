package runner_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"warden/pkg/gpu/fakegpu"
	"warden/pkg/gpu/sample"
)

// The idle power is read before the server loads, after the protocol's
// settle (idle_settle_s), and each attempt keeps its energy per request in
// energy.json for the sanity block: with the fake GPUs' idle 75 W below
// the loaded server's draw, a non-negative figure.
func TestIdlePowerAndEnergyFile(t *testing.T) {
	c := newCampaign(t, protocol{extra: "idle_settle_s: 0.2\nsample_interval_s: 0.02"})
	c.run()
	c.wantComplete()
	a := c.wantAttempts("p1.saturation", ok)[0]
	if w, ok := a.Figures["idle_power_w_gpu0"]; !ok && a.Figures["idle_power_w_gpu1"] != fakegpu.IdlePowerW || ok && w != fakegpu.IdlePowerW {
		t.Fatalf("idle power figures %v", a.Figures)
	}
	b, err := os.ReadFile(filepath.Join(a.Dir, "energy.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f sample.EnergyFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if f.EnergyPerRequestJ == nil || (*f.EnergyPerRequestJ < 0 || *f.EnergyPerRequestJ != a.Figures["energy_per_request_j"]) {
		t.Fatalf("energy.json %s; figures %v", b, a.Figures)
	}
	c.wantClean()
}
