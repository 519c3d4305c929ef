package amend

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warden/pkg/atomicfile"
	"warden/pkg/dirlayout"
	"warden/pkg/state"
	"warden/protocols"
)

// planCampaign is a campaign of protocol, its plan written and its runs in
// its store (closed at the end), without attempts.
func planCampaign(t *testing.T, protocol string) Campaign {
	t.Helper()
	plan, err := protocols.PlanFile(protocol, protocols.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := atomicfile.WriteJSON(dirlayout.Plan(dir), plan, 0o444); err != nil {
		t.Fatal(err)
	}
	s, err := state.Open(dirlayout.State(dir), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var runs []state.Run
	for i, r := range plan.Runs {
		runs = append(runs, state.Run{ID: r.ID, Order: i})
	}
	if err := s.CreateCampaign(state.Campaign{ID: "c1", Dir: dir, ProtocolSHA256: plan.Protocol.SHA256, ProtocolPath: protocol}, runs); err != nil {
		t.Fatal(err)
	}
	return Campaign{Dir: dir, Workdir: dir, Store: s}
}

// capacityDir is a campaign of protocols/testdata/capacity.yaml
// (planCampaign) with the runs of ran given an attempt each; it returns
// the campaign and its store.
func capacityDir(t *testing.T, ran ...string) (Campaign, *state.Store) {
	t.Helper()
	c := planCampaign(t, "../../protocols/testdata/capacity.yaml")
	for _, id := range ran {
		if _, err := c.Store.NewAttempt(id, "", nil); err != nil {
			t.Fatal(err)
		}
	}
	return c, c.Store
}

// amended is the capacity protocol with old replaced by new.
func amended(t *testing.T, old, new string) string {
	t.Helper()
	b, err := os.ReadFile("../../protocols/testdata/capacity.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("test bug: %q not in the protocol", old)
	}
	p := filepath.Join(t.TempDir(), "capacity.yaml")
	if err := os.WriteFile(p, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAmendCapacityMidSearch: an SLO amended mid-search was "no change
// to the plan": the earlier points kept their passes under the old SLO,
// the later ones failed the new one, and the search reported a found
// rate of both. The diff shows a capacity search's change; once a point
// of the search has run the amendment is refused, naming the points and
// the change; before, or for on_non_monotonic alone, it is accepted.
func TestAmendCapacityMidSearch(t *testing.T) {
	slo := amended(t, "slo: {success_min: 0.999}", "slo: {success_min: 0.9999}")
	c, _ := capacityDir(t, "A.open.b1")
	_, _, err := Amend(c, Request{Protocol: slo, ID: "A-1", Reason: "stricter SLO", Yes: true})
	if err == nil || !strings.Contains(err.Error(), "amend A-1 changes capacity search cap (capacity.cap) after 1 of its points ran (A.open.b1)") ||
		!strings.Contains(err.Error(), `"success_min":0.999}`) || !strings.Contains(err.Error(), `"success_min":0.9999}`) {
		t.Fatalf("an SLO amended after a point ran: %v", err)
	}
	if as, _ := c.Store.Amendments(); len(as) != 0 {
		t.Fatalf("recorded %v", as)
	}

	c, _ = capacityDir(t)
	res, _, err := Amend(c, Request{Protocol: slo, ID: "A-1", Reason: "stricter SLO"})
	if err != nil {
		t.Fatalf("before any point ran: %v", err)
	}
	found := false
	for _, f := range res.Diff.Fields {
		found = found || (f.Field == "capacity.cap" && strings.Contains(string(f.New), `"success_min":0.9999`) && strings.Contains(string(f.Old), `"success_min":0.999}`))
	}
	if !found {
		t.Fatalf("the diff does not show the SLO's change: %+v", res.Diff.Fields)
	}

	policy := amended(t, "slo: {success_min: 0.999}", "slo: {success_min: 0.999}\n      on_non_monotonic: continue")
	c, _ = capacityDir(t, "A.open.b1")
	if res, _, err := Amend(c, Request{Protocol: policy, ID: "A-2", Reason: "go on"}); err != nil || len(res.Diff.Fields) != 1 {
		t.Fatalf("on_non_monotonic alone, after a point ran: %v, diff %+v", err, res.Diff.Fields)
	}
}
