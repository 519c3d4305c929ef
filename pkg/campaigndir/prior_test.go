package campaigndir

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warden/pkg/dirlayout"
	"warden/pkg/provenance"
	"warden/pkg/state"
	"warden/protocols"
)

// colocProtocol is a co-location check that ran before the campaign (seed
// 002's E-a), on the mini protocol's host: its prior verdict, beside the
// protocol and named relative to it, failed pair-a and passed pair-b;
// 0.001 GPU-hours of it are declared consumed. It returns the protocol's
// path and the verdict file's.
func colocProtocol(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	ev := []byte(`{"verdict": "pass"}` + "\n")
	if err := os.WriteFile(filepath.Join(dir, "gate-pair-b.json"), ev, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(ev)
	pv := protocols.PriorVerdict{Schema: protocols.PriorVerdictSchema, Check: "E-a", GPUHours: 0.001,
		Gates: []protocols.PriorGate{
			{Gate: "colocation/pair-a", Verdict: "fail", Detail: "operator shares moved", Figures: map[string]float64{"throughput_ratio": 0.91}},
			{Gate: "colocation/pair-b", Verdict: "pass"},
		},
		Evidence: []protocols.PriorEvidence{{Path: "gate-pair-b.json", SHA256: hex.EncodeToString(sum[:])}}}
	b, err := json.Marshal(pv)
	if err != nil {
		t.Fatal(err)
	}
	verdict := filepath.Join(dir, "colocation-verdict.json")
	if err := os.WriteFile(verdict, b, 0o644); err != nil {
		t.Fatal(err)
	}
	proto := filepath.Join(dir, "coloc.yaml")
	if err := os.WriteFile(proto, []byte(`warden: 1
name: coloc
host: {gpus: 2, cpus: 4}
budget: {cap_gpu_hours: 2.0, consumed_gpu_hours: 0.001}
slots:
  - {name: s0, gpus: [0], cpus: "0-1", port: 9000}
  - {name: s1, gpus: [1], cpus: "2-3", port: 9001}
regimes:
  - {name: pair-a, concurrency: 2, gated: true}
  - {name: pair-b, concurrency: 2, gated: true}
classes:
  - {name: std, drain_allowance_s: 10, watchdog_s: 20}
servers:
  - name: srv
    kind: standin
    command: [standin, server, --port, "${PORT}"]
loads:
  - name: sat
    kind: saturation
    expected_s: 10
    client: [standin, client, --result-dir, "${ATTEMPT_DIR}/client"]
  - name: bg
    kind: background
    expected_s: 5
    client: [standin, client]
axes:
  - name: pattern
    values: [{id: p1}, {id: p2}]
phases:
  - name: colocation
    kind: colocation
    prior: {verdict: colocation-verdict.json}
    colocation:
      target: {pattern: p1}
      slot: s0
      loads: [sat]
      background_load: bg
      checks:
        - {regime: pair-a, backgrounds: [{cell: {pattern: p2}, slot: s1}]}
        - {regime: pair-b, backgrounds: [{cell: {pattern: p2}, slot: s1}]}
      gate:
        throughput_file: client/result.json
        throughput_field: throughput_rps
        throughput_tolerance: 0.99
  - name: matrix
    kind: primary
    matrix: {pattern: [p1, p2]}
    loads: [sat]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	return proto, verdict
}

// TestCreateRecordsPriorVerdict: a co-location check that ran before the
// campaign is recorded at start as the campaign's gate verdicts, each
// saying whose verdict it is, from which file and hash, and that it was
// not run here, with the gate's own detail and figures; the campaign runs
// under the regime the verdict authorizes and counts the hours declared
// consumed.
func TestCreateRecordsPriorVerdict(t *testing.T) {
	proto, verdict := colocProtocol(t)
	sum := sha256File(t, verdict)
	dir := filepath.Join(t.TempDir(), "campaign")
	plan, err := Create(proto, dir, StartOptions{Backend: "fake", Cgroups: "off"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if plan.Regime != "pair-b" || plan.Totals.BudgetConsumedGPUHours != 0.001 {
		t.Fatalf("plan regime %q, consumed %v: not the fixture meant", plan.Regime, plan.Totals.BudgetConsumedGPUHours)
	}
	if cp := storedCampaign(t, dir); cp.Regime != "pair-b" || cp.RegimeConcurrency != 2 || cp.PriorGPUHours != 0.001 {
		t.Errorf("campaign regime %q (concurrency %d), prior %v GPU-hours; want pair-b (2), 0.001", cp.Regime, cp.RegimeConcurrency, cp.PriorGPUHours)
	}
	st, err := state.OpenReadOnly(dirlayout.State(dir), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	vs, err := st.GateVerdicts("")
	if err != nil {
		t.Fatal(err)
	}
	from := "prior verdict of E-a (colocation-verdict.json, sha256 " + sum + "), not run in this campaign"
	want := []state.GateVerdict{
		{Gate: "colocation/pair-a", Verdict: "fail", Detail: from + ": operator shares moved", Figures: map[string]float64{"throughput_ratio": 0.91}},
		{Gate: "colocation/pair-b", Verdict: "pass", Detail: from},
	}
	if len(vs) != len(want) {
		t.Fatalf("gate verdicts %+v; want %+v", vs, want)
	}
	for i, w := range want {
		v := vs[i]
		if v.Gate != w.Gate || v.Verdict != w.Verdict || v.Detail != w.Detail || v.Run != "" || len(v.Figures) != len(w.Figures) || v.Figures["throughput_ratio"] != w.Figures["throughput_ratio"] {
			t.Errorf("gate verdict %d: %+v\nwant %+v", i, v, w)
		}
	}
}

// TestRecordPriorsRefuses: the prior verdict recorded must be the one
// provenance hashed (a file changed between the plan's read and the hash
// is refused, naming both hashes), and one the plan read; a refused
// record adds no gate verdict.
func TestRecordPriorsRefuses(t *testing.T) {
	proto, verdict := colocProtocol(t)
	plan, err := protocols.PlanFile(proto, protocols.Options{CheckInputs: true})
	if err != nil {
		t.Fatal(err)
	}
	workdir := filepath.Dir(proto)
	read := plan.Phases[0].Prior
	if read == nil || !read.Read || read.File != "colocation-verdict.json" {
		t.Fatalf("prior %+v: not the fixture meant", read)
	}
	other := strings.Repeat("0", 64)
	for _, tc := range []struct {
		name   string
		prior  protocols.PriorInfo
		hashed string // the verdict file's hash in provenance
		want   string // "" when the verdicts are recorded
	}{
		{name: "the file the plan read", prior: *read, hashed: read.SHA256},
		{name: "changed after the plan read it", prior: *read, hashed: other,
			want: "phase colocation: the prior verdict colocation-verdict.json changed while the campaign started (sha256 " + read.SHA256 + ", then " + other + ")"},
		{name: "not read", prior: protocols.PriorInfo{File: read.File, Gates: read.Gates}, hashed: read.SHA256,
			want: "phase colocation: the prior verdict colocation-verdict.json was not read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := state.Open(filepath.Join(t.TempDir(), "state.db"), state.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if err := st.CreateCampaign(state.Campaign{ID: "c1"}, nil); err != nil {
				t.Fatal(err)
			}
			p := *plan
			p.Phases = append([]protocols.PhaseInfo(nil), plan.Phases...)
			p.Phases[0].Prior = &tc.prior
			hashed := []provenance.Entry{{Path: proto, Role: "protocol", SHA256: sha256File(t, proto)}, {Path: verdict, Role: "verdict", SHA256: tc.hashed}}
			err = recordPriors(st, &p, hashed, workdir)
			vs, verr := st.GateVerdicts("")
			if verr != nil {
				t.Fatal(verr)
			}
			switch {
			case tc.want == "" && (err != nil || len(vs) != 2):
				t.Fatalf("recordPriors: %v, %d gate verdicts; want 2", err, len(vs))
			case tc.want != "" && (err == nil || err.Error() != tc.want || len(vs) != 0):
				t.Fatalf("recordPriors: %v, %d gate verdicts\nwant %s, none", err, len(vs), tc.want)
			}
		})
	}
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
