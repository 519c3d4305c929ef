package main

import (
	"fmt"
	"time"

	"warden/pkg/gates"
	"warden/pkg/gpu/fakegpu"
	"warden/pkg/gpu/nvmlgpu"
)

// fakeGPUs adapts the file-backed fake to the gates' GPU reader.
type fakeGPUs struct{ b *fakegpu.Backend }

func (f fakeGPUs) Name() string { return "fake" }

func (f fakeGPUs) Snapshot(indices []int) ([]gates.GPUState, error) {
	var out []gates.GPUState
	for _, i := range indices {
		dev, err := f.b.Device(i)
		if err != nil {
			return nil, err
		}
		used, err := f.b.MemoryUsedMiB(i)
		if err != nil {
			return nil, err
		}
		procs, err := f.b.Processes(i)
		if err != nil {
			return nil, err
		}
		st := gates.GPUState{Index: i, UUID: dev.UUID, UsedMiB: used}
		for _, p := range procs {
			st.Procs = append(st.Procs, gates.GPUProc{PID: p.PID, UID: p.UID, UsedMiB: p.UsedMiB})
		}
		out = append(out, st)
	}
	return out, nil
}

// openGPUs opens the backend the campaign uses. "auto" takes NVML when it
// initializes and the fake otherwise, and says which.
func openGPUs(backend, fakeDir string) (gates.GPUs, string, error) {
	switch backend {
	case "fake":
		b, err := fakegpu.Open(fakeDir)
		if err != nil {
			return nil, "", fmt.Errorf("fake GPUs in %s: %w", fakeDir, err)
		}
		return fakeGPUs{b}, "fake GPUs in " + fakeDir, nil
	case "nvml", "auto":
		b, err := nvmlgpu.Open(nil, 10*time.Second)
		if err != nil {
			return nil, "", fmt.Errorf("NVML: %w", err)
		}
		return b, "NVML", nil
	}
	return nil, "", fmt.Errorf("unknown GPU backend %q (auto, nvml or fake)", backend)
}
