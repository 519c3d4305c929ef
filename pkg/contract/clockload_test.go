package contract

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warden/pkg/gpu"
	"warden/pkg/gpu/fakegpu"
	"warden/pkg/gpu/sample"
)

// clockLoadDir is an attempt directory as the controller leaves it: GPU
// samples of two fake GPUs taken by the sampler (GPU 1 throttled with
// mask, when not 0), a phase file whose measured interval covers them, and
// the host records with the given load averages (negative: the record has
// no host).
func clockLoadDir(t *testing.T, mask uint64, load1 [2]float64) (string, string) {
	t.Helper()
	fake := t.TempDir()
	if err := fakegpu.Init(fake, 2, 1000); err != nil {
		t.Fatal(err)
	}
	if mask != 0 {
		if err := fakegpu.SetThrottle(fake, 1, mask); err != nil {
			t.Fatal(err)
		}
	}
	b, err := fakegpu.Open(fake)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s, err := sample.New(sample.Config{Reader: b, GPUs: []int{0, 1}, Interval: time.Hour, Path: filepath.Join(dir, "gpu-samples.jsonl")})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stop(); err != nil { // a sample at the start and one at the stop
		t.Fatal(err)
	}
	recs, err := sample.ReadFile(filepath.Join(dir, "gpu-samples.jsonl"))
	if err != nil || len(recs) < 2 {
		t.Fatalf("samples %v %v", recs, err)
	}
	first, last := recs[0].MonoNS, recs[len(recs)-1].MonoNS
	phases := filepath.Join(dir, "phases.jsonl")
	p := fmt.Sprintf(`{"phase":"warmup","t":"x","mono_ns":%d}`+"\n"+`{"phase":"clean","t":"x","mono_ns":%d,"index":1}`+"\n"+`{"phase":"drain","t":"x","mono_ns":%d}`+"\n", first-2, first-1, last+1)
	if err := os.WriteFile(phases, []byte(p), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"preflight", "postmeasure"} {
		rec := `{"at":"2026-07-13T10:00:00Z","gpus":[]}`
		if load1[i] >= 0 {
			rec = fmt.Sprintf(`{"at":"2026-07-13T10:00:00Z","gpus":[],"host":{"loadavg1":%g,"loadavg5":1,"loadavg15":1}}`, load1[i])
		}
		if err := os.WriteFile(filepath.Join(dir, name+".json"), []byte(rec), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, phases
}

// TestClockLoad: a thermal, power-brake or HW slowdown on any GPU during
// the measured interval, or a host load above the bound before or after
// it, fails the run with class infrastructure and the rule's name; the
// software power cap does not; what cannot be read is an error.
func TestClockLoad(t *testing.T) {
	cases := []struct {
		name    string
		mask    uint64
		load    [2]float64
		verdict string
		detail  string
	}{
		{"cool and idle host", 0, [2]float64{3, 4}, "pass", ""},
		{"at the power cap", gpu.ReasonSwPowerCap, [2]float64{3, 4}, "pass", ""},
		{"thermal slowdown", gpu.ReasonHwThermalSlowdown, [2]float64{3, 4}, "fail", "clock_reasons: 2 of 2 sample(s) of the measured interval report a forbidden clock-event reason on 1 GPU(s) (first: GPU 1 at "},
		{"power brake", gpu.ReasonHwPowerBrakeSlowdown, [2]float64{3, 4}, "fail", "hw_power_brake_slowdown"},
		{"HW slowdown", gpu.ReasonHwSlowdown, [2]float64{3, 4}, "fail", "hw_slowdown"},
		{"software thermal slowdown", gpu.ReasonSwThermalSlowdown, [2]float64{3, 4}, "fail", "sw_thermal_slowdown"},
		{"loaded after the interval", 0, [2]float64{3, 17}, "fail", "host_load: the host's 1-minute load average 17.00 in postmeasure.json is above the bound 16"},
		{"loaded before the run", 0, [2]float64{16.5, 4}, "fail", "in preflight.json is above the bound 16"},
		{"no host record", 0, [2]float64{3, -1}, "error", "postmeasure.json has no host.loadavg1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, phases := clockLoadDir(t, c.mask, c.load)
			o := DefaultClockLoad()
			o.AttemptDir, o.Phases, o.MaxLoad1 = dir, phases, 16
			r := ClockLoad(o)
			if r.Verdict != c.verdict || !strings.Contains(r.Detail, c.detail) {
				t.Fatalf("got %s %q; figures %v", r.Verdict, r.Detail, r.Figures)
			}
			if (r.Class == "infrastructure") != (c.verdict == "fail") {
				t.Fatalf("class %q", r.Class)
			}
			if r.Figures["samples"] != 2 {
				t.Fatalf("figures %v", r.Figures)
			}
		})
	}
}

// TestClockLoadCannotTell: no sample in the measured interval, a phase
// file without an end, no samples file, an unknown reason name: errors.
func TestClockLoadCannotTell(t *testing.T) {
	dir, phases := clockLoadDir(t, 0, [2]float64{1, 1})
	o := DefaultClockLoad()
	o.AttemptDir, o.Phases = dir, phases
	early := filepath.Join(dir, "early.jsonl")
	os.WriteFile(early, []byte(`{"phase":"clean","t":"x","mono_ns":1}`+"\n"+`{"phase":"drain","t":"x","mono_ns":2}`+"\n"), 0o644)
	noEnd := filepath.Join(dir, "noend.jsonl")
	os.WriteFile(noEnd, []byte(`{"phase":"clean","t":"x","mono_ns":1}`+"\n"), 0o644)
	for name, c := range map[string]struct {
		edit   func(o *ClockLoadOptions)
		detail string
	}{
		"interval without samples": {func(o *ClockLoadOptions) { o.Phases = early }, "no GPU sample in the measured interval"},
		"no end":                   {func(o *ClockLoadOptions) { o.Phases = noEnd }, "no drain or done line"},
		"no samples file":          {func(o *ClockLoadOptions) { o.AttemptDir = t.TempDir() }, "read samples"},
		"unknown reason":           {func(o *ClockLoadOptions) { o.ForbiddenReasons = []string{"hot"} }, `unknown clock-event reason "hot"`},
	} {
		oo := o
		c.edit(&oo)
		if r := ClockLoad(oo); r.Verdict != "error" || r.Class != "" || !strings.Contains(r.Detail, c.detail) {
			t.Errorf("%s: %s %q", name, r.Verdict, r.Detail)
		}
	}
}
