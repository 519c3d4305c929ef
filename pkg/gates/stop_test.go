package gates

import (
	"strings"
	"testing"
)

func TestStopRules(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	phase3 := StopRules{QuarantinedFractionGT: f(0.20), FailedFractionGT: f(0.05)}
	cases := []struct {
		name   string
		rules  StopRules
		counts Counts
		stop   bool
		rule   string
		detail string
	}{
		{"no thresholds never stop", StopRules{}, Counts{Measured: 52, Quarantined: 52, Failed: 52}, false, "", ""},
		{"10 of 52 quarantined", phase3, Counts{Measured: 52, Quarantined: 10}, false, "", ""},
		{"11 of 52 quarantined", phase3, Counts{Measured: 52, Quarantined: 11}, true, "quarantined-fraction", "11 of 52 measured runs quarantined"},
		{"exactly 20% does not stop", phase3, Counts{Measured: 50, Quarantined: 10}, false, "", ""},
		{"2 of 52 failed", phase3, Counts{Measured: 52, Failed: 2}, false, "", ""},
		{"3 of 52 failed", phase3, Counts{Measured: 52, Failed: 3}, true, "failed-fraction", "3 of 52 measured runs failed"},
		{"exactly 5% does not stop", phase3, Counts{Measured: 20, Failed: 1}, false, "", ""},
		{"both: failed named first", phase3, Counts{Measured: 20, Failed: 2, Quarantined: 10}, true, "failed-fraction", "2 of 20"},
		{"only the quarantine rule set", StopRules{QuarantinedFractionGT: f(0.2)}, Counts{Measured: 10, Failed: 10, Quarantined: 3}, true, "quarantined-fraction", "3 of 10"},
		{"zero threshold stops on the first", StopRules{FailedFractionGT: f(0)}, Counts{Measured: 52, Failed: 1}, true, "failed-fraction", "1 of 52"},
		{"no measured runs", phase3, Counts{Measured: 0, Failed: 3}, false, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stop, rule, detail, figs := c.rules.Evaluate(c.counts)
			if stop != c.stop || rule != c.rule || !strings.Contains(detail, c.detail) || (!c.stop && detail != "") {
				t.Fatalf("got stop %v rule %q detail %q, want %v %q %q", stop, rule, detail, c.stop, c.rule, c.detail)
			}
			if figs["measured"] != float64(c.counts.Measured) || figs["quarantined"] != float64(c.counts.Quarantined) || figs["failed"] != float64(c.counts.Failed) {
				t.Errorf("figures %v", figs)
			}
			if c.counts.Measured > 0 && figs["failed_fraction"] != float64(c.counts.Failed)/float64(c.counts.Measured) {
				t.Errorf("failed_fraction %v", figs["failed_fraction"])
			}
			if _, ok := figs["failed_fraction_gt"]; ok != (c.rules.FailedFractionGT != nil) {
				t.Errorf("failed_fraction_gt present %v with rule %v", ok, c.rules.FailedFractionGT)
			}
		})
	}
}
