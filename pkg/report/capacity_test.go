package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"warden/pkg/api"
	"warden/pkg/gates"
	"warden/pkg/schedule"
	"warden/pkg/state"
	"warden/protocols"
)

// TestCapacityNotACapacity: the report said "found 6 requests/s" of a
// search whose own follow-up at 3 requests/s failed the SLO. It says the
// found rate is not a capacity, and why.
func TestCapacityNotACapacity(t *testing.T) {
	plan, err := protocols.PlanFile("../../protocols/testdata/capacity.yaml", protocols.Options{})
	if err != nil {
		t.Fatal(err)
	}
	spec := plan.Phases[0].Capacity
	var rep api.Report
	var points []schedule.Point
	for i, r := range plan.Runs {
		if r.Cell != "A" {
			continue
		}
		s := schedule.Search(spec, points)
		if s.Next != i {
			break
		}
		rate := s.NextRate()
		v := gates.Fail
		if rate <= 6 && rate != 3 {
			v = gates.Pass
		}
		points = append(points, schedule.Point{Run: r.ID, Verdict: v})
		rep.Runs = append(rep.Runs, api.RunDetail{Run: state.Run{ID: r.ID, Done: true, Result: 1},
			Gates: []state.GateVerdict{{Gate: schedule.CapacityGate, Run: r.ID, Attempt: 1, Verdict: v, Figures: map[string]float64{"rate_rps": rate}}}})
	}
	views := capacitySearches(rep, plan)
	if len(views) != 2 || views[0].Found != 6 || !strings.HasPrefix(views[0].NotMonotonic, "point A.open.x050 failed the SLO at 3 requests/s, below point A.open.b5") || views[1].NotMonotonic != "" {
		t.Fatalf("searches %+v", views)
	}
	var b bytes.Buffer
	if err := WriteHTML(&b, &Data{Capacity: views}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `found <span class="num">6</span> requests/s: <strong class="not-a-capacity">not a capacity</strong>: point A.open.x050 failed the SLO at 3 requests/s`) {
		t.Fatalf("the page does not say the found rate is not a capacity")
	}
}

// TestCapacityCurves: a capacity search's judged points on a curve of
// each SLO figure against the rate (in order of rate, coloured by
// verdict, the bound drawn), and the same points in the table JSON and
// the capacity CSV; a point whose verdict records no rate is left off
// the curve, never drawn at 0.
func TestCapacityCurves(t *testing.T) {
	t.Parallel()
	bound := 100.0
	spec := &protocols.CapacitySpec{RateMin: 1, RateMax: 9, Resolution: 2, FollowUps: []float64{0.5}, Overload: 1.2,
		SLO: protocols.SLO{TTFTP99MsMax: &bound}, BisectionPoints: 3, MaxPoints: 5}
	plan := &protocols.Plan{Phases: []protocols.PhaseInfo{{Name: "cap", Kind: "capacity", Capacity: spec}}}
	// the bisection: 1 passes, (1+9)/2 = 5 passes, (5+9)/2 = 7 fails, so
	// 5 is found; then 0.5 x 5 and the overload point 1.2 x 5
	points := []struct {
		rate, ttft float64
		verdict    string
	}{{1, 20, "pass"}, {5, 80, "pass"}, {7, 150, "fail"}, {2.5, 40, "pass"}, {6, 120, "fail"}}
	var rep api.Report
	for i, p := range points {
		id := fmt.Sprintf("cap.A.p%d", i+1)
		plan.Runs = append(plan.Runs, protocols.Run{ID: id, Phase: "cap", Cell: "A", Load: "capacity", Capacity: &protocols.CapacityPoint{Search: "cap/A", Point: i + 1}})
		figs := map[string]float64{"rate_rps": p.rate, "ttft_p99_ms": p.ttft}
		rep.Runs = append(rep.Runs, api.RunDetail{Run: state.Run{ID: id, Phase: "cap", Cell: "A", Load: "capacity", Done: true, Result: 1}, State: "complete",
			Attempts: []state.Attempt{{N: 1, State: state.Complete, Dir: t.TempDir()}},
			Gates:    []state.GateVerdict{{Gate: schedule.CapacityGate, Run: id, Attempt: 1, Verdict: p.verdict, Figures: figs}}})
	}
	// a sixth run of the plan's search, judged without a recorded rate
	plan.Runs = append(plan.Runs, protocols.Run{ID: "cap.A.p6", Phase: "cap", Cell: "A", Load: "capacity", Capacity: &protocols.CapacityPoint{Search: "cap/A", Point: 6}})
	rep.Runs = append(rep.Runs, api.RunDetail{Run: state.Run{ID: "cap.A.p6", Phase: "cap", Cell: "A", Done: true, Result: 1}, State: "complete",
		Attempts: []state.Attempt{{N: 1, State: state.Complete, Dir: t.TempDir()}},
		Gates:    []state.GateVerdict{{Gate: schedule.CapacityGate, Run: "cap.A.p6", Attempt: 1, Verdict: "error", Detail: "no rate", Figures: map[string]float64{"ttft_p99_ms": 1}}}})
	d := Build(t.TempDir(), rep, plan)
	if len(d.Capacity) != 1 || d.Capacity[0].Found != 5 || len(d.Capacity[0].Curves) != 1 {
		t.Fatalf("capacity %+v", d.Capacity)
	}
	svg := string(d.Capacity[0].Curves[0])
	colour := map[string]string{"pass": "#2e9d57", "fail": "#d24a43"}
	last := -1
	for _, rate := range []float64{1, 2.5, 5, 6, 7} { // in order of rate
		for _, p := range points {
			if p.rate != rate {
				continue
			}
			pt := fmt.Sprintf(`fill="%s" class="pt" data-series="cap/A" data-x="%s" data-y="%s"`, colour[p.verdict], g(p.rate), g(p.ttft))
			i := strings.Index(svg, pt)
			if i < 0 || i < last {
				t.Errorf("the curve lacks %s, or not in order of rate", pt)
			}
			last = i
		}
	}
	if !strings.Contains(svg, `class="bound" data-y="100"`) || strings.Count(svg, `class="pt"`) != 5 || strings.Contains(svg, `data-x="0"`) {
		t.Errorf("the curve's bound or point count:\n%s", svg)
	}
	var tb struct {
		Capacity []CapacityTable `json:"capacity_searches"`
	}
	b, _ := json.Marshal(d.Table())
	if err := json.Unmarshal(b, &tb); err != nil || len(tb.Capacity) != 1 {
		t.Fatalf("table JSON %v: %s", err, b)
	}
	c := tb.Capacity[0]
	if c.Search != "cap/A" || c.FoundRPS == nil || *c.FoundRPS != 5 || c.Bounds["ttft_p99_ms"] != 100 || len(c.Points) != 6 ||
		*c.Points[2].RateRPS != 7 || c.Points[2].Figures["ttft_p99_ms"] != 150 || c.Points[2].Verdict != "fail" || c.Points[5].RateRPS != nil {
		t.Errorf("capacity JSON %+v", c)
	}
	var csvOut bytes.Buffer
	if err := WriteCapacityCSV(&csvOut, d); err != nil {
		t.Fatal(err)
	}
	want := "search,phase,point,run,rate_rps,verdict,figure,value,bound,found_rps\n"
	for i, p := range points {
		want += fmt.Sprintf("cap/A,cap,%d,cap.A.p%d,%s,%s,ttft_p99_ms,%s,100,5\n", i+1, i+1, g(p.rate), p.verdict, g(p.ttft))
	}
	want += "cap/A,cap,6,cap.A.p6,,error,ttft_p99_ms,1,100,5\n"
	if csvOut.String() != want {
		t.Errorf("capacity CSV:\n%s\nwant\n%s", csvOut.String(), want)
	}
}
