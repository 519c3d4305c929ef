package protocols

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const inputsProtocol = `warden: 1
name: inputs
host: {gpus: 1, cpus: 2}
budget: {cap_gpu_hours: 1.0}
vars:
  MANIFEST: data/manifest.jsonl
provenance:
  - {path: data/helper.py, role: helper}
slots:
  - {name: s0, gpus: [0], cpus: "0-1", port: 9000}
regimes:
  - {name: one, concurrency: 1}
classes:
  - {name: std, drain_allowance_s: 10, watchdog_s: 20}
servers:
  - name: srv
    kind: standin
    command: [sh, -c, "exec sleep 1", "${PORT}"]
loads:
  - name: sat
    kind: saturation
    expected_s: 10
    client: [bin/client, --manifest, "${MANIFEST}", --out, "${ATTEMPT_DIR}"]
validators:
  - name: check
    command: [bin/check, "${ATTEMPT_DIR}"]
axes:
  - name: pattern
    values: [{id: A}]
phases:
  - name: main
    kind: primary
    matrix: {pattern: [A]}
    loads: [sat]
`

func writeExec(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o755); err != nil {
		t.Fatal(err)
	}
}

// A missing provenance file, a missing manifest named only in vars and
// given to the client as --manifest, and a missing validator binary: the
// plan reports three problems, each with its file, line and field.
func TestPlanChecksInputs(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(file, []byte(inputsProtocol), 0o644); err != nil {
		t.Fatal(err)
	}
	writeExec(t, filepath.Join(dir, "bin", "client"))
	if _, err := PlanFile(file, Options{}); err != nil {
		t.Fatalf("without CheckInputs the plan looks at no file: %v", err)
	}
	_, err := PlanFile(file, Options{CheckInputs: true})
	var ps *Problems
	if !errors.As(err, &ps) {
		t.Fatalf("plan with missing inputs: %v, want problems", err)
	}
	want := map[string]string{
		"provenance[0].path":       "data/helper.py",
		"loads.sat.client":         "data/manifest.jsonl",
		"validators.check.command": "bin/check",
	}
	if len(ps.List) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%v", len(ps.List), len(want), err)
	}
	for _, p := range ps.List {
		w, ok := want[p.Field]
		if !ok || p.File != file || p.Pos.Line == 0 || !strings.Contains(p.Msg, w) || !strings.Contains(p.Msg, "does not exist") {
			t.Errorf("problem %v: want file %s, a line, a field among %v naming what is missing", p, file, want)
		}
		delete(want, p.Field)
	}

	// Each put in place (the validator not executable first): then none.
	writeExec(t, filepath.Join(dir, "data", "helper.py"))
	writeExec(t, filepath.Join(dir, "data", "manifest.jsonl"))
	if err := os.WriteFile(filepath.Join(dir, "bin", "check"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = PlanFile(file, Options{CheckInputs: true})
	if !errors.As(err, &ps) || len(ps.List) != 1 || !strings.Contains(ps.List[0].Msg, "not an executable file") {
		t.Fatalf("a validator that is not executable: %v", err)
	}
	writeExec(t, filepath.Join(dir, "bin", "check"))
	if _, err := PlanFile(file, Options{CheckInputs: true}); err != nil {
		t.Fatalf("every input present: %v", err)
	}
}

// planWithClientAndCheck writes the executables bin/client and bin/check
// beside file, writes y to file and plans it, checking inputs.
func planWithClientAndCheck(t *testing.T, file, y string) (*Plan, error) {
	t.Helper()
	for _, rel := range []string{"bin/client", "bin/check"} {
		writeExec(t, filepath.Join(filepath.Dir(file), rel))
	}
	if err := os.WriteFile(file, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return PlanFile(file, Options{CheckInputs: true})
}

// A bare executable name is looked up on PATH; with the Slurm executor the
// executables are not looked for and the plan says so.
func TestPlanChecksExecutablesOnPath(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "p.yaml")
	y := strings.Replace(inputsProtocol, "[sh, -c,", "[warden-no-such-server-binary, -c,", 1)
	y = strings.Replace(y, "provenance:\n  - {path: data/helper.py, role: helper}\n", "", 1)
	y = strings.Replace(y, `--manifest, "${MANIFEST}", `, "", 1)
	_, err := planWithClientAndCheck(t, file, y)
	var ps *Problems
	if !errors.As(err, &ps) || len(ps.List) != 1 || ps.List[0].Field != "servers.srv.command" || !strings.Contains(ps.List[0].Msg, "not on PATH") {
		t.Fatalf("a server executable not on PATH: %v", err)
	}
	slurm := strings.Replace(y, "phases:", "executor: {kind: slurm}\nphases:", 1)
	if err := os.WriteFile(file, []byte(slurm), 0o644); err != nil {
		t.Fatal(err)
	}
	plan, err := PlanFile(file, Options{CheckInputs: true})
	if err != nil {
		t.Fatalf("slurm: %v", err)
	}
	if len(plan.InputsUnchecked) != 1 || !strings.Contains(plan.InputsUnchecked[0], "Slurm") {
		t.Fatalf("slurm: inputs_unchecked %q, want the executables named", plan.InputsUnchecked)
	}
}

// The ledger's commands and the co-location gate's validator are looked
// for too: the first in a small protocol, the second in phase 3's with
// its controller named where none is.
func TestPlanChecksLedgerAndGateValidator(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "p.yaml")
	y := strings.Replace(inputsProtocol, "provenance:\n  - {path: data/helper.py, role: helper}\n",
		"ledger:\n  - [warden-no-such-ledger-tool, --version]\n", 1)
	y = strings.Replace(y, `--manifest, "${MANIFEST}", `, "", 1)
	_, err := planWithClientAndCheck(t, file, y)
	var ps *Problems
	if !errors.As(err, &ps) || len(ps.List) != 1 || ps.List[0].Field != "ledger[0]" || ps.List[0].Pos.Line == 0 {
		t.Fatalf("a ledger command not on PATH: %v", err)
	}

	b, err := os.ReadFile("testdata/opprof-phase3-check-again.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p3 := strings.Replace(string(b), "WARDEN: bin/controller", "WARDEN: bin/warden-no-such-controller", 1)
	if p3 == string(b) {
		t.Fatal("test bug: phase 3 names its controller otherwise")
	}
	file = filepath.Join(t.TempDir(), "p3.yaml")
	if err := os.WriteFile(file, []byte(p3), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = PlanFile(file, Options{CheckInputs: true})
	if !errors.As(err, &ps) {
		t.Fatalf("phase 3 with no controller: %v", err)
	}
	for _, p := range ps.List {
		if strings.HasSuffix(p.Field, ".colocation.gate.validator") && strings.Contains(p.Msg, "bin/warden-no-such-controller does not exist") && p.Pos.Line > 0 {
			return
		}
	}
	t.Fatalf("no problem for the co-location gate's validator:\n%v", err)
}

// A provenance entry's sha256 freezes the file's hash: the plan that looks
// at its inputs refuses a file with another hash at the field's file, line
// and column with both hashes, and passes the file that has it; a sha256
// that is not one is refused with or without the inputs.
func TestPlanChecksFrozenHash(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "p.yaml")
	writeExec(t, filepath.Join(dir, "data", "manifest.jsonl"))
	if err := os.WriteFile(filepath.Join(dir, "data", "helper.py"), []byte("print(1)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const good = "cc42155088fca5730758db72b2a5bca33112a941dfaa2d43098ec422ce4ea213" // sha256 of "print(1)\n"
	bad := strings.Repeat("0", 64)
	frozen := func(sum string) string {
		return strings.Replace(inputsProtocol, "{path: data/helper.py, role: helper}", "{path: data/helper.py, role: helper, sha256: "+sum+"}", 1)
	}
	_, err := planWithClientAndCheck(t, file, frozen(bad))
	var ps *Problems
	if !errors.As(err, &ps) || len(ps.List) != 1 {
		t.Fatalf("a file with another hash: %v", err)
	}
	p := ps.List[0]
	if p.Field != "provenance[0].sha256" || p.Pos != (Pos{Line: 8, Column: 50}) || !strings.Contains(p.Msg, "data/helper.py has sha256 "+good+"; the protocol freezes "+bad) {
		t.Fatalf("problem %+v", p)
	}
	plan, err := planWithClientAndCheck(t, file, frozen(good))
	if err != nil {
		t.Fatalf("the frozen file: %v", err)
	}
	if pi := plan.Provenance[0]; pi.SHA256 != good || pi.SHA256At != file+":8:50" {
		t.Fatalf("plan provenance %+v", pi)
	}
	if err := os.WriteFile(file, []byte(frozen("F539")), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := PlanFile(file, Options{}); err == nil || !strings.Contains(err.Error(), `provenance[0].sha256: a SHA-256 is 64 lower-case hex digits, got "F539"`) {
		t.Fatalf("a malformed sha256: %v", err)
	}
}
