package testcampaign

import (
	"strings"
	"testing"

	"warden/protocols"
)

// standinPlan plans Head and the body s of a two-slot protocol.
func standinPlan(t *testing.T, s Standin) *protocols.Plan {
	t.Helper()
	y := Head("t", "1.0", `STANDIN: "/bin/true"`, []int{18001, 18002}) + s.YAML()
	plan, err := protocols.PlanBytes("t.yaml", []byte(y), protocols.Options{})
	if err != nil {
		t.Fatalf("plan:\n%s\n%v", y, err)
	}
	return plan
}

func body() Standin {
	return Standin{
		DrainS: "5", WatchdogS: "20", CleanupS: "10", ReadyS: "10", ExpectedS: "10", Quarantined: "0.9",
		Server:         `["${STANDIN}", server, --port, "${PORT}"]`,
		Expect:         `[{name: chunked, pattern: 'x'}]`,
		Client:         `["${STANDIN}", client, --drain-extra-s, "${DRAIN_EXTRA}"]`,
		ModerateClient: `["${STANDIN}", client]`,
	}
}

// The body plans as written: one cell p1 when Cells is 0, a saturation
// run per cell, and a moderate run after each when Moderate is set; Late
// says which cells' clients drain 2 s longer.
func TestStandinPlans(t *testing.T) {
	if plan := standinPlan(t, body()); len(plan.Runs) != 1 || plan.Runs[0].ID != "p1.saturation" {
		t.Fatalf("runs of the default body: %+v", plan.Runs)
	}
	s := body()
	s.Cells, s.Moderate, s.Late = 3, true, func(i int) bool { return i == 1 }
	plan := standinPlan(t, s)
	var ids []string
	for _, r := range plan.Runs {
		ids = append(ids, r.ID)
		late := strings.HasPrefix(r.ID, "p2.")
		if r.Load == "saturation" && strings.Contains(strings.Join(r.Client.Argv, " "), `--drain-extra-s 2`) != late {
			t.Errorf("%s client %q: late %v", r.ID, r.Client.Argv, late)
		}
	}
	if got := strings.Join(ids, " "); got != "p1.saturation p1.moderate p2.saturation p2.moderate p3.saturation p3.moderate" {
		t.Fatalf("runs %s", got)
	}
}
