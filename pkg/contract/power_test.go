package contract

import (
	"math"
	"strings"
	"testing"
)

// The power measurement on the seed timeline's run: its reference is
// clean segment C, the last clean segment, [220, 300) s (1,600 steps 50
// ms apart, 1,593 blocks of 8); on a burn-in's result (no clean segment)
// the last --reference-tail-s of the warm-up.
func TestPowerDir(t *testing.T) {
	// prefill tokens follow the step's index mod 7: a varying feature
	varying := func(_ float64, r *Layer1Record) {
		r.PrefillTokens = 100 + 50*(r.Step%7)
		r.NumWaitingReqs = 4
	}
	rd, ld := seedRun{step: varying}.write(t)
	o := DefaultPower()
	o.Layer1Dir = ld
	r := PowerDir(rd, o)
	if r.Verdict != "pass" || r.Figures["reference_steps"] != 1600 || r.Figures["smd.self.blocks"] != 1593 ||
		r.Figures["power.representativeness.samples"] != 1593 || r.Figures["power.recovery.samples"] != 71 {
		t.Fatalf("%s %q %v", r.Verdict, r.Detail, r.Figures)
	}
	// the same figures as layer2's own on the same segment
	if want := selfSMD(clean(t, ld, 220, 300), 8); math.Abs(r.Figures["power.representativeness.unit_pass_fraction"]-want.jointPass([]float64{.25, .25, .25, .25, .25, .25})) > 1e-12 {
		t.Fatalf("unit pass %v", r.Figures)
	}
	// and recovery's: a constant rate and queue stay in the band
	if r.Figures["power.recovery.unit_pass_fraction"] != 1 || r.Figures["recovery.self.false_failure_rate"] != 0 {
		t.Fatalf("recovery figures %v", r.Figures)
	}

	// a burn-in: no clean segment; the last 30 s of the 60 s warm-up
	burn := seedRun{step: varying, noProfile: true, warmupSucceeded: 118, warmupRecords: -1, edit: func(res map[string]any) {
		segs := res["segments"].([]map[string]any)
		res["segments"] = segs[:1]
	}}
	rd, ld = burn.write(t)
	o.Layer1Dir = ld
	r = PowerDir(rd, o)
	// the warm-up's successes are 0.5 s apart from 1 s: 20 in a window
	if r.Verdict != "pass" || r.Figures["reference_s"] != 30 || r.Figures["reference_steps"] != 600 || !strings.Contains(r.Detail, "the last 30 s of warmup") {
		t.Fatalf("burn-in: %s %q %v", r.Verdict, r.Detail, r.Figures)
	}

	// what cannot be measured is an error, never a pass
	o.Layer1Dir = t.TempDir()
	if r := PowerDir(rd, o); r.Verdict == "pass" {
		t.Fatalf("no Layer-1 stream: %+v", r)
	}
	o.Layer1Dir, o.ReferenceTailS = ld, 0
	if r := PowerDir(rd, o); r.Verdict != "error" || !strings.Contains(r.Detail, "no clean segment and no warm-up") {
		t.Fatalf("no reference: %s %q", r.Verdict, r.Detail)
	}
}

// clean reads the Layer-1 steps of ld submitted in [a, b) s of the
// synthetic timeline.
func clean(t *testing.T, ld string, a, b float64) []L1Step {
	t.Helper()
	stream, _ := Layer1Stream(ld)
	steps, err := ReadL1File(stream)
	if err != nil {
		t.Fatal(err)
	}
	var out []L1Step
	for _, s := range steps {
		if *s.SubmitMonoNS >= ns(a) && *s.SubmitMonoNS < ns(b) {
			out = append(out, s)
		}
	}
	return out
}
