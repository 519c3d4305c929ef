package report

import (
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"
)

// xyChart is a small chart of points, drawn as inline SVG. Every point
// carries its exact figures as data attributes (data-series, data-x,
// data-y, each number in its shortest exact form), so that what the page
// draws can be read back from its DOM.
type xyChart struct {
	Class  string // the svg element's class besides "chart"
	Label  string // aria-label
	W, H   int    // the viewBox; W also scales the width
	XLabel string
	YLabel string
	LogX   bool
	// YFrom and YTo fix the y range when YTo > YFrom (a CDF's quantiles);
	// else it runs from 0 to a little above the largest value.
	YFrom, YTo float64
	YTicks     []float64 // with YFrom and YTo: where the y ticks are
	Series     []xySeries
	Bounds     []xyBound // horizontal lines: an SLO's bound
	Front      []xyPoint // the Pareto front, drawn as a dashed line
}

type xySeries struct {
	Name, Colour string
	Points       []xyPoint
	Join         bool // a line through the points, in their order
}

type xyPoint struct {
	X, Y   float64
	Lo, Hi *float64 // a whisker on y (a confidence interval)
	Title  string
	Fill   string // overrides the series' colour (a verdict's)
}

type xyBound struct {
	Y     float64
	Label string
}

// num is a figure in its shortest exact form.
func num(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// ticks are about n round values from 0 to max.
func ticks(max float64, n int) []float64 {
	if max <= 0 {
		return []float64{0}
	}
	raw := max / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for v := 0.0; v <= max*(1+1e-9); v += step {
		out = append(out, v)
	}
	return out
}

func (c xyChart) svg() template.HTML {
	const left, right, top, bottom = 58.0, 14.0, 12.0, 36.0
	w, h := float64(c.W)-left-right, float64(c.H)-top-bottom
	var xmin, xmax, ymax = math.Inf(1), 0.0, 0.0
	see := func(p xyPoint) {
		if c.LogX && p.X <= 0 {
			return
		}
		xmin, xmax, ymax = math.Min(xmin, p.X), math.Max(xmax, p.X), math.Max(ymax, p.Y)
		if p.Hi != nil {
			ymax = math.Max(ymax, *p.Hi)
		}
	}
	for _, s := range c.Series {
		for _, p := range s.Points {
			see(p)
		}
	}
	for _, b := range c.Bounds {
		ymax = math.Max(ymax, b.Y)
	}
	if ymax <= 0 {
		ymax = 1
	}
	ymax *= 1.1
	y0 := 0.0
	yticks := ticks(ymax/1.1, 4)
	if c.YTo > c.YFrom {
		y0, ymax, yticks = c.YFrom, c.YTo, c.YTicks
	}
	var x0, x1 float64
	if c.LogX {
		if math.IsInf(xmin, 1) {
			xmin, xmax = 1, 10
		}
		x0, x1 = math.Pow(10, math.Floor(math.Log10(xmin))), math.Pow(10, math.Ceil(math.Log10(xmax)))
		if x1 <= x0 {
			x1 = x0 * 10
		}
	} else {
		if xmax <= 0 {
			xmax = 1
		}
		x0, x1 = 0, xmax*1.08
	}
	xOf := func(v float64) float64 {
		if c.LogX {
			v = math.Max(v, x0)
			return left + (math.Log10(v)-math.Log10(x0))/(math.Log10(x1)-math.Log10(x0))*w
		}
		return left + (v-x0)/(x1-x0)*w
	}
	yOf := func(v float64) float64 { return top + h - (v-y0)/(ymax-y0)*h }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart %s" viewBox="0 0 %d %d" width="%d" role="img" aria-label="%s">`, c.Class, c.W, c.H, c.W, esc(c.Label))
	for _, v := range yticks {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" class="grid"/><text x="%.1f" y="%.1f" class="tick" text-anchor="end">%s</text>`,
			left, left+w, yOf(v), yOf(v), left-5, yOf(v)+3.5, esc(strconv.FormatFloat(v, 'g', 4, 64)))
	}
	var xt []float64
	if c.LogX {
		for d := x0; d <= x1*(1+1e-9); d *= 10 {
			for _, m := range []float64{1, 2, 5} {
				if v := d * m; v <= x1*(1+1e-9) {
					xt = append(xt, v)
				}
			}
		}
	} else {
		xt = ticks(x1/1.08, 5)
	}
	for _, v := range xt {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" class="grid"/><text x="%.1f" y="%.1f" class="tick" text-anchor="middle">%s</text>`,
			xOf(v), xOf(v), top, top+h, xOf(v), top+h+13, esc(strconv.FormatFloat(v, 'g', 4, 64)))
	}
	fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" class="axis"/><line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" class="axis"/>`,
		left, left+w, top+h, top+h, left, left, top, top+h)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" class="label" text-anchor="middle">%s</text>`, left+w/2, top+h+29, esc(c.XLabel))
	fmt.Fprintf(&b, `<text x="12" y="%.1f" class="label" text-anchor="middle" transform="rotate(-90 12 %.1f)">%s</text>`, top+h/2, top+h/2, esc(c.YLabel))
	for _, bd := range c.Bounds {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" class="bound" data-y="%s"/><text x="%.1f" y="%.1f" class="label" text-anchor="end">%s</text>`,
			left, left+w, yOf(bd.Y), yOf(bd.Y), num(bd.Y), left+w-2, yOf(bd.Y)-3, esc(bd.Label))
	}
	if len(c.Front) > 0 {
		var p strings.Builder
		for i, q := range c.Front {
			fmt.Fprintf(&p, "%s%.1f,%.1f ", map[bool]string{true: "M", false: "L"}[i == 0], xOf(q.X), yOf(q.Y))
		}
		fmt.Fprintf(&b, `<path d="%s" class="front"/>`, strings.TrimSpace(p.String()))
		for _, q := range c.Front {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="7" class="front-pt" data-x="%s" data-y="%s"/>`, xOf(q.X), yOf(q.Y), num(q.X), num(q.Y))
		}
	}
	for _, s := range c.Series {
		if s.Join && len(s.Points) > 1 {
			var p strings.Builder
			for i, q := range s.Points {
				fmt.Fprintf(&p, "%s%.1f,%.1f ", map[bool]string{true: "M", false: "L"}[i == 0], xOf(q.X), yOf(q.Y))
			}
			fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.6"/>`, strings.TrimSpace(p.String()), s.Colour)
		}
		for _, q := range s.Points {
			if q.Lo != nil && q.Hi != nil {
				fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" class="whisker" stroke="%s"/>`, xOf(q.X), xOf(q.X), yOf(*q.Lo), yOf(*q.Hi), s.Colour)
			}
			fill := s.Colour
			if q.Fill != "" {
				fill = q.Fill
			}
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="4" fill="%s" class="pt" data-series="%s" data-x="%s" data-y="%s"><title>%s</title></circle>`,
				xOf(q.X), yOf(q.Y), fill, esc(s.Name), num(q.X), num(q.Y), esc(q.Title))
		}
	}
	b.WriteString(`</svg>`)
	if len(c.Series) > 1 || (len(c.Series) == 1 && c.Series[0].Name != "") {
		b.WriteString(`<div class="legend">`)
		for _, s := range c.Series {
			fmt.Fprintf(&b, `<span class="key"><i style="background:%s"></i>%s</span>`, s.Colour, esc(s.Name))
		}
		if len(c.Front) > 0 {
			b.WriteString(`<span class="key"><i class="front-key"></i>Pareto front</span>`)
		}
		b.WriteString(`</div>`)
	}
	return template.HTML(b.String())
}
