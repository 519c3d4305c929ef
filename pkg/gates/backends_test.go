package gates_test

import (
	"warden/pkg/gates"
	"warden/pkg/gpu/fakegpu"
	"warden/pkg/gpu/nvmlgpu"
)

// Both GPU backends serve the gates. The check lives here, not in
// pkg/gpu, because nothing under pkg/gpu may depend on pkg/gates.
var (
	_ gates.GPUs = (*nvmlgpu.Backend)(nil)
	_ gates.GPUs = (*fakegpu.Backend)(nil)
)
