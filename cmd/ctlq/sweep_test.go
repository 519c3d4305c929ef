package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"warden/internal/testutil/testsweep"
)

// TestConfigSweepInChromium loads a config sweep's report in headless
// Chromium: the DOM the browser built (its script run, its console empty)
// holds the latency rows and CDF points, the throughput-latency curve's
// mean points and the Pareto front's rings, with the figures computed
// here from the sweep's inputs; the CSVs and JSON it wrote beside it
// carry the same. What the figures must be, and why, is
// TestConfigSweep's (pkg/report); this test is what only a browser shows.
func TestConfigSweepInChromium(t *testing.T) {
	browser := chromium(t)
	sw := testsweep.Write(t, t.TempDir())
	out := t.TempDir()
	page, tj, rc, cc := filepath.Join(out, "report.html"), filepath.Join(out, "t.json"), filepath.Join(out, "runs.csv"), filepath.Join(out, "configs.csv")
	if o, code := run(t, "report", "-d", sw.Dir, "-o", page, "--table-json", tj, "--csv", rc, "--configs-csv", cc); code != 0 {
		t.Fatalf("report exit %d:\n%s", code, o)
	}
	dom, logs := headless(t, browser, "--dump-dom", "file://"+page)
	if !strings.Contains(dom, `data-ready="1"`) {
		t.Fatalf("the page's script did not run to its end")
	}
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "CONSOLE") || strings.Contains(line, "net::ERR") {
			t.Errorf("browser console: %s", line)
		}
	}
	g := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	type point struct {
		x, y float64
		n    int
	}
	points := map[string]*point{}
	var keys []string
	for _, r := range sw.Runs {
		if !r.Measured || r.Failed {
			continue
		}
		k := r.Config + " " + r.Load
		if points[k] == nil {
			points[k] = &point{}
			keys = append(keys, k)
		}
		p := points[k]
		p.x, p.y, p.n = p.x+r.ThroughputRPS(), p.y+r.Dists["ttft_ms"].P99, p.n+1
		if want := fmt.Sprintf(`data-series="%s" data-x="%s" data-y="0.99"`, r.ID, g(r.Dists["ttft_ms"].P99)); !strings.Contains(dom, want) {
			t.Errorf("the DOM lacks %s's p99 TTFT on its CDF: %s", r.ID, want)
		}
		if !strings.Contains(dom, `<tr data-run="`+r.ID+`"`) {
			t.Errorf("the DOM lacks %s's rows", r.ID)
		}
	}
	front := 0
	for _, k := range keys {
		p := points[k]
		x, y := p.x/float64(p.n), p.y/float64(p.n)
		cfg := strings.Fields(k)[0]
		if want := fmt.Sprintf(`data-series="config=%s" data-x="%s" data-y="%s"`, cfg, g(x), g(y)); !strings.Contains(dom, want) {
			t.Errorf("the DOM's curve lacks %s: %s", k, want)
		}
		dominated := false
		for _, q := range points {
			qx, qy := q.x/float64(q.n), q.y/float64(q.n)
			if qx >= x && qy <= y && (qx > x || qy < y) {
				dominated = true
			}
		}
		if ring := fmt.Sprintf(`class="front-pt" data-x="%s" data-y="%s"`, g(x), g(y)); strings.Contains(dom, ring) == dominated {
			t.Errorf("%s: dominated %t, ringed on the front %t", k, dominated, !dominated)
		}
		if !dominated {
			front++
		}
	}
	if front == 0 || front == len(keys) {
		t.Fatalf("a front of %d of %d points tells nothing", front, len(keys))
	}
	// the files beside it
	var tb struct {
		Schema  int `json:"schema"`
		Configs []struct {
			Config  string `json:"config"`
			Load    string `json:"load"`
			OnFront bool   `json:"on_pareto_front"`
		} `json:"configs"`
	}
	b, _ := os.ReadFile(tj)
	if err := json.Unmarshal(b, &tb); err != nil || tb.Schema != 2 || len(tb.Configs) != len(keys) {
		t.Fatalf("table JSON (%v): %.300s", err, b)
	}
	onFront := 0
	for _, c := range tb.Configs {
		if c.OnFront {
			onFront++
		}
	}
	for _, f := range []string{rc, cc} {
		fb, _ := os.ReadFile(f)
		recs, err := csv.NewReader(strings.NewReader(string(fb))).ReadAll()
		if err != nil || len(recs) < 2 {
			t.Fatalf("%s: %v\n%s", f, err, fb)
		}
	}
	if onFront != front {
		t.Errorf("JSON has %d points on the front, the DOM %d", onFront, front)
	}
	if o, code := run(t, "report", "-d", sw.Dir, "-o", page, "--latency", "ttft_p98_ms"); code != 2 || !strings.Contains(o, "ttft_p99_ms") {
		t.Errorf("report --latency ttft_p98_ms: exit %d\n%s", code, o)
	}
}

// TestShowServing: ctlq show of a finished run ends with its serving
// benchmark result, and -o json carries the same figures.
func TestShowServing(t *testing.T) {
	t.Parallel()
	sw := testsweep.Write(t, t.TempDir())
	var r testsweep.Run
	for _, x := range sw.Runs {
		if x.ID == "p1.base.saturation.r1" {
			r = x
		}
	}
	o, code := run(t, "show", "-d", sw.Dir, r.ID)
	if code != 0 {
		t.Fatalf("show exit %d:\n%s", code, o)
	}
	f2 := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
	for _, want := range []string{
		"============ Serving Benchmark Result ============\n",
		fmt.Sprintf("Successful requests:                     %d\n", r.Completed),
		fmt.Sprintf("Request throughput (req/s):              %s\n", f2(r.ThroughputRPS())),
		fmt.Sprintf("Total token throughput (tok/s):          %s\n", f2(float64(r.Input+r.Out)/r.Seconds)),
		fmt.Sprintf("P99 TTFT (ms):                           %s\n", f2(r.Dists["ttft_ms"].P99)),
		fmt.Sprintf("Median E2EL (ms):                        %s\n", f2(r.Dists["e2e_ms"].P50)),
	} {
		if !strings.Contains(o, want) {
			t.Errorf("show lacks %q:\n%s", want, o)
		}
	}
	o, code = run(t, "show", "-d", sw.Dir, r.ID, "-o", "json")
	var doc struct {
		Serving map[string]any `json:"serving"`
	}
	if err := json.Unmarshal([]byte(o), &doc); code != 0 || err != nil || doc.Serving["ttft_p99_ms"] != r.Dists["ttft_ms"].P99 || doc.Serving["throughput_rps"] != r.ThroughputRPS() {
		t.Fatalf("show -o json (exit %d, %v): %.600s", code, err, o)
	}
	// the failed run's result is missing, and says so
	if o, _ := run(t, "show", "-d", sw.Dir, "p1.large.moderate.r2"); !strings.Contains(o, "  missing: attempt 1 has no client/result.json\n") {
		t.Errorf("show of a run without a result:\n%s", o)
	}
}
