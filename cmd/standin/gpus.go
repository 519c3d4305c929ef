package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"warden/pkg/gpu/fakegpu"
)

// claimVisibleGPUs claims mib MiB of fake GPU memory for this process on
// every GPU it can see, and returns their indices. It does nothing when
// $WARDEN_FAKE_GPU_DIR is unset or mib is 0.
func claimVisibleGPUs(mib int, role string) ([]int, error) {
	dir := os.Getenv(fakegpu.EnvDir)
	if dir == "" || mib == 0 {
		return nil, nil
	}
	b, err := fakegpu.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("claim GPU memory: %w", err)
	}
	value, set := os.LookupEnv("CUDA_VISIBLE_DEVICES")
	gpus, err := visibleGPUs(b, value, set)
	if err != nil {
		return nil, fmt.Errorf("claim GPU memory: %w", err)
	}
	for _, gpu := range gpus {
		if err := fakegpu.Claim(dir, gpu, mib, fakegpu.WithRole(role)); err != nil {
			return nil, fmt.Errorf("claim GPU memory: %w", err)
		}
	}
	return gpus, nil
}

// visibleGPUs resolves a CUDA_VISIBLE_DEVICES value as CUDA does: unset
// means every GPU, empty means none, otherwise a comma-separated list of
// indices or UUIDs. Unlike CUDA, which stops at the first bad entry, a bad
// entry is an error.
func visibleGPUs(b *fakegpu.Backend, value string, set bool) ([]int, error) {
	if !set {
		all := make([]int, b.Count())
		for i := range all {
			all[i] = i
		}
		return all, nil
	}
	var gpus []int
	for _, id := range strings.Split(value, ",") {
		id = strings.TrimSpace(id)
		if id == "" {
			continue
		}
		gpu, err := lookupGPU(b, id)
		if err != nil {
			return nil, fmt.Errorf("CUDA_VISIBLE_DEVICES=%q: %w", value, err)
		}
		gpus = append(gpus, gpu)
	}
	return gpus, nil
}

func lookupGPU(b *fakegpu.Backend, id string) (int, error) {
	if i, err := strconv.Atoi(id); err == nil {
		if _, err := b.Device(i); err != nil {
			return 0, err
		}
		return i, nil
	}
	for i := 0; i < b.Count(); i++ {
		d, err := b.Device(i)
		if err != nil {
			return 0, err
		}
		if d.UUID == id {
			return i, nil
		}
	}
	return 0, fmt.Errorf("GPU %q: %w", id, fakegpu.ErrNoDevice)
}
