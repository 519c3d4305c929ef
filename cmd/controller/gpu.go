package main

import (
	"fmt"
	"time"

	"warden/pkg/gpu/fakegpu"
	"warden/pkg/gpu/nvmlgpu"
	"warden/pkg/runner"
)

// openGPUs opens the backend the campaign uses.
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
