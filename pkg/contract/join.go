package contract

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"time"

	"warden/pkg/phasefile"
)

// The join of seed 002 ("Layer 2: sampled Kineto windows"): "The analysis
// joins execute annotations to Layer-1 records by timestamp, order, and
// the annotation's context/generation token counts. A join is invalid if
// more than one Layer-1 record is compatible or if the annotation and
// Layer-1 token totals disagree."

// L1Step is what the Layer-2 rules read of one Layer-1 record. Only step,
// submit_mono_ns, prefill_tokens and decode_tokens are required; the
// others are compared or reported when present.
type L1Step struct {
	Step           *int64  `json:"step"`
	SubmitMonoNS   *int64  `json:"submit_mono_ns"`
	CompleteMonoNS *int64  `json:"complete_mono_ns"`
	ModelExecuted  *bool   `json:"model_executed"`
	PrefillReqs    *int64  `json:"num_prefill_reqs"`
	DecodeReqs     *int64  `json:"num_decode_reqs"`
	PrefillTokens  *int64  `json:"prefill_tokens"`
	DecodeTokens   *int64  `json:"decode_tokens"`
	RuntimeMode    *string `json:"runtime_mode"`
	PrefixQueries  *int64  `json:"prefix_cache_queries"`
	PrefixHits     *int64  `json:"prefix_cache_hits"`
	Footer         bool    `json:"footer"`
}

// L1Fields are the Layer-1 field names the Layer-2 rules read.
var L1Fields = []string{"step", "submit_mono_ns", "complete_mono_ns", "model_executed", "num_prefill_reqs", "num_decode_reqs",
	"prefill_tokens", "decode_tokens", "runtime_mode", "prefix_cache_queries", "prefix_cache_hits"}

// ReadL1Steps reads a Layer-1 stream's data lines (the footer line is
// skipped), sorted by submit time. A line that does not decode, or lacks
// a required field, is an error: the join cannot be told.
func ReadL1Steps(r io.Reader) ([]L1Step, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var out []L1Step
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		var s L1Step
		if err := json.Unmarshal(line, &s); err != nil {
			return nil, fmt.Errorf("layer1 line %d: %w", n, err)
		}
		if s.Footer {
			continue
		}
		if s.Step == nil || s.SubmitMonoNS == nil || s.PrefillTokens == nil || s.DecodeTokens == nil {
			return nil, fmt.Errorf("layer1 line %d: needs step, submit_mono_ns, prefill_tokens and decode_tokens", n)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("layer1: %w", err)
	}
	sort.SliceStable(out, func(i, j int) bool { return *out[i].SubmitMonoNS < *out[j].SubmitMonoNS })
	return out, nil
}

// ReadL1File reads a Layer-1 stream from a file.
func ReadL1File(path string) ([]L1Step, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("layer1: %w", err)
	}
	defer f.Close()
	return ReadL1Steps(f)
}

// Phase windows: the load client's phase file gives each profile window's
// CLOCK_MONOTONIC bounds (the profile line to the next line) and the clean
// segment before the first window.
type monoSpan struct{ lo, hi int64 }

type phaseBounds struct {
	profiles  []monoSpan // by profile index, in order
	lastClean *monoSpan  // the clean segment adjacent to the first window
	// wallMinusMono is a line's wall-clock time minus its CLOCK_MONOTONIC
	// time (the first line whose t parses), which maps a trace's
	// baseTimeNanoseconds-anchored clock to the monotonic one.
	wallMinusMono int64
	haveWall      bool
}

// ReadPhaseBounds reads the profile windows and the last clean segment of
// a phase file.
func readPhaseBounds(path string) (phaseBounds, error) {
	var pb phaseBounds
	lines, err := readPhaseLines(path)
	if err != nil {
		return pb, err
	}
	for _, p := range lines {
		if w, err := time.Parse(time.RFC3339Nano, p.T); err == nil && !pb.haveWall {
			pb.wallMinusMono, pb.haveWall = w.UnixNano()-p.MonoNS, true
		}
	}
	for i, p := range lines {
		if i+1 >= len(lines) {
			break
		}
		s := monoSpan{p.MonoNS, lines[i+1].MonoNS}
		switch p.Phase {
		case phasefile.Profile:
			pb.profiles = append(pb.profiles, s)
		case phasefile.Clean:
			if len(pb.profiles) == 0 {
				c := s
				pb.lastClean = &c
			}
		}
	}
	return pb, nil
}

// readPhaseLines reads a phase file's lines.
func readPhaseLines(path string) ([]phasefile.Line, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("phases: %w", err)
	}
	lines, err := phasefile.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("phases %w", err) // phases line N: ...
	}
	return lines, nil
}

// joinOutcome is the join of one window's annotations.
type joinOutcome struct {
	recs       []int // per annotation, the index of its record in the stream; -1 when none
	placements int   // placements of the whole window that fit
	problems   []string
}

func (j joinOutcome) ok() bool { return len(j.problems) == 0 }

// compatible: tokens equal, requests equal where the record has them, and
// the record executed the model.
func compatible(a annot, r L1Step) bool {
	if r.ModelExecuted != nil && !*r.ModelExecuted {
		return false
	}
	if *r.PrefillTokens != a.ctxTok || *r.DecodeTokens != a.genTok {
		return false
	}
	if r.PrefillReqs != nil && *r.PrefillReqs != a.ctxReqs || r.DecodeReqs != nil && *r.DecodeReqs != a.genReqs {
		return false
	}
	return true
}

type annot struct {
	name                             string
	tsNS                             float64
	ctxReqs, ctxTok, genReqs, genTok int64
}

// joinWindow joins annotations (in time order, trace clock) to records
// (sorted by submit time, CLOCK_MONOTONIC; cands their indices allowed for
// this window). The clocks differ by an unknown offset: each record
// compatible with the first annotation fixes one; under it every
// annotation must find exactly one record submitted within tolNS of its
// start, compatible, later in step order than the previous one's. Exactly
// one placement of the whole window must fit.
//
// When the trace's clock maps to the monotonic one (expect: the offset
// that the trace's baseTimeNanoseconds and the phase file's wall and
// monotonic times give), only offsets within clockTolNS of it are tried.
func joinWindow(as []annot, recs []L1Step, cands []int, tolNS float64, expect *float64, clockTolNS float64) joinOutcome {
	out := joinOutcome{recs: make([]int, len(as))}
	for i := range out.recs {
		out.recs[i] = -1
	}
	if len(as) == 0 {
		return out
	}
	var best joinOutcome
	bestN := -1
	var fits []joinOutcome
	for _, ri := range cands {
		if !compatible(as[0], recs[ri]) {
			continue
		}
		off := float64(*recs[ri].SubmitMonoNS) - as[0].tsNS
		if expect != nil && math.Abs(off-*expect) > clockTolNS {
			continue
		}
		p := place(as, recs, cands, off, tolNS)
		n := 0
		for _, x := range p.recs {
			if x >= 0 {
				n++
			}
		}
		if p.ok() {
			fits = append(fits, p)
		} else if n > bestN {
			best, bestN = p, n
		}
	}
	switch {
	case len(fits) == 1:
		fits[0].placements = 1
		return fits[0]
	case len(fits) > 1:
		out.placements = len(fits)
		out.problems = append(out.problems, fmt.Sprintf("ambiguous: the %d annotations fit %d placements in Layer 1 (first at steps %s and %s)",
			len(as), len(fits), stepList(fits[0].recs, recs), stepList(fits[1].recs, recs)))
		return out
	case bestN < 0:
		out.problems = append(out.problems, fmt.Sprintf("annotation 1 (%s) matches the tokens of no Layer-1 record of the window at its time", as[0].name))
		return out
	}
	return best
}

// place tries one clock offset.
func place(as []annot, recs []L1Step, cands []int, off, tolNS float64) joinOutcome {
	out := joinOutcome{recs: make([]int, len(as))}
	lastStep := int64(math.MinInt64)
	used := map[int]bool{}
	for i, a := range as {
		out.recs[i] = -1
		want := a.tsNS + off
		var near, fit []int
		// cands ascend, and so do their submit times
		k := sort.Search(len(cands), func(k int) bool { return float64(*recs[cands[k]].SubmitMonoNS) >= want-tolNS })
		for ; k < len(cands) && float64(*recs[cands[k]].SubmitMonoNS) <= want+tolNS; k++ {
			ri := cands[k]
			near = append(near, ri)
			if compatible(a, recs[ri]) {
				fit = append(fit, ri)
			}
		}
		switch {
		case len(fit) > 1:
			out.problems = append(out.problems, fmt.Sprintf("annotation %d (%s): %d compatible Layer-1 records (steps %s)", i+1, a.name, len(fit), stepList(fit, recs)))
		case len(fit) == 1 && (used[fit[0]] || *recs[fit[0]].Step <= lastStep):
			out.problems = append(out.problems, fmt.Sprintf("annotation %d (%s): Layer-1 step %d is out of order", i+1, a.name, *recs[fit[0]].Step))
		case len(fit) == 1:
			out.recs[i] = fit[0]
			used[fit[0]] = true
			lastStep = *recs[fit[0]].Step
		case len(near) > 0:
			r := recs[near[0]]
			out.problems = append(out.problems, fmt.Sprintf("annotation %d (%s) disagrees with Layer-1 step %d (prefill_tokens %d, decode_tokens %d)", i+1, a.name, *r.Step, *r.PrefillTokens, *r.DecodeTokens))
		default:
			out.problems = append(out.problems, fmt.Sprintf("annotation %d (%s): no Layer-1 record within %.1f ms", i+1, a.name, tolNS/1e6))
		}
	}
	return out
}

func stepList(idx []int, recs []L1Step) string {
	var s []string
	for _, i := range idx {
		if i >= 0 {
			s = append(s, fmt.Sprint(*recs[i].Step))
		} else {
			s = append(s, "-")
		}
	}
	return strings.Join(s, ",")
}
