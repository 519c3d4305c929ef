package attempt_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"warden/pkg/attempt"
	"warden/pkg/gpu/fakegpu"
	"warden/pkg/state"
)

// preflightCases are preflight's outcomes (preflight.go, and the spine's
// stop before it in attempt.go): an attempt that fails there has started
// nothing, held no GPU time and fails directly, without stopping or
// cleanup.
var preflightCases = []phaseCase{
	{
		name: "stopped before preflight",
		prep: func(h *harness) { h.cancel(nil) },
		path: "reserved interrupted:interrupted",
		check: func(h *harness) {
			h.wantDetail("stopped before preflight")
			h.nothingStarted()
			if !h.out.Interrupted {
				h.t.Fatalf("outcome %+v: not marked interrupted", h.out)
			}
		},
	},
	{
		name: "budget cap before preflight",
		prep: func(h *harness) { h.cancel(attempt.ErrBudgetExhausted) },
		path: "reserved interrupted:budget-exhausted",
		check: func(h *harness) {
			h.wantDetail("the campaign's GPU time reached its cap: stopped before preflight")
			h.nothingStarted()
		},
	},
	{
		name: "GPUs cannot be read",
		prep: func(h *harness) {
			h.faults.set(func(g *gpuFaults) { g.snapshotErr = errors.New("NVML: driver not loaded") })
		},
		path: "reserved preflight failed:harness-error",
		check: func(h *harness) {
			h.wantDetail("read GPUs: NVML: driver not loaded")
			h.nothingStarted()
			if gs := h.rec.gates(); len(gs) != 0 {
				h.t.Fatalf("gates judged on GPUs that could not be read: %+v", gs)
			}
		},
	},
	{
		// seed 002 stop condition 2: a GPU not idle at preflight
		name:  "GPU not idle",
		prep:  func(h *harness) { h.claim(0, os.Getuid(), 2048) },
		path:  "reserved preflight failed:gpu-not-idle",
		gates: "preflight:fail",
		check: func(h *harness) {
			v := h.gate("preflight")
			if v.Figures["gpu0_used_mib"] != 2048 || !strings.Contains(v.Detail, "pid "+strconv.Itoa(os.Getpid())) || v.Figures["foreign_processes"] != 0 {
				h.t.Fatalf("preflight gate %+v", v)
			}
			h.wantDetail("GPU not idle", "holds 2048 MiB")
			h.nothingStarted()
		},
	},
	{
		// seed 002 stop condition 2: another user's GPU process
		name:  "foreign GPU process",
		prep:  func(h *harness) { h.claim(0, 4242, 2048) },
		path:  "reserved preflight failed:foreign-gpu-process",
		gates: "preflight:fail",
		check: func(h *harness) {
			if v := h.gate("preflight"); v.Figures["foreign_processes"] != 1 || !strings.Contains(v.Detail, "another user's process") || !strings.Contains(v.Detail, "uid 4242") {
				h.t.Fatalf("preflight gate %+v", v)
			}
			h.nothingStarted()
		},
	},
	{
		name: "a GPU beside the slot's is busy",
		prep: func(h *harness) { h.claim(1, 4242, 2048) },
		path: "reserved preflight starting ready measuring stopping cleanup validating complete",
		check: func(h *harness) {
			if v := h.gate("preflight"); v.Verdict != state.VerdictPass {
				h.t.Fatalf("preflight judged a GPU the slot does not hold: %+v", v)
			}
		},
	},
	{
		name: "CPUs not local",
		prep: func(h *harness) {
			far := 0
			for _, c := range h.cpus {
				far = max(far, c+1)
			}
			h.gpusAt(strconv.Itoa(far))
		},
		path:  "reserved preflight failed:harness-error",
		gates: "preflight:pass cpu-local:fail",
		check: func(h *harness) {
			if v := h.gate("cpu-local"); v.Figures["nonlocal_cpus"] != float64(len(h.cpus)) {
				h.t.Fatalf("cpu-local gate %+v", v)
			}
			h.wantDetail("slot s0: ", "not local to GPU 0")
			h.nothingStarted()
		},
	},
	{
		name: "port busy",
		prep: func(h *harness) {
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(h.port))
			if err != nil {
				h.t.Fatal(err)
			}
			h.t.Cleanup(func() { ln.Close() })
		},
		path:  "reserved preflight failed:harness-error",
		gates: "preflight:pass cpu-local:pass port:fail",
		check: func(h *harness) {
			h.wantDetail("port " + strconv.Itoa(h.port) + " is in use")
			h.nothingStarted()
		},
	},
	{
		name: "preflight record kept",
		path: "reserved preflight starting ready measuring stopping cleanup validating complete",
		check: func(h *harness) {
			for _, f := range []string{"preflight.json", "postmeasure.json"} {
				if _, err := os.Stat(filepath.Join(h.adir, f)); err != nil {
					h.t.Errorf("the host record %s: %v", f, err)
				}
			}
			if _, ok := h.rec.figure("preflight_load1"); !ok {
				h.t.Errorf("no preflight_load1 figure recorded")
			}
		},
	},
}

func TestPreflight(t *testing.T) {
	t.Parallel()
	runCases(t, preflightCases)
}

// gpusAt makes the fake host anew: two GPUs whose close CPUs are cpus.
func (h *harness) gpusAt(cpus string) {
	h.t.Helper()
	if err := os.Remove(filepath.Join(h.gpuDir, "gpus.json")); err != nil {
		h.t.Fatal(err)
	}
	if err := fakegpu.InitWith(h.gpuDir, []fakegpu.Device{{TotalMiB: 143771, CPUs: cpus, NUMANode: -1}, {TotalMiB: 143771, CPUs: cpus, NUMANode: -1}}); err != nil {
		h.t.Fatal(err)
	}
	var err error
	if h.faults.Backend, err = fakegpu.Open(h.gpuDir); err != nil {
		h.t.Fatal(err)
	}
	h.gpus = h.faults.Backend
}
