package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"warden/bench/crashcheck"
	"warden/pkg/dirlayout"
	"warden/pkg/state"
)

// sweepArgs are controller sweep's flags for a small sweep on the
// stand-in and two fake GPUs, on the test's own ports: two configurations
// (TP 1 on one GPU, TP 2 on both), each a saturation run and a moderate
// run that needs it.
func sweepArgs(t *testing.T, dir string, extra ...string) []string {
	ports := freePorts(t, 2)
	return append([]string{"sweep", "-d", dir,
		"--serve-cmd", standinBin + " server --load-s 0.2 --shutdown-timeout 1 --gpu-mem-mib 512 --token-ms 5",
		"--model", "standin", "--grid", "max-num-seqs=64", "--grid", "tp=1,2",
		"--gpus", "0,1", "--cpus", "0-1", "--ports", strconv.Itoa(ports[0]) + "," + strconv.Itoa(ports[1]),
		"--max-concurrency", "2", "--rate-fraction", "0.5", "--rate-tolerance", "0.3",
		"--input-uniform", "8:16", "--output-fixed", "8", "--num-requests", "2000",
		"--warmup-seconds", "0.2", "--clean-segment-seconds", "0.6", "--num-clean-segments", "1",
		"--drain-allowance-s", "2", "--watchdog-s", "10", "--startup-s", "0.5", "--server-ready-timeout", "20",
		"--cap-gpu-hours", "1", "--budget-unit", "fake-GPU-hours", "--gpu-backend", "fake", "-o", "json"}, extra...)
}

// sweepDocOf decodes controller sweep's -o json document.
func sweepDocOf(t *testing.T, out string) sweepDoc {
	t.Helper()
	var d sweepDoc
	// the document is the first thing on stdout; stderr follows it here
	if err := json.NewDecoder(strings.NewReader(out)).Decode(&d); err != nil {
		t.Fatalf("no JSON document: %v\n%s", err, out)
	}
	return d
}

// planJSON is controller plan -o json of a protocol, compacted.
func planJSON(t *testing.T, protocol string) []byte {
	t.Helper()
	c := &campaign{t: t}
	out, code := c.controller("plan", "-f", protocol, "-o", "json")
	if code != 0 {
		t.Fatalf("controller plan -f %s: exit %d\n%s", protocol, code, out)
	}
	return compactJSON(t, []byte(out))
}

func compactJSON(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, bytes.TrimSpace(b)); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b)
	}
	return buf.Bytes()
}

// TestSweepStartsAResumableCampaign: one controller sweep writes the
// protocol and the manifest into the campaign directory and starts the
// campaign detached; the plan it runs (DIR/plan.json) is controller plan
// of the written protocol; the controller killed with SIGKILL while a run
// measures, a resume completes every run, and every promise of a crash
// holds.
func TestSweepStartsAResumableCampaign(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	out, code := stdoutOnly(t, sweepArgs(t, c.dir)...)
	if code != 0 {
		t.Fatalf("controller sweep: exit %d\n%s", code, out)
	}
	d := sweepDocOf(t, out)
	if d.Action != "sweep" || !d.Running || d.PID == 0 || d.Runs != 4 || d.Configurations != 2 || d.ExitCode != 0 ||
		d.Protocol != filepath.Join(c.dir, "inputs", "sweep.yaml") || d.Manifest == nil || d.Manifest.Rows != 2000 || !d.Manifest.Materialized {
		t.Fatalf("sweep document %+v", d)
	}
	if got, want := compactJSON(t, mustRead(t, dirlayout.Plan(c.dir))), planJSON(t, d.Protocol); !bytes.Equal(got, want) {
		t.Fatalf("the campaign's plan.json is not controller plan of the written protocol:\n%s\n%s", got, want)
	}
	c.waitMeasuring()
	c.killController()
	before, vs, err := crashcheck.Take(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		t.Errorf("after the kill: %s", v)
	}
	if out, code := c.controller("resume", "-d", c.dir, "--foreground"); code != 0 {
		t.Fatalf("resume: exit %d\n%s", code, tail(out, 3000))
	}
	after, vs, err := crashcheck.Take(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	vs = append(vs, crashcheck.Compare(before, after)...)
	final, err := crashcheck.FinalExpect(c.dir, after, crashcheck.Expect{State: state.CampaignComplete})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range append(vs, final...) {
		t.Error(v)
	}
	s := c.store()
	if cp, _ := s.Campaign(); cp.ProtocolSHA256 != d.ProtocolSHA256 || cp.ProtocolPath != d.Protocol {
		t.Errorf("campaign %s %s, sweep wrote %s %s", cp.ProtocolPath, cp.ProtocolSHA256, d.Protocol, d.ProtocolSHA256)
	}
	if n := len(c.attemptsIn(s, state.Interrupted)); n != 1 {
		t.Errorf("%d attempts interrupted by the kill, want 1", n)
	}
	for _, run := range []string{"max-num-seqs-64_tp-1.saturation", "max-num-seqs-64_tp-1.moderate-0.5", "max-num-seqs-64_tp-2.saturation", "max-num-seqs-64_tp-2.moderate-0.5"} {
		as := c.attempts(s, run)
		if len(as) == 0 || as[len(as)-1].State != state.Complete {
			t.Errorf("%s: %v", run, attemptStates(as))
		}
	}
	if as := c.attempts(s, "max-num-seqs-64_tp-2.saturation"); len(as) > 0 && len(as[len(as)-1].GPUIDs) != 2 {
		t.Errorf("the TP 2 run had GPUs %v", as[len(as)-1].GPUIDs)
	}
	c.assertNoProcesses()
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSweepDryRun: --dry-run writes the protocol and the manifest and
// plans them, the plan controller plan -f gives, and starts nothing;
// --print-protocol prints the file written; a sweep into the directory
// again is refused, naming the start command of what is there.
func TestSweepDryRun(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	out, code := stdoutOnly(t, sweepArgs(t, c.dir, "--dry-run")...)
	if code != 0 {
		t.Fatalf("controller sweep --dry-run: exit %d\n%s", code, out)
	}
	var raw struct {
		Plan json.RawMessage `json:"plan"`
	}
	json.NewDecoder(strings.NewReader(out)).Decode(&raw)
	d := sweepDocOf(t, out)
	if !d.DryRun || d.Running || d.PID != 0 || len(raw.Plan) == 0 {
		t.Fatalf("dry-run document %+v", d)
	}
	if got, want := compactJSON(t, raw.Plan), planJSON(t, d.Protocol); !bytes.Equal(got, want) {
		t.Fatalf("the dry run's plan is not controller plan of the written protocol:\n%s\n%s", got, want)
	}
	if _, err := os.Stat(dirlayout.State(c.dir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a dry run made a campaign: %v", err)
	}
	out, code = stdoutOnly(t, sweepArgs(t, c.dir, "--dry-run")...)
	if d := sweepDocOf(t, out); code != 1 || d.ExitCode != 1 || !strings.Contains(d.Error, "controller start -f "+d.Dir+"/inputs/sweep.yaml -d "+d.Dir) {
		t.Fatalf("a sweep into a directory that holds one: exit %d\n%s", code, out)
	}

	other := filepath.Join(t.TempDir(), "p")
	stdout, code := stdoutOnly(t, without(t, sweepArgs(t, other, "--print-protocol"), "-o")...)
	if code != 0 || stdout != string(mustRead(t, filepath.Join(other, "inputs", "sweep.yaml"))) || !strings.HasPrefix(stdout, "# A config sweep, written by controller sweep") {
		t.Fatalf("--print-protocol: exit %d\n%s", code, stdout)
	}
}

// without is args without flag and its value.
func without(t *testing.T, args []string, flag string) []string {
	t.Helper()
	for i, a := range args {
		if a == flag {
			return append(append([]string(nil), args[:i]...), args[i+2:]...)
		}
	}
	t.Fatalf("no %s in %v", flag, args)
	return nil
}

// stdoutOnly runs the controller and returns its standard output alone.
func stdoutOnly(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(controllerBin, args...)
	var so bytes.Buffer
	cmd.Stdout = &so
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return so.String(), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return so.String(), 0
}

// TestSweepRefusals: each refusal has its exit status and one -o json
// document naming what is wrong: a flag (nothing made), a protocol that
// does not plan (its problems; the files kept), a budget the plan passes
// (a dry run keeps the files, a start leaves nothing).
func TestSweepRefusals(t *testing.T) {
	t.Parallel()
	c := newCampaign(t)
	set := func(args []string, flag, value string) []string {
		out := append([]string(nil), args...)
		for i, a := range out {
			if a == flag {
				out[i+1] = value
				return out
			}
		}
		return append(out, flag, value)
	}

	dir := filepath.Join(t.TempDir(), "a")
	out, code := stdoutOnly(t, without(t, sweepArgs(t, dir), "-d")...)
	if d := sweepDocOf(t, out); code != 2 || d.ExitCode != 2 || !strings.Contains(d.Error, "-d DIR is required") {
		t.Fatalf("no -d: exit %d\n%s", code, out)
	}
	out, code = stdoutOnly(t, sweepArgs(t, dir, "--print-protocol")...)
	if d := sweepDocOf(t, out); code != 2 || !strings.Contains(d.Error, "--print-protocol prints the protocol's YAML") {
		t.Fatalf("--print-protocol -o json: exit %d\n%s", code, out)
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	out, code = stdoutOnly(t, sweepArgs(t, filepath.Join(file, "camp"))...)
	if d := sweepDocOf(t, out); code != 1 || d.ExitCode != 1 || !strings.Contains(d.Error, "not a directory") {
		t.Fatalf("a directory that cannot be made: exit %d\n%s", code, out)
	}
	out, code = stdoutOnly(t, without(t, sweepArgs(t, dir), "--model")...)
	if d := sweepDocOf(t, out); code != 2 || d.ExitCode != 2 || d.Flag != "--model" || !strings.HasPrefix(d.Error, "--model: required") {
		t.Fatalf("no --model: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a flag error made %s", dir)
	}
	text, code := c.controller(without(t, without(t, sweepArgs(t, dir), "--model"), "-o")...)
	if code != 2 || !strings.HasPrefix(text, "--model: required") {
		t.Fatalf("no --model, as text: exit %d\n%s", code, text)
	}

	out, code = stdoutOnly(t, set(set(sweepArgs(t, dir), "--serve-cmd", "./nowhere serve"), "--server-kind", "vllm")...)
	d := sweepDocOf(t, out)
	if code != 2 || len(d.Problems) == 0 || d.Problems[0].Field != "servers.server.command" || d.Flag != "--serve-cmd" ||
		!strings.Contains(d.Error, "is not on PATH (from --serve-cmd)") && !strings.Contains(d.Error, "does not exist (from --serve-cmd)") || !strings.Contains(d.Error, "its files are kept for review") {
		t.Fatalf("a server that is not there: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(d.Protocol); err != nil {
		t.Fatalf("the protocol that does not plan was not kept: %v", err)
	}

	dir = filepath.Join(t.TempDir(), "b")
	out, code = stdoutOnly(t, set(sweepArgs(t, dir, "--dry-run"), "--cap-gpu-hours", "0.001")...)
	if d := sweepDocOf(t, out); code != 3 || d.ExitCode != 3 || !strings.Contains(d.Error, "over budget") || d.Plan == nil {
		t.Fatalf("a dry run over the budget: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "inputs", "sweep.yaml")); err != nil {
		t.Fatalf("a dry run over the budget did not keep the protocol: %v", err)
	}
	dir = filepath.Join(t.TempDir(), "c")
	out, code = stdoutOnly(t, set(sweepArgs(t, dir), "--cap-gpu-hours", "0.001")...)
	if d := sweepDocOf(t, out); code != 3 || d.ExitCode != 3 || !strings.Contains(d.Error, "--allow-over-budget") || d.Running {
		t.Fatalf("a start over the budget: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused start left %s: %v", dir, err)
	}
}
