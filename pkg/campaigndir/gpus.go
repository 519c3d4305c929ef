package campaigndir

import (
	"errors"
	"fmt"
	"time"

	"warden/pkg/attempt"
	"warden/pkg/gpu/fakegpu"
	"warden/pkg/gpu/nvmlgpu"
)

// OpenGPUs opens the GPU backend the campaign uses, and says which it is.
func (s Settings) OpenGPUs() (attempt.GPUs, string, error) {
	return openGPUs(s.GPUBackend, s.FakeGPUDir)
}

func openGPUs(backend, fakeDir string) (attempt.GPUs, string, error) {
	switch backend {
	case "fake":
		b, err := fakegpu.Open(fakeDir)
		if err != nil {
			return nil, "", fmt.Errorf("fake GPUs in %s: %w", fakeDir, err)
		}
		return b, "fake GPUs in " + fakeDir, nil
	case "nvml", "auto":
		b, err := nvmlgpu.Open(nil, 10*time.Second)
		if err != nil {
			return nil, "", fmt.Errorf("NVML: %w", err)
		}
		return b, "NVML", nil
	}
	return nil, "", fmt.Errorf("unknown GPU backend %q (auto, nvml or fake)", backend)
}

// NoNVMLError says that NVML does not initialize on this host, so its
// GPUs cannot be read: start with --gpu-backend auto or nvml, and resume
// of an NVML campaign, refuse. Fake GPUs are never chosen in its place:
// every GPU gate would then read files on a host whose GPUs nobody
// watches.
type NoNVMLError struct {
	Backend string // what was asked for: auto, nvml, or the campaign's
	Err     error
}

func (e *NoNVMLError) Error() string {
	return fmt.Sprintf("refused: --gpu-backend %s needs NVML, which did not initialize on this host (%v); "+
		"GPUs that cannot be read are never replaced by fake ones. Fix the driver, or pass --gpu-backend fake "+
		"to run on file-backed fake GPUs (tests and demonstrations only: nothing it measures is a GPU's)", e.Backend, e.Err)
}

func (e *NoNVMLError) Unwrap() error { return e.Err }

// ResolveBackend is the GPU backend a new campaign records for the one
// asked for: "fake" only when asked for by name; "auto" and "nvml" are
// NVML, and a NoNVMLError where NVML does not initialize on this host.
// With the Slurm executor (slurm true) the nodes read the GPUs, not this
// host: "nvml" is taken as it is ("auto" is refused there before, by
// ResolveExecutor). note says what was chosen.
func ResolveBackend(backend string, slurm bool) (resolved, note string, err error) {
	switch backend {
	case "fake":
		return "fake", "fake (file-backed GPUs, asked for by --gpu-backend fake; nothing measured is a GPU's)", nil
	case "nvml", "auto":
		if slurm && backend == "nvml" {
			return "nvml", "NVML on the Slurm nodes (not checked from this host)", nil
		}
		if err := CheckNVML(backend); err != nil {
			return "", "", err
		}
		if backend == "auto" {
			return "nvml", "NVML (auto)", nil
		}
		return "nvml", "NVML", nil
	}
	return "", "", fmt.Errorf("unknown --gpu-backend %q (auto, nvml or fake)", backend)
}

// CheckNVML opens and closes NVML; a NoNVMLError naming backend when it
// does not initialize.
func CheckNVML(backend string) error {
	g, _, err := openGPUs("nvml", "")
	if err != nil {
		return &NoNVMLError{Backend: backend, Err: err}
	}
	if c, ok := g.(interface{ Close() error }); ok {
		c.Close()
	}
	return nil
}

// CheckResumeBackend refuses to resume a campaign on GPUs it cannot
// read: an NVML campaign (local executor) where NVML does not initialize
// on this host (NoNVMLError),
// and a fake campaign whose fake GPUs were not asked for by name (made
// when auto still fell back to them) unless backend is "fake". backend
// is resume's --gpu-backend ("" when not given).
func CheckResumeBackend(s Settings, backend string) error {
	switch {
	case s.GPUBackend == "nvml" && s.Executor == "slurm":
		return nil // the nodes read the GPUs; each attempt's runner opens NVML there
	case s.GPUBackend == "nvml":
		return CheckNVML("nvml")
	case s.GPUBackend == "fake" && !s.FakeExplicit && backend != "fake":
		return &NoNVMLError{Backend: "auto", Err: errors.New("this campaign's fake GPUs were chosen by auto when NVML was unavailable, never asked for")}
	}
	return nil
}
