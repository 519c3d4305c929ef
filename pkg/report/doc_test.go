package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"warden/internal/testutil/testsweep"
	"warden/pkg/views"
)

// TestReportDoc keeps docs/report.md in step with the files the report
// writes and the summary ctlq show prints: every column of the three CSVs
// (the latency and spread columns as their families), every key of the
// table JSON and of the serving JSON is named there, in backticks.
func TestReportDoc(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/report.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	seen := map[string]bool{}
	named := func(what, k string) {
		if !strings.Contains(doc, "`"+k+"`") && !seen[k] {
			seen[k] = true
			t.Errorf("docs/report.md does not name %s `%s`", what, k)
		}
	}
	latency := map[string]bool{}
	for _, k := range views.LatencyKeys() {
		latency[k] = true
	}
	for _, m := range views.LatencyMetrics {
		latency[m.Key+"_n"] = true
		named("the latency", m.Key)
	}
	for _, s := range views.LatencyStats {
		if s != "mean" {
			named("the statistic", "_"+s+"_ms")
		}
	}
	sw := testsweep.Write(t, t.TempDir())
	d := Build(sw.Dir, testsweep.Report(t, sw), sw.Plan)
	for _, w := range []struct {
		name  string
		write func(*bytes.Buffer) error
	}{
		{"--csv", func(b *bytes.Buffer) error { return WriteCSV(b, d.Rows) }},
		{"--configs-csv", func(b *bytes.Buffer) error { return WriteConfigsCSV(b, d) }},
		{"--capacity-csv", func(b *bytes.Buffer) error { return WriteCapacityCSV(b, d) }},
	} {
		var buf bytes.Buffer
		if err := w.write(&buf); err != nil {
			t.Fatal(err)
		}
		head, err := csv.NewReader(&buf).Read()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range head {
			switch {
			case latency[c]:
			case spreadFamily(c) != "":
				named(w.name+"'s spread column family", spreadFamily(c))
			default:
				named(w.name+"'s column", c)
			}
		}
	}
	for _, v := range []any{Table{}, ConfigPoint{}, Spread{}, Curve{}, CurvePoint{}, CapacityTable{}, CapacityPoint{}, PerfRow{}, views.Serving{}} {
		tp := reflect.TypeOf(v)
		for i := 0; i < tp.NumField(); i++ {
			f := tp.Field(i)
			k := strings.Split(f.Tag.Get("json"), ",")[0]
			if k == "" || k == "-" || f.Anonymous || latency[k] {
				continue
			}
			switch tp.Name() {
			case "PerfRow":
				if !slicesHas([]string{"ranked_by", "ranked_over", "config"}, k) {
					continue // the performance table's older keys are the runs table's
				}
			case "Table":
				if !slicesHas([]string{"curve_latency", "configs", "curves", "capacity_searches", "rows", "quality_gates", "performance", "not_ranked"}, k) {
					continue
				}
			}
			named(tp.Name()+"'s key", k)
		}
	}
	var tb map[string]any
	j, _ := json.Marshal(d.Table())
	json.Unmarshal(j, &tb)
	if tb["schema"] != float64(TableSchema) || !strings.Contains(doc, "`schema` "+strconv.Itoa(TableSchema)) {
		t.Errorf("docs/report.md does not give the table's schema %d", TableSchema)
	}
}

// spreadFamily is the suffix of a spread column ("_sd"), "" for another.
func spreadFamily(c string) string {
	for _, f := range []string{"_repeats", "_sd", "_ci95_low", "_ci95_high"} {
		if strings.HasSuffix(c, f) {
			return f
		}
	}
	return ""
}

func slicesHas(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}
