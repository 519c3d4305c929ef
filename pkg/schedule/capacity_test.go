package schedule

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"warden/pkg/gates"
	"warden/pkg/state"
	"warden/protocols"
)

func capacityPlan(t *testing.T) *protocols.Plan {
	t.Helper()
	return planFile(t, "../../protocols/testdata/capacity.yaml")
}

// simulate runs a search against a system whose SLO holds up to capacity
// c, returning the points' rates in order and the final state.
func simulate(spec *protocols.CapacitySpec, c float64) ([]float64, SearchState) {
	var points []Point
	for {
		s := Search(spec, points)
		if s.Done {
			return s.Rates, s
		}
		v := gates.Fail
		if s.NextRate() <= c {
			v = gates.Pass
		}
		points = append(points, Point{Run: fmt.Sprint(len(points)), Verdict: v})
	}
}

func TestCapacitySearchFindsCapacity(t *testing.T) {
	spec := capacityPlan(t).Phases[0].Capacity
	if spec.BisectionPoints != 5 || spec.MaxPoints != 9 { // ceil(log2(16/1)) + 1; + 0.5, 0.8, 0.95, 1.2
		t.Fatalf("bisection %d, max %d points; want 5 and 9", spec.BisectionPoints, spec.MaxPoints)
	}
	for _, c := range []float64{1, 1.5, 4.2, 8, 9.99, 12.5, 16.9, 40} {
		rates, s := simulate(spec, c)
		if len(rates) != spec.MaxPoints || s.Stop != "" {
			t.Fatalf("capacity %v: %d points, stop %q; want all %d", c, len(rates), s.Stop, spec.MaxPoints)
		}
		want := math.Min(c, spec.RateMax)
		if s.Found > want || want-s.Found > spec.Resolution {
			t.Fatalf("capacity %v: found %v, not within one resolution (%v) below it", c, s.Found, spec.Resolution)
		}
		tail := rates[spec.BisectionPoints:]
		for i, f := range []float64{0.5, 0.8, 0.95, 1.2} {
			if tail[i] != f*s.Found {
				t.Fatalf("capacity %v: follow-up %d at %v, want %v x %v", c, i, tail[i], f, s.Found)
			}
		}
		again, s2 := simulate(spec, c)
		if fmt.Sprint(again, s2) != fmt.Sprint(rates, s) {
			t.Fatalf("capacity %v: the same results gave another search: %v vs %v", c, again, rates)
		}
	}
	// the exact sequence for a known capacity of 6: 1 passes, 9 fails, 5
	// passes, 7 fails, 6 passes: lambda* = 6.
	rates, s := simulate(spec, 6)
	if got := fmt.Sprint(rates); got != "[1 9 5 7 6 3 4.800000000000001 5.699999999999999 7.199999999999999]" || s.Found != 6 {
		t.Fatalf("rates %s, found %v", got, s.Found)
	}
}

func TestCapacitySearchStops(t *testing.T) {
	spec := capacityPlan(t).Phases[0].Capacity
	s := Search(spec, []Point{{Verdict: gates.Fail}})
	if !s.Done || s.Stop != "below-range" || s.Next != -1 || s.Found != 0 {
		t.Fatalf("rate_min failing: %+v; want done below-range, nothing next", s)
	}
	s = Search(spec, []Point{{Verdict: gates.Pass}, {Verdict: gates.Error}})
	if !s.Done || s.Stop != gates.Error || s.Next != -1 {
		t.Fatalf("a point that erred: %+v; want the search stopped on error", s)
	}
	s = Search(spec, []Point{{Verdict: ""}})
	if !s.Done || s.Stop != gates.Error {
		t.Fatalf("a point without a verdict: %+v; want error", s)
	}
}

func TestCapacityDecide(t *testing.T) {
	p := capacityPlan(t)
	w := newWorld(p)
	d := Decide(w.View)
	if len(d.Launch) != 1 || d.Launch[0].Runs[0].ID != "A.open.b1" || d.Launch[0].Runs[0].Capacity.Rate != 1 {
		t.Fatalf("first launch %+v; want A.open.b1 at rate_min", d.Launch)
	}
	if len(d.Reserve) != 1 || d.Reserve[0].Run != "A.open.b1" {
		t.Fatalf("reserve %+v; the point is reserved before it runs", d.Reserve)
	}
	// b1 passed: b2 at the middle of [1, 17]; the plan's run keeps rate 0.
	w.done("A.open.b1")
	w.CapacityPoints = map[string][]Point{"cap/A": {{Run: "A.open.b1", Verdict: gates.Pass}}}
	d = Decide(w.View)
	if len(d.Launch) != 1 || d.Launch[0].Runs[0].ID != "A.open.b2" || d.Launch[0].Runs[0].Capacity.Rate != 9 {
		t.Fatalf("second launch %+v; want A.open.b2 at 9", d.Launch)
	}
	if p.Runs[1].Capacity.Rate != 0 {
		t.Fatalf("the plan's run was changed: rate %v", p.Runs[1].Capacity.Rate)
	}
	// rate_min fails: the rest of A's search is skipped and B's starts.
	w = newWorld(p).done("A.open.b1")
	w.CapacityPoints = map[string][]Point{"cap/A": {{Run: "A.open.b1", Verdict: gates.Fail}}}
	d = Decide(w.View)
	if len(d.Launch) != 1 || d.Launch[0].Runs[0].ID != "B.open.b1" {
		t.Fatalf("after A's search stopped, launch %v; want B.open.b1", launched(d))
	}
	// a done point without a verdict, or a verdict of a point not done:
	// the records and the search disagree.
	w = newWorld(p).done("A.open.b1")
	if d := Decide(w.View); d.Err == nil || !strings.Contains(d.Err.Error(), "A.open.b1") {
		t.Fatalf("done point without a verdict: %+v", d)
	}
	w = newWorld(p)
	w.CapacityPoints = map[string][]Point{"cap/A": {{Run: "A.open.b1", Verdict: gates.Pass}}}
	if d := Decide(w.View); d.Err == nil {
		t.Fatalf("a verdict of a point not done: %+v", d)
	}
}

// TestCapacityErrorStops: a bisection point that could not be judged
// stops the campaign for review, naming the search and the point; an
// unjudgeable follow-up steers nothing.
func TestCapacityErrorStops(t *testing.T) {
	p := capacityPlan(t)
	w := newWorld(p).done("A.open.b1", "A.open.b2")
	w.CapacityPoints = map[string][]Point{"cap/A": {{Run: "A.open.b1", Verdict: gates.Pass}, {Run: "A.open.b2", Verdict: gates.Error, Detail: "the result has no audio.ttfa_ms"}}}
	d := Decide(w.View)
	if d.Stop == nil || d.Stop.Reason != state.StopGateError || d.Stop.Detail != "capacity search cap/A could not judge point A.open.b2: the result has no audio.ttfa_ms" {
		t.Fatalf("decision %+v; want a gate-error stop naming cap/A and A.open.b2", d)
	}
	var pts []Point
	for _, r := range p.Runs[:6] { // A's 5 bisection points and its first follow-up
		w.done(r.ID)
		pts = append(pts, Point{Run: r.ID, Verdict: gates.Pass})
	}
	pts[5].Verdict = gates.Error
	w.CapacityPoints = map[string][]Point{"cap/A": pts}
	if d := Decide(w.View); d.Stop != nil || len(d.Launch) != 1 || d.Launch[0].Runs[0].ID != "A.open.x080" {
		t.Fatalf("after an erring follow-up: %+v; want A.open.x080 launched", d)
	}
}

func TestCapacityComplete(t *testing.T) {
	p := capacityPlan(t)
	w := newWorld(p)
	w.CapacityPoints = map[string][]Point{}
	for _, cell := range []string{"A", "B"} {
		var pts []Point
		for _, r := range p.Runs {
			if r.Cell != cell {
				continue
			}
			w.done(r.ID)
			pts = append(pts, Point{Run: r.ID, Verdict: gates.Pass})
		}
		w.CapacityPoints["cap/"+cell] = pts
	}
	if d := Decide(w.View); !d.Complete || len(d.Launch) > 0 {
		t.Fatalf("every point done: %+v; want complete", d)
	}
}

func TestJudgePoint(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	slo := protocols.SLO{SuccessMin: f(0.999), TTFAP99MsMax: f(500), ChunkGapP99MsMax: f(200), RTFP99LT: f(1), QueueGrowthMax: f(0.05)}
	good := `{"totals": {"admitted": 1000, "by_class": {"success": 1000, "transport-error": 0}},
	  "audio": {"ttfa_ms": {"n": 900, "p99": 480}, "gaps_ms": {"n": 9000, "p99": 150}, "rtf": {"n": 900, "p99": 0.7}},
	  "segments": [{"kind": "warmup", "admitted": 50, "ended": 10}, {"kind": "clean", "admitted": 400, "ended": 395}, {"kind": "clean", "admitted": 400, "ended": 401}]}`
	cases := []struct {
		name, old, new, verdict, detail string
	}{
		{"pass", "", "", gates.Pass, ""},
		{"success", `"success": 1000`, `"success": 998`, gates.Fail, "success 0.998 (bound 0.999)"},
		{"ttfa", `"p99": 480`, `"p99": 501`, gates.Fail, "ttfa_p99_ms 501 (bound 500)"},
		{"rtf strictly below", `"p99": 0.7`, `"p99": 1`, gates.Fail, "rtf_p99 1 (bound 1)"},
		{"queue", `"ended": 401`, `"ended": 350`, gates.Fail, "queue_growth 0.06875 (bound 0.05)"},
		{"no audio", `"audio"`, `"audio_x"`, gates.Error, "the result has no audio.ttfa_ms (no audio summary)"},
		{"empty sample", `"ttfa_ms": {"n": 900`, `"ttfa_ms": {"n": 0`, gates.Error, "audio.ttfa_ms is of no requests"},
		{"no p99", `"gaps_ms": {"n": 9000, "p99": 150}`, `"gaps_ms": {"n": 9000}`, gates.Error, "the result has no audio.gaps_ms"},
		{"no totals", `"totals"`, `"totals_x"`, gates.Error, "the result has no totals.admitted and totals.by_class.success"},
		{"nothing admitted", `"admitted": 1000`, `"admitted": 0`, gates.Error, "the point admitted no request"},
		{"no clean segment", `"kind": "clean", "admitted": 400, "ended": 395}, {"kind": "clean"`, `"kind": "recovery", "admitted": 400, "ended": 395}, {"kind": "recovery"`, gates.Error, "the result has no clean segment"},
		{"segment without ended", `"admitted": 400, "ended": 395`, `"admitted": 400`, gates.Error, "a clean segment of the result has no admitted or ended count"},
		{"not JSON", good, "{", gates.Error, "the client result is not JSON"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			raw := good
			if tc.old != "" {
				if !strings.Contains(raw, tc.old) {
					t.Fatalf("test bug: %q not in the result", tc.old)
				}
				raw = strings.Replace(raw, tc.old, tc.new, 1)
			}
			p := JudgePoint("A.open.b1", slo, []byte(raw))
			if p.Verdict != tc.verdict || !strings.Contains(p.Detail, tc.detail) || p.Run != "A.open.b1" {
				t.Fatalf("verdict %s (%s); want %s with %q", p.Verdict, p.Detail, tc.verdict, tc.detail)
			}
		})
	}
	text := protocols.SLO{TTFTP99MsMax: f(100), E2EP99MsMax: f(2000)}
	raw := `{"clean": {"latency": {"ttft_ms": {"n": 10, "p99": 90}, "e2e_ms": {"n": 10, "p99": 2500}}}}`
	if p := JudgePoint("r", text, []byte(raw)); p.Verdict != gates.Fail || p.Figures["ttft_p99_ms"] != 90 || !strings.Contains(p.Detail, "e2e_p99_ms 2500") {
		t.Fatalf("text SLO: %+v", p)
	}
	if p := JudgePoint("r", text, []byte(`{"clean": {}}`)); p.Verdict != gates.Error || !strings.Contains(p.Detail, "clean.latency.ttft_ms") {
		t.Fatalf("text SLO without latency: %+v", p)
	}
}
