package gates

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
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
// figure_tol, and diff_<key> (coloc minus solo) for each solo key present
// in coloc.
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
	if !(math.Abs(ratio-1) < throughputTol) {
		problems = append(problems, fmt.Sprintf("throughput ratio %.4f (co-located %.4f, solo %.4f) is not within %.4f of 1", ratio, coloc.Throughput, solo.Throughput, throughputTol))
	}
	keys := make([]string, 0, len(solo.Figures))
	for k := range solo.Figures {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
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
