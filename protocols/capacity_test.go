package protocols

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// capacityPhase appends a capacity phase over load "open" to the mini
// protocol; extra is added to its capacity: section.
func capacityMini(t *testing.T, client, extra string) string {
	t.Helper()
	base := strings.Replace(readMini(t), "axes:\n", `  - name: open
    kind: open-loop
    expected_s: 10
    client: `+client+`
axes:
`, 1)
	return base + `  - name: cap
    kind: capacity
    matrix: {pattern: [A]}
    loads: [open]
    capacity:
      rate_min: 0.5
      rate_max: 8
      resolution: 0.25
      slo: {success_min: 0.999, ttfa_p99_ms_max: 500, chunk_gap_p99_ms_max: 200, rtf_p99_lt: 1, queue_growth_max: 0.05}
` + extra
}

const rateClient = `[standin, client, --rate, "${CAPACITY_RATE}", --result-dir, "${ATTEMPT_DIR}"]`

func TestCapacityPlanWorstCase(t *testing.T) {
	p, err := PlanBytes("cap.yaml", []byte(capacityMini(t, rateClient, "")), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ph := p.Phases[1]
	if ph.Capacity == nil {
		t.Fatalf("phase %s has no capacity spec", ph.Name)
	}
	// ceil(log2((8-0.5)/0.25)) = ceil(log2 30) = 5 halvings, + the first point.
	if got := ph.Capacity.BisectionPoints; got != 6 {
		t.Fatalf("bisection points %d, want 6", got)
	}
	if got := ph.Capacity.MaxPoints; got != 10 || ph.Runs != 10 {
		t.Fatalf("max points %d, phase runs %d; want 10 (6 + 3 follow-ups + overload)", got, ph.Runs)
	}
	var ids []string
	cond := 0
	for _, r := range p.Runs[4:] {
		ids = append(ids, r.ID)
		if r.Capacity == nil || r.Capacity.Search != "cap/A" {
			t.Fatalf("run %s has capacity %+v", r.ID, r.Capacity)
		}
		if r.Condition == CapacityCondition {
			cond++
		}
		if !strings.Contains(strings.Join(r.Client.Argv, " "), "--rate ${CAPACITY_RATE}") {
			t.Fatalf("run %s client %v: ${CAPACITY_RATE} must be kept for launch", r.ID, r.Client.Argv)
		}
	}
	want := "A.open.b1 A.open.b2 A.open.b3 A.open.b4 A.open.b5 A.open.b6 A.open.x050 A.open.x080 A.open.x095 A.open.x120"
	if got := strings.Join(ids, " "); got != want {
		t.Fatalf("capacity runs %s, want %s", got, want)
	}
	if cond != 9 || p.Runs[4].Condition != "" {
		t.Fatalf("%d conditional points, first %q; want the first unconditional and 9 conditional", cond, p.Runs[4].Condition)
	}
	if p.Totals.Conditional != 9 || p.Totals.ConditionalGPUHours <= 0 {
		t.Fatalf("totals: %d conditional runs, %v GPU-hours; the worst case must be counted", p.Totals.Conditional, p.Totals.ConditionalGPUHours)
	}
	if units := map[int]bool{}; true {
		for _, r := range p.Runs[4:] {
			units[r.Unit] = true
		}
		if len(units) != 10 {
			t.Fatalf("%d units for 10 points; each point is a fresh server", len(units))
		}
	}
}

func TestCapacityProblems(t *testing.T) {
	cases := []struct {
		name, client, extra, old, new string
		line, col                     int
		field, msg                    string
	}{
		{"no rate", `[standin, client]`, "", "", "", 41, 12, "phases[1].loads",
			`load "open" is searched over its arrival rate, so its client must use ${CAPACITY_RATE}`},
		{"rate elsewhere", rateClient, "", "loads: [sat, mod]", "loads: [sat, mod, open]", 0, 0, "loads.open.client[3]",
			"unknown variable ${CAPACITY_RATE}"},
		{"rate order", rateClient, "", "rate_max: 8", "rate_max: 0.5", 44, 17, "phases[1].capacity.rate_max",
			"must be above rate_min (0.5), got 0.5"},
		{"resolution", rateClient, "", "resolution: 0.25", "resolution: 9", 45, 19, "phases[1].capacity.resolution",
			"must be positive and narrower than rate_max - rate_min (7.5), got 9"},
		{"follow-ups", rateClient, "      follow_ups: [0.8, 0.5]\n", "", "", 47, 19, "phases[1].capacity.follow_ups[1]",
			"follow-ups are ascending fractions of the found rate, above 0 and below 1, got 0.5"},
		{"overload", rateClient, "      overload: 0.9\n", "", "", 47, 17, "phases[1].capacity.overload",
			"the overload point is a multiple of the found rate above 1, got 0.9"},
		{"success", rateClient, "", "success_min: 0.999", "success_min: 99.9", 46, 26, "phases[1].capacity.slo.success_min",
			"a fraction of requests is above 0 and at most 1, got 99.9"},
		{"negative bound", rateClient, "", "ttfa_p99_ms_max: 500", "ttfa_p99_ms_max: -1", 46, 50, "phases[1].capacity.slo.ttfa_p99_ms_max",
			"must be positive, got -1"},
		{"empty slo", rateClient, "", "slo: {success_min: 0.999, ttfa_p99_ms_max: 500, chunk_gap_p99_ms_max: 200, rtf_p99_lt: 1, queue_growth_max: 0.05}", "slo: {}", 46, 12, "phases[1].capacity.slo",
			"the SLO names no bound (success_min, ttft_p99_ms_max, e2e_p99_ms_max, ttfa_p99_ms_max, chunk_gap_p99_ms_max, rtf_p99_lt, queue_growth_max)"},
		{"no section", rateClient, "", "    capacity:\n      rate_min", "    xcapacity:\n      rate_min", 38, 5, "phases[1].capacity",
			"a capacity phase needs a capacity: section (rate_min, rate_max, resolution, slo)"},
		{"wrong kind", rateClient, "", "kind: capacity", "kind: primary", 43, 7, "phases[1].capacity",
			"only a phase of kind capacity has a capacity: section"},
		{"repeats", rateClient, "", "loads: [open]", "loads: [open]\n    repeats: 3", 42, 14, "phases[1].repeats",
			"a capacity phase's repeats are its follow-up points; repeats must be 1, got 3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			text := capacityMini(t, tc.client, tc.extra)
			if tc.old != "" {
				if !strings.Contains(text, tc.old) {
					t.Fatalf("test bug: %q not in the protocol", tc.old)
				}
				text = strings.Replace(text, tc.old, tc.new, 1)
			}
			_, err := PlanBytes("bad.yaml", []byte(text), Options{})
			var ps *Problems
			if !errors.As(err, &ps) {
				t.Fatalf("want *Problems, got %v", err)
			}
			for _, p := range ps.List {
				if strings.HasPrefix(p.Msg, tc.msg) {
					if p.File != "bad.yaml" || (tc.line != 0 && p.Pos.Line != tc.line) || (tc.col != 0 && p.Pos.Column != tc.col) || p.Field != tc.field {
						t.Fatalf("problem %q at %s:%d:%d field %q; want line %d col %d field %q", p.Msg, p.File, p.Pos.Line, p.Pos.Column, p.Field, tc.line, tc.col, tc.field)
					}
					return
				}
			}
			t.Fatalf("no problem %q; got:\n%v", tc.msg, err)
		})
	}
}

func TestHalvings(t *testing.T) {
	for _, tc := range []struct {
		lo, hi, res float64
		want        int
	}{{0.5, 8, 0.25, 5}, {1, 9, 1, 3}, {1, 9, 0.999, 4}, {0, 1, 2, 0}} {
		if got := Halvings(tc.lo, tc.hi, tc.res); got != tc.want {
			t.Errorf("Halvings(%v, %v, %v) = %d, want %d", tc.lo, tc.hi, tc.res, got, tc.want)
		}
	}
}

func TestLaunchRate(t *testing.T) {
	if v, err := (&CapacityPoint{Rate: 4.5}).LaunchRate(); err != nil || v != "4.5" {
		t.Fatalf("rate 4.5: %q, %v", v, err)
	}
	for _, r := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if v, err := (&CapacityPoint{Search: "cap/A", Point: 2, Rate: r}).LaunchRate(); err == nil || !strings.Contains(err.Error(), "point 2 of capacity search cap/A has no decided rate") {
			t.Fatalf("rate %v: %q, %v; want refused", r, v, err)
		}
	}
}
