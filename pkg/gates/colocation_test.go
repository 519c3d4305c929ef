package gates

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestColocation(t *testing.T) {
	now := time.Date(2026, 7, 13, 0, 0, 0, 0, time.UTC)
	solo := Measurement{Throughput: 10, Figures: map[string]float64{"moe": 0.41, "attention": 0.22, "gemm": 0.18}}
	with := func(tp float64, figs map[string]float64) Measurement {
		return Measurement{Throughput: tp, Figures: figs}
	}
	cases := []struct {
		name           string
		solo, coloc    Measurement
		ttol, ftol     float64
		verdict        string
		figures        map[string]float64
		detail, absent []string
	}{
		{"same placement effect within bounds", solo, with(9.8, map[string]float64{"moe": 0.40, "attention": 0.235, "gemm": 0.19, "other": 0.9}), 0.03, 0.03, Pass,
			map[string]float64{"t_solo": 10, "t_coloc": 9.8, "ratio": 0.98}, nil, nil},
		{"throughput drop of 5%", solo, with(9.5, map[string]float64{"moe": 0.41, "attention": 0.22, "gemm": 0.18}), 0.03, 0.03, Fail,
			map[string]float64{"ratio": 0.95, "diff_moe": 0}, []string{"throughput ratio 0.9500"}, []string{"moe moved"}},
		{"a share moved 5 points", solo, with(10.1, map[string]float64{"moe": 0.36, "attention": 0.22, "gemm": 0.18}), 0.03, 0.03, Fail,
			nil, []string{"moe moved by -0.0500"}, []string{"throughput ratio", "attention moved"}},
		{"exactly at the bound fails (strict)", with(4, map[string]float64{"a": 0.25}), with(6, map[string]float64{"a": 0.75}), 0.5, 0.5, Fail,
			map[string]float64{"ratio": 1.5, "diff_a": 0.5}, []string{"throughput ratio 1.5000", "a moved by 0.5000"}, nil},
		{"a share missing", solo, with(10, map[string]float64{"moe": 0.41, "gemm": 0.18}), 0.03, 0.03, Fail,
			nil, []string{"attention is missing from the co-located measurement"}, []string{"gemm moved"}},
		{"NaN share fails", solo, with(10, map[string]float64{"moe": math.NaN(), "attention": 0.22, "gemm": 0.18}), 0.03, 0.03, Fail,
			nil, []string{"moe moved"}, nil},
		{"zero solo throughput", with(0, nil), with(3, nil), 0.03, 0.03, Error, nil, []string{"solo throughput 0 is not positive"}, nil},
		{"negative co-located throughput", solo, with(-1, nil), 0.03, 0.03, Error, nil, []string{"co-located throughput -1 is invalid"}, nil},
		{"zero tolerance", solo, solo, 0, 0.03, Error, nil, []string{"tolerances must be positive"}, nil},
		{"zero co-located throughput fails", solo, with(0, solo.Figures), 0.03, 0.03, Fail, map[string]float64{"ratio": 0}, []string{"throughput ratio 0.0000"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Colocation(c.solo, c.coloc, c.ttol, c.ftol, now)
			if v.Verdict != c.verdict || v.Gate != "colocation" || !v.At.Equal(now) {
				t.Fatalf("got %+v, want %s", v, c.verdict)
			}
			checkFigures(t, v.Figures, c.figures, 1e-12)
			checkDetail(t, v.Detail, c.detail, c.absent)
		})
	}
	// Keys only in the co-located measurement are not compared.
	v := Colocation(solo, with(10, map[string]float64{"moe": 0.41, "attention": 0.22, "gemm": 0.18, "other": 0.99}), 0.03, 0.03, now)
	if _, ok := v.Figures["diff_other"]; ok || !v.Passed() {
		t.Errorf("extra co-located key compared: %+v", v)
	}
}

func TestReadThroughput(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "result.json")
	doc := `{"clean": {"completed_rps": 12.5, "requests": 3000, "label": "x"},
	         "windows": [{"share": 0.4}, {"share": 0.25}], "big": 1e3}`
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	good := []struct {
		field string
		want  float64
	}{{"clean.completed_rps", 12.5}, {"clean.requests", 3000}, {"windows.1.share", 0.25}, {"big", 1000}}
	for _, g := range good {
		got, err := ReadThroughput(path, g.field)
		if err != nil || got != g.want {
			t.Errorf("ReadThroughput(%s) = %v, %v; want %v", g.field, got, err, g.want)
		}
	}
	bad := []struct {
		field   string
		noField bool
		msg     string
	}{
		{"clean.completed", true, "field clean.completed"},
		{"nope.completed_rps", true, "field nope"},
		{"windows.2.share", true, "index out of an array of 2"},
		{"clean.completed_rps.x", true, "clean.completed_rps is not an object"},
		{"clean.label", false, "is string, not a number"},
		{"clean", false, "not a number"},
		{"", false, "empty field path"},
	}
	for _, b := range bad {
		_, err := ReadThroughput(path, b.field)
		if err == nil || errors.Is(err, ErrNoField) != b.noField || !strings.Contains(err.Error(), b.msg) {
			t.Errorf("ReadThroughput(%q): err %v, want ErrNoField=%v and %q", b.field, err, b.noField, b.msg)
		}
	}
	if _, err := ReadThroughput(filepath.Join(dir, "missing.json"), "a"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	broken := filepath.Join(dir, "broken.json")
	if err := os.WriteFile(broken, []byte(`{"clean": {"completed_rps": 1`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadThroughput(broken, "clean.completed_rps"); err == nil || errors.Is(err, ErrNoField) {
		t.Errorf("truncated JSON: %v", err)
	}
}

func TestColocationF3(t *testing.T) {
	now := time.Date(2026, 7, 13, 0, 0, 0, 0, time.UTC)
	solo := map[string]float64{"moe_gemm": 0.30, "attention": 0.20, "attention_decode": 0.19, "norm_elementwise": 0.25, "dense_gemm": 0.10, "other": 0.15}
	shift := func(f string, d float64) map[string]float64 {
		c := map[string]float64{}
		for k, v := range solo {
			c[k] = v
		}
		c[f] += d
		c["other"] -= d
		return c
	}
	if got := TopFamilies(solo, 3); strings.Join(got, ",") != "moe_gemm,norm_elementwise,attention" {
		t.Fatalf("F3 %v", got)
	}
	cases := []struct {
		name    string
		coloc   map[string]float64
		verdict string
		detail  string
	}{
		{"a 2-point shift passes", shift("moe_gemm", 0.02), Pass, "moe_gemm 0.3000 -> 0.3200"},
		{"a 4-point shift fails", shift("attention", -0.04), Fail, "attention moved by -0.0400"},
		{"exactly 3 points fails (strict)", shift("norm_elementwise", 0.03), Fail, "norm_elementwise moved"},
		{"a family outside F3 may move", shift("dense_gemm", 0.09), Pass, "F3"},
		{"a subfamily is not compared", shift("attention_decode", -0.1), Pass, "F3"},
		{"a family gone from the co-located window", map[string]float64{"attention": 0.2, "norm_elementwise": 0.25}, Fail, "moe_gemm moved by -0.3000"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := ColocationF3(solo, c.coloc, 0.03, now)
			if v.Verdict != c.verdict || !strings.Contains(v.Detail, c.detail) || v.Figures["solo.moe_gemm"] != 0.30 {
				t.Fatalf("got %s %q %v", v.Verdict, v.Detail, v.Figures)
			}
		})
	}
	for name, c := range map[string]struct {
		solo, coloc map[string]float64
		tol         float64
	}{
		"two families":   {map[string]float64{"a": 0.5, "other": 0.5, "b": 0}, solo, 0.03},
		"NaN share":      {solo, map[string]float64{"moe_gemm": math.NaN()}, 0.03},
		"share above 1":  {map[string]float64{"a": 2, "b": 0, "c": 0}, solo, 0.03},
		"zero tolerance": {solo, solo, 0},
	} {
		if v := ColocationF3(c.solo, c.coloc, c.tol, now); v.Verdict != Error {
			t.Errorf("%s: %s %q", name, v.Verdict, v.Detail)
		}
	}
}

// The throughput criterion's own false-failure rate: the solo target's
// clean segments ran 10, 11 and 9 requests/s (sd 1, the mean's relative
// error 0.0577), the co-located target's 10, 10, 10; with no effect at all
// |ratio - 1| >= 0.03 has probability erfc(0.03 / (0.0577 sqrt 2)) =
// 0.6033. Without segments on either side, no figure.
func TestColocationThroughputSelf(t *testing.T) {
	now := time.Unix(0, 0)
	v := Colocation(Measurement{Throughput: 10, Segments: []float64{10, 11, 9}}, Measurement{Throughput: 10, Segments: []float64{10, 10, 10}}, 0.03, 0.03, now)
	if v.Verdict != Pass || math.Abs(v.Figures["throughput.self.se_ratio"]-0.05773502691896258) > 1e-12 ||
		math.Abs(v.Figures["throughput.self.false_failure_rate"]-0.6033317722918666) > 1e-9 {
		t.Fatalf("%+v", v)
	}
	v = Colocation(Measurement{Throughput: 10}, Measurement{Throughput: 10, Segments: []float64{10, 10, 10}}, 0.03, 0.03, now)
	if _, ok := v.Figures["throughput.self.false_failure_rate"]; ok {
		t.Fatalf("no solo segments: %+v", v)
	}
}
