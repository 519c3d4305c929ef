package campaigndir

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"warden/pkg/dirlayout"
	"warden/pkg/state"
)

// TestResolveBackend: fake is fake, asked for by name; auto and nvml are
// NVML exactly when NVML opens on this host, and never fake: where it
// does not open, both are a NoNVMLError that says how to ask for fake
// GPUs; anything else is refused.
func TestResolveBackend(t *testing.T) {
	if b, note, err := ResolveBackend("fake", false); err != nil || b != "fake" || !strings.Contains(note, "file-backed") {
		t.Fatalf("fake: %q %q %v", b, note, err)
	}
	nvmlErr := CheckNVML("nvml")
	for _, asked := range []string{"auto", "nvml"} {
		b, note, err := ResolveBackend(asked, false)
		var no *NoNVMLError
		switch {
		case nvmlErr == nil && (err != nil || b != "nvml" || !strings.HasPrefix(note, "NVML")):
			t.Fatalf("%s with NVML: %q %q %v", asked, b, note, err)
		case nvmlErr != nil && (!errors.As(err, &no) || b != "" || no.Backend != asked ||
			!strings.Contains(err.Error(), "--gpu-backend "+asked+" needs NVML") || !strings.Contains(err.Error(), "pass --gpu-backend fake")):
			t.Fatalf("%s without NVML (%v): %q %q %v", asked, nvmlErr, b, note, err)
		}
	}
	// with Slurm the nodes read the GPUs: nvml is not checked here
	if b, note, err := ResolveBackend("nvml", true); err != nil || b != "nvml" || !strings.Contains(note, "Slurm nodes") {
		t.Fatalf("nvml for Slurm: %q %q %v", b, note, err)
	}
	if _, _, err := ResolveBackend("cuda", false); err == nil || err.Error() != `unknown --gpu-backend "cuda" (auto, nvml or fake)` {
		t.Fatalf("cuda: %v", err)
	}
}

// TestCheckResumeBackend: an NVML campaign resumes only where NVML
// opens; a fake campaign asked for by name resumes; one whose fake GPUs
// auto chose (before auto stopped doing so) resumes only with
// --gpu-backend fake.
func TestCheckResumeBackend(t *testing.T) {
	nvmlErr := CheckNVML("nvml")
	err := CheckResumeBackend(Settings{GPUBackend: "nvml"}, "")
	var no *NoNVMLError
	if (nvmlErr == nil) != (err == nil) || err != nil && !errors.As(err, &no) {
		t.Fatalf("nvml campaign: %v (NVML here: %v)", err, nvmlErr)
	}
	if err := CheckResumeBackend(Settings{GPUBackend: "nvml", Executor: "slurm"}, ""); err != nil {
		t.Fatalf("nvml campaign on Slurm, resumed from a head without NVML: %v", err)
	}
	if err := CheckResumeBackend(Settings{GPUBackend: "fake", FakeExplicit: true}, ""); err != nil {
		t.Fatalf("explicit fake: %v", err)
	}
	if err := CheckResumeBackend(Settings{GPUBackend: "fake"}, ""); !errors.As(err, &no) || !strings.Contains(err.Error(), "chosen by auto") {
		t.Fatalf("fake chosen by auto, resumed bare: %v", err)
	}
	if err := CheckResumeBackend(Settings{GPUBackend: "fake"}, "fake"); err != nil {
		t.Fatalf("fake chosen by auto, resumed with --gpu-backend fake: %v", err)
	}
}

// TestOpenGPUs: a fake campaign's GPUs open from its fake host's
// directory, and say so; a missing one or an unknown backend is refused.
func TestOpenGPUs(t *testing.T) {
	dir, _ := created(t)
	set, err := ReadSettings(dir)
	if err != nil {
		t.Fatal(err)
	}
	g, desc, err := set.OpenGPUs()
	if err != nil {
		t.Fatal(err)
	}
	if g.Name() != "fake" || desc != "fake GPUs in "+set.FakeGPUDir || set.FakeGPUDir != filepath.Join(dir, "fake-gpus") {
		t.Fatalf("opened %s, %q (settings %s)", g.Name(), desc, set.FakeGPUDir)
	}
	// a fake campaign says so: in its settings (asked for by name) and in
	// its campaign record, which the query API reads
	s, err := state.OpenReadOnly(dirlayout.State(dir), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if cp, err := s.Campaign(); err != nil || cp.GPUBackend != "fake" || !set.FakeExplicit {
		t.Fatalf("campaign record backend %q (%v), settings explicit %v", cp.GPUBackend, err, set.FakeExplicit)
	}
	missing := Settings{GPUBackend: "fake", FakeGPUDir: filepath.Join(t.TempDir(), "none")}
	if _, _, err := missing.OpenGPUs(); err == nil || !strings.HasPrefix(err.Error(), "fake GPUs in "+missing.FakeGPUDir+": ") {
		t.Fatalf("missing fake host: %v", err)
	}
	if _, _, err := (Settings{GPUBackend: "cuda"}).OpenGPUs(); err == nil || err.Error() != `unknown GPU backend "cuda" (auto, nvml or fake)` {
		t.Fatalf("unknown backend: %v", err)
	}
}
