package protocols

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// typoCampaign writes the mini protocol into a directory of its own with
// its commands an executable file there, the provenance file prov and the
// sat load's manifest manifest, and creates the file have; it returns the
// protocol's path.
func typoCampaign(t *testing.T, prov, manifest, have string) string {
	t.Helper()
	dir := t.TempDir()
	y := strings.ReplaceAll(readMini(t), "[standin, ", "[./standin, ")
	y = strings.Replace(y, "budget: {cap_gpu_hours: 1.0}", "budget: {cap_gpu_hours: 1.0}\nprovenance:\n  - {path: "+prov+", role: manifest}", 1)
	y = strings.Replace(y, `    client: [./standin, client, --result-dir, "${ATTEMPT_DIR}"]`, `    client: [./standin, client, --result-dir, "${ATTEMPT_DIR}"]
    manifest: `+manifest, 1)
	for name, body := range map[string]string{"mini.yaml": y, have: "{}\n", "standin": "#!/bin/sh\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "mini.yaml")
}

// TestProvenanceTypoReportsTheCause (issue 39, friction 7): a provenance
// file typed otherwise than the manifest its load names is reported as
// its cause, "X does not exist" at the provenance entry's line and
// column, with the manifest beside it, instead of one "not among the
// provenance files" line per run; without the inputs looked for, the
// symptom is one line per load, naming its runs.
func TestProvenanceTypoReportsTheCause(t *testing.T) {
	path := typoCampaign(t, "gne.jsonl", "gen.jsonl", "gen.jsonl")
	_, err := PlanFile(path, Options{CheckInputs: true})
	var ps *Problems
	if !errors.As(err, &ps) || len(ps.List) != 1 {
		t.Fatalf("problems: %v", err)
	}
	p := ps.List[0]
	want := `gne.jsonl (relative to the workdir, ` + filepath.Dir(path) + `) does not exist; loads.sat.manifest names "gen.jsonl" (for run A.sat, B.sat), which is not among the provenance files: one of the two paths is mistyped`
	if p.Field != "provenance[0].path" || p.Pos.Line != 6 || p.Pos.Column != 12 || p.Msg != want || !p.Input {
		t.Fatalf("problem %+v\nwant at 6:12 provenance[0].path: %s", p, want)
	}

	_, err = PlanFile(path, Options{})
	if !errors.As(err, &ps) || len(ps.List) != 1 || ps.List[0].Field != "loads.sat.manifest" ||
		ps.List[0].Msg != `the manifest "gen.jsonl" (of run A.sat, B.sat) is not among the provenance files, so it has no hash recorded at start to check (provenance: gne.jsonl)` {
		t.Fatalf("without the inputs looked for: %v", err)
	}

	// a manifest far from every provenance file is no typo of one: both
	// problems stand
	path = typoCampaign(t, "gne.jsonl", "manifests/other-workload.jsonl", "manifests-x")
	_, err = PlanFile(path, Options{CheckInputs: true})
	if !errors.As(err, &ps) || len(ps.List) != 2 || !strings.HasSuffix(ps.List[0].Msg, "does not exist") || ps.List[1].Field != "loads.sat.manifest" {
		t.Fatalf("a manifest that is no typo: %v", err)
	}
}

// TestMissingInputsAreMarked (issue 39, friction 6): the problems of
// inputs this machine lacks say so (Input), so that controller plan can
// name --check-inputs=false; the others do not.
func TestMissingInputsAreMarked(t *testing.T) {
	_, err := PlanBytes("mini.yaml", []byte(strings.Replace(readMini(t), "host: {gpus: 2, cpus: 4}", "host: {gpus: 2, cpus: 4}\nprovenance:\n  - {path: /nonexistent/m.jsonl, role: manifest}", 1)), Options{CheckInputs: true})
	var ps *Problems
	if !errors.As(err, &ps) || ps.Inputs() != len(ps.List) || ps.Inputs() < 2 {
		t.Fatalf("missing inputs: %v (%d marked)", err, ps.Inputs())
	}
	_, err = PlanBytes("mini.yaml", []byte(strings.Replace(readMini(t), "gpus: [0], cpus", "gpus: [7], cpus", 1)), Options{CheckInputs: true})
	if !errors.As(err, &ps) || ps.Inputs() != 0 {
		t.Fatalf("a problem of the protocol's own: %v (%d marked)", err, ps.Inputs())
	}
}
