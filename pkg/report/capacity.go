package report

import (
	"fmt"
	"html/template"
	"math"
	"strings"

	"warden/pkg/api"
	"warden/pkg/gates"
	"warden/pkg/schedule"
	"warden/protocols"
)

// capacityView is one capacity search of the report: its points in run
// order with their recorded judgements, the rate it found, and a curve.
type capacityView struct {
	Search string
	Phase  string
	Found  float64 // 0 until the bisection ended
	Done   bool
	Stop   string
	// NotMonotonic says why Found is not a capacity ("" when it is one)
	NotMonotonic string
	Points       []capacityRow
	SVG          template.HTML
}

type capacityRow struct {
	Run     string
	Rate    float64
	Verdict string
	Detail  string
}

// capacitySearches rebuilds each search of the plan from the points'
// recorded capacity-slo verdicts, as the controller decides from them
// (schedule.Search), so the rate the report shows is the one the campaign
// went on with.
func capacitySearches(rep api.Report, plan *protocols.Plan) []capacityView {
	if plan == nil {
		return nil
	}
	verdict := map[string]api.RunDetail{}
	for _, rd := range rep.Runs {
		verdict[rd.Run.ID] = rd
	}
	var order []string
	views := map[string]*capacityView{}
	points := map[string][]schedule.Point{}
	specs := map[string]*protocols.CapacitySpec{}
	for _, r := range plan.Runs {
		if r.Capacity == nil {
			continue
		}
		name := r.Capacity.Search
		if views[name] == nil {
			spec, ok := plan.CapacitySearch(r.Phase)
			if !ok {
				continue
			}
			views[name], specs[name] = &capacityView{Search: name, Phase: r.Phase}, spec
			order = append(order, name)
		}
		rd, ok := verdict[r.ID]
		if !ok || !rd.Run.Done {
			continue
		}
		for _, g := range rd.Gates {
			if g.Gate == schedule.CapacityGate && g.Attempt == rd.Run.Result {
				points[name] = append(points[name], schedule.Point{Run: r.ID, Verdict: g.Verdict, Detail: g.Detail, Figures: g.Figures})
				views[name].Points = append(views[name].Points, capacityRow{Run: r.ID, Rate: g.Figures["rate_rps"], Verdict: g.Verdict, Detail: g.Detail})
			}
		}
	}
	var out []capacityView
	for _, name := range order {
		v := views[name]
		st := schedule.Search(specs[name], points[name])
		v.Found, v.Done, v.Stop, v.NotMonotonic = st.Found, st.Done, st.Stop, st.NotMonotonic
		v.SVG = capacitySVG(v, specs[name])
		out = append(out, *v)
	}
	return out
}

// capacitySVG draws the judged points on the rate axis, passing above
// and failing below, and the rate found.
func capacitySVG(v *capacityView, spec *protocols.CapacitySpec) template.HTML {
	const left, top, w, h = 60.0, 10.0, float64(chartW) - 80, 90.0
	hi := spec.RateMax
	for _, p := range v.Points {
		hi = math.Max(hi, p.Rate)
	}
	x := func(r float64) float64 { return left + r/hi*w }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %.0f" width="100%%" role="img" aria-label="capacity search %s">`, chartW, top+h+30, esc(v.Search))
	fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.0f" y2="%.0f" class="axis"/>`, left, left+w, top+h, top+h)
	for i := 0; i <= 4; i++ {
		r := hi * float64(i) / 4
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" class="tick" text-anchor="middle">%.3g</text>`, x(r), top+h+14, r)
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" class="label">requests/s</text>`, left+w-60, top+h+26)
	for _, p := range v.Points {
		y, c := top+h*0.3, "#2e9d57"
		switch p.Verdict {
		case gates.Fail:
			y, c = top+h*0.7, "#d24a43"
		case gates.Pass:
		default:
			y, c = top+h*0.5, "#8a8f98"
		}
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="5" fill="%s"><title>%s at %.4g requests/s: %s %s</title></circle>`,
			x(p.Rate), y, c, esc(p.Run), p.Rate, esc(p.Verdict), esc(p.Detail))
	}
	if v.Found > 0 {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f" class="found" stroke="#3a78d4" stroke-dasharray="4,3"/><text x="%.1f" y="%.0f" class="label">found %.4g requests/s</text>`,
			x(v.Found), x(v.Found), top, top+h, x(v.Found)+4, top+10, v.Found)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
