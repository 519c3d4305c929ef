package contract

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every block's |SMD| from prefix sums is SMD's own on the block and the
// rest, constant runs included (where SMD compares exactly).
func TestBlockAbsSMDIsSMD(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		n, k := 9+rng.IntN(60), 1+rng.IntN(8)
		if n < k+1 {
			continue
		}
		x := make([]float64, n)
		for i := range x {
			switch trial % 4 {
			case 0:
				x[i] = rng.NormFloat64() * 100
			case 1: // long runs of few values: constant blocks and rests
				x[i] = float64(rng.IntN(2))
				if i > 0 && rng.IntN(4) > 0 {
					x[i] = x[i-1]
				}
			case 2: // constant but for one value
				x[i] = 3
				if i == n/2 {
					x[i] = 4
				}
			default:
				x[i] = 5
			}
		}
		got := blockAbsSMD(x, k)
		for i := range got {
			rest := append(append([]float64(nil), x[:i]...), x[i+k:]...)
			want := math.Abs(SMD(x[i:i+k], rest))
			if !(got[i] == want || math.Abs(got[i]-want) <= 1e-9*math.Max(1, want)) {
				t.Fatalf("trial %d n %d k %d block %d: %v, SMD gives %v (x %v)", trial, n, k, i, got[i], want, x)
			}
		}
	}
}

// tokenSteps builds Layer-1 steps whose scheduled tokens follow tokens (all
// prefill, one mode): one varying feature.
func tokenSteps(tokens []float64) []L1Step {
	out := make([]L1Step, len(tokens))
	for i, v := range tokens {
		p, d, m, exec := int64(math.Round(v)), int64(0), "FULL", true
		step := int64(i)
		out[i] = L1Step{Step: &step, PrefillTokens: &p, DecodeTokens: &d, RuntimeMode: &m, ModelExecuted: &exec}
	}
	return out
}

// On independent steps an 8-step block of one varying feature passes the
// literal rule with probability 2*Phi(0.25/sd)-1, sd = sqrt(1/8 + 1/(n-8))
// (about 0.52); on autocorrelated steps far less often (0.24 at AR(1)
// 0.9). These are the
// figures the rule's own false-failure rate is made of.
func TestSelfSMDOnIndependentAndCorrelatedSteps(t *testing.T) {
	rng := rand.New(rand.NewPCG(20260714, 1))
	const n = 4000
	iid := make([]float64, n)
	ar := make([]float64, n)
	prev := 0.0
	for i := range iid {
		iid[i] = 4000 + 1000*rng.NormFloat64()
		prev = 0.9*prev + math.Sqrt(1-0.81)*rng.NormFloat64()
		ar[i] = 4000 + 1000*prev
	}
	sd := math.Sqrt(1.0/8 + 1.0/(n-8))
	want := math.Erf(0.25 / sd / math.Sqrt2)
	// an 8-step mean of AR(1) steps has the variance of 8/VIF independent
	// ones, VIF = 1 + 2 sum_j (1 - j/8) rho^j
	vif := 1.0
	for j := 1; j < 8; j++ {
		vif += 2 * (1 - float64(j)/8) * math.Pow(0.9, float64(j))
	}
	wantAR := math.Erf(0.25 / math.Sqrt(vif/8+1.0/(n-8)) / math.Sqrt2)
	for _, tc := range []struct {
		name   string
		x      []float64
		lo, hi float64
	}{{"iid", iid, want - 0.04, want + 0.04}, {"AR(1) 0.9", ar, wantAR - 0.05, wantAR + 0.05}} {
		s := selfSMD(tokenSteps(tc.x), 8)
		if s.Blocks != n-7 {
			t.Fatalf("%s: %d blocks", tc.name, s.Blocks)
		}
		limits := []float64{0.25, 0.25, 0.25, 0.25, 0.25, 0.25}
		p := s.jointPass(limits)
		if p < tc.lo || p > tc.hi {
			t.Errorf("%s: window pass fraction %.3f, want [%.3f, %.3f] (independent steps: %.3f)", tc.name, p, tc.lo, tc.hi, want)
		}
		// the constant features (prefill fraction, decode batch, modes) pass every block
		for f := 1; f < len(smdFeatures); f++ {
			if pf := s.passFraction(f, 0.25); pf != 1 {
				t.Errorf("%s: constant feature %s passes %v of blocks", tc.name, smdFeatures[f], pf)
			}
		}
		t.Logf("%s: literal window pass %.3f, |SMD| p95 %.3f", tc.name, p, s.quantileAbs(0, 0.95))
	}
}

// The calibrated thresholds let at least q of the blocks through jointly,
// at the smallest common level that does.
func TestThresholdsAt(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	dev := make([][]float64, 3)
	for f := range dev {
		for range 500 {
			dev[f] = append(dev[f], math.Abs(rng.NormFloat64())*float64(f+1))
		}
	}
	for _, q := range []float64{0.5, 0.9, 0.95, 0.99} {
		thr, level, joint := jointThresholds(dev, q)
		if joint < q || joint != jointPassFraction(dev, thr) {
			t.Fatalf("q %v: joint %v with thresholds %v", q, joint, thr)
		}
		k := int(math.Round(level * 500))
		if k > 1 {
			lower := make([]float64, 3)
			for f := range dev {
				s := append([]float64(nil), dev[f]...)
				sortFloats(s)
				lower[f] = s[k-2]
			}
			if jointPassFraction(dev, lower) >= q {
				t.Fatalf("q %v: level %v is not the smallest", q, level)
			}
		}
		// a noisier series gets a higher threshold
		if !(thr[0] < thr[1] && thr[1] < thr[2]) {
			t.Fatalf("q %v: thresholds %v", q, thr)
		}
	}
}

func sortFloats(xs []float64) {
	for i := 1; i < len(xs); i++ {
		for j := i; j > 0 && xs[j] < xs[j-1]; j-- {
			xs[j], xs[j-1] = xs[j-1], xs[j]
		}
	}
}

// The real H200 windows (eight steps cycling prefill, decode, mixed)
// against clean segments of those shapes drawn at random: the literal
// rule's own false-failure rate is reported; the calibrated rule passes
// the representative windows; and against a segment of another mix (90%
// prefill), both rules fail them.
func TestRepresentativenessRulesOnRealTraces(t *testing.T) {
	src := filepath.Join("testdata", "h200", "eager")
	mix := func(weights [3]float64, seed uint64) func(int) [4]int64 {
		rng := rand.New(rand.NewPCG(seed, 20260714))
		return func(int) [4]int64 {
			u := rng.Float64()
			switch {
			case u < weights[0]:
				return stepShapes[0]
			case u < weights[0]+weights[1]:
				return stepShapes[1]
			}
			return stepShapes[2]
		}
	}
	run := func(t *testing.T, clean func(int) [4]int64, rule string) Result {
		t.Helper()
		dir := t.TempDir()
		stream, phases := makeL1With(t, src, false, 1500, clean)
		os.WriteFile(filepath.Join(dir, "layer1.jsonl"), stream, 0o644)
		os.WriteFile(filepath.Join(dir, "phases.jsonl"), phases, 0o644)
		o := DefaultLayer2()
		o.Layer1, o.Phases = filepath.Join(dir, "layer1.jsonl"), filepath.Join(dir, "phases.jsonl")
		o.Representativeness.Rule = rule
		return Layer2Dir(src, o)
	}
	even := mix([3]float64{1.0 / 3, 1.0 / 3}, 1)
	lit := run(t, even, RuleLiteral)
	wp, ffr := lit.Figures["smd.self.window_pass_fraction"], lit.Figures["smd.self.false_failure_rate"]
	if lit.Figures["smd.self.blocks"] != 1493 || !(wp > 0 && wp < 0.6) || math.Abs(ffr-(1-wp*wp)) > 1e-12 ||
		lit.Figures["power.representativeness.unit_pass_fraction"] != wp || lit.Figures["power.representativeness.samples"] != 1493 {
		t.Fatalf("literal rule's own figures: %v", lit.Figures)
	}
	if !strings.Contains(lit.Detail, "representative run of 2 window(s) fails it") {
		t.Fatalf("the detail does not give the false-failure rate: %q", lit.Detail)
	}
	t.Logf("literal: %s (window pass %.3f, a representative run fails %.1f%%)", lit.Verdict, wp, 100*ffr)

	cal := run(t, even, RuleCalibrated)
	if cal.Verdict != "pass" || cal.Figures["smd.calibrated.window_pass_fraction"] < 0.99 || cal.Figures["smd.calibrated.quantile"] != 0.99 {
		t.Fatalf("calibrated rule on representative windows: %s %q %v", cal.Verdict, cal.Detail, cal.Figures)
	}
	for _, name := range smdFeatures {
		if thr := cal.Figures["smd.calibrated."+name+".threshold"]; thr < 0.25 {
			t.Fatalf("%s threshold %v under the seed's limit", name, thr)
		}
	}

	other := mix([3]float64{0.9, 0.05}, 2)
	for _, rule := range []string{RuleLiteral, RuleCalibrated} {
		r := run(t, other, rule)
		if r.Verdict != "fail" || !strings.Contains(r.Detail, "not representative of the adjacent clean segment") || r.Class != "profile-artifact" {
			t.Fatalf("%s rule, a clean segment of another mix: %s %q", rule, r.Verdict, r.Detail)
		}
	}
}
