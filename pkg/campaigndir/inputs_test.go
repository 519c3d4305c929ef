package campaigndir

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"warden/pkg/dirlayout"
	"warden/pkg/provenance"
)

// inputsCampaign writes the mini protocol, with a provenance file, into a
// new campaign directory's inputs/ (as controller sweep does) and returns
// the directory and the protocol's path. edit changes the protocol text.
func inputsCampaign(t *testing.T, edit func([]byte) []byte) (string, string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "protocols", "testdata", "mini.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "campaign")
	in := filepath.Join(dir, dirlayout.InputsDir)
	if err := os.MkdirAll(filepath.Join(in, "m"), 0o700); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(in, "m", "P.jsonl")
	if err := os.WriteFile(manifest, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b = bytes.Replace(b, []byte("cap_gpu_hours: 1.0"), []byte("cap_gpu_hours: 2.0"), 1)
	b = append(b, []byte("provenance:\n  - {path: "+manifest+", role: manifest}\n")...)
	if edit != nil {
		b = edit(b)
	}
	proto := filepath.Join(in, "sweep.yaml")
	if err := os.WriteFile(proto, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, proto
}

// TestCreateTakesInputs: a directory whose only entry is inputs/, holding
// the protocol being started and its provenance files, is taken as empty;
// the campaign records them, and they stay in place.
func TestCreateTakesInputs(t *testing.T) {
	dir, proto := inputsCampaign(t, nil)
	if _, err := Create(proto, dir, StartOptions{Backend: "fake", Cgroups: "off"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	es, err := provenance.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range es {
		paths = append(paths, e.Path)
	}
	if !slices.Contains(paths, proto) || !slices.Contains(paths, filepath.Join(dir, "inputs", "m", "P.jsonl")) {
		t.Errorf("provenance %v", paths)
	}
	if err := provenance.Verify(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dirlayout.State(dir)); err != nil {
		t.Fatal(err)
	}
}

// TestCreateRefusesOtherInputs: anything in inputs/ that is neither the
// protocol nor one of its provenance files is refused, naming it, before
// anything is made; a failure after the directory was made removes what
// start made and leaves inputs/ as it was.
func TestCreateRefusesOtherInputs(t *testing.T) {
	dir, proto := inputsCampaign(t, nil)
	stray := filepath.Join(dir, "inputs", "m", "notes.txt")
	os.WriteFile(stray, nil, 0o644)
	_, err := Create(proto, dir, StartOptions{Backend: "fake", Cgroups: "off"}, time.Now())
	if err == nil || !strings.Contains(err.Error(), "holds "+stray+", which is neither the protocol being started nor one of its provenance files") {
		t.Fatalf("a stray file: %v", err)
	}
	os.Remove(stray)
	if err := os.Symlink(proto, stray); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(proto, dir, StartOptions{Backend: "fake", Cgroups: "off"}, time.Now()); err == nil || !strings.Contains(err.Error(), "holds "+stray) {
		t.Fatalf("a link: %v", err)
	}
	os.Remove(stray)
	// beside inputs/, any other entry: not empty
	os.WriteFile(filepath.Join(dir, "other"), nil, 0o644)
	if _, err := Create(proto, dir, StartOptions{Backend: "fake", Cgroups: "off"}, time.Now()); err == nil || !strings.Contains(err.Error(), "is not empty and holds no campaign") {
		t.Fatalf("an entry beside inputs/: %v", err)
	}
	os.Remove(filepath.Join(dir, "other"))

	// what a start that fails after making the directory undoes: all it
	// made, never inputs/
	undo, err := makeCampaignDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(dirlayout.Plan(dir), nil, 0o444)
	if err := undo(); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 1 || ents[0].Name() != dirlayout.InputsDir {
		t.Fatalf("after the undo the directory holds %v (%v); want inputs/ alone", ents, err)
	}
	if _, err := os.Stat(proto); errors.Is(err, os.ErrNotExist) {
		t.Fatal("the failed start removed the protocol")
	}
}
