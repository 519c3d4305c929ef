package contract

import (
	"fmt"
	"math"
	"sort"
)

// Representativeness (seed 002, "Layer 2: sampled Kineto windows"):
// "Profiler representativeness is checked against the adjacent clean
// segment for scheduled tokens, prefill fraction, decode batch size, and
// graph-mode shares. For each feature, use standardized mean difference
// SMD=(mean_profile-mean_clean)/pooled_sd; a constant feature uses exact
// equality. If abs(SMD)>0.25 for any feature in either window, that load
// point's operator breakdown is invalid."

// smdFeatures are the per-step features, in report order. Decode batch
// size is num_decode_reqs where the stream has it, else decode_tokens
// (one token per decoding request). Graph-mode shares are one indicator
// per mode.
var smdFeatures = []string{"scheduled_tokens", "prefill_fraction", "decode_batch", "mode_FULL", "mode_PIECEWISE", "mode_NONE"}

func stepFeatures(s L1Step) []float64 {
	p, d := float64(*s.PrefillTokens), float64(*s.DecodeTokens)
	frac := 0.0
	if p+d > 0 {
		frac = p / (p + d)
	}
	batch := d
	if s.DecodeReqs != nil {
		batch = float64(*s.DecodeReqs)
	}
	mode := ""
	if s.RuntimeMode != nil {
		mode = *s.RuntimeMode
	}
	return []float64{p + d, frac, batch, b2f(mode == "FULL"), b2f(mode == "PIECEWISE"), b2f(mode == "NONE")}
}

// SMD is the standardized mean difference of one feature; a constant
// feature (pooled sd 0) gives 0 when the means are equal and +Inf or -Inf
// otherwise.
func SMD(profile, clean []float64) float64 {
	if cp, okp := constant(profile); okp {
		if cc, okc := constant(clean); okc {
			return signedInf(cp, cc)
		}
	}
	mp, vp := meanVar(profile)
	mc, vc := meanVar(clean)
	n1, n2 := float64(len(profile)), float64(len(clean))
	pooled := 0.0
	if n1+n2 > 2 {
		pooled = math.Sqrt(((n1-1)*vp + (n2-1)*vc) / (n1 + n2 - 2))
	}
	if pooled == 0 {
		return signedInf(mp, mc)
	}
	return (mp - mc) / pooled
}

// signedInf is the difference of two means over a spread of 0: 0 when
// they are equal, else +Inf or -Inf by the sign of p - c.
func signedInf(p, c float64) float64 {
	switch {
	case p == c:
		return 0
	case p > c:
		return math.Inf(1)
	default:
		return math.Inf(-1)
	}
}

// constant reports whether every value is the same one.
func constant(x []float64) (float64, bool) {
	for _, v := range x {
		if v != x[0] {
			return 0, false
		}
	}
	return x[0], len(x) > 0
}

func meanVar(x []float64) (float64, float64) {
	if len(x) == 0 {
		return math.NaN(), 0
	}
	m := 0.0
	for _, v := range x {
		m += v
	}
	m /= float64(len(x))
	if len(x) < 2 {
		return m, 0
	}
	s := 0.0
	for _, v := range x {
		s += (v - m) * (v - m)
	}
	return m, s / float64(len(x)-1)
}

// windowSMD gives each feature's SMD between the window's joined steps
// and the clean segment's steps, and the features over their limits (one
// per feature, in smdFeatures' order).
func windowSMD(profile, clean []L1Step, limits []float64) (map[string]float64, []string) {
	cols := func(ss []L1Step) [][]float64 {
		out := make([][]float64, len(smdFeatures))
		for _, s := range ss {
			for i, v := range stepFeatures(s) {
				out[i] = append(out[i], v)
			}
		}
		return out
	}
	p, c := cols(profile), cols(clean)
	smd := map[string]float64{}
	var over []string
	for i, name := range smdFeatures {
		v := SMD(p[i], c[i])
		smd[name] = v
		if !(math.Abs(v) <= limits[i]) {
			over = append(over, fmt.Sprintf("%s SMD %.3g", name, v))
		}
	}
	sort.Strings(over)
	return smd, over
}
