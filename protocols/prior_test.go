package protocols

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writePrior writes a verdict file, with an evidence file beside it, in
// dir; edit changes the verdict first.
func writePrior(t *testing.T, dir string, edit func(*PriorVerdict)) string {
	t.Helper()
	ev := []byte(`{"T_solo": 3.1, "T_coloc": 3.05}` + "\n")
	os.WriteFile(filepath.Join(dir, "gate.json"), ev, 0o644)
	sum := sha256.Sum256(ev)
	pv := PriorVerdict{Schema: PriorVerdictSchema, Check: "E-a", GPUHours: 3.964,
		Gates:    []PriorGate{{Gate: "colocation/eight-way", Verdict: "pass", Figures: map[string]float64{"throughput_ratio": 0.984}}},
		Evidence: []PriorEvidence{{Path: "gate.json", SHA256: hex.EncodeToString(sum[:])}}}
	if edit != nil {
		edit(&pv)
	}
	b, _ := json.Marshal(pv)
	path := filepath.Join(dir, "colocation-verdict.json")
	os.WriteFile(path, b, 0o644)
	return path
}

func TestCheckPrior(t *testing.T) {
	gates := []string{"colocation/eight-way", "colocation/four-way"}
	regimes := []string{"eight-way", "four-way"}
	cases := []struct {
		name       string
		edit       func(*PriorVerdict)
		problem    string
		authorized string
	}{
		{name: "eight-way passed", authorized: "eight-way"},
		{name: "four-way after eight-way failed", authorized: "four-way", edit: func(pv *PriorVerdict) {
			pv.Gates = []PriorGate{{Gate: "colocation/eight-way", Verdict: "fail"}, {Gate: "colocation/four-way", Verdict: "pass"}}
		}},
		{name: "both failed: no regime", edit: func(pv *PriorVerdict) {
			pv.Gates = []PriorGate{{Gate: "colocation/eight-way", Verdict: "fail"}, {Gate: "colocation/four-way", Verdict: "fail"}}
		}},
		{name: "four-way without eight-way's failure", problem: "colocation/four-way passed, but colocation/eight-way, checked before it, did not fail", authorized: "four-way",
			edit: func(pv *PriorVerdict) { pv.Gates = []PriorGate{{Gate: "colocation/four-way", Verdict: "pass"}} }},
		{name: "another schema", problem: `schema "x/1", want "warden.colocation-verdict/1"`, authorized: "eight-way", edit: func(pv *PriorVerdict) { pv.Schema = "x/1" }},
		{name: "more consumed than declared", problem: "the check consumed 4.5 GPU-hours, but budget.consumed_gpu_hours declares 3.964", authorized: "eight-way",
			edit: func(pv *PriorVerdict) { pv.GPUHours = 4.5 }},
		{name: "no cost", problem: "gpu_hours 0: what the check consumed must be given", authorized: "eight-way", edit: func(pv *PriorVerdict) { pv.GPUHours = 0 }},
		{name: "another gate", problem: `gate "colocation/two-way" is not one of the phase's`, edit: func(pv *PriorVerdict) { pv.Gates[0].Gate = "colocation/two-way" }},
		{name: "an error verdict", problem: `colocation/eight-way's verdict "error": a prior check's gate passed or failed`, edit: func(pv *PriorVerdict) { pv.Gates[0].Verdict = "error" }},
		{name: "evidence changed", problem: "evidence[0] gate.json hashes to sha256 ", authorized: "eight-way", edit: func(pv *PriorVerdict) { pv.Evidence[0].SHA256 = strings.Repeat("0", 64) }},
		{name: "evidence missing", problem: "evidence[1] gone.json: open ", authorized: "eight-way",
			edit: func(pv *PriorVerdict) {
				pv.Evidence = append(pv.Evidence, PriorEvidence{Path: "gone.json", SHA256: "x"})
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			pv, sum, err := ReadPriorVerdict(writePrior(t, dir, tc.edit))
			if err != nil || len(sum) != 64 {
				t.Fatal(err)
			}
			probs := CheckPrior(pv, gates, 3.964, dir)
			switch {
			case tc.problem == "" && len(probs) > 0:
				t.Fatalf("problems %v", probs)
			case tc.problem != "" && (len(probs) != 1 || !strings.Contains(probs[0], tc.problem)):
				t.Fatalf("problems %v, want one with %q", probs, tc.problem)
			}
			if got := pv.Authorized(regimes); got != tc.authorized {
				t.Fatalf("authorized %q, want %q", got, tc.authorized)
			}
		})
	}
	// strict: an unknown field is refused
	dir := t.TempDir()
	path := filepath.Join(dir, "v.json")
	os.WriteFile(path, []byte(`{"schema": "warden.colocation-verdict/1", "regime": "eight-way"}`), 0o644)
	if _, _, err := ReadPriorVerdict(path); err == nil || !strings.Contains(err.Error(), `unknown field "regime"`) {
		t.Fatalf("unknown field: %v", err)
	}
}

// With its inputs, plan reads the verdict: the estimate assumes the
// regime it authorized, and a verdict that does not hold is a problem at
// the prior's line.
func TestPlanReadsThePrior(t *testing.T) {
	b, err := os.ReadFile("opprof-phase3.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	vdir := filepath.Join(dir, "phase3", "E-a")
	os.MkdirAll(vdir, 0o755)
	// only the prior is looked at: the rest of the inputs are the seed's
	// deployment's, not here
	b = bytes.Replace(b, []byte("workdir: /home/admin/cpfs/wjh/aituner"), []byte("workdir: "+dir), 1)
	proto := filepath.Join(dir, "p3.yaml")
	os.WriteFile(proto, b, 0o644)
	b4 := []PriorGate{{Gate: "colocation/eight-way", Verdict: "fail"}, {Gate: "colocation/four-way", Verdict: "pass"}}
	writePrior(t, vdir, func(pv *PriorVerdict) { pv.Gates = b4 })
	p := &Protocol{}
	data, _ := os.ReadFile(proto)
	if p, err = Parse(proto, data); err != nil {
		t.Fatal(err)
	}
	c := &collector{file: proto}
	bl := newBuilder(c, p, Options{CheckInputs: true})
	bl.validate()
	plan := bl.expand()
	var prior []Problem
	for _, pr := range c.list {
		if strings.Contains(pr.Field, "prior") {
			prior = append(prior, pr)
		}
	}
	if len(prior) != 0 || plan.Regime != "four-way" || plan.Phases[0].Prior == nil || !plan.Phases[0].Prior.Read || plan.Phases[0].Prior.Authorized != "four-way" {
		t.Fatalf("regime %q, prior %+v, problems %v", plan.Regime, plan.Phases[0].Prior, prior)
	}
	writePrior(t, vdir, func(pv *PriorVerdict) { pv.GPUHours = 5 })
	c = &collector{file: proto}
	bl = newBuilder(c, p, Options{CheckInputs: true})
	bl.validate()
	bl.expand()
	found := false
	for _, pr := range c.list {
		if pr.Field == "phases[0].prior.verdict" && strings.Contains(pr.Msg, "the check consumed 5 GPU-hours") && pr.Pos.Line > 0 {
			found = true
		}
	}
	if !found {
		t.Fatalf("no problem at the prior for a verdict that consumed more than declared: %v", c.list)
	}
}
