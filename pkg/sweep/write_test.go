package sweep

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"warden/pkg/loadgen"
	"warden/protocols"
)

// TestWrite: the campaign directory is made owner-only with the protocol
// and the materialized manifest in inputs/; the plan is the written
// protocol's, as the protocols package plans the file; a directory that
// is not empty is refused, naming a protocol written there before.
func TestWrite(t *testing.T) {
	env := testEnv(t)
	a := baseArgs()
	a.Grid = []string{"max-num-seqs=64,128"}
	sw, err := Build(a, env)
	if err != nil {
		t.Fatal(err)
	}
	w, err := Write(sw)
	if err != nil {
		t.Fatal(err)
	}
	if w.Protocol != filepath.Join(env.Dir, "inputs", "sweep.yaml") {
		t.Errorf("protocol at %s", w.Protocol)
	}
	if fi, err := os.Stat(env.Dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("campaign directory %v, %v; want mode 0700", fi, err)
	}
	want, err := loadgen.Materialize(*sw.Pattern.Materialize, filepath.Join(t.TempDir(), "again.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if w.Manifest.SHA256 != want.SHA256 || w.Manifest.Rows != 1000 || !w.Manifest.Materialized || w.Manifest.Path != sw.Pattern.Path {
		t.Errorf("manifest %+v, materialized again %s", w.Manifest, want.SHA256)
	}
	text, err := os.ReadFile(w.Protocol)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), "1000 rows, sha256 "+want.SHA256) {
		t.Errorf("the protocol does not name the manifest's hash:\n%s", text)
	}
	again, err := protocols.PlanFile(w.Protocol, protocols.Options{CheckInputs: true})
	if err != nil || again.Protocol.SHA256 != w.Plan.Protocol.SHA256 || len(again.Runs) != 2 || len(w.Plan.Runs) != 2 {
		t.Fatalf("plan again: %v (%d runs, sha256 %s; Write's %s)", err, len(again.Runs), again.Protocol.SHA256, w.Plan.Protocol.SHA256)
	}

	_, err = Write(sw)
	var de *DirError
	if !errors.As(err, &de) || de.Written != w.Protocol || !strings.Contains(err.Error(), "controller start -f "+w.Protocol+" -d "+env.Dir) {
		t.Fatalf("a second Write: %v", err)
	}
	if err := w.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(env.Dir)); err != nil {
		t.Errorf("Remove removed the directory above the one Write made: %v", err)
	}
	if _, err := os.Stat(env.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Remove: %v", err)
	}

	// an empty directory is taken; Remove then empties it
	if err := os.Mkdir(env.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	w, err = Write(sw)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Remove(); err != nil {
		t.Fatal(err)
	}
	if ents, err := os.ReadDir(env.Dir); err != nil || len(ents) != 0 {
		t.Errorf("after Remove of a directory that existed: %v, %v", ents, err)
	}
	// any other entry is refused
	os.WriteFile(filepath.Join(env.Dir, "notes"), nil, 0o644)
	if _, err := Write(sw); !errors.As(err, &de) || de.Written != "" {
		t.Fatalf("a directory with a file: %v", err)
	}
}

// TestWriteKeepsAProtocolThatDoesNotPlan: a server command whose program
// is not there is the plan's problem, with the protocol's line; the files
// stay for the reader. A manifest that cannot be written leaves nothing.
func TestWriteKeepsAProtocolThatDoesNotPlan(t *testing.T) {
	env := testEnv(t)
	a := baseArgs()
	a.ServeCmd = "./nowhere serve"
	a.ServerKind = "vllm"
	sw, err := Build(a, env)
	if err != nil {
		t.Fatal(err)
	}
	w, err := Write(sw)
	var ps *protocols.Problems
	if !errors.As(err, &ps) || w == nil || !strings.Contains(err.Error(), "sweep.yaml:") || !strings.Contains(err.Error(), "servers.server.command: executable ./nowhere does not exist") {
		t.Fatalf("got %v", err)
	}
	if _, err := os.Stat(w.Protocol); err != nil {
		t.Errorf("the protocol was not kept: %v", err)
	}
	if f := w.FlagAt(ps.List[0].Pos.Line); f != "--serve-cmd" {
		t.Errorf("the problem's line names %q", f)
	}
	if f := w.FlagAt(1); f != "" {
		t.Errorf("the first line names %q", f)
	}

	env = testEnv(t)
	sw, err = Build(baseArgs(), env)
	if err != nil {
		t.Fatal(err)
	}
	sw.Pattern.Materialize.NumRequests = 0 // what loadgen refuses
	if _, err := Write(sw); err == nil || !strings.Contains(err.Error(), "materialize") {
		t.Fatalf("a manifest loadgen refuses: %v", err)
	}
	if _, err := os.Stat(env.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed Write left %s: %v", env.Dir, err)
	}
}

// TestWriteFailures: a campaign directory that cannot be made, and an
// existing manifest gone before it is hashed, fail Write, which leaves
// nothing of what it made.
func TestWriteFailures(t *testing.T) {
	env := testEnv(t)
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	env.Dir = filepath.Join(file, "camp")
	sw, err := Build(baseArgs(), env)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Write(sw); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("a campaign directory under a file: %v", err)
	}

	env = testEnv(t)
	manifest := filepath.Join(env.Workdir, "m.jsonl")
	if _, err := loadgen.Materialize(loadgen.Spec{ID: "m", Kind: "synthetic", Input: loadgen.Mixture{{Min: 4, Max: 8, Weight: 1}},
		OutputTokens: 4, Prefix: "none", Arrival: loadgen.Arrival{Kind: "steady"}, NumRequests: 50, VocabMin: 1000, VocabMax: 2000}, manifest); err != nil {
		t.Fatal(err)
	}
	a := baseArgs()
	a.InputUniform, a.OutputFixed, a.NumRequests, a.Manifest = "", 0, 0, manifest
	sw, err = Build(a, env)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(manifest)
	if _, err := Write(sw); err == nil || !strings.Contains(err.Error(), "hash the manifest") {
		t.Fatalf("a manifest gone: %v", err)
	}
	if _, err := os.Stat(env.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed Write left %s: %v", env.Dir, err)
	}
}
