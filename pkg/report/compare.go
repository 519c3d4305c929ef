package report

import (
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"warden/pkg/api"
	"warden/pkg/views"
	"warden/protocols"
)

// Options are the report's choices.
type Options struct {
	// Latency is the figure the throughput-latency curves and the Pareto
	// front set against throughput: one of LatencyChoices ("" is
	// DefaultLatency).
	Latency string
}

// DefaultLatency is the latency of the curves and the Pareto front unless
// Options says otherwise: p99 time to first token. It grows with the
// queueing a busier configuration causes, which is what a throughput gain
// costs a user; a mean or median hides the tail an SLO is written on.
// For long outputs, TPOT or ITL (tpot_p99_ms, itl_p99_ms) tell more;
// for speech, ttfa_p99_ms.
const DefaultLatency = "ttft_p99_ms"

// LatencyChoices are the figures Options.Latency may name: every latency
// statistic of the clean interval (views.LatencyKeys) and the audio p99s
// (milliseconds all).
func LatencyChoices() []string {
	return append(views.LatencyKeys(), "ttfa_p99_ms", "chunk_gap_p99_ms")
}

// CheckOptions says whether o can be reported.
func CheckOptions(o Options) error {
	if o.Latency != "" && !slices.Contains(LatencyChoices(), o.Latency) {
		return fmt.Errorf("--latency %q is not a latency the report has: one of %s", o.Latency, strings.Join(LatencyChoices(), ", "))
	}
	return nil
}

func (o Options) latency() string {
	if o.Latency == "" {
		return DefaultLatency
	}
	return o.Latency
}

// configFigureKeys are the figures of a configuration point (each the
// mean over its repeats): throughput, then the latencies.
func configFigureKeys() []string {
	return append(append([]string{"throughput_rps", "output_tokens_per_s"}, views.LatencyKeys()...), "ttfa_p99_ms", "chunk_gap_p99_ms", "rtf_p99")
}

// spreadKeys are the figures whose repeat-to-repeat spread the report
// gives, with the chosen latency's.
func spreadKeys(latency string) []string {
	keys := []string{"throughput_rps", "output_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
		"itl_p50_ms", "itl_p99_ms", "e2e_p50_ms", "e2e_p99_ms", "ttfa_p99_ms", "chunk_gap_p99_ms", "rtf_p99"}
	if !slices.Contains(keys, latency) {
		keys = append(keys, latency)
	}
	return keys
}

// ConfigPoint is one configuration at one cell and load: the ranked runs
// that differ only in their repeat, their figures averaged. In a config
// sweep, the points of a group (phase, load, the axes that do not choose
// the server) are the configurations compared.
type ConfigPoint struct {
	Curve   string   `json:"curve"`
	Group   string   `json:"group"`
	Config  string   `json:"config"` // the axes that choose the server ("config=C10"); the cell without such axes
	System  string   `json:"system"`
	Phase   string   `json:"phase"`
	Cell    string   `json:"cell"`
	Load    string   `json:"load"`
	Runs    []string `json:"runs"`
	Repeats int      `json:"repeats"`
	// Figures are the means over the runs that have each figure (null
	// when none has it), by configFigureKeys.
	Figures map[string]*float64 `json:"figures"`
	// Spread is each spreadKeys figure's repeat-to-repeat spread, for a
	// figure two or more of the runs have.
	Spread  map[string]Spread `json:"spread"`
	OnFront bool              `json:"on_pareto_front"`
	// Missing says why the point is not on its curve (no throughput, or no
	// figure of the chosen latency).
	Missing string `json:"missing,omitempty"`
}

// Spread is a figure over a configuration's repeats: n repeats, mean,
// sample standard deviation, range, and the 95% confidence interval of
// the mean (Student's t with n-1 degrees of freedom).
type Spread struct {
	N         int      `json:"repeats"`
	Mean      float64  `json:"mean"`
	SD        float64  `json:"sd"`
	Min       float64  `json:"min"`
	Max       float64  `json:"max"`
	CI95Low   float64  `json:"ci95_low"`
	CI95High  float64  `json:"ci95_high"`
	HalfWidth *float64 `json:"ci95_half_width_pct"` // of the mean; null for a mean of 0
}

// t975 are Student's t quantiles at 0.975, for 1..30 degrees of freedom
// (computed with mpmath's regularized incomplete beta, 17 digits).
var t975 = []float64{12.706204736174705, 4.3026527297494639, 3.1824463052837096, 2.7764451051977944, 2.5705818356363155,
	2.44691185114497, 2.3646242515927853, 2.3060041352041667, 2.2621571627982055, 2.2281388519862747,
	2.2009851600916399, 2.1788128296672289, 2.1603686564627925, 2.1447866879178038, 2.1314495455597757,
	2.1199052992212547, 2.1098155778333171, 2.1009220402410385, 2.0930240544083098, 2.0859634472658648,
	2.0796138447276804, 2.0738730679040262, 2.0686576104190487, 2.0638985616280258, 2.0595385527532977,
	2.0555294386428732, 2.0518305164802856, 2.0484071417952452, 2.0452296421327043, 2.0422724563012383}

// tQuantile975 is Student's t at 0.975 with df degrees of freedom: the
// table to 30, beyond it the Cornish-Fisher expansion around the normal
// quantile (within 1e-6 of the exact value from 31 on).
func tQuantile975(df int) float64 {
	if df >= 1 && df <= len(t975) {
		return t975[df-1]
	}
	z, n := 1.959963984540054, float64(df)
	z3, z5, z7, z9 := z*z*z, math.Pow(z, 5), math.Pow(z, 7), math.Pow(z, 9)
	return z + (z3+z)/(4*n) + (5*z5+16*z3+3*z)/(96*n*n) + (3*z7+19*z5+17*z3-15*z)/(384*n*n*n) +
		(79*z9+776*z7+1482*z5-1920*z3-945*z)/(92160*n*n*n*n)
}

// spreadOf is the spread of vs (two values or more).
func spreadOf(vs []float64) Spread {
	s := Spread{N: len(vs), Min: vs[0], Max: vs[0]}
	sum := 0.0
	for _, v := range vs {
		sum += v
		s.Min, s.Max = math.Min(s.Min, v), math.Max(s.Max, v)
	}
	s.Mean = sum / float64(len(vs))
	ss := 0.0
	for _, v := range vs {
		ss += (v - s.Mean) * (v - s.Mean)
	}
	s.SD = math.Sqrt(ss / float64(len(vs)-1))
	half := tQuantile975(len(vs)-1) * s.SD / math.Sqrt(float64(len(vs)))
	s.CI95Low, s.CI95High = s.Mean-half, s.Mean+half
	if s.Mean != 0 {
		pct := 100 * half / math.Abs(s.Mean)
		s.HalfWidth = &pct
	}
	return s
}

func mean(vs []float64) float64 {
	sum := 0.0
	for _, v := range vs {
		sum += v
	}
	return sum / float64(len(vs))
}

// rankedRun is a ranked run's place and figures, as the comparisons read
// them.
type rankedRun struct {
	PerfRow
	phase, load, workload string
	axes                  map[string]string // the axes that do not choose the server
	lat                   views.Latency
	figs                  map[string]*float64
}

func (r rankedRun) figure(key string) *float64 { return r.figs[key] }

// Curve is a throughput-latency curve: the configuration points of one
// phase and one workload (the same manifest), one line per configuration
// through its loads in order of throughput, and the Pareto front over
// every point: those no other point beats on both throughput (higher)
// and the latency (lower).
type Curve struct {
	Curve    string        `json:"curve"`
	Phase    string        `json:"phase"`
	Workload string        `json:"workload"` // what the points share: the manifest's SHA-256 (else its path, else the axes)
	Label    string        `json:"label"`    // the phase, the axes every point shares, the workload
	Latency  string        `json:"latency"`  // the figure on y, a key of configFigureKeys (milliseconds)
	Series   []CurveSeries `json:"series"`
	Front    []CurvePoint  `json:"pareto_front"` // by throughput
	Missing  []string      `json:"missing"`      // points left out, each with why
	SVG      template.HTML `json:"-"`
}

// CurveSeries is one configuration's line.
type CurveSeries struct {
	Config string       `json:"config"`
	Points []CurvePoint `json:"points"` // by throughput
}

// CurvePoint is a configuration point on a curve: throughput on x, the
// curve's latency on y (means over the repeats; the CI when there are
// two or more).
type CurvePoint struct {
	Config          string   `json:"config"`
	Cell            string   `json:"cell"`
	Load            string   `json:"load"`
	Runs            []string `json:"runs"`
	ThroughputRPS   float64  `json:"throughput_rps"`
	LatencyMS       float64  `json:"latency_ms"`
	LatencyCI95Low  *float64 `json:"latency_ci95_low_ms"`
	LatencyCI95High *float64 `json:"latency_ci95_high_ms"`
}

// comparisons builds the configuration points, the curves and their
// Pareto fronts from the ranked runs (the performance table: a run the
// ranking leaves out is no part of a comparison, seed 000 §4).
func comparisons(ranked []rankedRun, latency string, colours map[string]string) ([]ConfigPoint, []Curve) {
	type key struct{ phase, cell, load string }
	var order []key
	byKey := map[key][]rankedRun{}
	for _, r := range ranked {
		k := key{r.phase, r.Cell, r.load}
		if _, ok := byKey[k]; !ok {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], r)
	}
	sort.SliceStable(order, func(i, j int) bool {
		a, b := byKey[order[i]][0], byKey[order[j]][0]
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		return a.Config < b.Config
	})
	var points []ConfigPoint
	curveOf := map[string]*Curve{}
	var curveOrder []string
	for _, k := range order {
		rs := byKey[k]
		first := rs[0]
		p := ConfigPoint{Curve: first.phase + " " + first.workload, Group: first.Group, Config: first.Config, System: first.System,
			Phase: k.phase, Cell: k.cell, Load: k.load, Repeats: len(rs), Figures: map[string]*float64{}, Spread: map[string]Spread{}}
		for _, r := range rs {
			p.Runs = append(p.Runs, r.Run)
		}
		values := func(fk string) []float64 {
			var vs []float64
			for _, r := range rs {
				if v := r.figure(fk); v != nil {
					vs = append(vs, *v)
				}
			}
			return vs
		}
		for _, fk := range configFigureKeys() {
			if vs := values(fk); len(vs) > 0 {
				m := mean(vs)
				p.Figures[fk] = &m
			} else {
				p.Figures[fk] = nil
			}
		}
		for _, fk := range spreadKeys(latency) {
			if vs := values(fk); len(vs) >= 2 {
				p.Spread[fk] = spreadOf(vs)
			}
		}
		if _, ok := curveOf[p.Curve]; !ok {
			curveOrder = append(curveOrder, p.Curve)
			curveOf[p.Curve] = &Curve{Curve: p.Curve, Phase: first.phase, Workload: first.workload, Latency: latency, Missing: []string{}}
		}
		points = append(points, p)
	}
	// the axes every point of a curve shares name it, beside its workload
	common := map[string]map[string]string{}
	for _, r := range ranked {
		c := r.phase + " " + r.workload
		if common[c] == nil {
			common[c] = copyAxes(r.axes)
			continue
		}
		for a, v := range common[c] {
			if r.axes[a] != v {
				delete(common[c], a)
			}
		}
	}
	var curves []Curve
	for _, name := range curveOrder {
		c := curveOf[name]
		var onCurve []*ConfigPoint
		series := map[string]*CurveSeries{}
		var configs []string
		for i := range points {
			p := &points[i]
			if p.Curve != name {
				continue
			}
			x, y := p.Figures["throughput_rps"], p.Figures[latency]
			switch {
			case x == nil:
				p.Missing = "no throughput_rps"
			case y == nil:
				p.Missing = "no " + latency
			}
			if p.Missing != "" {
				c.Missing = append(c.Missing, fmt.Sprintf("%s at %s (%s): %s", p.Config, p.Load, strings.Join(p.Runs, ", "), p.Missing))
				continue
			}
			onCurve = append(onCurve, p)
			if series[p.Config] == nil {
				series[p.Config] = &CurveSeries{Config: p.Config}
				configs = append(configs, p.Config)
			}
			cp := CurvePoint{Config: p.Config, Cell: p.Cell, Load: p.Load, Runs: p.Runs, ThroughputRPS: *x, LatencyMS: *y}
			if s, ok := p.Spread[latency]; ok {
				lo, hi := s.CI95Low, s.CI95High
				cp.LatencyCI95Low, cp.LatencyCI95High = &lo, &hi
			}
			series[p.Config].Points = append(series[p.Config].Points, cp)
		}
		sort.Strings(configs)
		for _, cfg := range configs {
			s := series[cfg]
			sort.SliceStable(s.Points, func(i, j int) bool { return s.Points[i].ThroughputRPS < s.Points[j].ThroughputRPS })
			c.Series = append(c.Series, *s)
		}
		for _, p := range onCurve {
			x, y := *p.Figures["throughput_rps"], *p.Figures[latency]
			dominated := false
			for _, q := range onCurve {
				qx, qy := *q.Figures["throughput_rps"], *q.Figures[latency]
				if qx >= x && qy <= y && (qx > x || qy < y) {
					dominated = true
					break
				}
			}
			if !dominated {
				p.OnFront = true
				c.Front = append(c.Front, CurvePoint{Config: p.Config, Cell: p.Cell, Load: p.Load, Runs: p.Runs, ThroughputRPS: x, LatencyMS: y})
			}
		}
		sort.SliceStable(c.Front, func(i, j int) bool { return c.Front[i].ThroughputRPS < c.Front[j].ThroughputRPS })
		label := c.Phase
		if ax := axesText(common[name]); ax != "" {
			label += ", " + ax
		}
		label += ", " + c.Workload
		c.Label = label
		c.SVG = curveSVG(*c, label, colours)
		curves = append(curves, *c)
	}
	return points, curves
}

func copyAxes(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func axesText(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, " ")
}

// latencyLabel is how a latency key reads on an axis: "p99 TTFT (ms)".
func latencyLabel(key string) string {
	for _, m := range views.LatencyMetrics {
		for _, s := range views.LatencyStats {
			if views.LatencyKey(m.Key, s) == key {
				return s + " " + strings.ToUpper(m.Key) + " (ms)"
			}
		}
	}
	switch key {
	case "ttfa_p99_ms":
		return "p99 TTFA (ms)"
	case "chunk_gap_p99_ms":
		return "p99 audio chunk gap (ms)"
	}
	return key
}

// curveSVG draws a curve: a line per configuration, whiskers for the CI
// over repeats, and the Pareto front.
func curveSVG(c Curve, label string, colours map[string]string) template.HTML {
	ch := xyChart{Class: "curve", Label: "throughput against " + c.Latency + ": " + label, W: chartW, H: 300,
		XLabel: "throughput (requests/s)", YLabel: latencyLabel(c.Latency)}
	for _, s := range c.Series {
		xs := xySeries{Name: s.Config, Colour: colours[s.Config], Join: true}
		for _, p := range s.Points {
			xs.Points = append(xs.Points, xyPoint{X: p.ThroughputRPS, Y: p.LatencyMS, Lo: p.LatencyCI95Low, Hi: p.LatencyCI95High,
				Title: fmt.Sprintf("%s at %s (%s): %s requests/s, %s %s", s.Config, p.Load, strings.Join(p.Runs, ", "), num(p.ThroughputRPS), c.Latency, num(p.LatencyMS))})
		}
		ch.Series = append(ch.Series, xs)
	}
	for _, p := range c.Front {
		ch.Front = append(ch.Front, xyPoint{X: p.ThroughputRPS, Y: p.LatencyMS})
	}
	return ch.svg()
}

// distGroup is one group's latency distributions: each ranked run's
// quantiles, and a CDF per latency through them.
type distGroup struct {
	Group  string
	Rows   []distRow
	Charts []template.HTML
}

type distRow struct {
	Run, Config string
	Latency     views.Latency
}

// latencyDists draws, per group of the performance table, the CDF of
// each latency through each run's quantiles: (p50, 0.5), (p90, 0.9),
// (p95, 0.95), (p99, 0.99), (max, 1), on a log scale.
func latencyDists(ranked []rankedRun, colours map[string]string) []distGroup {
	var out []distGroup
	idx := map[string]int{}
	for _, r := range ranked {
		i, ok := idx[r.Group]
		if !ok {
			i = len(out)
			idx[r.Group] = i
			out = append(out, distGroup{Group: r.Group})
		}
		out[i].Rows = append(out[i].Rows, distRow{Run: r.Run, Config: r.Config, Latency: r.lat})
	}
	quantiles := []struct {
		stat string
		q    float64
	}{{"p50", 0.5}, {"p90", 0.9}, {"p95", 0.95}, {"p99", 0.99}, {"max", 1}}
	for i := range out {
		g := &out[i]
		for _, m := range views.LatencyMetrics {
			name := strings.ToUpper(m.Key)
			ch := xyChart{Class: "cdf cdf-" + m.Key, Label: name + " CDF: " + g.Group, W: 540, H: 200, LogX: true, YFrom: 0.45, YTo: 1.02, YTicks: []float64{0.5, 0.6, 0.7, 0.8, 0.9, 1},
				XLabel: name + " (ms, log scale)", YLabel: "quantile"}
			for _, r := range g.Rows {
				s := xySeries{Name: r.Run, Colour: colours[r.Config], Join: true}
				for _, q := range quantiles {
					if v, _ := r.Latency.Figure(views.LatencyKey(m.Key, q.stat)); v != nil {
						s.Points = append(s.Points, xyPoint{X: *v, Y: q.q, Title: fmt.Sprintf("%s: %s %s %s ms", r.Run, q.stat, name, num(*v))})
					}
				}
				if len(s.Points) > 0 {
					ch.Series = append(ch.Series, s)
				}
			}
			if len(ch.Series) == 0 {
				g.Charts = append(g.Charts, template.HTML(`<p class="muted">`+esc(name)+`: missing for every run of the group.</p>`))
				continue
			}
			g.Charts = append(g.Charts, ch.svg())
		}
	}
	return out
}

// serverIdentity is what a run's server is: its name, kind, command and
// environment. Two runs whose identities differ run differently
// configured servers.
func serverIdentity(s protocols.ServerSpec) string {
	b, _ := json.Marshal(struct {
		Name, Kind, Shell string
		Argv              []string
		Env               map[string]string
	}{s.Name, s.Kind, s.Command.Shell, s.Command.Argv, s.Env})
	return string(b)
}

// spreadTable is the page's table of the configurations with repeats:
// a column per figure of Keys, a row per configuration point that has
// two or more repeats.
type spreadTable struct {
	Keys []string
	Rows []spreadRow
}

type spreadRow struct {
	Group, Config, Load string
	Runs                []string
	Cells               []*Spread // by Keys; nil: fewer than two repeats have the figure
}

// pageSpreadKeys are the figures the page's Repeats table shows (every
// spreadKeys figure is in the CSV and JSON): throughput and the p99s,
// the chosen latency, and the audio p99s where a point has them.
func pageSpreadKeys(points []ConfigPoint, latency string) []string {
	keys := []string{"throughput_rps", "ttft_p99_ms", "tpot_p99_ms", "itl_p99_ms", "e2e_p99_ms"}
	if !slices.Contains(keys, latency) {
		keys = append(keys, latency)
	}
	for _, k := range []string{"ttfa_p99_ms", "chunk_gap_p99_ms"} {
		for _, p := range points {
			if _, ok := p.Spread[k]; ok && !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// compare builds the comparisons of the ranked runs (Data's Dists,
// Configs, Curves and Spread).
func (d *Data) compare(rep api.Report, plan *protocols.Plan, serving map[string]views.Serving) {
	details := map[string]api.RunDetail{}
	for _, rd := range rep.Runs {
		details[rd.Run.ID] = rd
	}
	planned := map[string]protocols.Run{}
	if plan != nil {
		for _, r := range plan.Runs {
			planned[r.ID] = r
		}
	}
	rows := map[string]Row{}
	for _, r := range d.Rows {
		rows[r.Run] = r
	}
	var configs []string
	seen := map[string]bool{}
	var ranked []rankedRun
	for _, p := range d.Performance {
		rd, pr, row := details[p.Run], planned[p.Run], rows[p.Run]
		axes := map[string]string{}
		over := map[string]bool{}
		for _, k := range p.over {
			over[k] = true
		}
		for k, v := range pr.Axes {
			if !over[k] {
				axes[k] = v
			}
		}
		workload := "manifest " + short(serving[p.Run].ManifestSHA256)
		switch {
		case serving[p.Run].ManifestSHA256 != "":
		case pr.Manifest != "":
			workload = "manifest " + pr.Manifest
		default:
			workload = "axes " + axesText(axes)
		}
		r := rankedRun{PerfRow: p, phase: rd.Run.Phase, load: rd.Run.Load, workload: workload, axes: axes, lat: row.Latency,
			figs: map[string]*float64{"throughput_rps": p.ThroughputRPS, "output_tokens_per_s": row.OutputTokensPerS,
				"ttfa_p99_ms": p.TTFAP99MS, "chunk_gap_p99_ms": p.ChunkGapP99MS, "rtf_p99": p.RTFP99}}
		for _, k := range views.LatencyKeys() {
			r.figs[k], _ = row.Latency.Figure(k)
		}
		ranked = append(ranked, r)
		if !seen[p.Config] {
			seen[p.Config] = true
			configs = append(configs, p.Config)
		}
	}
	sort.Strings(configs)
	colours := map[string]string{}
	for i, c := range configs {
		colours[c] = gpuColours[i%len(gpuColours)]
	}
	d.Dists = latencyDists(ranked, colours)
	d.Configs, d.Curves = comparisons(ranked, d.CurveLatency, colours)
	d.Spread.Keys = pageSpreadKeys(d.Configs, d.CurveLatency)
	for _, p := range d.Configs {
		if len(p.Spread) == 0 {
			continue
		}
		row := spreadRow{Group: p.Group, Config: p.Config, Load: p.Load, Runs: p.Runs}
		for _, k := range d.Spread.Keys {
			if s, ok := p.Spread[k]; ok {
				row.Cells = append(row.Cells, &s)
			} else {
				row.Cells = append(row.Cells, nil)
			}
		}
		d.Spread.Rows = append(d.Spread.Rows, row)
	}
}

// spreadCell is a Repeats table cell: the mean and the CI's half-width,
// the standard deviation and the half-width as a share of the mean.
func spreadCell(s *Spread) template.HTML {
	if s == nil {
		return `<td class="num">–</td>`
	}
	pct := "–"
	if s.HalfWidth != nil {
		pct = strconv.FormatFloat(*s.HalfWidth, 'f', 1, 64) + "%"
	}
	return template.HTML(fmt.Sprintf(`<td class="num" data-mean="%s" data-ci95-low="%s" data-ci95-high="%s">%.3f ± %.3f<br><span class="muted">sd %.3f, ±%s (%d)</span></td>`,
		num(s.Mean), num(s.CI95Low), num(s.CI95High), s.Mean, s.CI95High-s.Mean, s.SD, pct, s.N))
}

func short(s string) string { return s[:min(12, len(s))] }
