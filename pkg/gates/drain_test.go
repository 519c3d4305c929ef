package gates

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestDrain(t *testing.T) {
	now := time.Date(2026, 7, 13, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name                    string
		drain, allowance, watch float64
		verdict                 string
		outcome                 DrainOutcome
		quarantine, fired       float64
		detail                  string
	}{
		{"well within", 35.2, 120, 900, Pass, DrainOK, 0, 0, ""},
		{"exactly the allowance", 240, 240, 900, Pass, DrainOK, 0, 0, ""},
		{"P10 re-adjudicated under 600 s", 288.619107924, 600, 1200, Pass, DrainOK, 0, 0, ""},
		{"over the allowance", 120.001, 120, 900, Fail, DrainQuarantine, 1, 0, "quarantined, not invalid"},
		{"over, no watchdog", 5000, 120, 0, Fail, DrainQuarantine, 1, 0, "exceeds the 120.000 s allowance"},
		{"watchdog fired", 900, 120, 900, Fail, DrainWatchdog, 0, 1, "reached the 900.000 s watchdog"},
		{"past the watchdog", 950, 120, 900, Fail, DrainWatchdog, 0, 1, "the run is ended"},
		{"negative drain", -1, 120, 900, Error, DrainUnknown, 0, 0, "invalid drain time"},
		{"NaN drain", math.NaN(), 120, 900, Error, DrainUnknown, 0, 0, "invalid drain time"},
		{"zero allowance", 10, 0, 900, Error, DrainUnknown, 0, 0, "invalid drain allowance"},
		{"watchdog below allowance", 10, 120, 60, Error, DrainUnknown, 0, 0, "invalid drain watchdog"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, o := Drain(c.drain, c.allowance, c.watch, now)
			if v.Verdict != c.verdict || o != c.outcome || v.Gate != "drain" || !v.At.Equal(now) {
				t.Fatalf("got %+v outcome %v, want %s %v", v, o, c.verdict, c.outcome)
			}
			if v.Figures["quarantine"] != c.quarantine || v.Figures["watchdog_fired"] != c.fired || v.Figures["allowance_s"] != c.allowance || v.Figures["watchdog_s"] != c.watch {
				t.Errorf("figures %v", v.Figures)
			}
			if !math.IsNaN(c.drain) && v.Figures["drain_s"] != c.drain {
				t.Errorf("drain_s %v, want %v", v.Figures["drain_s"], c.drain)
			}
			if !strings.Contains(v.Detail, c.detail) || (c.detail == "" && v.Detail != "") {
				t.Errorf("detail %q, want it to hold %q", v.Detail, c.detail)
			}
		})
	}
	names := map[DrainOutcome]string{DrainUnknown: "unknown", DrainOK: "ok", DrainQuarantine: "quarantine", DrainWatchdog: "watchdog"}
	for o, want := range names {
		if o.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(o), o.String(), want)
		}
	}
}
