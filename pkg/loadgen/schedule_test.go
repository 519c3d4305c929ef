package loadgen

import (
	"math"
	"testing"
	"time"
)

func TestPlannerSteadyAndBurstAreExact(t *testing.T) {
	for _, tc := range []struct {
		arrival string
		rate    float64
		want    func(i int) time.Duration
	}{
		{"steady", 4, func(i int) time.Duration { return time.Duration(i) * 250 * time.Millisecond }},
		{"steady", 1000, func(i int) time.Duration { return time.Duration(i) * time.Millisecond }},
		{"burst:8", 4, func(i int) time.Duration { return time.Duration(i/8) * 2 * time.Second }},
		{"burst:8", 3, func(i int) time.Duration { return seconds(float64(i/8*8) / 3) }},
	} {
		a, err := ParseArrival(tc.arrival)
		if err != nil {
			t.Fatal(err)
		}
		p, err := NewPlanner(a, tc.rate, 1)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 1000; i++ {
			if got := p.Next(); got != tc.want(i) {
				t.Fatalf("%s at %v/s: request %d planned at %v, want %v", tc.arrival, tc.rate, i, got, tc.want(i))
			}
		}
	}
}

func TestPlannerRandomClassesAreSeededAndHaveTheirRate(t *testing.T) {
	for _, arrival := range []string{"poisson", "gamma:0.5", "gamma:4"} {
		a, err := ParseArrival(arrival)
		if err != nil {
			t.Fatal(err)
		}
		p1, _ := NewPlanner(a, 100, 20260712)
		p2, _ := NewPlanner(a, 100, 20260712)
		p3, _ := NewPlanner(a, 100, 7)
		const n = 20000
		var last time.Duration
		same3 := true
		for i := 0; i < n; i++ {
			x, y, z := p1.Next(), p2.Next(), p3.Next()
			if x != y {
				t.Fatalf("%s: the same seed planned %v and %v for request %d", arrival, x, y, i)
			}
			if i == 0 && x != 0 {
				t.Fatalf("%s: first request at %v, want t = 0", arrival, x)
			}
			if x < last {
				t.Fatalf("%s: request %d planned before its predecessor", arrival, i)
			}
			same3 = same3 && x == z
			last = x
		}
		if same3 {
			t.Fatalf("%s: another seed gave the same schedule", arrival)
		}
		// Mean gap 1/λ = 10 ms, within 5% over 20,000 gaps.
		if mean := last.Seconds() / (n - 1); math.Abs(mean-0.01) > 0.0005 {
			t.Fatalf("%s: mean gap %v s, want 0.01", arrival, mean)
		}
	}
}

func TestParseArrivalRefusesNonsense(t *testing.T) {
	for _, s := range []string{"", "burst", "burst:0", "burst:x", "gamma", "gamma:0", "gamma:-1", "steady:2", "uniform"} {
		if _, err := ParseArrival(s); err == nil {
			t.Errorf("ParseArrival(%q) accepted", s)
		}
	}
	for _, s := range []string{"steady", "burst:8", "poisson", "gamma:0.5"} {
		a, err := ParseArrival(s)
		if err != nil || a.String() != s {
			t.Errorf("ParseArrival(%q) = %v, %v", s, a, err)
		}
	}
}

func TestCountBefore(t *testing.T) {
	steady, _ := ParseArrival("steady")
	burst, _ := ParseArrival("burst:8")
	for _, tc := range []struct {
		a    Arrival
		rate float64
		d    time.Duration
		want int64
	}{
		{steady, 10, time.Second, 10},                // t = 0, 0.1, ..., 0.9
		{steady, 10, time.Second + 1, 11},            // and t = 1.0
		{burst, 8, time.Second, 8},                   // one burst at t = 0
		{burst, 8, time.Second + 1, 16},              // and one at t = 1
		{burst, 0.6 * 100, 408 * time.Second, 24480}, // the seed's moderate timeline at T_sat = 100
	} {
		got, err := CountBefore(tc.a, tc.rate, 0, tc.d)
		if err != nil || got != tc.want {
			t.Errorf("CountBefore(%s, %v, %v) = %d, %v; want %d", tc.a, tc.rate, tc.d, got, err, tc.want)
		}
	}
}
