package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"warden/pkg/dirlayout"
	"warden/pkg/state"
)

// loadgenResult is a real loadgen saturation result (the validators' testdata).
const loadgenResult = "../../pkg/contract/testdata/loadgen/saturation/result.json"

// reportDir makes a stopped campaign with what a report draws: attempts
// with directories, GPU samples, client results, figures, gate verdicts
// and ledger entries.
func reportDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := t0
	s, err := state.Open(dirlayout.State(dir), state.Options{Strict: true, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	noPrivateInputs(t, dir)
	runs := []state.Run{
		{ID: "c0.saturation", Order: 0, Phase: "matrix", Kind: "saturation", Cell: "c0", GPUs: 1, ExpectedS: 60},
		{ID: "c0.moderate", Order: 1, Phase: "matrix", Kind: "moderate", Cell: "c0", GPUs: 1, ExpectedS: 60},
		{ID: "c1.saturation", Order: 2, Phase: "matrix", Kind: "saturation", Cell: "c1", GPUs: 1, ExpectedS: 60},
	}
	c := state.Campaign{ID: "r-1", ProtocolName: "rep", ProtocolSHA256: strings.Repeat("cd", 32), Dir: dir, CreatedAt: t0,
		State: state.CampaignRunning, BudgetCapGPUHours: 0.2, PriorGPUHours: 0.01, BudgetUnit: "H20-hours", RegimeConcurrency: 2}
	if err := s.CreateCampaign(c, runs); err != nil {
		t.Fatal(err)
	}
	happy := []state.AttemptState{state.Reserved, state.Preflight, state.Starting, state.Ready, state.Measuring, state.Stopping, state.Cleanup, state.Validating, state.Complete}
	for i, r := range runs {
		gpuID := i % 2
		adir := filepath.Join(dir, "runs", r.ID, "a1")
		if err := os.MkdirAll(filepath.Join(adir, "client"), 0o755); err != nil {
			t.Fatal(err)
		}
		clock = t0.Add(time.Duration(i*40) * time.Second)
		start := clock
		if _, err := s.NewAttempt(r.ID, adir, func(a *state.Attempt) { a.Slot = fmt.Sprintf("gpu%d", gpuID); a.GPUIDs = []int{gpuID} }); err != nil {
			t.Fatal(err)
		}
		path := happy
		if i == 2 {
			path = []state.AttemptState{state.Reserved, state.Preflight, state.Starting, state.Ready, state.Measuring, state.Stopping, state.Cleanup, state.Failed}
		}
		for _, to := range path {
			clock = clock.Add(5 * time.Second)
			reason := state.Reason("")
			if to == state.Failed {
				reason = state.ReasonGPUNotIdle
			}
			if _, err := s.Transition(r.ID, 1, to, reason, "", nil, nil); err != nil {
				t.Fatal(err)
			}
		}
		var samples bytes.Buffer
		for k := 0; k < 40; k++ {
			fmt.Fprintf(&samples, `{"time":%q,"gpus":[{"index":%d,"uuid":"u","numa_node":0,"memory_used_mib":%d,"sm_clock_mhz":%d,"power_w":%d}]}`+"\n",
				start.Add(time.Duration(k)*time.Second).Format(time.RFC3339Nano), gpuID, 1000+k*50, 1400+k*10, 100+k*5)
		}
		os.WriteFile(filepath.Join(adir, "gpu-samples.jsonl"), samples.Bytes(), 0o644)
		result := []byte(`{"schema":1,"throughput_rps":12.5,"output_tokens_per_s":800}`)
		if i == 1 { // loadgen's own result, as every shipped protocol's client writes it
			if result, err = os.ReadFile(loadgenResult); err != nil {
				t.Fatal(err)
			}
		}
		os.WriteFile(filepath.Join(adir, "client", "result.json"), result, 0o644)
		if _, err := s.UpdateAttempt(r.ID, 1, func(a *state.Attempt) error {
			a.Figures = map[string]float64{"gpu_seconds": 30, "energy_per_request_j": 4.2, "samples": 40, "samples_missed": float64(i % 2), "preflight_load1": 0.5}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for _, g := range []state.GateVerdict{
			{Gate: "preflight", Run: r.ID, Attempt: 1, Verdict: state.VerdictPass},
			{Gate: "drain", Run: r.ID, Attempt: 1, Verdict: map[bool]string{true: state.VerdictFail, false: state.VerdictPass}[i == 2]},
		} {
			if _, err := s.AddGateVerdict(g); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.AddLedger(state.LedgerEntry{Kind: state.LedgerCharge, Run: r.ID, Attempt: 1, GPUSeconds: 30}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddAmendment(state.Amendment{ID: "A-R-1", Kind: "amend", Title: "longer drain", Text: "the seed allows it",
		ProtocolSHA256: strings.Repeat("ef", 32), Runs: []string{"c1.saturation"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetCampaignState(state.CampaignStopped, "gpu-not-idle", "run c1.saturation failed", nil); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestReportFiles: the HTML names nothing outside itself, and the runs
// table comes as JSON (schema, snake_case) and CSV.
func TestReportFiles(t *testing.T) {
	dir := reportDir(t)
	out := t.TempDir()
	page, tj, tc := filepath.Join(out, "r.html"), filepath.Join(out, "t.json"), filepath.Join(out, "t.csv")
	if o, code := run(t, "report", "-d", dir, "-o", page, "--table-json", tj, "--csv", tc); code != 0 {
		t.Fatalf("report exit %d:\n%s", code, o)
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	html := string(b)
	for _, want := range []string{"rep", "cdcdcdcd", "gpu-not-idle", "A-R-1", "the seed allows it", "c1.saturation", "drain: fail", "12.500", "power (W)", "Sanity", "cap 0.200"} {
		if !strings.Contains(html, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if m := regexp.MustCompile(`(?i)(src|href)\s*=\s*"(https?:)?//|url\(|@import|https?://`).FindString(html); m != "" {
		t.Errorf("the report refers outside itself: %q", m)
	}
	var table map[string]any
	jb, _ := os.ReadFile(tj)
	if err := json.Unmarshal(jb, &table); err != nil || table["schema"] == nil {
		t.Fatalf("table JSON: %v\n%s", err, jb)
	}
	rows := table["rows"].([]any)
	if len(rows) != 3 {
		t.Fatalf("%d rows", len(rows))
	}
	// loadgen's clean-interval throughput reaches the table (c0.moderate's
	// client is loadgen), the stand-in client's figures too.
	var lg struct {
		Clean struct {
			CompletedRPS     float64 `json:"completed_rps"`
			OutputTokensPerS float64 `json:"output_tokens_per_s"`
		} `json:"clean"`
	}
	if lb, err := os.ReadFile(loadgenResult); err != nil || json.Unmarshal(lb, &lg) != nil || lg.Clean.CompletedRPS <= 0 {
		t.Fatalf("loadgen result %s: %v", loadgenResult, err)
	}
	if r := rows[1].(map[string]any); r["throughput_rps"] != lg.Clean.CompletedRPS || r["output_tokens_per_s"] != lg.Clean.OutputTokensPerS {
		t.Errorf("loadgen run's row %v, want throughput %v and output tok/s %v", r, lg.Clean.CompletedRPS, lg.Clean.OutputTokensPerS)
	}
	if r := rows[0].(map[string]any); r["throughput_rps"] != 12.5 {
		t.Errorf("stand-in client's row %v, want throughput 12.5", r)
	}
	for k := range rows[0].(map[string]any) {
		if !regexp.MustCompile(`^[a-z0-9_]+$`).MatchString(k) {
			t.Errorf("table key %q is not snake_case", k)
		}
	}
	cb, _ := os.ReadFile(tc)
	recs, err := csv.NewReader(bytes.NewReader(cb)).ReadAll()
	if err != nil || len(recs) != 4 || recs[0][0] != "run" || recs[3][0] != "c1.saturation" || recs[3][6] != "failed" {
		t.Fatalf("CSV %v:\n%s", err, cb)
	}
}

// chromium finds headless Chromium (Debian's package). CI installs it;
// elsewhere the browser test is skipped.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium in CI")
	}
	t.Skip("no chromium on this machine")
	return ""
}

func headless(t *testing.T, browser string, args ...string) (stdout, stderr string) {
	t.Helper()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
		"--disable-sync", "--no-first-run", "--user-data-dir=" + t.TempDir(), "--enable-logging=stderr", "--v=0"}
	cmd := exec.Command(browser, append(base, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("chromium %v: %v\n%s", args, err, e.String())
		}
	case <-time.After(90 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("chromium %v did not finish", args)
	}
	return o.String(), e.String()
}

// TestReportInChromium loads the report in headless Chromium: its script
// runs, the console stays empty (the page's Content-Security-Policy turns
// any request into a console error), and a screenshot is not blank.
func TestReportInChromium(t *testing.T) {
	browser := chromium(t)
	dir := reportDir(t)
	page := filepath.Join(t.TempDir(), "report.html")
	if o, code := run(t, "report", "-d", dir, "-o", page); code != 0 {
		t.Fatalf("report exit %d:\n%s", code, o)
	}
	dom, logs := headless(t, browser, "--dump-dom", "file://"+page)
	if !strings.Contains(dom, `data-ready="1"`) {
		t.Errorf("the page's script did not run to its end:\n%.2000s", dom)
	}
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "CONSOLE") || strings.Contains(line, "net::ERR") {
			t.Errorf("browser console: %s", line)
		}
	}
	shot := filepath.Join(t.TempDir(), "shot.png")
	headless(t, browser, "--window-size=1280,1600", "--hide-scrollbars", "--screenshot="+shot, "file://"+page)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	colours := map[uint32]bool{}
	inked := 0
	bd := img.Bounds()
	for y := bd.Min.Y; y < bd.Max.Y; y += 2 {
		for x := bd.Min.X; x < bd.Max.X; x += 2 {
			r, g, b, _ := img.At(x, y).RGBA()
			colours[(r>>11)<<10|(g>>11)<<5|b>>11] = true
			if r < 0xe000 || g < 0xe000 || b < 0xe000 {
				inked++
			}
		}
	}
	if total := bd.Dx() * bd.Dy() / 4; len(colours) < 8 || inked < total/100 {
		t.Fatalf("screenshot looks blank: %d colours, %d of %d sampled pixels inked", len(colours), inked, total)
	}
}
