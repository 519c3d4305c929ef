package schedule

import (
	"strings"
	"testing"

	"warden/pkg/gates"
	"warden/pkg/state"
	"warden/protocols"
)

// judge gives each point of A's search, in plan order, the verdict of a
// system whose SLO holds at rate r when holds(r); it returns the points
// judged up to n of them.
func judge(p *protocols.Plan, holds func(float64) bool, n int) []Point {
	spec := p.Phases[0].Capacity
	var points []Point
	for i, r := range p.Runs {
		if r.Cell != "A" || len(points) == n {
			continue
		}
		s := Search(spec, points)
		if s.Next != i {
			break
		}
		v := gates.Fail
		if holds(s.NextRate()) {
			v = gates.Pass
		}
		points = append(points, Point{Run: r.ID, Verdict: v})
	}
	return points
}

// TestCapacityNotMonotonic: a server whose SLO holds up to 6 requests/s
// but fails at 3 (the x050 follow-up of the found 6) gives a bisection
// "found 6" that its own follow-up contradicts: the found rate is not a
// capacity, and the search says which points contradict each other. A
// pass above a failed rate (the overload point above the bisection's
// first failure) is the same contradiction.
func TestCapacityNotMonotonic(t *testing.T) {
	p := capacityPlan(t)
	spec := p.Phases[0].Capacity
	points := judge(p, func(r float64) bool { return r <= 6 && r != 3 }, 99)
	s := Search(spec, points[:5])
	if s.Found != 6 || s.NotMonotonic != "" {
		t.Fatalf("the bisection alone: %+v; want found 6, monotonic", s)
	}
	if at, _ := NotMonotonic(spec, points[:5]); at != -1 {
		t.Fatalf("the bisection alone: contradiction at %d", at)
	}
	s = Search(spec, points)
	at, detail := NotMonotonic(spec, points)
	want := "point A.open.x050 failed the SLO at 3 requests/s, below point A.open.b5 that passed it at 6 requests/s"
	if s.Found != 6 || at != 5 || !strings.HasPrefix(detail, want) || s.NotMonotonic != detail || !strings.Contains(detail, "the found rate is not a capacity") {
		t.Fatalf("with x050 failing at 3: found %v, at %d, %q; want at 5: %q", s.Found, at, detail, want)
	}
	// the later follow-ups pass: the first contradiction stays the one named
	if at2, _ := NotMonotonic(spec, append(points[:6:6], Point{Run: "A.open.x080", Verdict: gates.Pass})); at2 != 5 {
		t.Fatalf("the first contradiction is at %d, want 5", at2)
	}

	// overload at 1.2 x 8 = 9.6 passes above b2's failure at 9
	points = judge(p, func(r float64) bool { return r <= 8 || r > 9.5 }, 99)
	at, detail = NotMonotonic(spec, points)
	if at != 8 || !strings.HasPrefix(detail, "point A.open.x120 passed the SLO at 9.6 requests/s, above point A.open.b2 that failed it at 9 requests/s") {
		t.Fatalf("overload passing above a failure: at %d, %q", at, detail)
	}
	// a monotonic server never contradicts itself, at any capacity
	for _, c := range []float64{1, 2.5, 6, 12, 40} {
		if at, d := NotMonotonic(spec, judge(p, func(r float64) bool { return r <= c }, 99)); at != -1 {
			t.Fatalf("capacity %v: %q", c, d)
		}
	}
}

// unitOf is the unit of run id in p.
func unitOf(p *protocols.Plan, id string) int {
	for _, r := range p.Runs {
		if r.ID == id {
			return r.Unit
		}
	}
	return -1
}

// TestCapacityNotMonotonicStops: the point that shows a search's verdicts
// not monotonic stops the campaign for review when it ends
// (on_non_monotonic: stop, the default), naming both points; once
// resumed, the search's remaining points run. on_non_monotonic: continue
// goes on at once.
func TestCapacityNotMonotonicStops(t *testing.T) {
	p := capacityPlan(t)
	if p.Phases[0].Capacity.OnNonMonotonic != "stop" {
		t.Fatalf("on_non_monotonic defaults to %q, want stop", p.Phases[0].Capacity.OnNonMonotonic)
	}
	points := judge(p, func(r float64) bool { return r <= 6 && r != 3 }, 6)
	w := newWorld(p)
	for _, pt := range points {
		w.done(pt.Run)
	}
	w.CapacityPoints = map[string][]Point{"cap/A": points}
	w.Ended = []UnitEnd{{Unit: unitOf(p, "A.open.x050")}}
	d := Decide(w.View)
	if d.Stop == nil || d.Stop.Reason != state.StopCapacityNotMonotonic || !strings.Contains(d.Stop.Detail, "capacity search cap/A: point A.open.x050 failed the SLO at 3 requests/s, below point A.open.b5") || d.Stop.Figures["found_rps"] != 6 {
		t.Fatalf("decision %+v; want a capacity-not-monotonic stop naming both points", d)
	}
	// resumed after review: nothing ended yet, the next follow-up runs
	w.Ended = nil
	if d := Decide(w.View); d.Stop != nil || len(d.Launch) != 1 || d.Launch[0].Runs[0].ID != "A.open.x080" {
		t.Fatalf("after review: %+v; want A.open.x080 launched", d)
	}
	// a later point's end stops nothing again
	w.Ended = []UnitEnd{{Unit: unitOf(p, "A.open.b5")}}
	if d := Decide(w.View); d.Stop != nil {
		t.Fatalf("another unit ended: %+v", d.Stop)
	}
	cont := *p.Phases[0].Capacity
	cont.OnNonMonotonic = "continue"
	p.Phases[0].Capacity = &cont
	w.Ended = []UnitEnd{{Unit: unitOf(p, "A.open.x050")}}
	if d := Decide(w.View); d.Stop != nil || len(d.Launch) != 1 || d.Launch[0].Runs[0].ID != "A.open.x080" {
		t.Fatalf("on_non_monotonic continue: %+v; want A.open.x080 launched", d)
	}
}

// TestCapacityBelowRangeNotRun: with an SLO no point meets, the campaign
// was complete while the search's other points stayed pending for ever.
// Once rate_min fails, the search's remaining points are not run, with
// the reason; a point already not run, or live, is not named again.
func TestCapacityBelowRangeNotRun(t *testing.T) {
	p := capacityPlan(t)
	w := newWorld(p).done("A.open.b1", "B.open.b1")
	w.CapacityPoints = map[string][]Point{
		"cap/A": {{Run: "A.open.b1", Verdict: gates.Fail, Detail: "SLO not met: success 0.5 (bound 0.999)"}},
		"cap/B": {{Run: "B.open.b1", Verdict: gates.Fail, Detail: "SLO not met"}},
	}
	d := Decide(w.View)
	if !d.Complete || len(d.NotRun) != 16 {
		t.Fatalf("decision: complete %v, %d not run %v; want complete with the 16 points after A's and B's b1", d.Complete, len(d.NotRun), d.NotRun)
	}
	want := "capacity search cap/A ended below range: its first point A.open.b1, at rate_min 1 requests/s, failed the SLO (SLO not met: success 0.5 (bound 0.999)), so no later point runs"
	if d.NotRun[0].Run != "A.open.b2" || d.NotRun[0].Reason != want {
		t.Fatalf("first not run %+v; want A.open.b2: %q", d.NotRun[0], want)
	}
	reasons := NotRunReasons(d.NotRun)
	for i := range w.Runs {
		if reasons[w.Runs[i].ID] != "" && w.Runs[i].ID != "A.open.b2" {
			w.Runs[i].NotRunReason = reasons[w.Runs[i].ID]
		}
	}
	w.set("A.open.b2", state.Measuring)
	if d := Decide(w.View); len(d.NotRun) != 0 {
		t.Fatalf("named again: %v", d.NotRun)
	}
}

// TestStanding: where a search stands as the campaign records it, and the
// event of the one point that shows its verdicts not monotonic.
func TestStanding(t *testing.T) {
	p := capacityPlan(t)
	spec := p.Phases[0].Capacity
	points := judge(p, func(r float64) bool { return r <= 6 && r != 3 }, 99)
	for n := 1; n <= len(points); n++ {
		cs, ev := Standing("cap/A", spec, points[:n])
		if cs.Search != "cap/A" || cs.Judged != n || (n >= 5) != (cs.FoundRPS == 6) || (n >= 6) != (cs.NotMonotonic != "") || cs.Done != (n == len(points)) {
			t.Fatalf("after %d points: %+v", n, cs)
		}
		if (ev != nil) != (n == 6) {
			t.Fatalf("after %d points: event %+v; want one after the sixth, x050", n, ev)
		}
		if ev != nil && (ev.Reason != string(state.StopCapacityNotMonotonic) || !strings.HasPrefix(ev.Message, "capacity search cap/A: point A.open.x050 failed") || ev.Figures["found_rps"] != 6 || ev.Figures["rate_rps"] != 3) {
			t.Fatalf("event %+v", ev)
		}
	}
}
