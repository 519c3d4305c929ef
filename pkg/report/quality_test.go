package report

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"warden/pkg/api"
	"warden/pkg/state"
	"warden/protocols"
)

// omniReport is a campaign of three systems (servers a, b, c) over a
// concurrency axis: b is the fastest by p99 TTFA at c1, a the second; c's
// c1 run is faster still but quality-failed, so c's complete c2 run is
// not ranked either; a's c2 run failed; the c3 runs have no audio and are
// ranked by throughput; b's burn-in is complete but not a measured run.
func omniReport(t *testing.T) (api.Report, *protocols.Plan) {
	t.Helper()
	result := func(body string) string {
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "client"), 0o755)
		if body != "" {
			os.WriteFile(filepath.Join(dir, "client", "result.json"), []byte(body), 0o644)
		}
		return dir
	}
	audio := func(ttfa float64) string {
		b, _ := json.Marshal(map[string]any{"schema": "warden.loadgen.result/1", "clean": map[string]any{"completed_rps": 2.0, "latency": map[string]any{"ttft_ms": map[string]any{"n": 10, "p99": ttfa / 2}}},
			"audio": map[string]any{"ttfa_ms": map[string]any{"p99": ttfa}, "rtf": map[string]any{"p99": 0.5}, "gaps_ms": map[string]any{"p99": 40.0}}})
		return string(b)
	}
	type spec struct {
		system, conc, state, reason, body string
		gates                             []state.GateVerdict
	}
	pass := func(n string) state.GateVerdict {
		return state.GateVerdict{Gate: "validator:" + n, Attempt: 1, Verdict: "pass"}
	}
	specs := []spec{
		{"a", "c1", "complete", "", audio(120), []state.GateVerdict{pass("waveform"), pass("quality-tts"), {Gate: "drain", Attempt: 1, Verdict: "pass"}}},
		{"b", "c1", "complete", "", audio(90), []state.GateVerdict{pass("waveform"), pass("quality-tts")}},
		{"c", "c1", "quarantined", "quality-failed", audio(10), []state.GateVerdict{pass("waveform"), {Gate: "validator:quality-tts", Attempt: 1, Verdict: "fail"}}},
		{"c", "c2", "complete", "", audio(50), []state.GateVerdict{pass("waveform"), pass("quality-tts")}},
		{"a", "c2", "failed", "client-failed", "", nil},
		{"a", "c3", "complete", "", `{"clean":{"completed_rps":3}}`, nil},
		{"b", "c3", "complete", "", `{"clean":{"completed_rps":5}}`, nil},
		{"b", "burnin", "complete", "", `{"clean":{"completed_rps":9}}`, nil},
	}
	var rep api.Report
	plan := &protocols.Plan{}
	for _, s := range specs {
		id := s.system + "." + s.conc
		plan.Runs = append(plan.Runs, protocols.Run{ID: id, Phase: "closed", Cell: s.system + "/" + s.conc, Load: "closed",
			Axes: map[string]string{"system": s.system, "concurrency": s.conc}, Server: protocols.ServerSpec{Name: "srv-" + s.system},
			Measured: s.conc != "burnin"})
		st := state.AttemptState(s.state)
		rep.Runs = append(rep.Runs, api.RunDetail{Run: state.Run{ID: id, Phase: "closed", Cell: s.system + "/" + s.conc, Load: "closed", Result: 1},
			State: s.state, Gates: s.gates,
			Attempts: []state.Attempt{{N: 1, State: st, Reason: state.Reason(s.reason), Dir: result(s.body), Figures: map[string]float64{"energy_per_request_j": 2}}}})
	}
	return rep, plan
}

// TestQualityAndPerformanceTables: the first table holds every run with
// its validators and why it is not ranked; the second only the ranked
// runs, by group, best first; a quality-failed system is absent from it.
func TestQualityAndPerformanceTables(t *testing.T) {
	rep, plan := omniReport(t)
	d := Build(t.TempDir(), rep, plan)
	type q struct{ run, validators, excluded string }
	var got []q
	for _, r := range d.Quality {
		got = append(got, q{r.Run, strings.Join(r.Validators, ", "), r.Excluded})
		if r.Ranked != (r.Excluded == "") || r.System != "srv-"+r.Run[:1] {
			t.Fatalf("row %+v", r)
		}
	}
	want := []q{
		{"a.c1", "waveform: pass, quality-tts: pass", ""},
		{"b.c1", "waveform: pass, quality-tts: pass", ""},
		{"c.c1", "waveform: pass, quality-tts: fail", "quality-failed"},
		{"c.c2", "waveform: pass, quality-tts: pass", "system srv-c failed its quality gate (run c.c1)"},
		{"a.c2", "", "not complete (failed)"},
		{"a.c3", "", ""},
		{"b.c3", "", ""},
		{"b.burnin", "", "not a measured run"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("quality table\n got %q\nwant %q", got, want)
	}
	type p struct {
		group string
		rank  int
		by    string
		run   string
	}
	var perf []p
	for _, r := range d.Performance {
		perf = append(perf, p{r.Group, r.Rank, r.RankedBy, r.Run})
	}
	wantPerf := []p{
		{"closed closed concurrency=c1", 1, "ttfa_p99_ms", "b.c1"},
		{"closed closed concurrency=c1", 2, "ttfa_p99_ms", "a.c1"},
		{"closed closed concurrency=c3", 1, "throughput_rps", "b.c3"},
		{"closed closed concurrency=c3", 2, "throughput_rps", "a.c3"},
	}
	if !reflect.DeepEqual(perf, wantPerf) {
		t.Fatalf("performance table\n got %v\nwant %v", perf, wantPerf)
	}
	if r := d.Performance[0]; *r.TTFAP99MS != 90 || *r.TTFTP99MS != 45 || *r.RTFP99 != 0.5 || *r.ChunkGapP99MS != 40 || *r.ThroughputRPS != 2 || *r.EnergyPerRequestJ != 2 {
		t.Fatalf("figures %+v", r)
	}
	var kept []string
	for _, r := range d.NotRanked {
		kept = append(kept, r.Run+": "+r.Excluded)
	}
	if want := []string{"c.c1: quality-failed", "c.c2: system srv-c failed its quality gate (run c.c1)", "a.c2: not complete (failed)", "b.burnin: not a measured run"}; !reflect.DeepEqual(kept, want) ||
		*d.NotRanked[0].TTFAP99MS != 10 || d.NotRanked[0].Rank != 0 || d.NotRanked[2].TTFAP99MS != nil {
		t.Fatalf("not ranked %q, want %q (figures kept)", kept, want)
	}
	var page bytes.Buffer
	if err := WriteHTML(&page, d); err != nil {
		t.Fatal(err)
	}
	html := page.String()
	wantKept := `<tr data-run="c.c1"><td class="mono">c.c1</td><td>srv-c</td><td class="bad">quality-failed</td><td class="num">2.000</td><td class="num">5.000</td><td class="num">10.000</td><td class="num">0.500</td><td class="num">40.000</td><td class="num">2.000</td></tr>`
	if s := section(t, html, "not-ranked"); !strings.Contains(s, wantKept) {
		t.Fatalf("not-ranked table lacks\n%s\nin\n%s", wantKept, s)
	}
	first, second := section(t, html, "quality-gates"), section(t, html, "performance-ranking")
	tables := regexp.MustCompile(`<table[^>]*>`).FindAllString(html, 2)
	if len(tables) != 2 || tables[0] != `<table id="quality-gates">` || tables[1] != `<table id="performance-ranking">` {
		t.Fatalf("the page's first tables are %q: want the quality table, then performance", tables)
	}
	wantRow := `<tr data-run="c.c1"><td class="mono">c.c1</td><td>closed</td><td>srv-c</td><td>c/c1</td><td>closed</td><td>quarantined <span class="muted">(quality-failed)</span></td><td class="wrap">waveform: pass, quality-tts: fail</td><td class="wrap"><span class="bad">no: quality-failed</span></td></tr>`
	if !strings.Contains(first, wantRow) {
		t.Fatalf("quality table lacks\n%s\nin\n%s", wantRow, first)
	}
	wantPerfRow := `<tr class="group-row" data-group="closed closed concurrency=c1"><td colspan="13"><b>closed closed concurrency=c1</b>: ranked by ttfa_p99_ms over its 2 configurations (system), 2 runs</td></tr>
<tr data-run="b.c1"><td class="num">1</td><td class="mono">b.c1</td><td>srv-b</td><td>system=b</td><td class="num">2.000</td><td class="num">45.000</td><td class="num"><span class="missing">missing</span></td><td class="num"><span class="missing">missing</span></td><td class="num"><span class="missing">missing</span></td><td class="num">90.000</td><td class="num">0.500</td><td class="num">40.000</td><td class="num">2.000</td></tr>`
	if !strings.Contains(second, wantPerfRow) {
		t.Fatalf("performance table lacks\n%s\nin\n%s", wantPerfRow, second)
	}
	if n := strings.Count(second, "<tr data-run="); n != 4 || strings.Contains(second, `"c.c1"`) || strings.Contains(second, `"c.c2"`) {
		t.Fatalf("performance table has %d runs, or system c:\n%s", n, second)
	}
	if strings.Count(first, "<tr data-run=") != 8 {
		t.Fatalf("quality table:\n%s", first)
	}
	var doc struct {
		Quality     []map[string]any `json:"quality_gates"`
		Performance []map[string]any `json:"performance"`
		NotRanked   []map[string]any `json:"not_ranked"`
	}
	b, _ := json.Marshal(d.Table())
	if err := json.Unmarshal(b, &doc); err != nil || len(doc.Quality) != 8 || len(doc.Performance) != 4 ||
		doc.Quality[2]["ranked"] != false || doc.Quality[2]["excluded"] != "quality-failed" || doc.Performance[0]["ttfa_p99_ms"] != 90.0 ||
		len(doc.NotRanked) != 4 || doc.NotRanked[0]["excluded"] != "quality-failed" {
		t.Fatalf("table json: %s", b)
	}
}

// section is the body of the table with the given id.
func section(t *testing.T, html, id string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<table id="` + id + `">(.*?)</table>`).FindStringSubmatch(html)
	if m == nil {
		t.Fatalf("no table %s", id)
	}
	return m[1]
}

// TestPerformanceWithoutFigures: a ranked group whose runs lack every
// ranking figure keeps its runs, unranked (rank 0, shown as "–"); without
// a plan no system is known, so only the quality-failed run itself is
// left out.
func TestPerformanceWithoutFigures(t *testing.T) {
	rep, _ := omniReport(t)
	for i := range rep.Runs {
		rep.Runs[i].Attempts[0].Dir = t.TempDir() // no client results
	}
	d := Build(t.TempDir(), rep, nil)
	var runs []string
	for _, r := range d.Performance {
		if r.Rank != 0 || r.RankedBy != "" || r.Group != "closed closed" {
			t.Fatalf("row %+v", r)
		}
		runs = append(runs, r.Run)
	}
	if want := []string{"a.c1", "b.c1", "c.c2", "a.c3", "b.c3", "b.burnin"}; !reflect.DeepEqual(runs, want) {
		t.Fatalf("performance runs %v, want %v", runs, want)
	}
	var page bytes.Buffer
	if err := WriteHTML(&page, d); err != nil {
		t.Fatal(err)
	}
	if s := section(t, page.String(), "performance-ranking"); !strings.Contains(s, `not ranked (no figure every run has) over the group&#39;s 6 runs (no axis of the plan chooses the server)`) ||
		!strings.Contains(s, `<tr data-run="a.c1"><td class="num">–</td>`) {
		t.Fatalf("unranked rows:\n%s", s)
	}
}
