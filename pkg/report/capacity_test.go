package report

import (
	"bytes"
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
