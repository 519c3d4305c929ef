package views

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warden/internal/testutil/testcampaign"
	"warden/pkg/api"
	"warden/pkg/dirlayout"
	"warden/pkg/outcome"
	"warden/pkg/provenance"
	"warden/pkg/state"
)

// at is a wall time of the test's day in the local zone, which the views
// print.
func at(s int) time.Time { return time.Date(2026, 11, 30, 12, 0, s, 0, time.Local) }

func TestPrintRuns(t *testing.T) {
	var b bytes.Buffer
	err := PrintRuns(&b, []api.RunBrief{
		{ID: "c0.saturation", Phase: "matrix", Kind: "saturation", State: "complete",
			Attempts: []api.AttemptBrief{{N: 1, State: "failed", Reason: "gpu-not-idle"}, {N: 2, State: "complete"}}},
		{ID: "c0.moderate", Phase: "matrix", Kind: "moderate", State: "pending", Attempts: []api.AttemptBrief{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "" +
		"RUN            PHASE   KIND        STATE     ATTEMPTS\n" +
		"c0.saturation  matrix  saturation  complete  a1 failed (gpu-not-idle), a2 complete\n" +
		"c0.moderate    matrix  moderate    pending   \n"
	if b.String() != want {
		t.Fatalf("runs:\n%q\nwant\n%q", b.String(), want)
	}
}

func TestPrintStatus(t *testing.T) {
	eta := 95.0
	st := api.Status{Source: "database",
		Campaign: api.CampaignStatus{ID: "t-1", Protocol: "p", SHA256: strings.Repeat("ab", 32), State: "stopped",
			StopReason: state.StopOperator, StopDetail: "SIGTERM", GPUBackend: "fake", FakeGPUs: true},
		Controller: api.Controller{PID: 42, Heartbeat: at(0), HeartbeatAgeS: 31.25, HeartbeatIntervalS: 10},
		Runs:       api.RunCounts{Total: 3, ByState: map[string]int{"pending": 1, "complete": 2}},
		Budget:     api.BudgetStatus{CapGPUHours: 2, ConsumedGPUHours: 0.75, ChargedGPUHours: 0.5, InFlightGPUHours: 0.25, ReservedGPUHours: 0.125, RemainingGPUHours: 1.375},
		Current: []api.Current{{Run: "c0.moderate", Attempt: 1, State: "measuring", Slot: "gpu0", ElapsedS: 12.5, InStateS: 2,
			Slurm: &state.SlurmStep{JobName: "w-t-1", JobID: "77", StepID: "0", Node: "n1", StepGPUs: "3"}}},
		ETAS:       &eta,
		Amendments: []api.AmendmentBrief{{ID: "A-1", Kind: "amend", Text: "longer drain"}},
	}
	var b bytes.Buffer
	PrintStatus(&b, st)
	PrintAwaiting(&b, &[]outcome.Awaiting{{Run: "c1.saturation", Attempt: 2, Reason: "server-exit"}})
	want := "" +
		"campaign   t-1 (protocol p, sha256 abababababab)\n" +
		"state      stopped (operator-stop: SIGTERM)\n" +
		"controller pid 42, not running: last heartbeat 31.2 s ago (every 10 s) (via database)\n" +
		"gpus       FAKE (file-backed GPUs: no figure of this campaign is a GPU's)\n" +
		"amendment  A-1 (amend): longer drain\n" +
		"runs       3: complete 2, pending 1\n" +
		"budget     cap 2.000, consumed 0.750 (charged 0.500 + in flight 0.250), reserved 0.125, remaining 1.375 GPU-hours\n" +
		"now        c0.moderate attempt 1 measuring for 2.0 s (attempt age 12.5 s) on gpu0 (Slurm job 77.0 on node n1, GPUs 3)\n" +
		"awaiting   c1.saturation: attempt 2 failed (server-exit); no further attempt without an amendment\n"
	if b.String() != want {
		t.Fatalf("status:\n%s\nwant\n%s", b.String(), want)
	}
	// a live, healthy controller of a running campaign adds the ETA
	st.Campaign.State, st.Campaign.StopReason = "running", ""
	st.Controller.Alive, st.Controller.Healthy = true, true
	b.Reset()
	PrintStatus(&b, st)
	if !strings.Contains(b.String(), "controller pid 42, healthy: heartbeat 31.2 s ago") || !strings.HasSuffix(b.String(), "eta        1m35s\n") {
		t.Fatalf("running status:\n%s", b.String())
	}
}

func TestPrintEvent(t *testing.T) {
	var b bytes.Buffer
	PrintEvent(&b, state.Event{Seq: 7, Wall: at(5), Run: "c0.saturation", Attempt: 2, From: "ready", To: "measuring", Reason: "r", Message: "go"})
	PrintEvent(&b, state.Event{Seq: 8, Wall: at(6), From: "running", To: "stopped"})
	want := "     7 12:00:05 c0.saturation a2             ready -> measuring [r] go\n" +
		"     8 12:00:06 campaign                     running -> stopped\n"
	if b.String() != want {
		t.Fatalf("events:\n%q\nwant\n%q", b.String(), want)
	}
}

// TestPrintRun: one run's attempt, its events, processes, exits and
// signals in time order, its gates (a cpu-local verdict the backend could
// not judge reads n/a), the run's own gates and the Layer-2 windows.
func TestPrintRun(t *testing.T) {
	d := api.RunDetail{GPUBackend: "nvml",
		Run:   state.Run{ID: "c0.saturation", Kind: "saturation", Phase: "matrix", Cell: "c0", Load: "sat", Needs: []string{"c0.warmup"}},
		State: "complete",
		Attempts: []state.Attempt{{RunID: "c0.saturation", N: 1, State: state.Complete, Dir: "/c/runs/c0.saturation/a1", Slot: "gpu0", GPUIDs: []int{0, 1}, Port: 8100,
			Procs:   []state.Proc{{Role: "server", PID: 100, StartTime: 5, PGID: 100, Argv: []string{"vllm", "serve", "it's"}}},
			Exits:   []state.Exit{{Role: "server", PID: 100, Signal: "SIGTERM", At: at(9)}},
			Signals: []state.Signal{{At: at(8), Role: "server", Target: "group", PID: 100, Signal: "SIGTERM"}}}},
		Events: []state.Event{{Run: "c0.saturation", Attempt: 1, Wall: at(1), To: "reserved"}, {Run: "c0.saturation", Attempt: 1, Wall: at(9), From: "cleanup", To: "complete", Reason: "ok"}},
		Gates: []state.GateVerdict{
			{Gate: "cpu-local", Attempt: 1, Verdict: state.VerdictError, Detail: "no affinity", Figures: map[string]float64{"slot_cpus": 4}},
			{Gate: "validator:layer2", Attempt: 1, Verdict: state.VerdictPass, Figures: map[string]float64{"w0.r0.share.gemm": 0.75, "w0.r0.share.attention": 0.25, "w0.r0.share.attention_prefill": 0.1, "w0.r0.other_opaque": 0.05, "w0.smd_max": 1.5}},
			{Gate: "budget", Verdict: state.VerdictPass, Figures: map[string]float64{"b": 2, "a": 0.5}},
		}}
	var b bytes.Buffer
	PrintRun(&b, d)
	want := "run c0.saturation (saturation, phase matrix, cell c0, load sat): complete\n" +
		"gpus NVML\n" +
		"needs c0.warmup\n" +
		"\n" +
		"attempt 1: complete\n" +
		"  dir   /c/runs/c0.saturation/a1\n" +
		"  slot  gpu0, GPUs 0,1, CPUs -, port 8100\n" +
		"  TIME          FROM     TO        REASON  MESSAGE\n" +
		"  12:00:01.000  -        reserved  -       \n" +
		"  12:00:09.000  cleanup  complete  ok      \n" +
		"  processes\n" +
		"    server pid 100 (start 5, pgid 100, NOT in a cgroup: process group only): vllm serve 'it'\\''s'\n" +
		"  12:00:08.000  SIGTERM to group 100 (server)\n" +
		"  12:00:09.000  server pid 100 killed by SIGTERM\n" +
		"  GATE              VERDICT  DETAIL                                            FIGURES\n" +
		"  cpu-local         n/a      not judged: no CPU affinity from the GPU backend  slot_cpus=4\n" +
		"  validator:layer2  pass     -                                                 w0.r0.other_opaque=0.05 w0.r0.share.attention=0.25 w0.r0.share.attention_prefill=0.1 w0.r0.share.gemm=0.75 w0.smd_max=1.5\n" +
		"\n" +
		"GATE    VERDICT  DETAIL  FIGURES\n" +
		"budget  pass     -       a=0.5 b=2\n" +
		"\n" +
		"attempt 1 Layer-2 windows (validator:layer2):\n" +
		"  WINDOW  RANK  FAMILY SHARES                OTHER+OPAQUE  JOIN  MAX |SMD|\n" +
		"  1       0     gemm 75.0%, attention 25.0%  5.0%          -     1.500\n"
	if b.String() != want {
		t.Fatalf("show:\n%s\nwant\n%s", b.String(), want)
	}
	// a cpu-local verdict that judged a GPU stays an error
	if v, _ := GateText(state.GateVerdict{Gate: "cpu-local", Verdict: state.VerdictError, Figures: map[string]float64{"slot_cpus": 4, "gpu0_nonlocal_cpus": 2}}); v != state.VerdictError {
		t.Fatalf("a judged cpu-local error reads %q", v)
	}
}

// TestPrintRunNamesDamagedEvidence: each damaged evidence file is named,
// with its path, under its own attempt's head, before its transitions;
// another attempt of the run has no such line.
func TestPrintRunNamesDamagedEvidence(t *testing.T) {
	result := "/c/runs/c0.saturation/a2/client/result.json"
	damage := []api.EvidenceDamage{{Attempt: 2, Error: "damaged evidence: " + result + " holds only NUL bytes (93)"}}
	d := api.RunDetail{GPUBackend: "fake", FakeGPUs: true, Run: state.Run{ID: "c0.saturation", Kind: "saturation", Phase: "matrix", Cell: "c0", Load: "sat"}, State: "complete",
		Attempts: []state.Attempt{
			{RunID: "c0.saturation", N: 1, State: state.Failed, Reason: state.ReasonClientFailed, Dir: "/c/runs/c0.saturation/a1", Slot: "gpu0", GPUIDs: []int{0}},
			{RunID: "c0.saturation", N: 2, State: state.Complete, Dir: "/c/runs/c0.saturation/a2", Slot: "gpu0", GPUIDs: []int{0}},
		},
		Events:          []state.Event{{Run: "c0.saturation", Attempt: 1, Wall: at(1), To: "reserved"}, {Run: "c0.saturation", Attempt: 2, Wall: at(2), To: "reserved"}},
		DamagedEvidence: &damage}
	var b bytes.Buffer
	PrintRun(&b, d)
	want := "run c0.saturation (saturation, phase matrix, cell c0, load sat): complete\n" +
		"gpus FAKE (file-backed GPUs: no figure of this campaign is a GPU's)\n" +
		"\n" +
		"attempt 1: failed (client-failed)\n" +
		"  dir   /c/runs/c0.saturation/a1\n" +
		"  slot  gpu0, GPUs 0, CPUs -, port -\n" +
		"  TIME          FROM  TO        REASON  MESSAGE\n" +
		"  12:00:01.000  -     reserved  -       \n" +
		"\n" +
		"attempt 2: complete\n" +
		"  dir   /c/runs/c0.saturation/a2\n" +
		"  slot  gpu0, GPUs 0, CPUs -, port -\n" +
		"  DAMAGED EVIDENCE: damaged evidence: " + result + " holds only NUL bytes (93)\n" +
		"  TIME          FROM  TO        REASON  MESSAGE\n" +
		"  12:00:02.000  -     reserved  -       \n"
	if b.String() != want {
		t.Fatalf("show:\n%s\nwant\n%s", b.String(), want)
	}
}

// TestStderrGuard: a tail is read only from under the campaign's runs/,
// never from a link, never under a private input's directory, and not
// shown when it holds private text; without a provenance record none is.
func TestStderrGuard(t *testing.T) {
	dir := t.TempDir()
	secret := "the patient in bed twelve was given every drug on the ward list, twice"
	pdir := filepath.Join(dir, "runs", "r", "private")
	manifest := filepath.Join(pdir, "p.jsonl")
	testcampaign.RecordPrivateManifest(t, dir, manifest, secret)
	adir := dirlayout.AttemptDir(dir, "r", 1)
	outside := filepath.Join(t.TempDir(), "a1")
	for _, d := range []string{adir, outside} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "client.err"), []byte("one\ntwo\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(adir, "server.err"), []byte("echo: "+secret[3:60]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := dirlayout.AttemptDir(dir, "r", 2)
	if err := os.Symlink(adir, link); err != nil {
		t.Fatal(err)
	}
	failed := func(n int, d string, roles ...string) state.Attempt {
		a := state.Attempt{N: n, State: state.Failed, Dir: d}
		for _, r := range roles {
			a.Exits = append(a.Exits, state.Exit{Role: r, Code: 1})
		}
		return a
	}
	rd := api.RunDetail{Attempts: []state.Attempt{
		failed(1, adir, "client", "server", "client", "validator"), failed(2, link, "client"), failed(3, outside, "client"), failed(4, pdir, "client"),
		{N: 5, State: state.Complete, Dir: adir, Exits: []state.Exit{{Role: "client", Code: 1}}},
	}}
	tails := StderrTails(rd, NewStderrGuard(dir, 32))
	if len(tails) != 5 {
		t.Fatalf("%d tails, want 5 (client and server of a1, one client of a2, a3, a4): %+v", len(tails), tails)
	}
	if c := tails[0]; c.Role != "client" || c.Note != "" || strings.Join(c.Lines, "|") != "one|two" || c.Truncated {
		t.Errorf("a1 client: %+v", c)
	}
	for i, want := range []string{"holds private text (sha256:", "is not a directory", "is not under", "a private input's directory"} {
		if c := tails[i+1]; len(c.Lines) != 0 || !strings.Contains(c.Note, want) {
			t.Errorf("tail %d: %+v, want a note %q", i+1, c, want)
		}
	}
	if err := os.Remove(filepath.Join(dir, provenance.SubDir, provenance.SumFile)); err != nil {
		t.Fatal(err)
	}
	tails = StderrTails(api.RunDetail{Attempts: []state.Attempt{failed(1, adir, "client")}}, NewStderrGuard(dir, 32))
	if len(tails) != 1 || len(tails[0].Lines) != 0 || !strings.Contains(tails[0].Note, "the private inputs cannot be read") {
		t.Fatalf("without provenance: %+v", tails)
	}
}

func TestFmtDur(t *testing.T) {
	for s, want := range map[float64]string{0: "0s", 59.9: "59s", 95: "1m35s", 3600: "1h00m", 7322: "2h02m"} {
		if got := FmtDur(s); got != want {
			t.Errorf("FmtDur(%v) = %q, want %q", s, got, want)
		}
	}
}

// The false-failure rates of a run's gates that judge a sample: one line
// per measure the verdict measured, the rule it judged by named.
func TestSelfChecks(t *testing.T) {
	l2 := state.GateVerdict{Gate: "validator:layer2", Attempt: 2, Figures: map[string]float64{
		"smd.self.blocks": 1593, "smd.self.window_pass_fraction": 0.26, "smd.self.false_failure_rate": 0.9324,
		"smd.calibrated.quantile": 0.99, "w0.smd_max": 0.4}}
	rec := state.GateVerdict{Gate: "validator:recovery", Attempt: 2, Figures: map[string]float64{
		"recovery.self.samples": 213, "recovery.self.unit_pass_fraction": 0.8216, "recovery.self.false_failure_rate": 0.325}}
	other := state.GateVerdict{Gate: "validator:client", Attempt: 2, Figures: map[string]float64{"clean_failures": 0}}
	var b strings.Builder
	printSelfChecks(&b, []state.GateVerdict{l2, rec, other})
	want := `
the gates that judge a sample, on this run's own data (their false-failure rate):
  attempt 2 validator:layer2: representativeness (judged by the calibrated rule, quantile 0.99): on 1593 blocks of the clean segment C the literal rule passes 26.0% of representative windows; a representative run fails it 93.2% of the time
  attempt 2 validator:recovery: recovery (judged by the literal rule): on 213 samples of the clean segments the literal rule passes 82.2% of representative recoveries; a representative run fails it 32.5% of the time
`
	if b.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	printSelfChecks(&b, []state.GateVerdict{other})
	if b.Len() != 0 {
		t.Fatalf("a verdict without the figures: %q", b.String())
	}
}
