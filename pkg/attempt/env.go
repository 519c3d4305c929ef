package attempt

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"warden/internal/cpulist"
	"warden/pkg/endlog"
	"warden/pkg/gates"
	"warden/pkg/gpu"
	"warden/pkg/launch"
	"warden/pkg/state"
	"warden/protocols"
)

// GPUs is what an attempt reads of the GPUs: the gates' snapshot (memory
// and processes), the full record kept before and after the measured
// interval, the fast fields the sampler takes, and the energy counters
// read at the attempt's boundaries. NVML and the fake backend both
// satisfy it.
type GPUs interface {
	gates.GPUs
	Info(indices []int) ([]gpu.Reading, error)
	Sample(indices []int) ([]gpu.Reading, error)
	Energy(indices []int) ([]gpu.Reading, error)
}

// Env is everything an attempt runs with beyond its own Spec: the host it
// runs on and the campaign it belongs to. The caller opens and owns each
// part; an attempt never reaches back to whoever drives the campaign.
type Env struct {
	// Dir is the campaign directory, absolute; every file an attempt
	// writes is beneath it.
	Dir string
	// Workdir is where commands run; ProtocolPath the protocol file
	// (absolute), whose directory is ${PROTOCOL_DIR}.
	Workdir, ProtocolPath string
	// FakeGPUDir, when set, is exported to every child as the fake GPU
	// backend's directory (and is not scanned as a campaign file).
	FakeGPUDir string
	// StepCUDA, when set, is CUDA_VISIBLE_DEVICES for the attempt's
	// processes instead of the GPU ids: a Slurm step's own numbering.
	StepCUDA string
	// GPUs reads the host's GPUs.
	GPUs GPUs
	// Launcher starts every child process; its Reaper must be running.
	Launcher *launch.Launcher
	// Cgroups contains the processes; nil or not Available: process
	// groups and sessions only.
	Cgroups *launch.Manager
	// Boot is the boot id source identities are taken and checked with.
	// nil: the kernel's.
	Boot launch.BootIDSource
	// UID is the user whose processes are the campaign's own.
	UID int
	// Now is the clock (required).
	Now func() time.Time
	// Log receives the attempt's log lines.
	Log zerolog.Logger
	// Private indexes the private inputs, no run of which any artifact
	// may contain (PrivateIndex); PrivCache holds the campaign's own files
	// found clean and unchanged by earlier attempts' scans (required).
	Private   *gates.PrivateIndex
	PrivCache *gates.ScanCache
	// Ends is the campaign's end log: where an attempt whose end cannot be
	// recorded writes when its processes were proven gone. nil: nowhere.
	Ends *endlog.Log
	// InFlight hears of the GPU time an attempt holds, from its server's
	// start to its charge. nil: nobody listens.
	InFlight InFlight
	// DiskFull is the count of the controller's writes to the campaign
	// directory that the file system refused (no space, EIO, EROFS), and
	// the last such cause and error. nil: none are counted.
	DiskFull func() (count int64, last string)
	// StorageFault hears of an evidence file's fsync that failed
	// (record.Config.StorageFault). nil: nobody listens.
	StorageFault func(error)
	// FlushFiles writes the files derived from the database that are still
	// queued (record.Config.FlushFiles). nil: none are queued.
	FlushFiles func()
	// NeedDirs resolves the result directories of the runs a run needs, by
	// the variable each is exported as, for an attempt whose Spec names
	// none. nil: a need no Spec resolves fails the attempt.
	NeedDirs func(protocols.Run) (map[string]string, error)
}

// InFlight are the in-flight hooks: Add when an attempt's server starts
// holding its GPUs (key is Key of the attempt), Remove once its GPU time
// is charged or its attempt ended without a charge.
type InFlight interface {
	Add(key string, gpus int, since time.Time)
	Remove(key string)
}

func (e *Env) held(key string, gpus int, since time.Time) {
	if e.InFlight != nil {
		e.InFlight.Add(key, gpus, since)
	}
}

func (e *Env) released(key string) {
	if e.InFlight != nil {
		e.InFlight.Remove(key)
	}
}

// Spec is one attempt: the run, under the plan it starts under, its
// number and directory, and the slots' resources it holds.
type Spec struct {
	Plan  *protocols.Plan
	Run   protocols.Run
	N     int
	Dir   string
	Slots []protocols.SlotInfo
	// GPUIDs and CPUs are the slots' GPUs and CPUs as the attempt's host
	// numbers them; Port the first slot's.
	GPUIDs, CPUs []int
	Port         int
	// NeedDirs, when set, are the needed runs' result directories as the
	// controller resolved them (a node-side runner has no database).
	NeedDirs map[string]string
	Options  Options
}

// Options shape an attempt beyond its run.
type Options struct {
	// Regime is the regime in force, exported as ${REGIME}.
	Regime string
	// For a background load of a co-location check: Measuring receives
	// the run id once its client runs, and closing Until ends the client
	// (the target is done); the run then completes normally.
	Measuring chan<- string
	Until     <-chan struct{}
}

// Outcome is how one attempt ended.
type Outcome struct {
	State       state.AttemptState
	Reason      state.Reason
	Detail      string
	Interrupted bool
	// EarlyBackground: a background load whose client ended before its
	// target was done.
	EarlyBackground bool
	// BusyPort is the slot's port when the preflight found it taken (the
	// attempt failed harness-error): the exact rerun waits for it first
	// (outcome.PortBackoff).
	BusyPort int
}

// ErrBudgetExhausted is the cause of an attempt's context when the
// campaign's GPU time reached its cap: the attempt ends budget-exhausted
// rather than interrupted.
var ErrBudgetExhausted = errors.New("the campaign's GPU time reached its cap")

// SlotResources are the GPUs and CPUs of slots, in order.
func SlotResources(slots []protocols.SlotInfo) (gpus, cpus []int) {
	for _, s := range slots {
		gpus = append(gpus, s.GPUs...)
		c, _ := cpulist.Parse(s.CPUs)
		cpus = append(cpus, c...)
	}
	return gpus, cpus
}

// LeafName is the leaf cgroup of an attempt's server or client: run id,
// attempt and role, hashed when that is not a valid cgroup name (too long,
// odd characters), so that every run id plan accepts gets containment.
func LeafName(run string, n int, role string) string {
	return launch.CgroupName(fmt.Sprintf("%s.a%d.%s", run, n, role))
}

// ExitText says how a process ended, for a detail.
func ExitText(ex launch.ExitStatus) string {
	if ex.Signal != "" {
		return "killed by " + ex.Signal
	}
	return "exit code " + strconv.Itoa(ex.Code)
}

// StopSlack is how much longer than its graces a shutdown may take before
// it is abandoned (SIGKILL and the wait for the group).
const StopSlack = 30 * time.Second
