package runner

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"warden/pkg/launch"
	"warden/pkg/slurm"
	"warden/pkg/state"
	"warden/protocols"
)

// NodeSpec is everything a node-side runner needs to run one attempt as a
// Slurm step: the controller writes it into the attempt directory
// (NodeSpecFile) before it asks Slurm for the step. The campaign directory
// is on a file system every node sees at the same path.
type NodeSpec struct {
	Schema       int    `json:"schema"`
	CampaignDir  string `json:"campaign_dir"`
	Workdir      string `json:"workdir"`
	ProtocolPath string `json:"protocol_path"`
	// GPUBackend is the campaign's ("nvml" or "fake"); with the fake
	// backend each node's fake host is FakeGPUDir/<node>.
	GPUBackend string `json:"gpu_backend"`
	FakeGPUDir string `json:"fake_gpu_dir,omitempty"`
	// UID is the user whose processes are the campaign's own.
	UID int `json:"uid"`
	// Plan is the plan the attempt starts under.
	Plan    *protocols.Plan      `json:"plan"`
	Run     protocols.Run        `json:"run"`
	Attempt int                  `json:"attempt"`
	Dir     string               `json:"dir"`
	Slots   []protocols.SlotInfo `json:"slots"`
	Regime  string               `json:"regime,omitempty"`
	// NeedDirs are the result directories of the runs this one needs, by
	// the variable they are exported as.
	NeedDirs map[string]string `json:"need_dirs,omitempty"`
	// Background: a co-location check's background load, ended by the
	// controller's "until" once its target is done.
	Background bool   `json:"background,omitempty"`
	JobName    string `json:"job_name"`
	// Shared: the step runs in an allocation shared with other attempts.
	Shared bool `json:"shared,omitempty"`
}

// NodeSpecFile is the node spec's name in the attempt directory.
const NodeSpecFile = "node-spec.json"

// nodeSpecSchema is the version of NodeSpec.
const nodeSpecSchema = 1

// The controller's commands to a node-side runner, one per line on its
// standard input. The end of the input means the controller is gone: the
// attempt is ended as for a stop.
const (
	nodeCmdStop   = "stop"   // end the attempt: interrupted, it restarts on resume
	nodeCmdBudget = "budget" // the same, because the budget's cap was reached
	nodeCmdUntil  = "until"  // a background load's target is done: end its client
)

// errControllerGone ends a node-side attempt whose controller stopped
// reading and writing (its input ended).
var errControllerGone = errors.New("the controller is gone: its input to the node-side runner ended")

// NodeConfig is what a node-side runner is given: the spec and the node's
// GPUs, launcher and identity.
type NodeConfig struct {
	Spec NodeSpec
	// Step is the Slurm step the runner runs in; CPUs its affinity mask.
	Step slurm.Step
	CPUs []int
	// StepCUDA is CUDA_VISIBLE_DEVICES as Slurm set it for the step.
	StepCUDA string
	// FakeGPUDir is this node's fake host, when the backend is fake.
	FakeGPUDir string
	GPUs       GPUs
	Launcher   *launch.Launcher
	Boot       launch.BootIDSource
	Now        func() time.Time
	Log        zerolog.Logger
	// Out receives the reports (JSON lines); In the controller's commands.
	Out io.Writer
	In  io.Reader
}

// RunNode runs one attempt on this node, from preflight to its terminal
// state, and reports every record of it to Out. It returns the attempt's
// terminal state, or an error when it could not begin.
func RunNode(ctx context.Context, cfg NodeConfig) (state.AttemptState, error) {
	sp := cfg.Spec
	if sp.Schema != nodeSpecSchema {
		return "", fmt.Errorf("node spec schema %d, this controller reads %d", sp.Schema, nodeSpecSchema)
	}
	if sp.Plan == nil || len(sp.Slots) == 0 {
		return "", errors.New("node spec: no plan or no slots")
	}
	if filepath.Clean(sp.Dir) != sp.Dir || !filepath.IsAbs(sp.Dir) {
		return "", fmt.Errorf("node spec: attempt directory %q is not a clean absolute path", sp.Dir)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	rec := newLineRecorder(cfg.Out, now)
	gpuIDs := cfg.Step.GPUs
	if want := slotGPUs(sp.Slots); len(gpuIDs) != want {
		return "", fmt.Errorf("the step has GPUs %v (SLURM_STEP_GPUS=%q); the run's slots need %d", gpuIDs, cfg.Step.GPUsText, want)
	}
	step := &state.SlurmStep{JobName: sp.JobName, Shared: sp.Shared, JobID: cfg.Step.JobID, StepID: cfg.Step.StepID, Node: cfg.Step.Node,
		StepGPUs: cfg.Step.GPUsText, CPUs: protocols.FormatCPUList(cfg.CPUs)}
	if len(gpuIDs) > 0 {
		info, err := cfg.GPUs.Info(gpuIDs)
		if err != nil {
			return "", fmt.Errorf("read the step's GPUs %v: %w", gpuIDs, err)
		}
		for _, r := range info {
			step.GPUUUIDs = append(step.GPUUUIDs, r.UUID)
		}
	}
	if err := rec.send(Report{Kind: "step", Step: step}); err != nil {
		return "", fmt.Errorf("report the step: %w", err)
	}
	private, err := PrivateIndex(sp.CampaignDir, sp.Plan.PrivacyMinLeakBytes)
	if err != nil {
		return "", err
	}
	c := &Runner{
		dir: sp.CampaignDir, workdir: sp.Workdir, protocolPath: sp.ProtocolPath, fakeGPUDir: cfg.FakeGPUDir,
		starter: cfg.Launcher, gpus: cfg.GPUs, log: cfg.Log, boot: cfg.Boot, uid: sp.UID, now: now, private: private,
		stopReq: make(chan struct{}), storageFailed: make(chan struct{}), onNode: true,
	}
	// The step's GPUs keep Slurm's numbering (renumbered from 0 where its
	// device cgroup hides the node's other GPUs). Fake GPUs are files no
	// cgroup hides: they are named by the node's indices, the GPU ids.
	if sp.GPUBackend != "fake" {
		c.stepCUDA = cfg.StepCUDA
	}
	c.plan.Store(sp.Plan)

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var until chan struct{}
	if sp.Background {
		until = make(chan struct{})
	}
	var untilOnce sync.Once
	go func() {
		// ends when the controller closes the runner's input (at the end of
		// the attempt, or by dying)
		sc := bufio.NewScanner(cfg.In)
		for sc.Scan() {
			switch sc.Text() {
			case nodeCmdStop:
				cancel(errors.New("the controller asked the node-side runner to stop"))
			case nodeCmdBudget:
				cancel(errBudgetExhausted)
			case nodeCmdUntil:
				if until != nil {
					untilOnce.Do(func() { close(until) })
				}
			}
		}
		cancel(errControllerGone)
	}()

	a := &attempt{c: c, rec: rec, plan: sp.Plan, run: sp.Run, n: sp.Attempt, dir: sp.Dir, slots: sp.Slots,
		gpuIDs: gpuIDs, cpus: cfg.CPUs, port: sp.Slots[0].Port, needDirs: sp.NeedDirs,
		opts: attemptOpts{regime: sp.Regime, until: until}}
	out := a.execute(ctx)
	return out.state, nil
}

func slotGPUs(slots []protocols.SlotInfo) int {
	n := 0
	for _, s := range slots {
		n += len(s.GPUs)
	}
	return n
}
