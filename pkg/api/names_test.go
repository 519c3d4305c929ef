package api_test

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"warden/pkg/api"
	"warden/pkg/state"
)

// keysOf is the set of keys of every object in the JSON document b, at
// any depth, with the path of the first place each is found.
func keysOf(t *testing.T, b []byte) map[string]string {
	t.Helper()
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	keys := map[string]string{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if _, seen := keys[k]; !seen {
					keys[k] = path + "." + k
				}
				walk(path+"."+k, e)
			}
		case []any:
			for _, e := range x {
				walk(path+"[]", e)
			}
		}
	}
	walk("", v)
	return keys
}

// TestOneNameForARunID (issue 39, friction 10): the run's id is "run" in
// ctlq runs, ctlq show (the run, its record, its attempts, events and
// gates) and ctlq events; an event's monotonic time says its unit
// (mono_ns); the documents say schema 2. Nothing is lost: each document
// reads back into the same records.
func TestOneNameForARunID(t *testing.T) {
	dir := t.TempDir()
	s := newStore(t, dir, state.Campaign{ID: "c1", BudgetCapGPUHours: 10})
	if api.Schema != 2 {
		t.Fatalf("schema %d: the renames need the bump", api.Schema)
	}

	runs, err := api.BuildRuns(s, "")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(api.Runs{Schema: api.Schema, Runs: runs})
	if k := keysOf(t, b); k["run"] != ".runs[].run" || k["id"] != "" {
		t.Errorf("ctlq runs -o json keys %v: want the id as run", k)
	}

	d, err := api.BuildRun(s, "r0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddGateVerdict(state.GateVerdict{Gate: "g", Run: "r0", Attempt: 1, Verdict: state.VerdictPass}); err != nil {
		t.Fatal(err)
	}
	if d.Gates, err = s.GateVerdicts("r0"); err != nil {
		t.Fatal(err)
	}
	b, err = json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	k := keysOf(t, b)
	for _, old := range []string{"id", "run_id", "mono"} {
		if k[old] != "" {
			t.Errorf("ctlq show -o json still has %q (at %s):\n%s", old, k[old], b)
		}
	}
	var top map[string]json.RawMessage
	json.Unmarshal(b, &top)
	if string(top["run"]) != `"r0"` || k["mono_ns"] == "" || !strings.Contains(string(top["record"]), `"run":"r0"`) ||
		!strings.Contains(string(top["attempts"]), `"run":"r0"`) || !strings.Contains(string(top["gates"]), `"run":"r0"`) {
		t.Errorf("ctlq show -o json: run %s, keys %v:\n%s", top["run"], k, b)
	}
	var back api.RunDetail
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Run, d.Run) || len(back.Attempts) != 1 || back.Attempts[0].RunID != "r0" ||
		len(back.Events) != len(d.Events) || back.Events[0].Mono != d.Events[0].Mono || back.Events[0].Mono == 0 {
		t.Errorf("read back: %+v\nwant %+v", back, d)
	}

	ev := d.Events[0]
	b, _ = json.Marshal(api.EventLine{Schema: api.Schema, Event: ev})
	if !bytes.HasPrefix(b, []byte(`{"schema":2,"seq":`)) || k["mono_ns"] == "" || bytes.Contains(b, []byte(`"mono":`)) ||
		!bytes.Contains(b, []byte(`"run":"r0"`)) {
		t.Errorf("ctlq events -o json line: %s", b)
	}
	var line api.EventLine
	if err := json.Unmarshal(b, &line); err != nil || line.Event.Mono != ev.Mono || line.Schema != 2 || line.Run != "r0" {
		t.Errorf("read back %+v (%v), want %+v", line, err, ev)
	}
	page := api.Events{Schema: api.Schema, Events: d.Events}
	b, _ = json.Marshal(page)
	var back2 api.Events
	if err := json.Unmarshal(b, &back2); err != nil || !reflect.DeepEqual(back2.Events, d.Events) || !bytes.Contains(b, []byte(`"mono_ns"`)) {
		t.Errorf("events page %s read back %+v (%v)", b, back2, err)
	}
}

// TestConsumedIsOneFigure (friction 10): consumed_gpu_hours is the
// charged GPU time plus what is in flight, the figure the text prints as
// "consumed", with both parts beside it; the ETA is null while the
// controller is dead.
func TestConsumedIsOneFigure(t *testing.T) {
	dir, s, t0 := runningCampaign(t, []state.Run{{ID: "a", ExpectedS: 100}})
	if _, err := s.NewAttempt("a", "", func(a *state.Attempt) {
		a.GPUIDs = []int{0, 1}
		a.Procs = []state.Proc{{Role: "server", PID: 1, StartedAt: t0}}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddLedger(state.LedgerEntry{Kind: state.LedgerPrior, GPUSeconds: 3600}); err != nil {
		t.Fatal(err)
	}
	st, err := api.BuildStatus(s, dir, api.Controller{}, t0.Add(900*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	bu := st.Budget
	if bu.ChargedGPUHours != 1 || bu.InFlightGPUHours != 0.5 || bu.ConsumedGPUHours != 1.5 {
		t.Errorf("budget %+v: want charged 1 + in flight 0.5 = consumed 1.5", bu)
	}
	b, _ := json.Marshal(st)
	var doc struct {
		ETA    *float64           `json:"eta_s"`
		Budget map[string]float64 `json:"budget"`
	}
	if err := json.Unmarshal(b, &doc); err != nil || doc.ETA != nil || !bytes.Contains(b, []byte(`"eta_s":null`)) ||
		math.Abs(doc.Budget["consumed_gpu_hours"]-doc.Budget["charged_gpu_hours"]-doc.Budget["in_flight_gpu_hours"]) > 1e-12 {
		t.Errorf("status -o json with the controller dead: %s", b)
	}
}
