package gates

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"warden/pkg/safefile"
)

// Measurement is what the co-location gate compares for one placement of
// the target: its completed-request throughput over the clean interval and
// named figures, such as the device-duration shares of the solo target's
// three largest operator families (F3 of A-P3-1).
type Measurement struct {
	Throughput float64
	Figures    map[string]float64
	// Segments are the clean segments' own throughputs, when the result
	// gives them (ReadSegmentThroughputs): the throughput's noise.
	Segments []float64
}

// Colocation is the co-location validity check of A-P3-1 item 4: the
// target measured alongside its background loads must look like the target
// measured alone. It passes only if abs(T_coloc/T_solo - 1) < throughputTol
// and, for every figure key present in solo, abs(coloc[k] - solo[k]) <
// figureTol. The figure comparison is an absolute difference: shares are
// fractions, and the seed's "three percentage points" is figureTol 0.03.
// Both comparisons are strict, as in the seed.
//
// Verdicts: fail when either comparison fails or a solo key is missing
// from coloc (the detail names each); error when T_solo <= 0, a
// throughput is negative or not finite, or a tolerance is not positive.
//
// Figures: t_solo, t_coloc, ratio (T_coloc/T_solo), throughput_tol,
// figure_tol, diff_<key> (coloc minus solo) for each solo key present in
// coloc, and, where both measurements give their segments, the throughput
// criterion's own false-failure rate (throughputSelf).
//
// A fail withholds the regime under test: the caller records it and
// falls back to the protocol's next regime (eight-way to four-way); when
// none is left it stops the campaign for review. An error stops for review.
func Colocation(solo, coloc Measurement, throughputTol, figureTol float64, now time.Time) Verdict {
	v := Verdict{Gate: "colocation", Verdict: Pass, At: now, Figures: map[string]float64{
		"t_solo": solo.Throughput, "t_coloc": coloc.Throughput, "throughput_tol": throughputTol, "figure_tol": figureTol}}
	bad := func(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) }
	switch {
	case bad(solo.Throughput) || solo.Throughput <= 0:
		v.Verdict, v.Detail = Error, fmt.Sprintf("solo throughput %v is not positive: nothing to compare with", solo.Throughput)
		return v
	case bad(coloc.Throughput) || coloc.Throughput < 0:
		v.Verdict, v.Detail = Error, fmt.Sprintf("co-located throughput %v is invalid", coloc.Throughput)
		return v
	case bad(throughputTol) || throughputTol <= 0 || bad(figureTol) || figureTol <= 0:
		v.Verdict, v.Detail = Error, fmt.Sprintf("tolerances must be positive (throughput %v, figures %v)", throughputTol, figureTol)
		return v
	}
	var problems []string
	ratio := coloc.Throughput / solo.Throughput
	v.Figures["ratio"] = ratio
	throughputSelf(v.Figures, solo, coloc, ratio, throughputTol)
	if !(math.Abs(ratio-1) < throughputTol) {
		problems = append(problems, fmt.Sprintf("throughput ratio %.4f (co-located %.4f, solo %.4f) is not within %.4f of 1", ratio, coloc.Throughput, solo.Throughput, throughputTol))
	}
	for _, k := range slices.Sorted(maps.Keys(solo.Figures)) {
		c, ok := coloc.Figures[k]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s is missing from the co-located measurement", k))
			continue
		}
		d := c - solo.Figures[k]
		v.Figures["diff_"+k] = d
		if !(math.Abs(d) < figureTol) {
			problems = append(problems, fmt.Sprintf("%s moved by %.4f (solo %.4f, co-located %.4f), not within %.4f", k, d, solo.Figures[k], c, figureTol))
		}
	}
	if len(problems) > 0 {
		v.Verdict = Fail
		v.Detail = strings.Join(problems, "; ")
	}
	return v
}

// throughputSelf is the throughput criterion's own false-failure rate,
// where the data allow it: each target's clean throughput is the mean of
// its clean segments' (the seed's three of 80 s), so its standard error is
// their sd over sqrt(segments), and the ratio's, ratio x hypot of the two
// relative errors; under no effect (a normal approximation)
// |ratio - 1| >= tol with probability erfc(tol / (se sqrt 2)). Three
// segments estimate the sd roughly: the figure says how noisy the
// criterion is, not more. Figures throughput.self.se_ratio and
// throughput.self.false_failure_rate; none with fewer than two segments
// on either side.
func throughputSelf(figs map[string]float64, solo, coloc Measurement, ratio, tol float64) {
	rel := func(m Measurement) (float64, bool) {
		n := len(m.Segments)
		if n < 2 {
			return 0, false
		}
		mean, ss := 0.0, 0.0
		for _, x := range m.Segments {
			mean += x
		}
		mean /= float64(n)
		for _, x := range m.Segments {
			ss += (x - mean) * (x - mean)
		}
		if mean <= 0 {
			return 0, false
		}
		return math.Sqrt(ss/float64(n-1)/float64(n)) / mean, true
	}
	rs, ok1 := rel(solo)
	rc, ok2 := rel(coloc)
	if !ok1 || !ok2 {
		return
	}
	se := ratio * math.Hypot(rs, rc)
	figs["throughput.self.se_ratio"] = se
	ffr := 0.0
	if se > 0 {
		ffr = math.Erfc(tol / (se * math.Sqrt2))
	}
	figs["throughput.self.false_failure_rate"] = ffr
}

// ReadSegmentThroughputs reads, from a load client's result.json
// (docs/loadgen.md), the completed-request throughput of each clean
// segment: succeeded over seconds. None when it has no clean segment.
func ReadSegmentThroughputs(path string) ([]float64, error) {
	b, err := safefile.ReadFile(path, maxResultBytes)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Segments []struct {
			Kind      string  `json:"kind"`
			Succeeded float64 `json:"succeeded"`
			Seconds   float64 `json:"seconds"`
		} `json:"segments"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []float64
	for _, s := range doc.Segments {
		if s.Kind == "clean" && s.Seconds > 0 {
			out = append(out, s.Succeeded/s.Seconds)
		}
	}
	return out, nil
}

// ErrNoField is returned (wrapped) by ReadThroughput when the dotted path
// names a field that is not in the file.
var ErrNoField = errors.New("no such field")

// maxResultBytes bounds the JSON file ReadThroughput reads.
const maxResultBytes = 64 << 20

// ReadThroughput reads one number from a JSON file by a dotted path such as
// "clean.completed_rps": each segment is an object key, or an index when
// the value at that point is an array ("windows.0.share"). Keys containing
// dots cannot be named. The value must be a JSON number; files larger than
// 64 MiB are refused.
func ReadThroughput(path string, dottedField string) (float64, error) {
	// the client wrote it: no FIFO or link may wedge the reader
	b, err := safefile.ReadFile(path, maxResultBytes)
	if err != nil {
		return 0, fmt.Errorf("read throughput: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var cur any
	if err := dec.Decode(&cur); err != nil {
		return 0, fmt.Errorf("read throughput %s: %w", path, err)
	}
	if dottedField == "" {
		return 0, fmt.Errorf("read throughput %s: empty field path", path)
	}
	segs := strings.Split(dottedField, ".")
	for i, s := range segs {
		at := strings.Join(segs[:i+1], ".")
		switch c := cur.(type) {
		case map[string]any:
			next, ok := c[s]
			if !ok {
				return 0, fmt.Errorf("read throughput %s: field %s: %w", path, at, ErrNoField)
			}
			cur = next
		case []any:
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 || n >= len(c) {
				return 0, fmt.Errorf("read throughput %s: field %s: index out of an array of %d: %w", path, at, len(c), ErrNoField)
			}
			cur = c[n]
		default:
			return 0, fmt.Errorf("read throughput %s: field %s: %s is not an object or array: %w", path, at, strings.Join(segs[:i], "."), ErrNoField)
		}
	}
	n, ok := cur.(json.Number)
	if !ok {
		return 0, fmt.Errorf("read throughput %s: field %s is %T, not a number", path, dottedField, cur)
	}
	x, err := n.Float64()
	if err != nil {
		return 0, fmt.Errorf("read throughput %s: field %s: %w", path, dottedField, err)
	}
	return x, nil
}

// NotFamilies are share keys that F3 never names: unmatched and opaque
// device time, and the attention subfamilies (the ranking uses the
// attention total; seed 002: "The headline bottleneck ranking uses
// attention_total").
var NotFamilies = map[string]bool{"other": true, "graph_replay_opaque": true,
	"attention_prefill": true, "attention_decode": true, "attention_mixed": true, "attention_unsplit": true, "attention_idle": true}

// TopFamilies gives the n operator families with the greatest share, the
// larger first, ties by name.
func TopFamilies(shares map[string]float64, n int) []string {
	var fams []string
	for f := range shares {
		if !NotFamilies[f] {
			fams = append(fams, f)
		}
	}
	sort.Slice(fams, func(i, j int) bool {
		if shares[fams[i]] != shares[fams[j]] {
			return shares[fams[i]] > shares[fams[j]]
		}
		return fams[i] < fams[j]
	})
	if len(fams) > n {
		fams = fams[:n]
	}
	return fams
}

// ColocationF3 is the share half of A-P3-1 item 4: "Let F3 be the three
// operator families with greatest aggregate device-duration share in the
// solo target's accepted Layer-2 validation window. ... for every f in F3,
// abs(share_coloc[f] - share_solo[f]) < 0.03. The latter thresholds are
// absolute share fractions (three percentage points)". solo and coloc are
// the two windows' family shares (fractions of device kernel time, as the
// Layer-2 check computes them with one mapping). A family of F3 absent from
// coloc has share 0 there.
//
// Verdicts: fail when a share of F3 moved by tol or more (strict, as in
// the seed); error when solo has fewer than three families, a share is not
// a finite fraction, or tol is not positive.
//
// Figures: solo.F and coloc.F for each F of F3 (the pairs the co-location
// gate compares), diff_F (coloc minus solo), share_tol, families.
func ColocationF3(solo, coloc map[string]float64, tol float64, now time.Time) Verdict {
	v := Verdict{Gate: "colocation-f3", Verdict: Pass, At: now, Figures: map[string]float64{"share_tol": tol}}
	for _, m := range []map[string]float64{solo, coloc} {
		for f, s := range m {
			if math.IsNaN(s) || s < 0 || s > 1 {
				v.Verdict, v.Detail = Error, fmt.Sprintf("share %s = %v is not a fraction", f, s)
				return v
			}
		}
	}
	if math.IsNaN(tol) || tol <= 0 {
		v.Verdict, v.Detail = Error, fmt.Sprintf("share tolerance %v must be positive", tol)
		return v
	}
	f3 := TopFamilies(solo, 3)
	v.Figures["families"] = float64(len(f3))
	if len(f3) < 3 {
		v.Verdict, v.Detail = Error, fmt.Sprintf("the solo window has %d operator families (%s): F3 needs three", len(f3), strings.Join(f3, ", "))
		return v
	}
	var problems, parts []string
	for _, f := range f3 {
		d := coloc[f] - solo[f]
		v.Figures["solo."+f], v.Figures["coloc."+f], v.Figures["diff_"+f] = solo[f], coloc[f], d
		parts = append(parts, fmt.Sprintf("%s %.4f -> %.4f", f, solo[f], coloc[f]))
		if !(math.Abs(d) < tol) {
			problems = append(problems, fmt.Sprintf("%s moved by %+.4f (solo %.4f, co-located %.4f), not within %.4f", f, d, solo[f], coloc[f], tol))
		}
	}
	v.Detail = "F3: " + strings.Join(parts, ", ")
	if len(problems) > 0 {
		v.Verdict = Fail
		v.Detail = strings.Join(problems, "; ") + " (" + v.Detail + ")"
	}
	return v
}
