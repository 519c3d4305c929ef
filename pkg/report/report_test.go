package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"warden/pkg/api"
	"warden/pkg/dirlayout"
	"warden/pkg/provenance"
	"warden/pkg/safefile"
	"warden/pkg/state"
	"warden/pkg/views"
	"warden/protocols"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// campaign writes a stopped campaign of two runs into a new directory: a
// measured saturation run whose attempt completed on GPU 0 with a client
// result, GPU samples and figures, and a moderate run whose attempt failed
// on GPU 1 (its client exited 2, its stderr one line). It returns the
// directory and the report the query API builds from it.
func campaign(t *testing.T) (string, api.Report, *protocols.Plan) {
	t.Helper()
	dir := t.TempDir()
	if err := provenance.Write(dir, nil, provenance.Options{}); err != nil {
		t.Fatal(err)
	}
	clock := t0
	s, err := dirlayout.OpenStore(dir, state.Options{Strict: true, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	runs := []state.Run{
		{ID: "c0.saturation", Order: 0, Phase: "matrix", Kind: "saturation", Cell: "c0", Load: "sat", GPUs: 1, ExpectedS: 60},
		{ID: "c0.moderate", Order: 1, Phase: "matrix", Kind: "moderate", Cell: "c0", Load: "mod", GPUs: 1, ExpectedS: 60},
	}
	c := state.Campaign{ID: "r-1", ProtocolName: "rep", ProtocolSHA256: strings.Repeat("cd", 32), Dir: dir, CreatedAt: t0,
		State: state.CampaignRunning, BudgetCapGPUHours: 1, BudgetUnit: "H20-hours", RegimeConcurrency: 1}
	if err := s.CreateCampaign(c, runs); err != nil {
		t.Fatal(err)
	}
	complete := []state.AttemptState{state.Reserved, state.Preflight, state.Starting, state.Ready, state.Measuring, state.Stopping, state.Cleanup, state.Validating, state.Complete}
	failed := []state.AttemptState{state.Reserved, state.Preflight, state.Starting, state.Ready, state.Measuring, state.Stopping, state.Cleanup, state.Failed}
	for i, r := range runs {
		adir := dirlayout.AttemptDir(dir, r.ID, 1)
		if err := os.MkdirAll(filepath.Join(adir, dirlayout.ClientDir), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := s.NewAttempt(r.ID, adir, func(a *state.Attempt) { a.Slot = fmt.Sprintf("gpu%d", i); a.GPUIDs = []int{i} }); err != nil {
			t.Fatal(err)
		}
		path, exits := complete, func(*state.Attempt) error { return nil }
		if i == 1 {
			path = failed
			exits = func(a *state.Attempt) error {
				a.Exits = append(a.Exits, state.Exit{Role: "client", PID: 10, Code: 2, At: clock})
				return nil
			}
		}
		for _, to := range path {
			clock = clock.Add(10 * time.Second)
			reason, mutate := state.Reason(""), func(*state.Attempt) error { return nil }
			if to == state.Failed {
				reason, mutate = state.ReasonClientFailed, exits
			}
			if _, err := s.Transition(r.ID, 1, to, reason, "", nil, mutate); err != nil {
				t.Fatal(err)
			}
		}
		if i == 0 { // the figures cleanup records, before the attempt ends
			if _, err := s.UpdateAttempt(r.ID, 1, func(a *state.Attempt) error {
				a.Figures = map[string]float64{"gpu_seconds": 80, "energy_per_request_j": 4.5, "samples": 10, "samples_missed": 1, "preflight_load1": 0.25}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		var samples bytes.Buffer
		for k := 0; k < 10; k++ {
			fmt.Fprintf(&samples, `{"time":%q,"mono_ns":%d,"took_ns":1,"gpus":[{"index":%d,"uuid":"u","numa_node":0,"memory_used_mib":%d,"sm_clock_mhz":1400,"power_w":%d}]}`+"\n",
				t0.Add(time.Duration(i*90+k)*time.Second).Format(time.RFC3339Nano), k, i, 1000+k, 100+k)
		}
		write(t, dirlayout.GPUSamples(adir), samples.String())
	}
	write(t, dirlayout.ClientResult(dirlayout.AttemptDir(dir, "c0.saturation", 1)), `{"schema":"warden.loadgen.result/1","clean":{"completed_rps":12.5,"output_tokens_per_s":800}}`)
	write(t, dirlayout.Stderr(dirlayout.AttemptDir(dir, "c0.moderate", 1), "client"), "error: no manifest\n")
	for _, g := range []state.GateVerdict{
		{Gate: "preflight", Run: "c0.saturation", Attempt: 1, Verdict: state.VerdictPass},
		{Gate: "drain", Run: "c0.saturation", Attempt: 1, Verdict: state.VerdictFail, Detail: "drain took 9 s"},
		{Gate: "validator:layer2", Run: "c0.saturation", Attempt: 1, Verdict: state.VerdictPass,
			Figures: map[string]float64{"w0.r0.share.moe_gemm": 0.6, "w0.r0.share.attention": 0.3, "w0.r0.other_opaque": 0.1, "w0.join_placements": 1, "w0.smd_max": 0.25}},
	} {
		if _, err := s.AddGateVerdict(g); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.AddLedger(state.LedgerEntry{Kind: state.LedgerCharge, Run: "c0.saturation", Attempt: 1, GPUSeconds: 80}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetCampaignState(state.CampaignStopped, "client-failed", "run c0.moderate failed", nil); err != nil {
		t.Fatal(err)
	}
	rep, err := api.BuildReport(s, dir, api.Controller{}, t0.Add(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	plan := &protocols.Plan{Runs: []protocols.Run{{ID: "c0.saturation", Measured: true}, {ID: "c0.moderate"}}}
	return dir, rep, plan
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func fp(v float64) *float64 { return &v }

// TestBuild: the runs table, the charts, the windows, the sanity notes
// and the stderr of a campaign directory, from the report and the files.
func TestBuild(t *testing.T) {
	dir, rep, plan := campaign(t)
	d := Build(dir, rep, plan)
	want := []Row{
		{Run: "c0.saturation", Phase: "matrix", Kind: "saturation", Cell: "c0", Load: "sat", Measured: true, State: "complete", Attempts: 1, Attempt: 1,
			Outcome: "complete", GatesPassed: 2, GatesNotPassed: []string{"drain: fail"}, DurationS: fp(90), ThroughputRPS: fp(12.5),
			OutputTokensPerS: fp(800), EnergyPerRequestJ: fp(4.5), GPUSeconds: fp(80), DamagedEvidence: []string{},
			Latency: views.Latency{Missing: []string{"clean.latency.ttft_ms: absent", "clean.latency.tpot_ms: absent", "clean.latency.itl_ms: absent", "clean.latency.e2e_ms: absent"}}},
		{Run: "c0.moderate", Phase: "matrix", Kind: "moderate", Cell: "c0", Load: "mod", State: "failed", Attempts: 1, Attempt: 1,
			Outcome: "failed", Reason: "client-failed", GatesNotPassed: []string{}, DurationS: fp(80), DamagedEvidence: []string{},
			Latency: views.Latency{Missing: []string{"attempt 1 has no client/result.json"}}},
	}
	if !reflect.DeepEqual(d.Rows, want) {
		got, _ := json.Marshal(d.Rows)
		exp, _ := json.Marshal(want)
		t.Fatalf("rows:\n got %s\nwant %s", got, exp)
	}
	if d.Unit != "H20-hours" {
		t.Errorf("unit %q", d.Unit)
	}
	wantNotes := []string{
		"1 attempt(s) with figures; 1 GPU sample(s) missed; 0 other users' process(es) seen at preflight or after measuring; 1 gate verdict(s) not passed.",
		"The campaign stopped: client-failed (run c0.moderate failed).",
	}
	if !reflect.DeepEqual(d.Notes, wantNotes) {
		t.Errorf("notes %q", d.Notes)
	}
	if len(d.Sanity) != 1 || d.Sanity[0] != (sanityRow{Attempt: "c0.saturation a1", PreLoad: "0.25", PostLoad: "-", OtherProcs: "- / -", Samples: "10", Missed: "1", ReadMaxMS: "-", Flag: true}) {
		t.Errorf("sanity rows %+v", d.Sanity)
	}
	if len(d.Windows) != 1 || d.Windows[0] != (reportWindow{Run: "c0.saturation", Gate: "validator:layer2", Attempt: 1, Window: 1, Rank: 0,
		Shares: "moe_gemm 60.0%, attention 30.0%", OtherOpaque: "10.0%", Join: "joined", SMD: "0.250"}) {
		t.Errorf("windows %+v", d.Windows)
	}
	if len(d.Stderr) != 1 || d.Stderr[0].Run != "c0.moderate" || d.Stderr[0].Role != "client" || !reflect.DeepEqual(d.Stderr[0].Lines, []string{"error: no manifest"}) {
		t.Errorf("stderr %+v", d.Stderr)
	}
	if len(d.Traces) != 3 || d.Traces[0].Title != "power (W)" || !strings.Contains(string(d.Traces[0].SVG), "GPU 0") || !strings.Contains(string(d.Traces[0].SVG), "GPU 1") {
		t.Errorf("traces %d: %+v", len(d.Traces), d.Traces)
	}
	tl := string(d.Timeline)
	for _, w := range []string{`>GPU 0</text>`, `>GPU 1</text>`, `fill="#2e9d57"`, `fill="#d24a43"`, `data-run="c0.moderate"`} {
		if !strings.Contains(tl, w) {
			t.Errorf("timeline lacks %s:\n%s", w, tl)
		}
	}
	if b := string(d.Budget); !strings.Contains(b, "cap 1.000") || !strings.Contains(b, `class="charged"`) {
		t.Errorf("budget chart:\n%s", b)
	}
	var page bytes.Buffer
	if err := WriteHTML(&page, d); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"<title>Warden report: r-1</title>", `<tr data-run="c0.saturation">`, "drain: fail", "error: no manifest", "moe_gemm 60.0%"} {
		if !strings.Contains(page.String(), w) {
			t.Errorf("page lacks %q", w)
		}
	}
}

// TestTable: the runs table as CSV, to the byte, and as JSON.
func TestTable(t *testing.T) {
	dir, rep, plan := campaign(t)
	d := Build(dir, rep, plan)
	var csv bytes.Buffer
	if err := WriteCSV(&csv, d.Rows); err != nil {
		t.Fatal(err)
	}
	lat := "ttft_n,ttft_mean_ms,ttft_p50_ms,ttft_p90_ms,ttft_p95_ms,ttft_p99_ms,ttft_max_ms,tpot_n,tpot_mean_ms,tpot_p50_ms,tpot_p90_ms,tpot_p95_ms,tpot_p99_ms,tpot_max_ms," +
		"itl_n,itl_mean_ms,itl_p50_ms,itl_p90_ms,itl_p95_ms,itl_p99_ms,itl_max_ms,e2e_n,e2e_mean_ms,e2e_p50_ms,e2e_p90_ms,e2e_p95_ms,e2e_p99_ms,e2e_max_ms,latency_missing"
	none := strings.Repeat(",", 28) // 28 empty latency cells
	want := "run,phase,kind,cell,load,measured,state,attempts,attempt,outcome,reason,gates_passed,gates_not_passed,duration_s,throughput_rps,output_tokens_per_s,energy_per_request_j,gpu_seconds," + lat + ",damaged_evidence\n" +
		"c0.saturation,matrix,saturation,c0,sat,true,complete,1,1,complete,,2,drain: fail,90,12.5,800,4.5,80," + none + "clean.latency.ttft_ms: absent; clean.latency.tpot_ms: absent; clean.latency.itl_ms: absent; clean.latency.e2e_ms: absent,\n" +
		"c0.moderate,matrix,moderate,c0,mod,false,failed,1,1,failed,client-failed,0,,80,,,,," + none + "attempt 1 has no client/result.json,\n"
	if csv.String() != want {
		t.Fatalf("csv:\n%s\nwant:\n%s", csv.String(), want)
	}
	b, err := json.Marshal(d.Table())
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc["schema"] != float64(TableSchema) || doc["campaign"] != "r-1" || doc["protocol"] != "rep" || doc["protocol_sha256"] != strings.Repeat("cd", 32) {
		t.Fatalf("table: %s", b)
	}
	rows := doc["rows"].([]any)
	if len(rows) != 2 || rows[1].(map[string]any)["throughput_rps"] != nil || rows[0].(map[string]any)["energy_per_request_j"] != 4.5 {
		t.Fatalf("table rows: %s", b)
	}
}

// TestBuildWithoutFiles: a report whose attempts' files are gone, and no
// plan, still builds: no figure from files, no trace, nothing measured.
func TestBuildWithoutFiles(t *testing.T) {
	dir, rep, _ := campaign(t)
	if err := os.RemoveAll(dirlayout.Runs(dir)); err != nil {
		t.Fatal(err)
	}
	d := Build(dir, rep, nil)
	if len(d.Rows) != 2 || d.Rows[0].Measured || d.Rows[0].ThroughputRPS != nil || d.Rows[0].GPUSeconds == nil || len(d.Traces) != 0 {
		t.Fatalf("rows %+v, traces %d", d.Rows, len(d.Traces))
	}
	if len(d.Stderr) != 1 || d.Stderr[0].Note == "" || len(d.Stderr[0].Lines) != 0 {
		t.Fatalf("stderr of a removed attempt directory: %+v", d.Stderr)
	}
}

// TestWriteRefusesPrivateText: a document that holds a private input's
// text is not written, to a file or to stdout; a clean one is, whole; an
// unreadable provenance refuses every document (Privacy errs).
func TestWriteRefusesPrivateText(t *testing.T) {
	dir := t.TempDir()
	secret := "the patient in bed twelve was given every drug on the ward list, twice"
	pdir := filepath.Join(t.TempDir(), "private")
	if err := os.Mkdir(pdir, 0o700); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(pdir, "p.jsonl")
	write(t, manifest, `{"prompt": "`+secret+`"}`+"\n")
	entries, err := provenance.Record(dir, []provenance.Entry{{Path: manifest, Role: "manifest", Private: true}}, provenance.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := provenance.Write(dir, entries, provenance.Options{}); err != nil {
		t.Fatal(err)
	}
	priv, err := Privacy(dir, &protocols.Plan{PrivacyMinLeakBytes: 32})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "r.html")
	var stdout bytes.Buffer
	leak := func(w io.Writer) error { _, err := w.Write([]byte("<p>" + secret[5:50] + "</p>")); return err }
	for _, path := range []string{out, "-"} {
		var pe *PrivateError
		if err := Write(path, &stdout, priv, leak); !errors.As(err, &pe) || !strings.Contains(err.Error(), "32+ bytes of private value(s) sha256:") || strings.Contains(err.Error(), secret[5:20]) {
			t.Fatalf("Write(%s) of a leaky document = %v", path, err)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) || stdout.Len() != 0 {
		t.Fatalf("a leaky document was written: %v, stdout %q", err, stdout.String())
	}
	clean := func(w io.Writer) error { _, err := w.Write([]byte("<p>clean</p>")); return err }
	if err := Write(out, &stdout, priv, clean); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(out); err != nil || string(b) != "<p>clean</p>" {
		t.Fatalf("clean document: %q, %v", b, err)
	}
	if err := os.Remove(filepath.Join(dir, provenance.SubDir, provenance.SumFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := Privacy(dir, nil); err == nil || !strings.Contains(err.Error(), "provenance") {
		t.Fatalf("Privacy without a provenance record = %v, want an error", err)
	}
}

// TestZeroCleanInterval: a loadgen result whose clean interval lasted no
// time (a burn-in's) has no throughput, not the 0 it writes.
func TestZeroCleanInterval(t *testing.T) {
	t.Parallel()
	if v := firstFigure(map[string]float64{"clean.seconds": 0, "clean.completed_rps": 0}, throughputKeys); v != nil {
		t.Errorf("throughput of a 0 s clean interval: %v", *v)
	}
	if v := firstFigure(map[string]float64{"clean.seconds": 2, "clean.completed_rps": 0}, throughputKeys); v == nil || *v != 0 {
		t.Errorf("throughput of a 2 s clean interval that completed nothing: %v", v)
	}
}

// TestDamagedEvidenceGivesNoFigure: a client/result.json that no longer
// holds what was recorded of it, or only NUL bytes, is named in its
// row's damaged_evidence with its path, and no throughput is read from
// it, even where it still parses; the figures recorded in the database
// stay, and neither another attempt of the run nor the other run's row
// names its own damage there.
func TestDamagedEvidenceGivesNoFigure(t *testing.T) {
	for _, c := range []struct {
		name   string
		sealed bool   // its digest recorded before the damage
		now    string // what the file holds then; "" NUL bytes of its size
		says   string
	}{
		{"NUL-filled, sealed", true, "", "holds 93 bytes (sha256 "},
		{"NUL-filled, no digest", false, "", "holds only NUL bytes (93)"},
		{"rewritten, sealed", true, `{"schema":"warden.loadgen.result/1","clean":{"completed_rps":99,"output_tokens_per_s":9}}`, "recorded 93 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, rep, plan := campaign(t)
			a := &rep.Runs[0].Attempts[0]
			path := dirlayout.ClientResult(a.Dir)
			sum, err := safefile.SumFile(path)
			if err != nil || sum.Size != 93 {
				t.Fatalf("the result.json before damage: %+v, %v", sum, err)
			}
			if c.sealed {
				a.Evidence = []state.EvidenceFile{{Path: dirlayout.ClientResultRel, Size: sum.Size, SHA256: sum.SHA256}}
			}
			now := c.now
			if now == "" {
				now = string(make([]byte, sum.Size))
			}
			write(t, path, now)
			// a later failed attempt's damage is that attempt's, not the row's
			a2 := dirlayout.AttemptDir(dir, "c0.saturation", 2)
			if err := os.MkdirAll(a2, 0o755); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(a2, "client.out"), "\x00\x00\x00")
			rep.Runs[0].Attempts = append(rep.Runs[0].Attempts, state.Attempt{RunID: "c0.saturation", N: 2, State: state.Failed, Dir: a2})
			d := Build(dir, rep, plan)
			r := d.Rows[0]
			if len(r.DamagedEvidence) != 1 || !strings.HasPrefix(r.DamagedEvidence[0], "damaged evidence: "+path+" ") || !strings.Contains(r.DamagedEvidence[0], c.says) {
				t.Fatalf("damaged_evidence %q, want one naming %s (%q)", r.DamagedEvidence, path, c.says)
			}
			if r.ThroughputRPS != nil || r.OutputTokensPerS != nil {
				t.Fatalf("throughput %v, output tokens %v read from damaged evidence", fval(r.ThroughputRPS), fval(r.OutputTokensPerS))
			}
			if r.GPUSeconds == nil || *r.GPUSeconds != 80 || r.EnergyPerRequestJ == nil || *r.EnergyPerRequestJ != 4.5 {
				t.Fatalf("the recorded figures are gone: gpu_seconds %v, energy %v", fval(r.GPUSeconds), fval(r.EnergyPerRequestJ))
			}
			if len(d.Rows[1].DamagedEvidence) != 0 {
				t.Fatalf("the other run's row names %q", d.Rows[1].DamagedEvidence)
			}
		})
	}
}

// TestSelfChecksRows: the report's false-failure table has one row per
// measure of each validator verdict that measured its own rule's
// false-failure rate, its rates in percent, a representative run failing
// more often than not marked; a gate that is not a validator's, or a
// validator verdict without the figures, gives no row.
func TestSelfChecksRows(t *testing.T) {
	dir, rep, plan := campaign(t)
	if d := Build(dir, rep, plan); len(d.SelfChecks) != 0 { // its validator:layer2 verdict has windows, no self figures
		t.Fatalf("a campaign whose validators measured no false-failure rate: %+v", d.SelfChecks)
	}
	self := map[string]float64{"smd.self.blocks": 1593, "smd.self.window_pass_fraction": 0.26, "smd.self.false_failure_rate": 0.9324, "smd.calibrated.quantile": 0.99}
	rep.Runs[0].Gates = append(rep.Runs[0].Gates,
		state.GateVerdict{Gate: "validator:layer2", Run: "c0.saturation", Attempt: 1, Verdict: state.VerdictFail, Figures: self},
		state.GateVerdict{Gate: "drain", Run: "c0.saturation", Attempt: 1, Verdict: state.VerdictPass, Figures: self})
	rep.Runs[1].Gates = append(rep.Runs[1].Gates, state.GateVerdict{Gate: "validator:recovery", Run: "c0.moderate", Attempt: 1, Verdict: state.VerdictPass,
		Figures: map[string]float64{"recovery.self.samples": 213, "recovery.self.unit_pass_fraction": 0.8216, "recovery.self.false_failure_rate": 0.325}})
	d := Build(dir, rep, plan)
	want := []reportSelfCheck{
		{Run: "c0.saturation", Gate: "validator:layer2", Measure: "representativeness", Rule: "calibrated rule, quantile 0.99", Attempt: 1, Samples: 1593,
			UnitPass: "26.0%", RunFail: "93.2%", High: true},
		{Run: "c0.moderate", Gate: "validator:recovery", Measure: "recovery", Rule: "literal rule", Attempt: 1, Samples: 213,
			UnitPass: "82.2%", RunFail: "32.5%"},
	}
	if !reflect.DeepEqual(d.SelfChecks, want) {
		t.Fatalf("self checks:\n got %+v\nwant %+v", d.SelfChecks, want)
	}
	var page bytes.Buffer
	if err := WriteHTML(&page, d); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`<td class="num bad">93.2%</td>`, `<td class="num">32.5%</td>`} {
		if !strings.Contains(page.String(), w) {
			t.Errorf("page lacks %q", w)
		}
	}
}

// fval is a figure as text, "none" when there is none.
func fval(p *float64) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}
