// Package nvmlgpu reads GPUs through NVML (github.com/NVIDIA/go-nvml,
// cgo). NVML calls can hang on a lost GPU, so every read runs off the
// caller's goroutine with a deadline; a timed-out read returns an error and
// its goroutine ends when NVML returns.
package nvmlgpu

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"warden/pkg/gates"
)

// ErrTimeout is returned when NVML does not answer within the deadline.
var ErrTimeout = errors.New("nvml: no answer within the deadline")

// Backend reads GPUs through an nvml.Interface: the real library, or one
// of go-nvml's mock servers in tests.
type Backend struct {
	lib     nvml.Interface
	timeout time.Duration
}

// Open initializes NVML. It fails (ERROR_LIBRARY_NOT_FOUND) where there is
// no driver.
func Open(lib nvml.Interface, timeout time.Duration) (*Backend, error) {
	if lib == nil {
		lib = nvml.New()
	}
	b := &Backend{lib: lib, timeout: timeout}
	err := b.call(func() error {
		if ret := lib.Init(); ret != nvml.SUCCESS {
			return fmt.Errorf("nvml init: %s", lib.ErrorString(ret))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// Name is "nvml".
func (b *Backend) Name() string { return "nvml" }

// Close shuts NVML down.
func (b *Backend) Close() error {
	return b.call(func() error {
		if ret := b.lib.Shutdown(); ret != nvml.SUCCESS {
			return fmt.Errorf("nvml shutdown: %s", b.lib.ErrorString(ret))
		}
		return nil
	})
}

// call runs fn with the deadline.
func (b *Backend) call(fn func() error) error {
	done := make(chan error, 1) // buffered: a late answer does not block the goroutine
	go func() { done <- fn() }()
	t := time.NewTimer(b.timeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return ErrTimeout
	}
}

// Snapshot reads memory used (v2: 0 on an idle GPU) and the compute
// processes of the GPUs with the given indices.
func (b *Backend) Snapshot(indices []int) ([]gates.GPUState, error) {
	var out []gates.GPUState
	err := b.call(func() error {
		for _, i := range indices {
			dev, ret := b.lib.DeviceGetHandleByIndex(i)
			if ret != nvml.SUCCESS {
				return fmt.Errorf("nvml GPU %d: %s", i, b.lib.ErrorString(ret))
			}
			st := gates.GPUState{Index: i}
			if uuid, ret := dev.GetUUID(); ret == nvml.SUCCESS {
				st.UUID = uuid
			}
			mem, ret := dev.GetMemoryInfo_v2()
			if ret != nvml.SUCCESS {
				return fmt.Errorf("nvml GPU %d memory: %s", i, b.lib.ErrorString(ret))
			}
			st.UsedMiB = int(mem.Used >> 20)
			procs, ret := dev.GetComputeRunningProcesses()
			if ret != nvml.SUCCESS {
				return fmt.Errorf("nvml GPU %d processes: %s", i, b.lib.ErrorString(ret))
			}
			for _, p := range procs {
				st.Procs = append(st.Procs, gates.GPUProc{PID: int(p.Pid), UID: uidOf(int(p.Pid)), UsedMiB: int(p.UsedGpuMemory >> 20)})
			}
			out = append(out, st)
		}
		return nil
	})
	return out, err
}

// uidOf reads the real uid of a host pid; -1 when it cannot be read (a
// process in another pid namespace, or gone).
func uidOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				uid, err := strconv.Atoi(f[0])
				if err == nil {
					return uid
				}
			}
		}
	}
	return -1
}
