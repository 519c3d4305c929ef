package node

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"warden/internal/cpulist"
	"warden/pkg/attempt"
	"warden/pkg/gates"
	"warden/pkg/launch"
	"warden/pkg/record"
	"warden/pkg/slurm"
	"warden/pkg/state"
	"warden/protocols"
)

// Spec is everything a node-side runner needs to run one attempt as a
// Slurm step: the controller writes it into the attempt directory
// (SpecFile) before it asks Slurm for the step. The campaign directory
// is on a file system every node sees at the same path.
type Spec struct {
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

// SpecFile is the node spec's name in the attempt directory.
const SpecFile = "node-spec.json"

// SpecSchema is the version of Spec.
const SpecSchema = 1

// The controller's commands to a node-side runner, one per line on its
// standard input. The end of the input means the controller is gone: the
// attempt is ended as for a stop.
const (
	CmdStop   = "stop"   // end the attempt: interrupted, it restarts on resume
	CmdBudget = "budget" // the same, because the budget's cap was reached
	CmdUntil  = "until"  // a background load's target is done: end its client
)

// errControllerGone ends a node-side attempt whose controller stopped
// reading and writing (its input ended).
var errControllerGone = errors.New("the controller is gone: its input to the node-side runner ended")

// Config is what a node-side runner is given: the spec and the node's
// GPUs, launcher and identity.
type Config struct {
	Spec Spec
	// Step is the Slurm step the runner runs in; CPUs its affinity mask.
	Step slurm.Step
	CPUs []int
	// StepCUDA is CUDA_VISIBLE_DEVICES as Slurm set it for the step.
	StepCUDA string
	// FakeGPUDir is this node's fake host, when the backend is fake.
	FakeGPUDir string
	GPUs       attempt.GPUs
	Launcher   *launch.Launcher
	Boot       launch.BootIDSource
	Now        func() time.Time
	Log        zerolog.Logger
	// Out receives the reports (JSON lines); In the controller's commands.
	Out io.Writer
	In  io.Reader
}

// Run runs one attempt on this node, from preflight to its terminal
// state, and reports every record of it to Out. It returns the attempt's
// terminal state, or an error when it could not begin.
func Run(ctx context.Context, cfg Config) (state.AttemptState, error) {
	sp := cfg.Spec
	if sp.Schema != SpecSchema {
		return "", fmt.Errorf("node spec schema %d, this controller reads %d", sp.Schema, SpecSchema)
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
		StepGPUs: cfg.Step.GPUsText, CPUs: cpulist.Format(cfg.CPUs)}
	if len(gpuIDs) > 0 {
		info, err := cfg.GPUs.Info(gpuIDs)
		if err != nil {
			return "", fmt.Errorf("read the step's GPUs %v: %w", gpuIDs, err)
		}
		for _, r := range info {
			step.GPUUUIDs = append(step.GPUUUIDs, r.UUID)
		}
	}
	if err := rec.send(record.Report{Kind: "step", Step: step}); err != nil {
		return "", fmt.Errorf("report the step: %w", err)
	}
	private, err := gates.CampaignPrivateIndex(sp.CampaignDir, sp.Plan.PrivacyMinLeakBytes)
	if err != nil {
		return "", err
	}
	env := &attempt.Env{
		Dir: sp.CampaignDir, Workdir: sp.Workdir, ProtocolPath: sp.ProtocolPath, FakeGPUDir: cfg.FakeGPUDir,
		Launcher: cfg.Launcher, GPUs: cfg.GPUs, Log: cfg.Log, Boot: cfg.Boot, UID: sp.UID, Now: now,
		Private: private, PrivCache: &gates.ScanCache{},
	}
	// The step's GPUs keep Slurm's numbering (renumbered from 0 where its
	// device cgroup hides the node's other GPUs). Fake GPUs are files no
	// cgroup hides: they are named by the node's indices, the GPU ids.
	if sp.GPUBackend != "fake" {
		env.StepCUDA = cfg.StepCUDA
	}

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
			case CmdStop:
				cancel(errors.New("the controller asked the node-side runner to stop"))
			case CmdBudget:
				cancel(attempt.ErrBudgetExhausted)
			case CmdUntil:
				if until != nil {
					untilOnce.Do(func() { close(until) })
				}
			}
		}
		cancel(errControllerGone)
	}()

	a := attempt.New(env, rec, attempt.Spec{Plan: sp.Plan, Run: sp.Run, N: sp.Attempt, Dir: sp.Dir, Slots: sp.Slots,
		GPUIDs: gpuIDs, CPUs: cfg.CPUs, Port: sp.Slots[0].Port, NeedDirs: sp.NeedDirs,
		Options: attempt.Options{Regime: sp.Regime, Until: until}})
	out := a.Execute(ctx)
	return out.State, nil
}

func slotGPUs(slots []protocols.SlotInfo) int {
	n := 0
	for _, s := range slots {
		n += len(s.GPUs)
	}
	return n
}

// lineRecorder sends reports as JSON lines (a node-side runner's standard
// output). The signals it sent are kept for the validators' signals.json.
type lineRecorder struct {
	mu   sync.Mutex
	enc  *json.Encoder
	now  func() time.Time
	sigs []state.Signal
}

func newLineRecorder(w io.Writer, now func() time.Time) *lineRecorder {
	return &lineRecorder{enc: json.NewEncoder(w), now: now}
}

func (r *lineRecorder) send(rep record.Report) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep.Schema = record.ReportSchema
	if rep.At.IsZero() {
		rep.At = r.now()
	}
	r.sigs = append(r.sigs, rep.Signals...)
	return r.enc.Encode(rep)
}

func (r *lineRecorder) Transition(_ string, _ int, rep record.Report) error {
	rep.Kind = "transition"
	return r.send(rep)
}

func (r *lineRecorder) ProcStarted(_ string, _ int, p state.Proc) error {
	return r.send(record.Report{Kind: "proc", Proc: &p})
}

func (r *lineRecorder) Signals(string, int) ([]state.Signal, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]state.Signal(nil), r.sigs...), nil
}
