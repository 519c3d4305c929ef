// Package report is ctlq report: one self-contained HTML page of a
// campaign (its CSS, script and SVG charts inline), and its runs table as
// JSON and CSV. Build reads the report the query API gives (api.Report)
// and what lives in the campaign directory (the attempts' client results
// and GPU samples, the failed processes' stderr); Write refuses a document
// that holds private text.
package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"html"
	"html/template"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"warden/pkg/api"
	"warden/pkg/atomicfile"
	"warden/pkg/dirlayout"
	"warden/pkg/gates"
	"warden/pkg/gpu/sample"
	"warden/pkg/provenance"
	"warden/pkg/state"
	"warden/pkg/views"
	"warden/protocols"
)

// Write renders a document, refuses it when it holds private text (priv:
// a *PrivateError, nothing written), and writes it to path, through a
// temporary file and a rename ("-": to stdout).
func Write(path string, stdout io.Writer, priv *gates.PrivateIndex, render func(io.Writer) error) error {
	var b bytes.Buffer
	if err := render(&b); err != nil {
		return err
	}
	if ids := priv.Leaks(b.Bytes()); len(ids) > 0 {
		return &PrivateError{fmt.Errorf("refused to write %s: it holds %d+ bytes of private value(s) %s (seed 002 stop condition 8); nothing written",
			path, priv.MinLen(), strings.Join(ids, ", "))}
	}
	if path == "-" {
		_, err := stdout.Write(b.Bytes())
		return err
	}
	return atomicfile.WriteFile(path, b.Bytes(), 0o644)
}

// PrivateError says a document was not written: it holds private text.
type PrivateError struct{ err error }

func (e *PrivateError) Error() string { return e.err.Error() }
func (e *PrivateError) Unwrap() error { return e.err }

// Privacy indexes the campaign's private inputs (its provenance) at
// the protocol's leak length, so that report writes none of their text.
// An input that cannot be read is an error: the report cannot be shown
// to be clean.
func Privacy(dir string, plan *protocols.Plan) (*gates.PrivateIndex, error) {
	entries, err := provenance.Read(dir)
	if err != nil {
		return nil, fmt.Errorf("read the campaign's provenance for the privacy check of the report: %w", err)
	}
	var paths []string
	for _, e := range entries {
		if e.Private {
			paths = append(paths, e.Path)
		}
	}
	x, err := gates.IndexPrivate(paths, views.MinLeakOf(plan))
	if err != nil {
		return nil, fmt.Errorf("the report is not written: its privacy check cannot read the private inputs: %w", err)
	}
	return x, nil
}

// TableSchema is the version of the runs table's JSON and CSV (2: the
// latencies, the configurations, the curves and the capacity searches;
// CSV numbers in their shortest exact form).
const TableSchema = 2

// Row is one run in the runs table (HTML, --table-json, --csv). Figures
// are of the attempt that counts (the run's result, else its last).
type Row struct {
	Run               string   `json:"run"`
	Phase             string   `json:"phase"`
	Kind              string   `json:"kind"`
	Cell              string   `json:"cell"`
	Load              string   `json:"load"`
	Measured          bool     `json:"measured"`
	State             string   `json:"state"`
	Attempts          int      `json:"attempts"`
	Attempt           int      `json:"attempt"` // the one the figures are from; 0 if none
	Outcome           string   `json:"outcome"` // that attempt's state
	Reason            string   `json:"reason"`
	GatesPassed       int      `json:"gates_passed"`
	GatesNotPassed    []string `json:"gates_not_passed"` // "gate: verdict"
	DurationS         *float64 `json:"duration_s"`
	ThroughputRPS     *float64 `json:"throughput_rps"`
	OutputTokensPerS  *float64 `json:"output_tokens_per_s"`
	EnergyPerRequestJ *float64 `json:"energy_per_request_j"`
	GPUSeconds        *float64 `json:"gpu_seconds"`
	// Latency is the clean interval's TTFT, TPOT, ITL and E2E of that
	// attempt's loadgen result.json (views.ReadServing): null figures, and
	// latency_missing saying why, when the result lacks them.
	views.Latency
	// DamagedEvidence names that attempt's evidence files that do not hold
	// what was recorded of them, or only NUL bytes (state.Attempt.
	// CheckEvidence), each with its path; a damaged result.json gives no
	// figures.
	DamagedEvidence []string `json:"damaged_evidence"`
}

// Table is --table-json.
type Table struct {
	Schema   int    `json:"schema"`
	Campaign string `json:"campaign"`
	Protocol string `json:"protocol"`
	SHA256   string `json:"protocol_sha256"`
	Rows     []Row  `json:"rows"`
	// Quality is the report's first table (configuration and quality
	// gates, every run), Performance its second (the ranked runs).
	Quality     []QualityRow `json:"quality_gates"`
	Performance []PerfRow    `json:"performance"`
	NotRanked   []PerfRow    `json:"not_ranked"`
	// CurveLatency is the latency the curves and Pareto fronts are drawn
	// against (Options.Latency).
	CurveLatency string          `json:"curve_latency"`
	Configs      []ConfigPoint   `json:"configs"`
	Curves       []Curve         `json:"curves"`
	Capacity     []CapacityTable `json:"capacity_searches"`
}

// csvNum is a figure in its shortest exact form, "" when there is none.
func csvNum(p *float64) string {
	if p == nil {
		return ""
	}
	return num(*p)
}

// csvLatencyHeader are the runs table's latency columns: per metric its
// count and statistics, then why any is missing.
func csvLatencyHeader() []string {
	var out []string
	for _, m := range views.LatencyMetrics {
		out = append(out, m.Key+"_n")
		for _, st := range views.LatencyStats {
			out = append(out, views.LatencyKey(m.Key, st))
		}
	}
	return append(out, "latency_missing")
}

func csvLatency(l views.Latency) []string {
	var out []string
	n := map[string]*int{"ttft": l.TTFTN, "tpot": l.TPOTN, "itl": l.ITLN, "e2e": l.E2EN}
	for _, m := range views.LatencyMetrics {
		if c := n[m.Key]; c != nil {
			out = append(out, strconv.Itoa(*c))
		} else {
			out = append(out, "")
		}
		for _, st := range views.LatencyStats {
			v, _ := l.Figure(views.LatencyKey(m.Key, st))
			out = append(out, csvNum(v))
		}
	}
	return append(out, strings.Join(l.Missing, "; "))
}

// WriteCSV writes the runs table (--csv): one row per run, its latencies
// beside its throughput; a missing figure is an empty cell, and
// latency_missing says why.
func WriteCSV(w io.Writer, rows []Row) error {
	cw := csv.NewWriter(w)
	cw.Write(append(append([]string{"run", "phase", "kind", "cell", "load", "measured", "state", "attempts", "attempt", "outcome", "reason",
		"gates_passed", "gates_not_passed", "duration_s", "throughput_rps", "output_tokens_per_s", "energy_per_request_j", "gpu_seconds"},
		csvLatencyHeader()...), "damaged_evidence"))
	for _, r := range rows {
		cw.Write(append(append([]string{r.Run, r.Phase, r.Kind, r.Cell, r.Load, strconv.FormatBool(r.Measured), r.State, strconv.Itoa(r.Attempts),
			strconv.Itoa(r.Attempt), r.Outcome, r.Reason, strconv.Itoa(r.GatesPassed), strings.Join(r.GatesNotPassed, "; "),
			csvNum(r.DurationS), csvNum(r.ThroughputRPS), csvNum(r.OutputTokensPerS), csvNum(r.EnergyPerRequestJ), csvNum(r.GPUSeconds)},
			csvLatency(r.Latency)...), strings.Join(r.DamagedEvidence, "; ")))
	}
	cw.Flush()
	return cw.Error()
}

// WriteConfigsCSV writes the configuration points (--configs-csv): per
// point its curve, group, configuration and runs, whether it is on its
// curve's Pareto front, each figure's mean over the repeats, and for the
// figures with a spread its repeats, standard deviation and 95% CI.
func WriteConfigsCSV(w io.Writer, d *Data) error {
	cw := csv.NewWriter(w)
	head := []string{"curve", "group", "config", "system", "phase", "cell", "load", "repeats", "runs", "on_pareto_front", "missing"}
	head = append(head, configFigureKeys()...)
	keys := spreadKeys(d.CurveLatency)
	for _, k := range keys {
		head = append(head, k+"_repeats", k+"_sd", k+"_ci95_low", k+"_ci95_high")
	}
	cw.Write(head)
	for _, p := range d.Configs {
		row := []string{p.Curve, p.Group, p.Config, p.System, p.Phase, p.Cell, p.Load, strconv.Itoa(p.Repeats), strings.Join(p.Runs, " "), strconv.FormatBool(p.OnFront), p.Missing}
		for _, k := range configFigureKeys() {
			row = append(row, csvNum(p.Figures[k]))
		}
		for _, k := range keys {
			if s, ok := p.Spread[k]; ok {
				row = append(row, strconv.Itoa(s.N), num(s.SD), num(s.CI95Low), num(s.CI95High))
			} else {
				row = append(row, "", "", "", "")
			}
		}
		cw.Write(row)
	}
	cw.Flush()
	return cw.Error()
}

// Data is what the HTML template draws.
type Data struct {
	Rep  api.Report
	Plan *protocols.Plan
	Rows []Row
	// The first two tables (seed 000 §14): configuration and quality
	// gates, then performance.
	Quality     []QualityRow
	Performance []PerfRow
	NotRanked   []PerfRow // the figures of the runs the ranking leaves out
	Timeline    template.HTML
	Budget      template.HTML
	Traces      []trace
	Sanity      []sanityRow
	Notes       []string // sanity findings, in words
	Windows     []reportWindow
	SelfChecks  []reportSelfCheck
	Capacity    []capacityView // the capacity searches, with the rate each found
	Unit        string
	Stderr      []runStderr // the ends of failed processes' stderr
	// The comparisons of the ranked runs: their latency distributions by
	// group, the configuration points, the throughput-latency curves with
	// their Pareto fronts against CurveLatency.
	CurveLatency string
	Dists        []distGroup
	Configs      []ConfigPoint
	Curves       []Curve
	Spread       spreadTable // the configurations with repeats
}

// runStderr is a failed process's stderr tail, with its run.
type runStderr struct {
	Run string
	views.StderrTail
}

type trace struct {
	Title string
	SVG   template.HTML
}

type sanityRow struct {
	Attempt                    string
	PreLoad, PostLoad          string
	OtherProcs                 string
	Samples, Missed, ReadMaxMS string
	Flag                       bool
}

func (d *Data) Table() Table {
	c := d.Rep.Status.Campaign
	t := Table{Schema: TableSchema, Campaign: c.ID, Protocol: c.Protocol, SHA256: c.SHA256, Rows: d.Rows,
		Quality: d.Quality, Performance: d.Performance, NotRanked: d.NotRanked,
		CurveLatency: d.CurveLatency, Configs: d.Configs, Curves: d.Curves, Capacity: []CapacityTable{}}
	for _, v := range d.Capacity {
		t.Capacity = append(t.Capacity, v.table())
	}
	if t.Configs == nil {
		t.Configs = []ConfigPoint{}
	}
	if t.Curves == nil {
		t.Curves = []Curve{}
	}
	return t
}

func fptr(m map[string]float64, k string) *float64 {
	if v, ok := m[k]; ok {
		return &v
	}
	return nil
}

// clientResult reads the numeric figures of the attempt's
// client/result.json, nested objects flattened to dotted keys
// ("clean.completed_rps"); a missing or unreadable file leaves them empty,
// and so does a damaged one (state.Attempt.CheckEvidence: the row names
// it).
func clientResult(a *state.Attempt) map[string]float64 {
	if a.CheckEvidence(dirlayout.ClientResultRel) != nil {
		return nil
	}
	b, err := os.ReadFile(dirlayout.ClientResult(a.Dir))
	if err != nil {
		return nil
	}
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	out := map[string]float64{}
	flattenFigures(out, "", m)
	return out
}

func flattenFigures(out map[string]float64, prefix string, m map[string]any) {
	for k, v := range m {
		switch v := v.(type) {
		case float64:
			out[prefix+k] = v
		case map[string]any:
			flattenFigures(out, prefix+k+".", v)
		}
	}
}

// The report's throughput columns, by the client that wrote result.json:
// loadgen's clean-interval figures (warden.loadgen.result/1), else the
// stand-in client's top-level ones.
var (
	throughputKeys   = []string{"clean.completed_rps", "throughput_rps"}
	outputTokensKeys = []string{"clean.output_tokens_per_s", "output_tokens_per_s"}
)

// firstFigure is the first of keys that m has. A loadgen result whose
// clean interval lasted no time (a burn-in's) gives no clean figure: its
// zeros were not measured.
func firstFigure(m map[string]float64, keys []string) *float64 {
	if s, ok := m["clean.seconds"]; ok && s <= 0 {
		return nil
	}
	for _, k := range keys {
		if v := fptr(m, k); v != nil {
			return v
		}
	}
	return nil
}

// Build is BuildWith the default options.
func Build(dir string, rep api.Report, plan *protocols.Plan) *Data {
	return BuildWith(dir, rep, plan, Options{})
}

// BuildWith reads what the report shows from the report the query API
// gives and the campaign directory's files (CheckOptions first: an option
// it refuses is taken as its default).
func BuildWith(dir string, rep api.Report, plan *protocols.Plan, opts Options) *Data {
	if CheckOptions(opts) != nil {
		opts = Options{}
	}
	d := &Data{Rep: rep, Plan: plan, Unit: rep.Status.Budget.Unit, CurveLatency: opts.latency()}
	if d.Unit == "" {
		d.Unit = "GPU-hours"
	}
	measured := map[string]bool{}
	serving := map[string]views.Serving{}
	if plan != nil {
		for _, r := range plan.Runs {
			measured[r.ID] = r.Measured
		}
	}
	for _, rd := range rep.Runs {
		row := Row{Run: rd.Run.ID, Phase: rd.Run.Phase, Kind: rd.Run.Kind, Cell: rd.Run.Cell, Load: rd.Run.Load,
			Measured: measured[rd.Run.ID], State: rd.State, Attempts: len(rd.Attempts), GatesNotPassed: []string{}, DamagedEvidence: []string{},
			Latency: views.Latency{Missing: []string{"no attempt has run"}}}
		if a := countingAttempt(rd); a != nil {
			serving[rd.Run.ID] = views.ReadServing(*a)
			row.Latency = serving[rd.Run.ID].Latency
			row.Attempt, row.Outcome, row.Reason = a.N, string(a.State), string(a.Reason)
			if a.State.Terminal() {
				dur := a.UpdatedAt.Sub(a.CreatedAt).Seconds()
				row.DurationS = &dur
			}
			if rd.DamagedEvidence == nil {
				rd.CheckEvidence() // unchecked: the report reads the files, so it checks them
			}
			for _, e := range *rd.DamagedEvidence {
				if e.Attempt == a.N {
					row.DamagedEvidence = append(row.DamagedEvidence, e.Error)
				}
			}
			res := clientResult(a)
			row.ThroughputRPS, row.OutputTokensPerS = firstFigure(res, throughputKeys), firstFigure(res, outputTokensKeys)
			row.EnergyPerRequestJ, row.GPUSeconds = fptr(a.Figures, "energy_per_request_j"), fptr(a.Figures, "gpu_seconds")
			for _, g := range rd.Gates {
				if g.Attempt != a.N && g.Attempt != 0 {
					continue
				}
				if v, _ := views.GateText(g); v == state.VerdictPass || v == "n/a" {
					row.GatesPassed++
				} else {
					row.GatesNotPassed = append(row.GatesNotPassed, g.Gate+": "+g.Verdict)
				}
			}
		}
		d.Rows = append(d.Rows, row)
	}
	d.Quality, d.Performance, d.NotRanked = qualityAndPerformance(rep, plan)
	d.compare(rep, plan, serving)
	d.Timeline = timelineSVG(rep)
	d.Budget = budgetSVG(rep)
	d.Traces = gpuTraces(rep)
	d.Sanity, d.Notes = sanity(rep)
	d.Notes = append(d.Notes, gapNotes(rep.ControllerGaps)...)
	d.Windows = reportWindows(rep)
	d.SelfChecks = reportSelfChecks(rep)
	d.Capacity = capacitySearches(rep, plan)
	d.Stderr = stderrOf(dir, rep, plan)
	return d
}

// outcome colours, shared by the timeline, its legend and the table.
var outcomeColour = map[string]string{
	"complete": "#2e9d57", "quarantined": "#e0a020", "failed": "#d24a43", "interrupted": "#8a8f98", "pending": "#c9ced6",
}

func colourOf(st string) string {
	if c, ok := outcomeColour[st]; ok {
		return c
	}
	return "#3a78d4" // live
}

// span is the time range the charts share.
func span(rep api.Report) (time.Time, time.Time) {
	t0 := rep.Status.Campaign.CreatedAt
	t1 := t0
	for _, rd := range rep.Runs {
		for _, a := range rd.Attempts {
			if t0.IsZero() || a.CreatedAt.Before(t0) {
				t0 = a.CreatedAt
			}
			end := a.UpdatedAt
			if !a.State.Terminal() {
				end = rep.GeneratedAt
			}
			if end.After(t1) {
				t1 = end
			}
		}
	}
	for _, l := range rep.Ledger {
		if l.At.After(t1) {
			t1 = l.At
		}
	}
	if !t1.After(t0) {
		t1 = t0.Add(time.Second)
	}
	return t0, t1
}

const chartW = 1100

func esc(s string) string { return html.EscapeString(s) }

func timeAxis(b *strings.Builder, t0, t1 time.Time, x0, w, y, h float64) {
	total := t1.Sub(t0).Seconds()
	step := niceStep(total / 8)
	for s := 0.0; s <= total+1e-9; s += step {
		x := x0 + s/total*w
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" class="grid"/>`, x, y, x, y+h)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" class="tick" text-anchor="middle">%s</text>`, x, y+h+14, esc(views.FmtDur(s)))
	}
}

func niceStep(raw float64) float64 {
	for _, s := range []float64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 28800, 86400} {
		if s >= raw {
			return s
		}
	}
	return 86400 * math.Ceil(raw/86400)
}

// timelineSVG draws one row per GPU and one bar per attempt on it.
func timelineSVG(rep api.Report) template.HTML {
	t0, t1 := span(rep)
	gpus := map[int]bool{}
	for _, rd := range rep.Runs {
		for _, a := range rd.Attempts {
			for _, g := range a.GPUIDs {
				gpus[g] = true
			}
		}
	}
	ids := make([]int, 0, len(gpus))
	for g := range gpus {
		ids = append(ids, g)
	}
	sort.Ints(ids)
	if len(ids) == 0 {
		return template.HTML(`<p class="muted">No attempt has run yet.</p>`)
	}
	const left, rowH, top = 60.0, 28.0, 10.0
	w := chartW - left - 20
	h := top + float64(len(ids))*rowH
	total := t1.Sub(t0).Seconds()
	xOf := func(t time.Time) float64 { return left + t.Sub(t0).Seconds()/total*w }
	row := map[int]int{}
	for i, g := range ids {
		row[g] = i
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %.0f" width="100%%" role="img" aria-label="attempts per GPU over time">`, chartW, h+30)
	timeAxis(&b, t0, t1, left, w, top, float64(len(ids))*rowH)
	deadBands(&b, rep.ControllerGaps, t0, t1, left, w, top, float64(len(ids))*rowH)
	for i, g := range ids {
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" class="label" text-anchor="end">GPU %d</text>`, left-8, top+float64(i)*rowH+rowH/2+4, g)
	}
	for _, rd := range rep.Runs {
		for _, a := range rd.Attempts {
			end := a.UpdatedAt
			if !a.State.Terminal() {
				end = rep.GeneratedAt
			}
			var tip strings.Builder
			fmt.Fprintf(&tip, "%s attempt %d: %s", a.RunID, a.N, a.State)
			if a.Reason != "" {
				fmt.Fprintf(&tip, " (%s)", a.Reason)
			}
			fmt.Fprintf(&tip, "\nslot %s\n", a.Slot)
			var marks []float64
			for _, e := range rd.Events {
				if e.Attempt != a.N {
					continue
				}
				fmt.Fprintf(&tip, "%s %s\n", e.Wall.UTC().Format("15:04:05"), e.To)
				switch e.To {
				case string(state.Ready), string(state.Measuring), string(state.Stopping):
					marks = append(marks, xOf(e.Wall))
				}
			}
			x1, x2 := xOf(a.CreatedAt), xOf(end)
			for _, g := range a.GPUIDs {
				y := top + float64(row[g])*rowH + 4
				fmt.Fprintf(&b, `<g class="att" data-run="%s"><title>%s</title><rect x="%.1f" y="%.1f" width="%.1f" height="%.0f" rx="2" fill="%s"/>`,
					esc(a.RunID), esc(tip.String()), x1, y, math.Max(1.5, x2-x1), rowH-8, colourOf(string(a.State)))
				for _, m := range marks {
					fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" class="phase"/>`, m, y, m, y+rowH-8)
				}
				if x2-x1 > float64(len(a.RunID))*6+8 {
					fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" class="bar">%s</text>`, x1+4, y+(rowH-8)/2+4, esc(a.RunID))
				}
				b.WriteString(`</g>`)
			}
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// budgetSVG draws the GPU-hours charged over time (prior consumption
// first), what is charged or reserved, and the cap.
func budgetSVG(rep api.Report) template.HTML {
	t0, t1 := span(rep)
	bu := rep.Status.Budget
	prior := bu.ChargedGPUHours
	for _, l := range rep.Ledger {
		if l.Kind == state.LedgerCharge {
			prior -= l.GPUSeconds / 3600
		}
	}
	prior = math.Max(0, prior)
	type pt struct {
		t           time.Time
		charged, rs float64
	}
	pts := []pt{{t0, prior, prior}}
	charged, reserved := prior, 0.0
	for _, l := range rep.Ledger {
		switch l.Kind {
		case state.LedgerCharge:
			charged += l.GPUSeconds / 3600
		case state.LedgerReserve:
			reserved += l.GPUSeconds / 3600
		case state.LedgerRelease:
			reserved -= l.GPUSeconds / 3600
		}
		pts = append(pts, pt{l.At, charged, charged + math.Max(0, reserved)})
	}
	pts = append(pts, pt{t1, charged, charged + math.Max(0, reserved)})
	ymax := bu.CapGPUHours
	for _, p := range pts {
		ymax = math.Max(ymax, p.rs)
	}
	ymax *= 1.08
	if ymax <= 0 {
		ymax = 1
	}
	const left, top, ch = 60.0, 10.0, 200.0
	w := chartW - left - 20
	total := t1.Sub(t0).Seconds()
	x := func(t time.Time) float64 { return left + t.Sub(t0).Seconds()/total*w }
	y := func(v float64) float64 { return top + ch - v/ymax*ch }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %.0f" width="100%%" role="img" aria-label="budget over time">`, chartW, top+ch+30)
	timeAxis(&b, t0, t1, left, w, top, ch)
	deadBands(&b, rep.ControllerGaps, t0, t1, left, w, top, ch)
	for i := 0; i <= 4; i++ {
		v := ymax / 1.08 * float64(i) / 4
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" class="tick" text-anchor="end">%.3g</text>`, left-6, y(v)+4, v)
	}
	step := func(val func(pt) float64) string {
		var p strings.Builder
		for i, q := range pts {
			if i == 0 {
				fmt.Fprintf(&p, "M%.1f,%.1f", x(q.t), y(val(q)))
				continue
			}
			fmt.Fprintf(&p, " H%.1f V%.1f", x(q.t), y(val(q)))
		}
		return p.String()
	}
	fmt.Fprintf(&b, `<path d="%s" class="reserved"/>`, step(func(p pt) float64 { return p.rs }))
	fmt.Fprintf(&b, `<path d="%s" class="charged"/>`, step(func(p pt) float64 { return p.charged }))
	fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" class="cap"/><text x="%.0f" y="%.1f" class="label" text-anchor="end">cap %.3f</text>`,
		left, left+w, y(bu.CapGPUHours), y(bu.CapGPUHours), left+w, y(bu.CapGPUHours)-4, bu.CapGPUHours)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// point is one GPU reading at a time.
type point struct {
	t                 time.Time
	power, mem, clock float64
	hasP, hasM, hasC  bool
}

// readSamples reads an attempt's periodic GPU samples per GPU index; a
// samples file that cannot be read adds none.
func readSamples(path string, into map[int][]point) {
	recs, err := sample.ReadFile(path)
	if err != nil {
		return
	}
	for _, r := range recs {
		if r.Kind != sample.KindSample {
			continue
		}
		for _, g := range r.GPUs {
			x := point{t: r.Time}
			if g.PowerW != nil {
				x.power, x.hasP = *g.PowerW, true
			}
			if g.MemoryUsedMiB != nil {
				x.mem, x.hasM = float64(*g.MemoryUsedMiB), true
			}
			if g.SMClockMHz != nil {
				x.clock, x.hasC = float64(*g.SMClockMHz), true
			}
			into[g.Index] = append(into[g.Index], x)
		}
	}
}

var gpuColours = []string{"#3a78d4", "#d24a43", "#2e9d57", "#e0a020", "#8e5bd0", "#1aa3a3", "#c4579b", "#6b7a8f"}

// gpuTraces draws power, memory and SM clock over time, one line per GPU.
func gpuTraces(rep api.Report) []trace {
	per := map[int][]point{}
	for _, rd := range rep.Runs {
		for _, a := range rd.Attempts {
			readSamples(dirlayout.GPUSamples(a.Dir), per)
		}
	}
	if len(per) == 0 {
		return nil
	}
	ids := make([]int, 0, len(per))
	for g := range per {
		sort.Slice(per[g], func(i, j int) bool { return per[g][i].t.Before(per[g][j].t) })
		ids = append(ids, g)
	}
	sort.Ints(ids)
	t0, t1 := span(rep)
	metrics := []struct {
		title string
		get   func(point) (float64, bool)
	}{
		{"power (W)", func(s point) (float64, bool) { return s.power, s.hasP }},
		{"memory used (MiB)", func(s point) (float64, bool) { return s.mem, s.hasM }},
		{"SM clock (MHz)", func(s point) (float64, bool) { return s.clock, s.hasC }},
	}
	var out []trace
	for _, m := range metrics {
		ymax := 0.0
		for _, g := range ids {
			for _, s := range per[g] {
				if v, ok := m.get(s); ok {
					ymax = math.Max(ymax, v)
				}
			}
		}
		if ymax <= 0 {
			ymax = 1
		}
		ymax *= 1.1
		const left, top, ch = 60.0, 10.0, 150.0
		w := chartW - left - 20
		total := t1.Sub(t0).Seconds()
		var b strings.Builder
		fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %.0f" width="100%%" role="img" aria-label="%s">`, chartW, top+ch+30, esc(m.title))
		timeAxis(&b, t0, t1, left, w, top, ch)
		deadBands(&b, rep.ControllerGaps, t0, t1, left, w, top, ch)
		for i := 0; i <= 3; i++ {
			v := ymax / 1.1 * float64(i) / 3
			fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" class="tick" text-anchor="end">%.4g</text>`, left-6, top+ch-v/ymax*ch+4, v)
		}
		for k, g := range ids {
			ss := per[g]
			stride := max(1, len(ss)/800)
			var p strings.Builder
			var prev time.Time
			for i := 0; i < len(ss); i += stride {
				v, ok := m.get(ss[i])
				if !ok {
					continue
				}
				cmd := "L"
				// a gap of more than 30 s (between attempts), or a time no
				// controller ran, breaks the line
				if p.Len() == 0 || ss[i].t.Sub(prev) > 30*time.Second || inGap(rep.ControllerGaps, prev, ss[i].t) {
					cmd = "M"
				}
				prev = ss[i].t
				fmt.Fprintf(&p, "%s%.1f,%.1f ", cmd, left+ss[i].t.Sub(t0).Seconds()/total*w, top+ch-v/ymax*ch)
			}
			fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.3"><title>GPU %d</title></path>`, p.String(), gpuColours[k%len(gpuColours)], g)
		}
		b.WriteString(`</svg>`)
		var legend strings.Builder
		for k, g := range ids {
			fmt.Fprintf(&legend, `<span class="key"><i style="background:%s"></i>GPU %d</span>`, gpuColours[k%len(gpuColours)], g)
		}
		out = append(out, trace{Title: m.title, SVG: template.HTML(b.String() + `<div class="legend">` + legend.String() + `</div>`)})
	}
	return out
}

// sanity lists, per attempt, what says whether the host was quiet, and
// the findings worth a look.
func sanity(rep api.Report) ([]sanityRow, []string) {
	var rows []sanityRow
	var notes []string
	missed, others, failing := 0.0, 0.0, 0
	f := func(m map[string]float64, k string) string {
		if v, ok := m[k]; ok {
			return strconv.FormatFloat(v, 'g', 4, 64)
		}
		return "-"
	}
	for _, rd := range rep.Runs {
		for _, a := range rd.Attempts {
			fg := a.Figures
			if fg == nil {
				continue
			}
			r := sanityRow{Attempt: fmt.Sprintf("%s a%d", a.RunID, a.N), PreLoad: f(fg, "preflight_load1"), PostLoad: f(fg, "postmeasure_load1"),
				OtherProcs: f(fg, "preflight_other_users_procs") + " / " + f(fg, "postmeasure_other_users_procs"),
				Samples:    f(fg, "samples"), Missed: f(fg, "samples_missed"), ReadMaxMS: f(fg, "sampler_read_max_ms")}
			o := fg["preflight_other_users_procs"] + fg["postmeasure_other_users_procs"]
			r.Flag = fg["samples_missed"] > 0 || o > 0
			missed += fg["samples_missed"]
			others += o
			rows = append(rows, r)
		}
		for _, g := range rd.Gates {
			if v, _ := views.GateText(g); v != state.VerdictPass && v != "n/a" {
				failing++
			}
		}
	}
	notes = append(notes, fmt.Sprintf("%d attempt(s) with figures; %g GPU sample(s) missed; %g other users' process(es) seen at preflight or after measuring; %d gate verdict(s) not passed.",
		len(rows), missed, others, failing))
	if c := rep.Status.Campaign; c.StopReason != "" {
		notes = append(notes, fmt.Sprintf("The campaign stopped: %s (%s).", c.StopReason, c.StopDetail))
	}
	return rows, notes
}

func f3(p *float64) string {
	if p == nil {
		return "–"
	}
	return strconv.FormatFloat(*p, 'f', 3, 64)
}

// latCell is a latency table's cell: the figure, or "missing".
func latCell(l views.Latency, metric, stat string) template.HTML {
	v, _ := l.Figure(views.LatencyKey(metric, stat))
	return msCell(v)
}

// msCell is a latency's cell: the figure to 3 decimals, or "missing"
// (never 0, never a dash that could read as not applicable).
func msCell(v *float64) template.HTML {
	if v == nil {
		return `<td class="num"><span class="missing">missing</span></td>`
	}
	return template.HTML(`<td class="num">` + strconv.FormatFloat(*v, 'f', 3, 64) + `</td>`)
}

// LatencyMetrics are the latencies the page's tables have columns for.
func (d *Data) LatencyMetrics() []views.LatencyMetric { return views.LatencyMetrics }

func WriteHTML(w io.Writer, d *Data) error {
	t, err := template.New("report").Funcs(template.FuncMap{
		"f3":     f3,
		"colour": colourOf,
		"join":   strings.Join,
		"time":   func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
		"short":  short,
		"lat":    latCell,
		"ms3":    msCell,
		"spread": spreadCell,
		"deref":  func(p *float64) float64 { return *p },
		"onFront": func(c Curve, p CurvePoint) bool {
			for _, q := range c.Front {
				if q.Config == p.Config && q.Cell == p.Cell && q.Load == p.Load {
					return true
				}
			}
			return false
		},
	}).Parse(reportTemplate)
	if err != nil {
		return err
	}
	return t.Execute(w, d)
}

// stderrOf is the stderr tails of every run's failed processes, as
// ctlq show prints them.
func stderrOf(dir string, rep api.Report, plan *protocols.Plan) []runStderr {
	g := views.NewStderrGuard(dir, views.MinLeakOf(plan))
	var out []runStderr
	for _, rd := range rep.Runs {
		for _, t := range views.StderrTails(rd, g) {
			out = append(out, runStderr{Run: rd.Run.ID, StderrTail: t})
		}
	}
	return out
}

// reportWindow is one Layer-2 window in the HTML report.
type reportWindow struct {
	Run, Gate             string
	Attempt, Window, Rank int
	Shares                string
	OtherOpaque           string
	Join, SMD             string
	Bad                   bool // not classifiable (other + opaque above 30%)
}

// reportSelfCheck is one verdict's false-failure rate of a gate that
// judges a sample (views.SelfChecks).
type reportSelfCheck struct {
	Run, Gate, Measure, Rule string
	Attempt, Samples         int
	UnitPass, RunFail        string
	High                     bool // a representative run fails more often than not
}

// reportSelfChecks lists the false-failure rates every run's validators
// measured on its own data.
func reportSelfChecks(rep api.Report) []reportSelfCheck {
	var out []reportSelfCheck
	for _, rd := range rep.Runs {
		for _, g := range rd.Gates {
			if !strings.HasPrefix(g.Gate, "validator:") {
				continue
			}
			for _, r := range views.SelfChecks(g) {
				out = append(out, reportSelfCheck{Run: rd.Run.ID, Gate: g.Gate, Measure: r.Measure, Rule: r.RuleText(), Attempt: r.Attempt,
					Samples: r.Samples, UnitPass: fmt.Sprintf("%.1f%%", 100*r.UnitPass), RunFail: fmt.Sprintf("%.1f%%", 100*r.RunFail), High: r.RunFail > 0.5})
			}
		}
	}
	return out
}

// reportWindows lists the windows of every run's validator verdicts.
func reportWindows(rep api.Report) []reportWindow {
	var out []reportWindow
	for _, rd := range rep.Runs {
		for _, g := range rd.Gates {
			if !strings.HasPrefix(g.Gate, "validator:") {
				continue
			}
			for _, r := range views.Layer2Windows(g.Figures) {
				row := reportWindow{Run: rd.Run.ID, Gate: g.Gate, Attempt: g.Attempt, Window: r.Window + 1, Rank: r.Rank,
					OtherOpaque: fmt.Sprintf("%.1f%%", 100*r.Other), Join: "-", SMD: "-", Bad: r.Other > 0.30}
				row.Shares = views.SharesText(r.Shares)
				if r.HasJoin {
					row.Join = "joined"
				}
				if r.HasSMD {
					row.SMD = strconv.FormatFloat(r.SMD, 'f', 3, 64)
				}
				out = append(out, row)
			}
		}
	}
	return out
}
