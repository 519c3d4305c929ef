package campaigndir

import (
	"fmt"
	"time"

	"warden/pkg/gpu/fakegpu"
	"warden/pkg/gpu/nvmlgpu"
	"warden/pkg/runner"
)

// OpenGPUs opens the GPU backend the campaign uses, and says which it is.
func (s Settings) OpenGPUs() (runner.GPUs, string, error) {
	return openGPUs(s.GPUBackend, s.FakeGPUDir)
}

func openGPUs(backend, fakeDir string) (runner.GPUs, string, error) {
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

// ResolveBackend is the GPU backend a new campaign records for the one
// asked for: "auto" is NVML when it initializes on this host, and the
// file-backed fake GPUs otherwise. note says what was chosen, and why.
func ResolveBackend(backend string) (resolved, note string, err error) {
	switch backend {
	case "fake":
		return "fake", "fake (file-backed GPUs in the campaign directory)", nil
	case "nvml":
		g, _, err := openGPUs("nvml", "")
		if err != nil {
			return "", "", err
		}
		if c, ok := g.(interface{ Close() error }); ok {
			c.Close()
		}
		return "nvml", "NVML", nil
	case "auto":
		if g, _, err := openGPUs("nvml", ""); err == nil {
			if c, ok := g.(interface{ Close() error }); ok {
				c.Close()
			}
			return "nvml", "NVML (auto)", nil
		} else {
			return "fake", fmt.Sprintf("fake (auto: NVML unavailable: %v)", err), nil
		}
	}
	return "", "", fmt.Errorf("unknown --gpu-backend %q (auto, nvml or fake)", backend)
}
