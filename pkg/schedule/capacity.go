package schedule

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"warden/pkg/gates"
	"warden/pkg/state"
	"warden/protocols"
)

// A capacity search (seed 000 section 13: "use bisection or a piecewise
// search to locate the largest sustainable λ*, then repeat at 0.5λ*,
// 0.8λ*, 0.95λ* and in the overload region") is decided point by point
// from the verdicts of the points recorded so far: Search is a pure
// function of the plan's spec and those verdicts, so a controller that
// resumes after a crash decides the same next point at the same rate.

// Point is a recorded capacity point's verdict on the search's SLO: pass,
// fail or error (the point ran and could not be judged, or did not end
// CapacityGate is the gate verdict a capacity point's judgement on its
// search's SLO is recorded as, with the point's rate (rate_rps) among its
// figures: what later decisions, a resumed controller and the report read.
const CapacityGate = "capacity-slo"

// with a result).
type Point struct {
	Run     string             `json:"run"`
	Verdict string             `json:"verdict"`
	Detail  string             `json:"detail,omitempty"`
	Figures map[string]float64 `json:"figures,omitempty"`
}

// SearchState is where a capacity search stands.
type SearchState struct {
	// Rates are the rates of the points decided so far, in plan order
	// (the recorded ones, then the next).
	Rates []float64 `json:"rates"`
	// Lo is the largest rate that passed, Hi the smallest that failed (or
	// rate_max, never run); Found is λ*, Lo once the bisection is over.
	Lo    float64 `json:"lo"`
	Hi    float64 `json:"hi"`
	Found float64 `json:"found,omitempty"`
	// Next is the plan-order index of the point to run now, -1 when none.
	Next int `json:"next"`
	// Done says no point is left to run; Stop why the search ended before
	// its follow-ups: "below-range" (rate_min fails the SLO) or "error"
	// (a point could not be judged).
	Done bool   `json:"done"`
	Stop string `json:"stop,omitempty"`
	// NotMonotonic, when set, says why Found is not a capacity: the first
	// judged point, in plan order, that failed the SLO at a rate no higher
	// than one that passed it, or passed at a rate no lower than one that
	// failed (NotMonotonic, the function).
	NotMonotonic string `json:"not_monotonic,omitempty"`
}

// NextRate is the rate of the point to run now.
func (s SearchState) NextRate() float64 {
	if s.Next < 0 || s.Next >= len(s.Rates) {
		return 0
	}
	return s.Rates[s.Next]
}

// Search decides a capacity search from the verdicts of its recorded
// points, in plan order (the bisection points, then the follow-ups and
// the overload point). Only the bisection's verdicts steer it: the first
// point runs at rate_min, each later one at the middle of [Lo, Hi]. It
// says, too, whether the verdicts so far are monotonic.
func Search(spec *protocols.CapacitySpec, points []Point) SearchState {
	s := search(spec, points)
	_, s.NotMonotonic = notMonotonic(s.Rates, points)
	return s
}

// NotMonotonic returns the plan-order index of the first judged point of
// the search whose verdict contradicts one before it (a fail at a rate no
// higher than a pass, or a pass at a rate no lower than a fail: the SLO
// is then not monotonic in the rate, and the bisection's λ* is not a
// capacity), and why; -1 and "" when the verdicts agree. Error verdicts
// contradict nothing.
func NotMonotonic(spec *protocols.CapacitySpec, points []Point) (at int, detail string) {
	return notMonotonic(search(spec, points).Rates, points)
}

func notMonotonic(rates []float64, points []Point) (int, string) {
	pass, fail := -1, -1 // the highest pass and the lowest fail so far
	for i := 0; i < len(points) && i < len(rates); i++ {
		r := rates[i]
		switch points[i].Verdict {
		case gates.Pass:
			if fail >= 0 && rates[fail] <= r {
				return i, fmt.Sprintf("point %s passed the SLO at %.4g requests/s, above point %s that failed it at %.4g requests/s: the SLO does not fall with the rate, so the found rate is not a capacity",
					points[i].Run, r, points[fail].Run, rates[fail])
			}
			if pass < 0 || r > rates[pass] {
				pass = i
			}
		case gates.Fail:
			if pass >= 0 && r <= rates[pass] {
				return i, fmt.Sprintf("point %s failed the SLO at %.4g requests/s, below point %s that passed it at %.4g requests/s: the SLO does not fall with the rate, so the found rate is not a capacity",
					points[i].Run, r, points[pass].Run, rates[pass])
			}
			if fail < 0 || r < rates[fail] {
				fail = i
			}
		}
	}
	return -1, ""
}

func search(spec *protocols.CapacitySpec, points []Point) SearchState {
	s := SearchState{Lo: spec.RateMin, Hi: spec.RateMax, Next: -1}
	for i := range spec.BisectionPoints {
		rate := spec.RateMin
		if i > 0 {
			rate = (s.Lo + s.Hi) / 2
		}
		s.Rates = append(s.Rates, rate)
		if i >= len(points) {
			s.Next = i
			return s
		}
		switch points[i].Verdict {
		case gates.Pass:
			s.Lo = rate
		case gates.Fail:
			if i == 0 {
				s.Hi, s.Done, s.Stop = rate, true, "below-range"
				return s
			}
			s.Hi = rate
		default:
			s.Done, s.Stop = true, gates.Error
			return s
		}
	}
	s.Found = s.Lo
	for j, f := range append(append([]float64(nil), spec.FollowUps...), spec.Overload) {
		s.Rates = append(s.Rates, f*s.Found)
		if k := spec.BisectionPoints + j; k >= len(points) {
			s.Next = k
			return s
		}
	}
	s.Done = true
	return s
}

// capacityRequired says whether capacity point r must execute: it ran,
// or it is the point its search decides next; known is false while the
// search has not reached it.
func capacityRequired(r protocols.Run, v View) (need, known bool) {
	spec, ok := v.Plan.CapacitySearch(r.Phase)
	if !ok {
		return true, true // checkCapacity refuses the plan first
	}
	points := v.CapacityPoints[r.Capacity.Search]
	s := Search(spec, points)
	switch i := r.Capacity.Point - 1; {
	case i < len(points) || i == s.Next:
		return true, true
	case s.Done:
		return false, true
	}
	return false, false
}

// withRate is r as it launches: a capacity point carries the rate its
// search decided from the recorded points.
func withRate(r protocols.Run, v View) protocols.Run {
	if r.Capacity == nil {
		return r
	}
	pt := *r.Capacity
	if spec, ok := v.Plan.CapacitySearch(r.Phase); ok {
		if s := Search(spec, v.CapacityPoints[pt.Search]); s.Next == pt.Point-1 {
			pt.Rate = s.NextRate()
		}
	}
	r.Capacity = &pt
	return r
}

// checkCapacity says where the records and the plan's capacity searches
// disagree: a point of a phase without a search, or a point whose verdict
// is given when it is not done or missing when it is (the search would
// decide from what the records do not say).
func checkCapacity(v View, done map[string]bool) error {
	for _, r := range v.Plan.Runs {
		if r.Capacity == nil {
			continue
		}
		if _, ok := v.Plan.CapacitySearch(r.Phase); !ok {
			return fmt.Errorf("run %s is a capacity point of phase %s, which has no capacity search", r.ID, r.Phase)
		}
		points := v.CapacityPoints[r.Capacity.Search]
		i := r.Capacity.Point - 1
		if judged := i < len(points); judged != done[r.ID] || (judged && points[i].Run != r.ID) {
			return fmt.Errorf("capacity point %s (point %d of %s): done %t, but %d points of its search are judged", r.ID, r.Capacity.Point, r.Capacity.Search, done[r.ID], len(points))
		}
	}
	return nil
}

// capacityError is the stop for review a capacity point that could not be
// judged calls for: its search cannot go on, and the cause (an SLO bound
// the client's result does not report, an unreadable result) is likely
// every cell's.
func capacityError(v View) *Stop {
	for _, search := range slices.Sorted(maps.Keys(v.CapacityPoints)) {
		phase, _, _ := strings.Cut(search, "/")
		spec, ok := v.Plan.CapacitySearch(phase)
		if !ok {
			continue // checkCapacity refused it
		}
		points := v.CapacityPoints[search]
		if s := Search(spec, points); s.Stop == gates.Error {
			last := points[len(points)-1]
			for _, p := range points {
				if p.Verdict != gates.Pass && p.Verdict != gates.Fail {
					last = p
					break
				}
			}
			return &Stop{Reason: state.StopGateError, Detail: fmt.Sprintf("capacity search %s could not judge point %s: %s", search, last.Run, last.Detail)}
		}
	}
	return nil
}

// capacityNotMonotonic is the stop for review a search whose verdicts are
// not monotonic calls for, unless its protocol says on_non_monotonic:
// continue: once, when the point that shows it ends (a resume then runs
// the search's remaining points).
func capacityNotMonotonic(v View) *Stop {
	ended := map[int]bool{}
	for _, e := range v.Ended {
		ended[e.Unit] = true
	}
	for _, search := range slices.Sorted(maps.Keys(v.CapacityPoints)) {
		phase, _, _ := strings.Cut(search, "/")
		spec, ok := v.Plan.CapacitySearch(phase)
		if !ok || spec.OnNonMonotonic == "continue" {
			continue
		}
		points := v.CapacityPoints[search]
		at, detail := NotMonotonic(spec, points)
		if at < 0 {
			continue
		}
		for _, r := range v.Plan.Runs {
			if r.ID == points[at].Run && ended[r.Unit] {
				return &Stop{Reason: state.StopCapacityNotMonotonic, Detail: fmt.Sprintf("capacity search %s: %s (the protocol's on_non_monotonic: stop; a resume runs its remaining points)", search, detail),
					Figures: map[string]float64{"found_rps": Search(spec, points).Found}}
			}
		}
	}
	return nil
}

// NotRun is a run that will never run, and why.
type NotRun struct {
	Run    string
	Reason string
}

// NotRunReasons are nr's reasons by run, as the store records them.
func NotRunReasons(nr []NotRun) map[string]string {
	out := make(map[string]string, len(nr))
	for _, n := range nr {
		out[n.Run] = n.Reason
	}
	return out
}

// Standing is where search stands once the last of points is judged, as
// the campaign's record keeps it, and, when that point is the one that
// shows the search's verdicts not monotonic, the campaign event that says
// its found rate is not a capacity (nil otherwise).
func Standing(search string, spec *protocols.CapacitySpec, points []Point) (state.CapacitySearch, *state.Event) {
	s := Search(spec, points)
	cs := state.CapacitySearch{Search: search, Judged: len(points), Done: s.Done, Stop: s.Stop, FoundRPS: s.Found, NotMonotonic: s.NotMonotonic}
	at, detail := NotMonotonic(spec, points)
	if at < 0 || at != len(points)-1 {
		return cs, nil
	}
	return cs, &state.Event{Reason: string(state.StopCapacityNotMonotonic), Message: "capacity search " + search + ": " + detail,
		Figures: map[string]float64{"found_rps": s.Found, "rate_rps": s.Rates[at]}}
}

// capacityNotRun are the points of the searches that ended before
// reaching them (below range: rate_min failed the SLO, so no later point
// runs) and that the records do not say so of yet: they become not-run,
// never left pending.
func capacityNotRun(v View) []NotRun {
	recs := make(map[string]state.Run, len(v.Runs))
	for _, r := range v.Runs {
		recs[r.ID] = r
	}
	var out []NotRun
	for _, r := range v.Plan.Runs {
		spec, ok := v.Plan.CapacitySearch(r.Phase)
		if r.Capacity == nil || !ok {
			continue
		}
		points := v.CapacityPoints[r.Capacity.Search]
		s := Search(spec, points)
		rec := recs[r.ID]
		if !s.Done || s.Stop != "below-range" || r.Capacity.Point-1 < len(points) || rec.Done || rec.NotRun != "" || rec.NotRunReason != "" || rec.LastState.Live() {
			continue
		}
		out = append(out, NotRun{Run: r.ID, Reason: fmt.Sprintf("capacity search %s ended below range: its first point %s, at rate_min %.4g requests/s, failed the SLO (%s), so no later point runs",
			r.Capacity.Search, points[0].Run, spec.RateMin, points[0].Detail)})
	}
	return out
}

// result is the part of a client's result.json (loadgen's
// warden.loadgen.result/1) an SLO reads; a pointer is nil when the field
// is absent.
type result struct {
	Totals *struct {
		Admitted *float64          `json:"admitted"`
		ByClass  map[string]*int64 `json:"by_class"`
	} `json:"totals"`
	Clean *struct {
		Latency *latency `json:"latency"`
	} `json:"clean"`
	Audio    *audio `json:"audio"`
	Segments []struct {
		Kind     string `json:"kind"`
		Admitted *int64 `json:"admitted"`
		Ended    *int64 `json:"ended"`
	} `json:"segments"`
}

type dist struct {
	N   *int64   `json:"n"`
	P99 *float64 `json:"p99"`
}

// p99 is a distribution's p99, or why it cannot be read: an absent field,
// or an empty sample (whose zeros would pass any bound).
func (d *dist) p99(field string) (float64, error) {
	switch {
	case d == nil || d.P99 == nil || d.N == nil:
		return 0, fmt.Errorf("the result has no %s", field)
	case *d.N == 0:
		return 0, fmt.Errorf("%s is of no requests", field)
	}
	return *d.P99, nil
}

// JudgePoint judges a capacity point's client result (the bytes of its
// result.json) against the SLO: pass when every bound the SLO gives holds,
// fail when one does not, error when the result is not JSON or lacks a
// figure a bound names (fail closed: a bound that cannot be read never
// passes).
func JudgePoint(run string, slo protocols.SLO, raw []byte) Point {
	p := Point{Run: run, Verdict: gates.Error, Figures: map[string]float64{}}
	var r result
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&r); err != nil {
		p.Detail = "the client result is not JSON: " + err.Error()
		return p
	}
	var broken, missing []string
	for _, b := range sloBounds(slo) {
		v, err := b.figure(&r)
		if err != nil {
			missing = append(missing, err.Error())
			continue
		}
		p.Figures[b.name] = v
		if !b.holds(v) {
			broken = append(broken, fmt.Sprintf("%s %.6g (bound %.6g)", b.name, v, *b.bound))
		}
	}
	switch {
	case len(missing) > 0:
		p.Detail = strings.Join(missing, "; ")
	case len(broken) > 0:
		p.Verdict, p.Detail = gates.Fail, "SLO not met: "+strings.Join(broken, ", ")
	default:
		p.Verdict = gates.Pass
	}
	return p
}

// sloBound is one bound of an SLO: the figure it reads and its rule.
type sloBound struct {
	name   string
	bound  *float64
	figure func(*result) (float64, error)
	holds  func(float64) bool
}

// sloBounds are the bounds slo gives, in the reference's order.
func sloBounds(slo protocols.SLO) []sloBound {
	atMost := func(b *float64) func(float64) bool { return func(v float64) bool { return v <= *b } }
	all := []sloBound{
		{"success", slo.SuccessMin, successFraction, func(v float64) bool { return v >= *slo.SuccessMin }},
		{"ttft_p99_ms", slo.TTFTP99MsMax, func(r *result) (float64, error) {
			return r.latency(func(l latency) *dist { return l.TTFT }, "clean.latency.ttft_ms")
		}, atMost(slo.TTFTP99MsMax)},
		{"e2e_p99_ms", slo.E2EP99MsMax, func(r *result) (float64, error) {
			return r.latency(func(l latency) *dist { return l.E2E }, "clean.latency.e2e_ms")
		}, atMost(slo.E2EP99MsMax)},
		{"ttfa_p99_ms", slo.TTFAP99MsMax, func(r *result) (float64, error) {
			return r.audio(func(a audio) *dist { return a.TTFA }, "audio.ttfa_ms")
		}, atMost(slo.TTFAP99MsMax)},
		{"chunk_gap_p99_ms", slo.ChunkGapP99MsMax, func(r *result) (float64, error) {
			return r.audio(func(a audio) *dist { return a.Gaps }, "audio.gaps_ms")
		}, atMost(slo.ChunkGapP99MsMax)},
		{"rtf_p99", slo.RTFP99LT, func(r *result) (float64, error) { return r.audio(func(a audio) *dist { return a.RTF }, "audio.rtf") }, func(v float64) bool { return v < *slo.RTFP99LT }},
		{"queue_growth", slo.QueueGrowthMax, queueGrowth, atMost(slo.QueueGrowthMax)},
	}
	var given []sloBound
	for _, b := range all {
		if b.bound != nil {
			given = append(given, b)
		}
	}
	return given
}

type (
	latency = struct {
		TTFT *dist `json:"ttft_ms"`
		E2E  *dist `json:"e2e_ms"`
	}
	audio = struct {
		TTFA *dist `json:"ttfa_ms"`
		Gaps *dist `json:"gaps_ms"`
		RTF  *dist `json:"rtf"`
	}
)

func (r *result) latency(pick func(latency) *dist, field string) (float64, error) {
	if r.Clean == nil || r.Clean.Latency == nil {
		return 0, fmt.Errorf("the result has no %s", field)
	}
	return pick(*r.Clean.Latency).p99(field)
}

func (r *result) audio(pick func(audio) *dist, field string) (float64, error) {
	if r.Audio == nil {
		return 0, fmt.Errorf("the result has no %s (no audio summary)", field)
	}
	return pick(*r.Audio).p99(field)
}

// successFraction is the successes over every admitted request (seed 000
// section 12: "the success rate's denominator is every planned initial
// request actually sent").
func successFraction(r *result) (float64, error) {
	if r.Totals == nil || r.Totals.Admitted == nil || r.Totals.ByClass == nil || r.Totals.ByClass["success"] == nil {
		return 0, fmt.Errorf("the result has no totals.admitted and totals.by_class.success")
	}
	if *r.Totals.Admitted <= 0 {
		return 0, fmt.Errorf("the point admitted no request")
	}
	return float64(*r.Totals.ByClass["success"]) / *r.Totals.Admitted, nil
}

// queueGrowth is how much the queue grew over the clean window (seed 000
// section 13: "if the queue length keeps growing, the rate is judged
// unsustainable even when the window's throughput looks high"): the
// clean segments' admitted requests less those that ended, over the
// admitted. It needs at least one clean segment with both counts.
func queueGrowth(r *result) (float64, error) {
	var admitted, ended int64
	n := 0
	for _, s := range r.Segments {
		if s.Kind != "clean" {
			continue
		}
		if s.Admitted == nil || s.Ended == nil {
			return 0, fmt.Errorf("a clean segment of the result has no admitted or ended count")
		}
		admitted, ended, n = admitted+*s.Admitted, ended+*s.Ended, n+1
	}
	if n == 0 || admitted == 0 {
		return 0, fmt.Errorf("the result has no clean segment with admitted requests (segments[].kind clean)")
	}
	return math.Max(0, float64(admitted-ended)) / float64(admitted), nil
}
