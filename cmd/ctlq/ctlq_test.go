package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"warden/internal/testutil/testbin"
	"warden/internal/testutil/testcampaign"
	"warden/internal/testutil/testterm"
	"warden/pkg/api"
	"warden/pkg/dirlayout"
	"warden/pkg/state"
)

var ctlqBin string

func TestMain(m *testing.M) {
	os.Exit(testbin.Run("ctlq-test-", []string{"."}, func(dir string) int {
		ctlqBin = filepath.Join(dir, "ctlq")
		return m.Run()
	}))
}

// campaignDir makes a campaign database in the given state, as a
// controller that has exited would leave it.
func campaignDir(t *testing.T, final state.CampaignState) string {
	t.Helper()
	dir := t.TempDir()
	s, err := state.Open(dirlayout.State(dir), state.Options{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	runs := []state.Run{
		{ID: "a.saturation", Order: 0, Phase: "matrix", Kind: "saturation", GPUs: 1, ExpectedS: 100},
		{ID: "a.moderate", Order: 1, Phase: "matrix", Kind: "moderate", Needs: []string{"a.saturation"}, GPUs: 1, ExpectedS: 100},
	}
	c := state.Campaign{ID: "t-1", ProtocolName: "t", ProtocolSHA256: strings.Repeat("ab", 32), Dir: dir, CreatedAt: time.Now(),
		State: state.CampaignRunning, BudgetCapGPUHours: 16, PriorGPUHours: 3.964, BudgetUnit: "H20-hours", RegimeConcurrency: 1}
	if err := s.CreateCampaign(c, runs); err != nil {
		t.Fatal(err)
	}
	noPrivateInputs(t, dir)
	if _, err := s.NewAttempt("a.saturation", "", nil); err != nil {
		t.Fatal(err)
	}
	for _, to := range []state.AttemptState{state.Reserved, state.Preflight} {
		if _, err := s.Transition("a.saturation", 1, to, "", "", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Transition("a.saturation", 1, state.Failed, state.ReasonGPUNotIdle, "GPU 0 not idle", nil, nil); err != nil {
		t.Fatal(err)
	}
	switch final {
	case state.CampaignStopped:
		if err := s.SetCampaignState(state.CampaignStopped, "gpu-not-idle", "run a.saturation failed", nil); err != nil {
			t.Fatal(err)
		}
	case state.CampaignComplete:
		for _, r := range runs {
			a, err := s.NewAttempt(r.ID, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, to := range []state.AttemptState{state.Reserved, state.Preflight, state.Starting, state.Ready, state.Measuring, state.Stopping, state.Cleanup, state.Validating, state.Complete} {
				if _, err := s.Transition(r.ID, a.N, to, "", "", nil, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := s.SetCampaignState(state.CampaignComplete, "complete", "", nil); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func run(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(ctlqBin, args...)
	cmd.Env = append(os.Environ(), "WARDEN_DIR=")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// privatePrompt is the text of a private input, longer than the privacy
// scan's 48 bytes.
const privatePrompt = "Please summarize the attached discharge letter of the patient in bed twelve, listing every drug"

// recordPrivateManifest writes a private manifest holding privatePrompt
// and records it as the only input in the campaign dir's provenance; it
// returns the manifest's path.
func recordPrivateManifest(t *testing.T, dir string) string {
	t.Helper()
	manifest := filepath.Join(t.TempDir(), "private", "p10.jsonl")
	testcampaign.RecordPrivateManifest(t, dir, manifest, privatePrompt)
	return manifest
}

// reportPage writes the campaign's report to a file of its own, fails the
// test unless ctlq report exits 0, and returns the HTML.
func reportPage(t *testing.T, dir string) string {
	t.Helper()
	page := filepath.Join(t.TempDir(), "r.html")
	if out, code := run(t, "report", "-d", dir, "-o", page); code != 0 {
		t.Fatalf("report: exit %d:\n%s", code, out)
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestStatusExitCodes(t *testing.T) {
	cases := []struct {
		state state.CampaignState
		code  int
	}{
		{state.CampaignComplete, 0},
		{state.CampaignStopped, 3},
		{state.CampaignRunning, 4}, // no controller holds the campaign
	}
	for _, tc := range cases {
		t.Run(string(tc.state), func(t *testing.T) {
			dir := campaignDir(t, tc.state)
			out, code := run(t, "status", "-d", dir, "-o", "json")
			if code != tc.code {
				t.Fatalf("exit %d, want %d:\n%s", code, tc.code, out)
			}
			var st api.Status
			if err := json.Unmarshal([]byte(out), &st); err != nil {
				t.Fatalf("status JSON: %v\n%s", err, out)
			}
			if st.Schema != api.Schema || st.Campaign.State != string(tc.state) || st.Controller.Alive || st.Source != "database" ||
				st.Runs.Total != 2 || st.Budget.CapGPUHours != 16 || st.Budget.ConsumedGPUHours < 3.964 {
				t.Fatalf("status %+v", st)
			}
			if tc.state == state.CampaignStopped && st.Campaign.StopReason != "gpu-not-idle" {
				t.Fatalf("stop reason %q", st.Campaign.StopReason)
			}
		})
	}
}

// TestOperatorStopExitCode: an operator's own stop is not a stop for
// review; ctlq status says so with its own exit code.
func TestOperatorStopExitCode(t *testing.T) {
	dir := campaignDir(t, state.CampaignRunning)
	s, err := state.Open(dirlayout.State(dir), state.Options{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetCampaignState(state.CampaignStopped, string(state.StopOperator), "stopped by an operator", nil); err != nil {
		t.Fatal(err)
	}
	s.Close()
	out, code := run(t, "status", "-d", dir)
	if code != exitOperatorStop || exitOperatorStop == exitStopped {
		t.Fatalf("exit %d, want %d:\n%s", code, exitOperatorStop, out)
	}
	// the controller exited after the stop: it says so, not an alarm; the
	// hint is the resume
	if !strings.Contains(out, "operator-stop") || !strings.Contains(out, "exited; campaign stopped at ") ||
		!strings.Contains(out, "hint       stopped by an operator, resumable as it is: controller resume -d "+dir) {
		t.Fatalf("status:\n%s", out)
	}
}

func TestNotACampaign(t *testing.T) {
	out, code := run(t, "status", "-d", t.TempDir())
	if code != 2 || !strings.Contains(out, "is not a campaign directory") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	out, code = run(t, "status")
	if code != 2 || !strings.Contains(out, "give -d DIR or set WARDEN_DIR") {
		t.Fatalf("no dir: exit %d:\n%s", code, out)
	}
}

func TestRunsAndShow(t *testing.T) {
	dir := campaignDir(t, state.CampaignStopped)
	out, code := run(t, "runs", "-d", dir, "-o", "json")
	if code != 0 {
		t.Fatalf("runs exit %d:\n%s", code, out)
	}
	var doc struct {
		Schema int `json:"schema"`
		Runs   []struct {
			ID       string `json:"run"`
			Kind     string `json:"kind"`
			State    string `json:"state"`
			Attempts []struct {
				N      int    `json:"n"`
				State  string `json:"state"`
				Reason string `json:"reason"`
			} `json:"attempts"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Schema != api.Schema {
		t.Fatalf("runs schema %d", doc.Schema)
	}
	runs := doc.Runs
	if len(runs) != 2 || runs[0].ID != "a.saturation" || runs[0].State != "failed" || len(runs[0].Attempts) != 1 ||
		runs[0].Attempts[0].Reason != "gpu-not-idle" || runs[1].State != "pending" || runs[1].Kind != "moderate" {
		t.Fatalf("runs %+v", runs)
	}
	out, _ = run(t, "runs", "-d", dir, "--state", "failed")
	if !strings.Contains(out, "a.saturation") || strings.Contains(out, "a.moderate") {
		t.Fatalf("filtered runs:\n%s", out)
	}
	out, code = run(t, "show", "-d", dir, "a.saturation")
	if code != 0 || !regexp.MustCompile(`preflight +failed +gpu-not-idle`).MatchString(out) {
		t.Fatalf("show exit %d:\n%s", code, out)
	}
	out, code = run(t, "show", "-d", dir, "nope")
	if code != 2 || !strings.Contains(out, `no run "nope"`) {
		t.Fatalf("show missing: exit %d:\n%s", code, out)
	}
	out, code = run(t, "events", "-d", dir)
	if code != 0 || !strings.Contains(out, "a.saturation a1") || !strings.Contains(out, "running -> stopped") {
		t.Fatalf("events exit %d:\n%s", code, out)
	}
}

// TestShowReadsAsText: no Go syntax, aligned columns, argv that a shell
// reads back, and a CPU-locality check the GPU backend could not make
// shown as not applicable rather than as an error.
func TestShowReadsAsText(t *testing.T) {
	dir := campaignDir(t, state.CampaignStopped)
	s, err := state.Open(dirlayout.State(dir), state.Options{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateAttempt("a.saturation", 1, func(a *state.Attempt) error {
		a.Procs = []state.Proc{{Role: "server", PID: 10, PGID: 10, Argv: []string{"srv", "--config", "a b=c", "it's", ""}}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, g := range []state.GateVerdict{
		{Gate: "preflight", Run: "a.saturation", Attempt: 1, Verdict: state.VerdictPass, Figures: map[string]float64{"gpu0_used_mib": 0}},
		{Gate: "cpu-local", Run: "a.saturation", Attempt: 1, Verdict: state.VerdictError, Detail: "CPU affinity unknown for GPU 0",
			Figures: map[string]float64{"slot_cpus": 1, "nonlocal_cpus": 0}},
		{Gate: "cpu-local", Run: "a.saturation", Attempt: 1, Verdict: state.VerdictFail, Detail: "CPUs 3 are not local to GPU 0",
			Figures: map[string]float64{"slot_cpus": 1, "nonlocal_cpus": 1, "gpu0_nonlocal_cpus": 1}},
	} {
		if _, err := s.AddGateVerdict(g); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	out, code := run(t, "show", "-d", dir, "a.saturation")
	if code != 0 {
		t.Fatalf("show exit %d:\n%s", code, out)
	}
	for _, bad := range []string{"map[", "[]", "%!"} {
		if strings.Contains(out, bad) {
			t.Errorf("show prints Go syntax %q:\n%s", bad, out)
		}
	}
	if want := `srv --config 'a b=c' 'it'\''s' ''`; !strings.Contains(out, want) {
		t.Errorf("argv not shell-quoted, want %s:\n%s", want, out)
	}
	if !regexp.MustCompile(`(?m)^  cpu-local +n/a +not judged`).MatchString(out) {
		t.Errorf("an unjudged CPU-locality check reads as an error:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^  cpu-local +fail +CPUs 3 are not local`).MatchString(out) {
		t.Errorf("a failed CPU-locality check is not shown as failed:\n%s", out)
	}
	if !strings.Contains(out, "gpu0_used_mib=0") {
		t.Errorf("figures not written as name=value:\n%s", out)
	}
	// the transition rows line up under their header
	lines := strings.Split(out, "\n")
	to, rows := -1, 0
	for _, line := range lines {
		if strings.HasPrefix(line, "  TIME") {
			to = strings.Index(line, " TO ") + 1
			continue
		}
		if to > 0 && regexp.MustCompile(`^  \d\d:\d\d:\d\d\.\d{3}  `).MatchString(line) {
			rows++
			if len(line) <= to || line[to-2:to] != "  " || line[to] == ' ' {
				t.Errorf("transition row not aligned under TO (column %d): %q", to, line)
			}
		}
	}
	if rows == 0 {
		t.Errorf("no transition rows:\n%s", out)
	}
}

// TestWatchInATerminal runs ctlq watch in a real pseudo-terminal: it
// draws full-screen (alternate screen), ends by itself when no controller
// runs the campaign, leaves the last frame on the terminal and exits with
// the status code.
func TestWatchInATerminal(t *testing.T) {
	dir := campaignDir(t, state.CampaignStopped)
	cmd := exec.Command(ctlqBin, "watch", "-d", dir)
	cmd.Env = append(os.Environ(), "WARDEN_DIR=", "TERM=xterm-256color")
	term, err := testterm.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	if !term.Wait(cmd, 30*time.Second) {
		t.Fatalf("watch did not end on a campaign without a controller:\n%q", term.Output())
	}
	text := term.Close()
	if code := cmd.ProcessState.ExitCode(); code != exitStopped {
		t.Errorf("exit %d, want %d", code, exitStopped)
	}
	if !strings.Contains(text, "\x1b[?1049h") {
		t.Errorf("no alternate screen in a terminal:\n%q", text)
	}
	plain := testterm.Plain(text)
	for _, want := range []string{"campaign t-1", "stop reason gpu-not-idle", "runs ", "1/2 done", "budget", "slots", "last events", "watch ended"} {
		if !strings.Contains(plain, want) {
			t.Errorf("frame lacks %q:\n%s", want, plain)
		}
	}
}

// TestWatchPlain: when stdout is not a terminal, watch prints plain lines
// with no escape sequences.
func TestWatchPlain(t *testing.T) {
	dir := campaignDir(t, state.CampaignComplete)
	out, code := run(t, "watch", "-d", dir)
	if code != 0 || strings.Contains(out, "\x1b") || !strings.Contains(out, "complete; runs 2/2 done") {
		t.Fatalf("exit %d:\n%q", code, out)
	}
	out, code = run(t, "status", "-w", "-d", dir)
	if code != 0 || !strings.Contains(out, "controller not running") {
		t.Fatalf("status -w: exit %d:\n%q", code, out)
	}
}

// TestCompletion: run ids complete from the campaign, states from their
// list; man pages are generated for every command.
func TestCompletion(t *testing.T) {
	dir := campaignDir(t, state.CampaignStopped)
	out, code := run(t, "__complete", "show", "-d", dir, "a.s")
	if code != 0 || !strings.Contains(out, "a.saturation\tfailed") || strings.Contains(out, "a.moderate") {
		t.Fatalf("complete run ids: exit %d:\n%s", code, out)
	}
	out, _ = run(t, "__complete", "runs", "--state", "")
	for _, s := range runStates {
		if !strings.Contains(out, s+"\n") {
			t.Errorf("state %s not completed:\n%s", s, out)
		}
	}
	man := t.TempDir()
	if out, code := run(t, "man", man); code != 0 {
		t.Fatalf("man: exit %d:\n%s", code, out)
	}
	for _, page := range []string{"ctlq.1", "ctlq-watch.1", "ctlq-report.1", "ctlq-status.1"} {
		if _, err := os.Stat(filepath.Join(man, page)); err != nil {
			t.Errorf("no man page %s: %v", page, err)
		}
	}
}

// TestCrashedCampaign: a campaign left running by a dead controller is
// told apart by watch (exit 4, at once) and by the report's header.
func TestCrashedCampaign(t *testing.T) {
	dir := campaignDir(t, state.CampaignRunning)
	out, code := run(t, "watch", "-d", dir)
	if code != exitControllerX || !strings.Contains(out, "controller not running") {
		t.Fatalf("watch on a crashed campaign: exit %d:\n%s", code, out)
	}
	if !strings.Contains(reportPage(t, dir), "no controller runs it") {
		t.Fatal("the report of a crashed campaign does not say that no controller runs it")
	}
}
