package campaigndir

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestResolveBackend: fake is fake; auto is NVML exactly when NVML opens
// on this host, and says why it is not; anything else is refused.
func TestResolveBackend(t *testing.T) {
	if b, note, err := ResolveBackend("fake"); err != nil || b != "fake" || !strings.Contains(note, "file-backed") {
		t.Fatalf("fake: %q %q %v", b, note, err)
	}
	_, _, nvmlErr := ResolveBackend("nvml")
	b, note, err := ResolveBackend("auto")
	switch {
	case err != nil:
		t.Fatalf("auto: %v", err)
	case nvmlErr == nil && (b != "nvml" || note != "NVML (auto)"):
		t.Fatalf("auto with NVML: %q %q", b, note)
	case nvmlErr != nil && (b != "fake" || note != "fake (auto: NVML unavailable: "+nvmlErr.Error()+")"):
		t.Fatalf("auto without NVML (%v): %q %q", nvmlErr, b, note)
	}
	if _, _, err := ResolveBackend("cuda"); err == nil || err.Error() != `unknown --gpu-backend "cuda" (auto, nvml or fake)` {
		t.Fatalf("cuda: %v", err)
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
	missing := Settings{GPUBackend: "fake", FakeGPUDir: filepath.Join(t.TempDir(), "none")}
	if _, _, err := missing.OpenGPUs(); err == nil || !strings.HasPrefix(err.Error(), "fake GPUs in "+missing.FakeGPUDir+": ") {
		t.Fatalf("missing fake host: %v", err)
	}
	if _, _, err := (Settings{GPUBackend: "cuda"}).OpenGPUs(); err == nil || err.Error() != `unknown GPU backend "cuda" (auto, nvml or fake)` {
		t.Fatalf("unknown backend: %v", err)
	}
}
