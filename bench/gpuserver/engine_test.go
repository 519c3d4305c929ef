// Package gpuserver holds no code: its test runs the Python tests of
// scripts/gpu_server.py, the random-weight engine that protocols/gpu-phase3.yaml
// serves on a GPU (docs/gpu.md), so that CI, which has no GPU, still checks
// the engine's HTTP, SSE, scheduling, Layer-1 and shutdown paths on its
// fake backend. The profiler tests need torch and are skipped without it.
package gpuserver

import (
	"os/exec"
	"regexp"
	"strconv"
	"testing"
)

func TestEngineWithoutGPU(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the engine's tests cannot run")
	}
	cmd := exec.Command(py, "-B", "-m", "unittest", "-v", "scripts/test_gpu_server.py")
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the engine's tests failed: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`(?m)^Ran (\d+) tests? in`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no test count in the output:\n%s", out)
	}
	// the seven tests that need no torch must have run, not been skipped
	ran, _ := strconv.Atoi(string(m[1]))
	skipped := len(regexp.MustCompile(`(?m)\.\.\. skipped`).FindAll(out, -1))
	if ran-skipped < 7 {
		t.Fatalf("%d tests ran, %d skipped: the fake-backend tests did not all run\n%s", ran, skipped, out)
	}
	t.Logf("%d engine tests ran, %d skipped (no torch)", ran, skipped)
}
