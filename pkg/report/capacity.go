package report

import (
	"encoding/csv"
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"strconv"
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
	// Bounds are the SLO's bounds by figure name (as the points' figures
	// name them); Curves, one per figure, the points' figure against
	// their rate.
	Bounds map[string]float64
	Curves []template.HTML
	spec   *protocols.CapacitySpec
}

type capacityRow struct {
	Run     string
	Rate    float64
	HasRate bool // the verdict records the point's rate
	Verdict string
	Detail  string
	Figures map[string]float64
}

// CapacityTable is a capacity search in the table JSON: its points in
// run order with their verdicts and figures, the SLO's bounds, and the
// rate found (null until the bisection ended).
type CapacityTable struct {
	Search   string             `json:"search"`
	Phase    string             `json:"phase"`
	FoundRPS *float64           `json:"found_rps"`
	Done     bool               `json:"done"`
	Stop     string             `json:"stop,omitempty"`
	Bounds   map[string]float64 `json:"slo_bounds"`
	Points   []CapacityPoint    `json:"points"`
}

// CapacityPoint is one judged point of a search.
type CapacityPoint struct {
	Run     string             `json:"run"`
	RateRPS *float64           `json:"rate_rps"`
	Verdict string             `json:"verdict"`
	Detail  string             `json:"detail,omitempty"`
	Figures map[string]float64 `json:"figures"`
}

func (v capacityView) table() CapacityTable {
	t := CapacityTable{Search: v.Search, Phase: v.Phase, Done: v.Done, Stop: v.Stop, Bounds: v.Bounds, Points: []CapacityPoint{}}
	if v.Found > 0 {
		f := v.Found
		t.FoundRPS = &f
	}
	for _, p := range v.Points {
		cp := CapacityPoint{Run: p.Run, Verdict: p.Verdict, Detail: p.Detail, Figures: map[string]float64{}}
		if p.HasRate {
			r := p.Rate
			cp.RateRPS = &r
		}
		for k, x := range p.Figures {
			if k != "rate_rps" {
				cp.Figures[k] = x
			}
		}
		t.Points = append(t.Points, cp)
	}
	return t
}

// sloFigures are the figures a capacity point's verdict records for each
// bound of its SLO (schedule.JudgePoint's names), with the bound.
func sloFigures(slo protocols.SLO) []struct {
	name  string
	bound *float64
} {
	return []struct {
		name  string
		bound *float64
	}{{"success", slo.SuccessMin}, {"ttft_p99_ms", slo.TTFTP99MsMax}, {"e2e_p99_ms", slo.E2EP99MsMax}, {"ttfa_p99_ms", slo.TTFAP99MsMax},
		{"chunk_gap_p99_ms", slo.ChunkGapP99MsMax}, {"rtf_p99", slo.RTFP99LT}, {"queue_growth", slo.QueueGrowthMax}}
}

// capacityCurves draws, per figure of the search's SLO, the points'
// figure against their rate, joined in order of rate, coloured by
// verdict, with the bound; a point without a recorded rate or that
// figure is left out of that curve.
func capacityCurves(v *capacityView, spec *protocols.CapacitySpec) []template.HTML {
	var out []template.HTML
	for _, f := range sloFigures(spec.SLO) {
		if f.bound == nil {
			continue
		}
		s := xySeries{Name: v.Search, Colour: "#6b7a8f", Join: true}
		for _, p := range v.Points {
			y, ok := p.Figures[f.name]
			if !ok || !p.HasRate {
				continue
			}
			s.Points = append(s.Points, xyPoint{X: p.Rate, Y: y, Fill: verdictColour(p.Verdict),
				Title: fmt.Sprintf("%s at %s requests/s: %s %s (%s)", p.Run, num(p.Rate), f.name, num(y), p.Verdict)})
		}
		if len(s.Points) == 0 {
			out = append(out, template.HTML(`<p class="muted">`+esc(f.name)+`: no point records it.</p>`))
			continue
		}
		sort.SliceStable(s.Points, func(i, j int) bool { return s.Points[i].X < s.Points[j].X })
		ch := xyChart{Class: "capacity-curve", Label: "capacity search " + v.Search + ": " + f.name + " against the rate", W: 540, H: 200,
			XLabel: "offered rate (requests/s)", YLabel: f.name, Series: []xySeries{s}, Bounds: []xyBound{{Y: *f.bound, Label: "bound " + num(*f.bound)}}}
		out = append(out, ch.svg())
	}
	return out
}

func verdictColour(v string) string {
	switch v {
	case gates.Pass:
		return "#2e9d57"
	case gates.Fail:
		return "#d24a43"
	}
	return "#8a8f98"
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
				rate, has := g.Figures["rate_rps"]
				views[name].Points = append(views[name].Points, capacityRow{Run: r.ID, Rate: rate, HasRate: has, Verdict: g.Verdict, Detail: g.Detail, Figures: g.Figures})
			}
		}
	}
	var out []capacityView
	for _, name := range order {
		v := views[name]
		st := schedule.Search(specs[name], points[name])
		v.Found, v.Done, v.Stop, v.NotMonotonic = st.Found, st.Done, st.Stop, st.NotMonotonic
		v.SVG = capacitySVG(v, specs[name])
		v.Bounds = map[string]float64{}
		for _, f := range sloFigures(specs[name].SLO) {
			if f.bound != nil {
				v.Bounds[f.name] = *f.bound
			}
		}
		v.Curves, v.spec = capacityCurves(v, specs[name]), specs[name]
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

// WriteCapacityCSV writes the capacity searches' points (--capacity-csv),
// one line per point and SLO figure: the search, the point's place, run,
// rate and verdict, the figure, its value and the bound.
func WriteCapacityCSV(w io.Writer, d *Data) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"search", "phase", "point", "run", "rate_rps", "verdict", "figure", "value", "bound", "found_rps"})
	for _, v := range d.Capacity {
		found := ""
		if v.Found > 0 {
			found = num(v.Found)
		}
		for i, p := range v.Points {
			rate := ""
			if p.HasRate {
				rate = num(p.Rate)
			}
			wrote := false
			for _, f := range sloFigures(v.spec.SLO) {
				if f.bound == nil {
					continue
				}
				val := ""
				if x, ok := p.Figures[f.name]; ok {
					val = num(x)
				}
				cw.Write([]string{v.Search, v.Phase, strconv.Itoa(i + 1), p.Run, rate, p.Verdict, f.name, val, num(*f.bound), found})
				wrote = true
			}
			if !wrote {
				cw.Write([]string{v.Search, v.Phase, strconv.Itoa(i + 1), p.Run, rate, p.Verdict, "", "", "", found})
			}
		}
	}
	cw.Flush()
	return cw.Error()
}
