package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"warden/internal/testutil/testsweep"
)

// The expected figures below are computed from the sweep's inputs
// (testsweep.Run), by the test's own arithmetic: never by the code under
// test.

func g(v float64) string   { return strconv.FormatFloat(v, 'g', -1, 64) }
func f3s(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

// sweepPoint is a configuration at a load, as the test computes it.
type sweepPoint struct {
	config, load string
	runs         []testsweep.Run
	x, y         float64 // mean throughput, mean p99 TTFT
	front        bool
}

// expectedPoints are the sweep's configuration points: the complete
// measured runs by configuration and load, their means, and which are on
// the Pareto front (no other point with throughput >= and p99 TTFT <=,
// one of them strictly).
func expectedPoints(sw testsweep.Sweep) []*sweepPoint {
	by := map[string]*sweepPoint{}
	var out []*sweepPoint
	for _, r := range sw.Runs {
		if !r.Measured || r.Failed {
			continue
		}
		k := r.Config + "/" + r.Load
		if by[k] == nil {
			by[k] = &sweepPoint{config: r.Config, load: r.Load}
			out = append(out, by[k])
		}
		by[k].runs = append(by[k].runs, r)
	}
	for _, p := range out {
		var sx, sy float64
		for _, r := range p.runs {
			sx += r.ThroughputRPS()
			sy += r.Dists["ttft_ms"].P99
		}
		p.x, p.y = sx/float64(len(p.runs)), sy/float64(len(p.runs))
	}
	for _, p := range out {
		p.front = true
		for _, q := range out {
			if q != p && q.x >= p.x && q.y <= p.y && (q.x > p.x || q.y < p.y) {
				p.front = false
			}
		}
	}
	return out
}

// TestConfigSweep: a one-server config sweep's report compares its
// configurations: each pattern and load ranks them against each other
// (not rank 1 for every row) and says what the rank is over; each run's
// latency quantiles are in the page (missing said as such, never 0), with
// a CDF through them; the throughput-latency curve has each
// configuration's mean points, the Pareto front rings exactly the
// non-dominated ones; the repeats' spread has Student's t intervals; the
// CSV and JSON carry the same figures to the byte.
func TestConfigSweep(t *testing.T) {
	t.Parallel()
	sw := testsweep.Write(t, t.TempDir())
	d := Build(sw.Dir, testsweep.Report(t, sw), sw.Plan)
	var page bytes.Buffer
	if err := WriteHTML(&page, d); err != nil {
		t.Fatal(err)
	}
	html := page.String()

	// the ranking: within each load, the configurations by p99 TTFT
	for _, load := range []string{"saturation", "moderate"} {
		var want []string
		runs := map[string]testsweep.Run{}
		for _, r := range sw.Runs {
			if r.Measured && !r.Failed && r.Load == load {
				want = append(want, r.ID)
				runs[r.ID] = r
			}
		}
		sort.SliceStable(want, func(i, j int) bool { return runs[want[i]].Dists["ttft_ms"].P99 < runs[want[j]].Dists["ttft_ms"].P99 })
		group := "matrix " + load + " pattern=p1"
		var got []string
		for _, p := range d.Performance {
			if p.Group != group {
				continue
			}
			got = append(got, p.Run)
			if p.Rank != len(got) || p.RankedBy != "ttft_p99_ms" || p.Config != "config="+runs[p.Run].Config {
				t.Errorf("%s: rank %d by %s, config %s; want rank %d by ttft_p99_ms, config=%s", p.Run, p.Rank, p.RankedBy, p.Config, len(got), runs[p.Run].Config)
			}
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("group %s ranks %v, want %v", group, got, want)
		}
		over := fmt.Sprintf("<b>%s</b>: ranked by ttft_p99_ms over its 3 configurations (config), %d runs</td></tr>", group, len(want))
		if !strings.Contains(html, over) {
			t.Errorf("the page does not say what %s is ranked over: %s", group, over)
		}
	}

	// each ranked run's latencies: a row of the group's table, and a CDF
	// point per quantile
	for _, r := range sw.Runs {
		if !r.Measured || r.Failed {
			continue
		}
		row := `<tr data-run="` + r.ID + `"`
		if x := r.Dists["tpot_ms"]; x.N == 0 {
			row += ` title="clean.latency.tpot_ms: of no requests (n 0)"`
		}
		row += `><td class="mono">` + r.ID + `</td><td>config=` + r.Config + `</td>`
		for _, m := range []string{"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"} {
			x := r.Dists[m]
			for _, v := range []float64{x.Mean, x.P50, x.P90, x.P99} {
				if x.N == 0 {
					row += `<td class="num"><span class="missing">missing</span></td>`
				} else {
					row += `<td class="num">` + f3s(v) + `</td>`
				}
			}
		}
		if !strings.Contains(html, row+"</tr>") {
			t.Errorf("the latency table lacks\n%s</tr>", row)
		}
		for _, m := range []string{"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"} {
			x := r.Dists[m]
			if x.N == 0 {
				if strings.Contains(html, `data-series="`+r.ID+`" data-x="0"`) {
					t.Errorf("%s's %s of no requests is drawn at 0", r.ID, m)
				}
				continue
			}
			for _, q := range []struct{ v, q float64 }{{x.P50, 0.5}, {x.P90, 0.9}, {x.P95, 0.95}, {x.P99, 0.99}, {x.Max, 1}} {
				if pt := fmt.Sprintf(`data-series="%s" data-x="%s" data-y="%s"`, r.ID, g(q.v), g(q.q)); !strings.Contains(html, pt) {
					t.Errorf("%s's %s CDF lacks the point %s", r.ID, m, pt)
				}
			}
		}
	}
	if strings.Count(html, `class="chart cdf cdf-`) != 8 { // 4 latencies x 2 loads
		t.Errorf("%d CDF charts, want 8", strings.Count(html, `class="chart cdf cdf-`))
	}

	// the curve and its Pareto front
	points := expectedPoints(sw)
	var front []*sweepPoint
	for _, p := range points {
		if pt := fmt.Sprintf(`data-series="config=%s" data-x="%s" data-y="%s"`, p.config, g(p.x), g(p.y)); !strings.Contains(html, pt) {
			t.Errorf("the curve lacks %s at %s: %s", p.config, p.load, pt)
		}
		ring := fmt.Sprintf(`class="front-pt" data-x="%s" data-y="%s"`, g(p.x), g(p.y))
		if strings.Contains(html, ring) != p.front {
			t.Errorf("%s at %s: on the front %t, but the page rings it: %t", p.config, p.load, p.front, !p.front)
		}
		if p.front {
			front = append(front, p)
		}
	}
	if len(front) == 0 || len(front) == len(points) {
		t.Fatalf("the sweep's data give a front of %d of %d points: the test cannot tell a front from none", len(front), len(points))
	}
	sort.SliceStable(front, func(i, j int) bool { return front[i].x < front[j].x })
	var wantFront strings.Builder
	for _, p := range front {
		fmt.Fprintf(&wantFront, "\n<tr><td>config=%s</td><td>%s</td><td class=\"num\">%s</td><td class=\"num\">%s</td></tr>", p.config, p.load, f3s(p.x), f3s(p.y))
	}
	if got := tableBody(t, html, "pareto-0"); !strings.HasSuffix(strings.TrimSpace(got), strings.TrimSpace(wantFront.String())+"\n</tbody>") {
		t.Errorf("the Pareto table:\n%s\nwant rows\n%s", got, wantFront.String())
	}

	// the repeats: Student's t at 0.975 with 1 degree of freedom
	const t1 = 12.706204736174705
	spreads := 0
	for _, p := range points {
		if len(p.runs) < 2 {
			continue
		}
		a, b := p.runs[0].ThroughputRPS(), p.runs[1].ThroughputRPS()
		m := (a + b) / 2
		sd := math.Sqrt(((a-m)*(a-m) + (b-m)*(b-m)) / 1)
		half := t1 * sd / math.Sqrt(2)
		cell := fmt.Sprintf(`data-mean="%s" data-ci95-low="%s" data-ci95-high="%s">%s ± %s`, g(m), g(m-half), g(m+half), f3s(m), f3s(m+half-m))
		if !strings.Contains(html, cell) {
			t.Errorf("the repeats table lacks %s at %s's throughput: %s", p.config, p.load, cell)
		}
		spreads++
	}
	if spreads != 5 {
		t.Fatalf("%d configurations with repeats, want 5 (large at moderate lost one)", spreads)
	}

	// the same figures in JSON
	var tb Table
	var buf bytes.Buffer
	json.NewEncoder(&buf).Encode(d.Table())
	if err := json.Unmarshal(buf.Bytes(), &tb); err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	json.Unmarshal(buf.Bytes(), &raw)
	if raw["schema"] != float64(2) || raw["curve_latency"] != "ttft_p99_ms" {
		t.Errorf("table schema %v, curve latency %v", raw["schema"], raw["curve_latency"])
	}
	if len(tb.Curves) != 1 || len(tb.Configs) != len(points) {
		t.Fatalf("%d curves, %d configs; want 1, %d", len(tb.Curves), len(tb.Configs), len(points))
	}
	var jfront []string
	for _, p := range tb.Curves[0].Front {
		jfront = append(jfront, fmt.Sprintf("%s/%s %s %s", p.Config, p.Load, g(p.ThroughputRPS), g(p.LatencyMS)))
	}
	var wfront []string
	for _, p := range front {
		wfront = append(wfront, fmt.Sprintf("config=%s/%s %s %s", p.config, p.load, g(p.x), g(p.y)))
	}
	if strings.Join(jfront, "; ") != strings.Join(wfront, "; ") {
		t.Errorf("JSON Pareto front %q, want %q", jfront, wfront)
	}
	for _, p := range points {
		found := false
		for _, c := range tb.Configs {
			if c.Config != "config="+p.config || c.Load != p.load {
				continue
			}
			found = true
			if c.Figures["throughput_rps"] == nil || *c.Figures["throughput_rps"] != p.x || *c.Figures["ttft_p99_ms"] != p.y || c.OnFront != p.front || c.Repeats != len(p.runs) {
				t.Errorf("JSON config %+v, want throughput %v, p99 TTFT %v, front %t, %d repeats", c, p.x, p.y, p.front, len(p.runs))
			}
		}
		if !found {
			t.Errorf("JSON lacks %s at %s", p.config, p.load)
		}
	}
	rows := map[string]Row{}
	for _, r := range tb.Rows {
		rows[r.Run] = r
	}
	for _, r := range sw.Runs {
		row := rows[r.ID]
		switch {
		case r.Failed:
			if row.TTFTP99MS != nil || len(row.Latency.Missing) != 1 || row.Latency.Missing[0] != "attempt 1 has no client/result.json" {
				t.Errorf("JSON row of failed %s: %+v", r.ID, row.Latency)
			}
		case r.Dists["tpot_ms"].N == 0:
			if row.TPOTP99MS != nil || row.TPOTN != nil || row.TTFTP99MS == nil || *row.TTFTP99MS != r.Dists["ttft_ms"].P99 {
				t.Errorf("JSON row of %s (TPOT of no requests): %+v", r.ID, row.Latency)
			}
		default:
			if row.TTFTP95MS == nil || *row.TTFTP95MS != r.Dists["ttft_ms"].P95 || *row.ITLP90MS != r.Dists["itl_ms"].P90 || *row.E2EMeanMS != r.Dists["e2e_ms"].Mean ||
				*row.TPOTP50MS != r.Dists["tpot_ms"].P50 || *row.E2EN != int(r.Dists["e2e_ms"].N) || len(row.Latency.Missing) != 0 {
				t.Errorf("JSON row of %s: %+v", r.ID, row.Latency)
			}
		}
	}

	// and in CSV: the runs table's latency cells, the configurations'
	// means, front and spread
	var rc bytes.Buffer
	if err := WriteCSV(&rc, d.Rows); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&rc).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	for _, rec := range recs[1:] {
		var r testsweep.Run
		for _, x := range sw.Runs {
			if x.ID == rec[0] {
				r = x
			}
		}
		for _, m := range []string{"ttft", "tpot", "itl", "e2e"} {
			x := r.Dists[m+"_ms"]
			want := []string{"", "", "", "", "", "", ""}
			if x != nil && x.N > 0 {
				want = []string{g(x.N), g(x.Mean), g(x.P50), g(x.P90), g(x.P95), g(x.P99), g(x.Max)}
			}
			got := rec[col[m+"_n"] : col[m+"_max_ms"]+1]
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("CSV %s %s: %q, want %q", r.ID, m, got, want)
			}
		}
	}
	var cc bytes.Buffer
	if err := WriteConfigsCSV(&cc, d); err != nil {
		t.Fatal(err)
	}
	crecs, err := csv.NewReader(&cc).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	ccol := map[string]int{}
	for i, h := range crecs[0] {
		ccol[h] = i
	}
	if len(crecs) != len(points)+1 {
		t.Fatalf("configs CSV has %d lines, want %d", len(crecs), len(points)+1)
	}
	for _, p := range points {
		var rec []string
		for _, x := range crecs[1:] {
			if x[ccol["config"]] == "config="+p.config && x[ccol["load"]] == p.load {
				rec = x
			}
		}
		want := []string{g(p.x), g(p.y), strconv.FormatBool(p.front), strconv.Itoa(len(p.runs))}
		got := []string{rec[ccol["throughput_rps"]], rec[ccol["ttft_p99_ms"]], rec[ccol["on_pareto_front"]], rec[ccol["repeats"]]}
		if len(p.runs) >= 2 {
			a, b := p.runs[0].Dists["ttft_ms"].P99, p.runs[1].Dists["ttft_ms"].P99
			m := (a + b) / 2
			sd := math.Sqrt(((a - m) * (a - m)) + (b-m)*(b-m))
			half := t1 * sd / math.Sqrt(2)
			want = append(want, g(sd), g(m-half), g(m+half))
			got = append(got, rec[ccol["ttft_p99_ms_sd"]], rec[ccol["ttft_p99_ms_ci95_low"]], rec[ccol["ttft_p99_ms_ci95_high"]])
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("configs CSV %s at %s: %q, want %q", p.config, p.load, got, want)
		}
	}
}

// tableBody is the body of the table with the given id.
func tableBody(t *testing.T, html, id string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<table id="` + regexp.QuoteMeta(id) + `"[^>]*>(.*?)</table>`).FindStringSubmatch(html)
	if m == nil {
		t.Fatalf("no table %s", id)
	}
	return m[1]
}

// TestCurveLatencyOption: --latency draws the curves and the front
// against another latency; a latency the report does not have is refused.
func TestCurveLatencyOption(t *testing.T) {
	t.Parallel()
	sw := testsweep.Write(t, t.TempDir())
	d := BuildWith(sw.Dir, testsweep.Report(t, sw), sw.Plan, Options{Latency: "e2e_p90_ms"})
	if d.CurveLatency != "e2e_p90_ms" || len(d.Curves) != 1 || d.Curves[0].Latency != "e2e_p90_ms" {
		t.Fatalf("curve latency %s, curves %+v", d.CurveLatency, d.Curves)
	}
	for _, s := range d.Curves[0].Series {
		for _, p := range s.Points {
			var sum float64
			for _, id := range p.Runs {
				for _, r := range sw.Runs {
					if r.ID == id {
						sum += r.Dists["e2e_ms"].P90
					}
				}
			}
			if want := sum / float64(len(p.Runs)); p.LatencyMS != want {
				t.Errorf("%s at %s: latency %v, want the mean p90 E2E %v", p.Config, p.Load, p.LatencyMS, want)
			}
		}
	}
	if err := CheckOptions(Options{Latency: "ttft_p98_ms"}); err == nil || !strings.Contains(err.Error(), "ttft_p99_ms") {
		t.Errorf("CheckOptions of an unknown latency: %v", err)
	}
	if err := CheckOptions(Options{Latency: "ttfa_p99_ms"}); err != nil {
		t.Errorf("CheckOptions(ttfa_p99_ms): %v", err)
	}
}

// TestCurveMissingLatency: a configuration point without the curve's
// latency is left off the curve, and the page says so and why.
func TestCurveMissingLatency(t *testing.T) {
	t.Parallel()
	sw := testsweep.Write(t, t.TempDir())
	d := BuildWith(sw.Dir, testsweep.Report(t, sw), sw.Plan, Options{Latency: "tpot_p99_ms"})
	// small at saturation: its second repeat has TPOT of no requests, so
	// the point's TPOT is its first repeat's alone; no point lacks it
	if len(d.Curves[0].Missing) != 0 {
		t.Fatalf("missing %q", d.Curves[0].Missing)
	}
	for _, p := range d.Configs {
		if p.Config == "config=small" && p.Load == "saturation" {
			if _, ok := p.Spread["tpot_p99_ms"]; ok || p.Figures["tpot_p99_ms"] == nil || *p.Figures["tpot_p99_ms"] != 2 {
				t.Fatalf("small at saturation: TPOT %v, spread %v: want its one repeat's 2, no spread", p.Figures["tpot_p99_ms"], p.Spread["tpot_p99_ms"])
			}
		}
	}
	d = BuildWith(sw.Dir, testsweep.Report(t, sw), sw.Plan, Options{Latency: "ttfa_p99_ms"})
	if len(d.Curves) != 1 || len(d.Curves[0].Series) != 0 || len(d.Curves[0].Missing) != 6 || !strings.Contains(d.Curves[0].Missing[0], ": no ttfa_p99_ms") {
		t.Fatalf("a curve of a latency no run has: %+v", d.Curves)
	}
	var page bytes.Buffer
	if err := WriteHTML(&page, d); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), `<p class="bad">not on the curve: config=base at moderate (p1.base.moderate.r1, p1.base.moderate.r2): no ttfa_p99_ms</p>`) {
		t.Errorf("the page does not say which points are missing")
	}
}

// TestSpread: the mean, sample standard deviation and Student's t
// interval of three repeats (t at 0.975 with 2 degrees of freedom,
// 4.302652729749464); t beyond the table is the expansion's, near the
// exact quantiles (40, 60, 120 degrees of freedom: mpmath).
func TestSpread(t *testing.T) {
	t.Parallel()
	s := spreadOf([]float64{10, 12, 17})
	m := 13.0
	sd := math.Sqrt((9 + 1 + 16) / 2.0)
	half := 4.3026527297494639 * sd / math.Sqrt(3)
	if s.N != 3 || s.Mean != m || s.SD != sd || s.CI95Low != m-half || s.CI95High != m+half || s.Min != 10 || s.Max != 17 || *s.HalfWidth != 100*half/m {
		t.Fatalf("spread %+v, want mean %v sd %v CI ±%v", s, m, sd, half)
	}
	if z := spreadOf([]float64{-1, 1}); z.HalfWidth != nil {
		t.Errorf("a mean of 0 has a relative half-width: %v", *z.HalfWidth)
	}
	for df, want := range map[int]float64{40: 2.0210753903062734, 60: 2.0002978220142605, 120: 1.9799304050824408, 30: 2.0422724563012383} {
		if got := tQuantile975(df); math.Abs(got-want) > 1e-6 {
			t.Errorf("t(0.975, %d) = %v, want %v", df, got, want)
		}
	}
}
