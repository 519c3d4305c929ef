package capacity

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"warden/pkg/dirlayout"
	"warden/pkg/schedule"
	"warden/pkg/state"
	"warden/protocols"
)

// capacityCampaign is a store holding the capacity test protocol's runs,
// with its first point done, and Records on it.
func capacityCampaign(t *testing.T, result string) (*Records, *protocols.Plan, string) {
	t.Helper()
	p, err := protocols.PlanFile("../../protocols/testdata/capacity.yaml", protocols.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	st, err := state.Open(filepath.Join(dir, "state.db"), state.Options{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var runs []state.Run
	for i, r := range p.Runs {
		runs = append(runs, state.Run{ID: r.ID, Order: i, Phase: r.Phase, Kind: r.Kind, Cell: r.Cell, Load: r.Load, GPUs: r.GPUs, ExpectedS: r.ExpectedS, Class: r.Class})
	}
	if err := st.CreateCampaign(state.Campaign{ID: "c", ProtocolName: p.Protocol.Name, Dir: dir, CreatedAt: time.Now(), State: state.CampaignRunning, BudgetCapGPUHours: 10}, runs); err != nil {
		t.Fatal(err)
	}
	run := p.Runs[0].ID
	adir := dirlayout.AttemptDir(dir, run, 1)
	if _, err := st.NewAttempt(run, adir, nil); err != nil {
		t.Fatal(err)
	}
	for _, to := range []state.AttemptState{state.Reserved, state.Preflight, state.Starting, state.Ready, state.Measuring, state.Stopping, state.Cleanup, state.Validating, state.Complete} {
		if _, err := st.Transition(run, 1, to, "", "test", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(adir, p.Runs[0].ResultFile)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(result), 0o644); err != nil {
		t.Fatal(err)
	}
	return &Records{Dir: dir, Store: st, Log: zerolog.Nop()}, p, path
}

// TestCapacityPointsRecorded: a done point is judged from its client's
// result and the judgement recorded with the point's rate; records that
// start afresh (a resumed controller) reads the recorded judgement back,
// so it decides the same next point even if the result file changed.
func TestCapacityPointsRecorded(t *testing.T) {
	c, p, path := capacityCampaign(t, `{"totals": {"admitted": 100, "by_class": {"success": 100}}}`)
	runs, err := c.Store.Runs()
	if err != nil {
		t.Fatal(err)
	}
	pts := c.Points(p, runs)["cap/A"]
	if len(pts) != 1 || pts[0].Verdict != "pass" || pts[0].Figures["rate_rps"] != 1 || pts[0].Figures["success"] != 1 {
		t.Fatalf("points %+v; want A.open.b1 passed at rate 1", pts)
	}
	v, err := c.Store.GateVerdicts("A.open.b1")
	if err != nil || len(v) != 1 || v[0].Gate != schedule.CapacityGate || v[0].Attempt != 1 || v[0].Figures["rate_rps"] != 1 {
		t.Fatalf("recorded %+v (%v); want one %s verdict of attempt 1 at rate 1", v, err, schedule.CapacityGate)
	}
	// where the search stands is the campaign record's, for ctlq status
	if cp, err := c.Store.Campaign(); err != nil || len(cp.Capacity) != 1 || cp.Capacity[0] != (state.CapacitySearch{Search: "cap/A", Judged: 1}) {
		t.Fatalf("the campaign records %+v (%v); want cap/A with one point judged", cp.Capacity, err)
	}
	if err := os.WriteFile(path, []byte(`{"totals": {"admitted": 100, "by_class": {"success": 1}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	resumed := &Records{Dir: c.Dir, Store: c.Store, Log: zerolog.Nop()}
	again := resumed.Points(p, runs)["cap/A"]
	if len(again) != 1 || again[0].Verdict != "pass" {
		t.Fatalf("resumed: %+v; want the recorded pass", again)
	}
	if v, _ := c.Store.GateVerdicts("A.open.b1"); len(v) != 1 {
		t.Fatalf("resumed: %d verdicts recorded; the judgement is recorded once", len(v))
	}
	if s := schedule.Search(p.Phases[0].Capacity, again); s.NextRate() != 9 {
		t.Fatalf("next rate %v, want 9", s.NextRate())
	}
}

// TestCapacityPointUnreadable: a done point whose result cannot be read
// is an error verdict, which stops its search.
func TestCapacityPointUnreadable(t *testing.T) {
	c, p, path := capacityCampaign(t, `{}`)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	runs, _ := c.Store.Runs()
	pts := c.Points(p, runs)["cap/A"]
	if len(pts) != 1 || pts[0].Verdict != "error" || !strings.Contains(pts[0].Detail, "read the client result") {
		t.Fatalf("points %+v; want an error verdict", pts)
	}
	if s := schedule.Search(p.Phases[0].Capacity, pts); !s.Done || s.Stop != "error" {
		t.Fatalf("search %+v; want stopped on error", s)
	}
}
