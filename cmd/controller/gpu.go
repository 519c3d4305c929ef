package main

import (
	"fmt"
	"time"

	"warden/pkg/gates"
	"warden/pkg/gpu"
	"warden/pkg/gpu/fakegpu"
	"warden/pkg/gpu/nvmlgpu"
)

// gpuBackend is what the controller reads of the GPUs: the gates'
// snapshot (memory and processes), the full record kept before and after
// the measured interval, the fast fields the sampler takes, and the
// energy counters read at the attempt's boundaries. NVML and the fake
// backend both satisfy it.
type gpuBackend interface {
	gates.GPUs
	Info(indices []int) ([]gpu.Reading, error)
	Sample(indices []int) ([]gpu.Reading, error)
	Energy(indices []int) ([]gpu.Reading, error)
}

// openGPUs opens the backend the campaign uses.
func openGPUs(backend, fakeDir string) (gpuBackend, string, error) {
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
