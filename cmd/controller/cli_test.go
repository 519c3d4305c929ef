package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/creack/pty"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rs/zerolog"

	"warden/internal/testutil/testterm"
	"warden/pkg/dirlayout"
	"warden/pkg/state"
)

// TestStopNotACampaign: a mistyped directory is an error, not "nothing
// to stop".
func TestStopNotACampaign(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	out, code := c.controller("stop", "-d", filepath.Join(t.TempDir(), "typo"))
	if code != 2 || !strings.Contains(out, "is not a campaign directory") {
		t.Fatalf("stop on a non-campaign: exit %d, want 2:\n%s", code, out)
	}
}

// TestPlanOverBudget: a valid protocol whose estimate passes the cap has
// its own exit code, and start refuses it (TestBudgetRefusedBeforeWave
// starts one with --allow-over-budget).
func TestPlanOverBudget(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	ok := writeProtocol(t, scenario{patterns: 2})
	if out, code := c.controller("plan", "-f", ok); code != 0 {
		t.Fatalf("plan within budget: exit %d:\n%s", code, out)
	}
	over := writeProtocol(t, scenario{patterns: 2, capGPUHours: "0.005"})
	for _, args := range [][]string{{"plan", "-f", over}, {"plan", "-f", over, "-o", "json"}} {
		out, code := c.controller(args...)
		if code != exitOverBudget || exitOverBudget == exitInvalid || !strings.Contains(out, "over budget") {
			t.Fatalf("%v: exit %d, want %d:\n%s", args, code, exitOverBudget, out)
		}
	}
	out, code := c.controller("start", "-f", over, "-d", c.dir, "--gpu-backend", "fake")
	if code != exitOverBudget || !strings.Contains(out, "--allow-over-budget") {
		t.Fatalf("start over budget: exit %d:\n%s", code, out)
	}
	if _, err := os.Stat(c.dir); err == nil {
		t.Fatal("a refused start created the campaign directory")
	}
}

// plan's over-budget message names the flag that lets start run it
// anyway, as start's refusal does.
func TestPlanOverBudgetNamesTheFlag(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	over := writeProtocol(t, scenario{patterns: 2, capGPUHours: "0.005"})
	out, code := c.controller("plan", "-f", over)
	if code != exitOverBudget || !strings.Contains(out, "over budget") || !strings.Contains(out, "unless --allow-over-budget") {
		t.Fatalf("plan over budget: exit %d:\n%s", code, out)
	}
}

// TestPlanExitMatchesVerdict: plan's exit status and its printed budget
// verdict say the same, on the seed's protocol as shipped (E-a's verdict
// an input: every wave fits) and with its co-location check run again
// (its first wave past the cap named, with its figures and the budget's
// line).
func TestPlanExitMatchesVerdict(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	shipped := filepath.Join("..", "..", "protocols", "opprof-phase3.yaml")
	out, code := c.controller("plan", "-f", shipped, "--check-inputs=false")
	if code != 0 || !strings.Contains(out, "of the 16.000 cap, within the cap: every wave fits") || strings.Contains(out, "first wave refused") ||
		!strings.Contains(out, "already consumed 3.964, remaining 12.036") {
		t.Fatalf("shipped: exit %d:\n%s", code, tail(out, 3000))
	}
	again := filepath.Join("..", "..", "protocols", "testdata", "opprof-phase3-check-again.yaml")
	out, code = c.controller("plan", "-f", again, "--check-inputs=false")
	if code != exitOverBudget || !strings.Contains(out, "OVER the cap: a wave would be refused") ||
		!strings.Contains(out, "first wave refused: the launch of P10.C00-TP2.saturation, after 58 runs") ||
		!regexp.MustCompile(`opprof-phase3-check-again\.yaml:\d+:18: over budget: the wave launching P10\.C00-TP2\.saturation`).MatchString(out) {
		t.Fatalf("check run again: exit %d:\n%s", code, tail(out, 3000))
	}
}

// TestPlanTableFits: the phase-3 plan table keeps to 120 columns with
// every run id whole; --wide shows every column. The protocol is the
// seed's with its co-location check run again: every phase, conditional
// runs too.
func TestPlanTableFits(t *testing.T) {
	t.Parallel()
	proto := filepath.Join("..", "..", "protocols", "testdata", "opprof-phase3-check-again.yaml")
	c := newCampaign(t)
	js, code := c.controller("plan", "-f", proto, "-o", "json", "--check-inputs=false")
	js = js[:strings.LastIndex(js, "}")+1] // the plan, before the over-budget line
	if code != exitOverBudget {
		t.Fatalf("plan -o json: exit %d:\n%s", code, tail(js, 2000))
	}
	var plan struct {
		Runs []struct {
			ID string `json:"id"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(js), &plan); err != nil || len(plan.Runs) == 0 {
		t.Fatalf("plan JSON: %v", err)
	}
	out, code := c.controller("plan", "-f", proto, "--check-inputs=false")
	if code != exitOverBudget {
		t.Fatalf("plan: exit %d:\n%s", code, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, ": over budget: ") {
			continue // the refusal, one line on stderr
		}
		if n := utf8.RuneCountInString(line); n > tableWidth {
			t.Errorf("line of %d columns: %q", n, line)
		}
	}
	for _, r := range plan.Runs {
		if !regexp.MustCompile(`(?m)^\d+ +` + regexp.QuoteMeta(r.ID) + ` `).MatchString(out) {
			t.Errorf("run id %s is not whole in the table", r.ID)
		}
	}
	if strings.Contains(out, "(-)") || !strings.Contains(out, "ON: the GPUs the estimate places it on") {
		t.Errorf("the GPUS notation is not explained:\n%s", out)
	}
	wide, code := c.controller("plan", "-f", proto, "--wide", "--check-inputs=false")
	if code != exitOverBudget || !strings.Contains(wide, "NEEDS") || !strings.Contains(wide, "if gate colocation/eight-way failed") {
		t.Fatalf("plan --wide: exit %d:\n%s", code, tail(wide, 2000))
	}
}

// TestForegroundLogsJSONLines: a foreground controller whose stderr is
// not a terminal writes JSON lines there, with no colour escapes.
func TestForegroundLogsJSONLines(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	out := c.runForeground(writeProtocol(t, scenario{}))
	if strings.Contains(out, "\x1b[") {
		t.Fatalf("escape sequences in a pipe:\n%q", tail(out, 2000))
	}
	logs := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "{") {
			continue // start's own messages
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %v: %q", err, line)
		}
		if m["level"] == nil || m["message"] == nil {
			t.Fatalf("log line without level or message: %q", line)
		}
		logs++
	}
	if logs == 0 {
		t.Fatalf("no JSON log lines on stderr:\n%s", tail(out, 2000))
	}
}

// snakeKey is what every key of a JSON document must look like.
var snakeKey = regexp.MustCompile(`^[a-z0-9_]+$`)

// dataMaps are the JSON objects whose keys are data, not field names:
// names the protocol chose (environment variables, kinds, phases, axes)
// and figure names. Their keys are not checked; their values are.
var dataMaps = map[string]bool{
	"env": true, "need_vars": true, "axes": true, "vars": true, "by_kind": true, "by_phase": true,
	"by_state": true, "figures": true, "stop_figures": true,
}

// checkJSONDoc walks a document: it must be an object with a schema, and
// every key outside dataMaps must be snake_case.
func checkJSONDoc(t *testing.T, what string, doc []byte) {
	t.Helper()
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		t.Errorf("%s: not JSON: %v\n%s", what, err, tail(string(doc), 1000))
		return
	}
	m, ok := v.(map[string]any)
	if !ok || m["schema"] == nil {
		t.Errorf("%s: not an object with a schema field:\n%s", what, tail(string(doc), 500))
		return
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if !snakeKey.MatchString(k) {
					t.Errorf("%s: key %q at %s is not snake_case", what, k, path)
				}
				if dataMaps[k] {
					if inner, ok := e.(map[string]any); ok {
						for dk, dv := range inner {
							walk(path+"."+k+"["+dk+"]", dv)
						}
						continue
					}
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
}

// TestEveryJSONDocument runs every command with -o json and walks what it
// prints: each document has a schema and snake_case keys only.
func TestEveryJSONDocument(t *testing.T) {
	t.Parallel()
	ctlq := ctlqBin
	c := newCampaign(t)
	proto := writeProtocol(t, scenario{patterns: 1, loadsModer: true})
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("warden: 1\nname: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{}
	ctl := func(name string, want int, args ...string) {
		t.Helper()
		cmd := exec.Command(controllerBin, args...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != want {
			t.Fatalf("%s: exit %d, want %d: %v\n%s\n%s", name, code, want, err, tail(out.String(), 2000), tail(errb.String(), 2000))
		}
		docs[name] = out.String()
	}
	ctl("controller plan", 0, "plan", "-f", proto, "-o", "json")
	ctl("controller plan (invalid)", 2, "plan", "-f", bad, "-o", "json")
	ctl("controller start", 0, "start", "-f", proto, "-d", c.dir, "--gpu-backend", "fake", "--foreground", "-o", "json")
	ctl("controller stop", 0, "stop", "-d", c.dir, "-o", "json")
	ctl("controller resume", 0, "resume", "-d", c.dir, "--foreground", "-o", "json")
	q := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command(ctlq, append(args, "-d", c.dir, "-o", "json")...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		docs[name] = string(out)
	}
	q("ctlq status", "status")
	q("ctlq runs", "runs")
	q("ctlq show", "show", "p1.saturation")
	q("ctlq events", "events")
	for name, out := range docs {
		if name == "ctlq events" {
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) < 2 {
				t.Errorf("ctlq events: %d lines", len(lines))
			}
			for i, line := range lines {
				checkJSONDoc(t, fmt.Sprintf("%s line %d", name, i+1), []byte(line))
			}
			continue
		}
		checkJSONDoc(t, name, []byte(out))
	}
}

// TestAutoPortsChosenAndRecorded: slots with port: auto get free, distinct
// ports at start, recorded in plan.json and used by the runs, so a port
// that happens to be taken does not stop the campaign.
func TestAutoPortsChosenAndRecorded(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	proto := writeProtocol(t, scenario{patterns: 2})
	b, err := os.ReadFile(proto)
	if err != nil {
		t.Fatal(err)
	}
	b = regexp.MustCompile(`port: \d+`).ReplaceAll(b, []byte("port: auto"))
	if err := os.WriteFile(proto, b, 0o644); err != nil {
		t.Fatal(err)
	}
	c.runForeground(proto)
	plan, err := dirlayout.ReadPlan(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	ports := map[int]bool{}
	for _, s := range plan.Slots {
		if !s.PortAuto || s.Port <= 0 || ports[s.Port] {
			t.Fatalf("slot %+v: no distinct recorded port", s)
		}
		ports[s.Port] = true
	}
	s := c.store()
	defer s.Close()
	cp, _ := s.Campaign()
	if cp.State != state.CampaignComplete {
		t.Fatalf("campaign %s %s %s", cp.State, cp.StopReason, cp.StopDetail)
	}
	runs, _ := s.Runs()
	for _, r := range runs {
		for _, a := range c.attempts(s, r.ID) {
			if !ports[a.Port] {
				t.Fatalf("%s a%d used port %d, not a recorded one %v", r.ID, a.N, a.Port, ports)
			}
		}
	}
}

// TestMetricsScrapedWhileRunning starts a controller with both metrics
// outputs, scrapes the listener while a run measures, and reads the
// textfile it leaves after an operator's stop.
func TestMetricsScrapedWhileRunning(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	addr := fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1)[0])
	textfile := filepath.Join(t.TempDir(), "warden.prom")
	proto := writeProtocol(t, scenario{patterns: 2, measureS: "3"})
	if out, code := c.controller("start", "-f", proto, "-d", c.dir, "--gpu-backend", "fake", "--metrics", "0.0.0.0:9", "--foreground"); code != 2 || !strings.Contains(out, "not a loopback address") {
		t.Fatalf("non-loopback metrics address: exit %d:\n%s", code, out)
	}
	c.start(proto, "--metrics", addr, "--metrics-textfile", textfile)
	c.waitMeasuring()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("parse exposition: %v", err)
	}
	running := 0.0
	for _, m := range fams["warden_runs"].GetMetric() {
		if m.GetLabel()[0].GetValue() == "running" {
			running = m.GetGauge().GetValue()
		}
	}
	if running < 1 || fams["warden_controller_heartbeat_age_seconds"] == nil || fams["warden_budget_gpu_seconds"] == nil {
		t.Fatalf("scrape while measuring: running %g, families %d", running, len(fams))
	}
	if out, code := c.controller("stop", "-d", c.dir); code != 0 {
		t.Fatalf("stop: exit %d:\n%s", code, out)
	}
	b, err := os.ReadFile(textfile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `warden_campaign_stop_reason{reason="operator-stop"} 1`) {
		t.Fatalf("textfile after stop:\n%s", b)
	}
}

// TestWatchLiveCampaign runs ctlq watch in a pseudo-terminal beside a
// running controller: it redraws while runs measure, shows the slots'
// lanes, and ends by itself when the controller exits.
func TestWatchLiveCampaign(t *testing.T) {
	t.Parallel()
	ctlq := ctlqBin
	c := newCampaign(t)
	proto := writeProtocol(t, scenario{patterns: 2, measureS: "2", loadsModer: true})
	c.start(proto)
	cmd := exec.Command(ctlq, "watch", "-d", c.dir, "--interval", "200ms")
	cmd.Env = append(os.Environ(), "TERM=xterm-256color")
	term, err := testterm.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	if !term.Wait(cmd, 3*time.Minute) {
		t.Fatalf("watch did not end with the controller")
	}
	out := term.Close()
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("watch exit %d, want 0 (complete)", code)
	}
	plain := testterm.Plain(out)
	for _, want := range []string{"measuring", "s0 ", "s1 ", "eta", "complete", "watch ended"} {
		if !strings.Contains(plain, want) {
			t.Errorf("the live view never showed %q:\n%s", want, tail(plain, 3000))
		}
	}
	if n := strings.Count(plain, "q quits"); n < 2 {
		t.Errorf("the view was drawn %d times while the campaign ran", n)
	}
}

// TestStderrLogChoosesByTerminal: readable lines for a terminal, the JSON
// lines themselves for anything else.
func TestStderrLogChoosesByTerminal(t *testing.T) {
	t.Parallel()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	defer tty.Close()
	if _, ok := stderrLog(tty).(zerolog.ConsoleWriter); !ok {
		t.Error("a terminal does not get the console writer")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if got := stderrLog(w); got != io.Writer(w) {
		t.Errorf("a pipe gets %T, want the pipe itself (JSON lines)", got)
	}
}
