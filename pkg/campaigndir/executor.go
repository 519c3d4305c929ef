package campaigndir

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"warden/pkg/gpu/fakegpu"
	"warden/pkg/launch"
	"warden/pkg/node"
	"warden/pkg/slurm"
	"warden/pkg/slurmexec"
	"warden/protocols"
)

// ExecutorChoice is what the command line says of the executor: its value
// and which of its settings were given (Given), beside the rest at their
// defaults.
type ExecutorChoice struct {
	Executor string // "local" or "slurm"
	Slurm    slurm.Options
	// Given names the settings given on the command line: "executor",
	// "partition", "account", "constraint", "exclusive", "queue_timeout".
	Given map[string]bool
}

// ResolveExecutor fills so with where the campaign's attempts run: the
// protocol's executor section (plan), where the command line gives
// nothing. backend is the GPU backend asked for: the nodes' cannot be
// detected from the head, so "auto" is refused for Slurm. self is the
// controller's own path, the nodes' default binary.
func ResolveExecutor(so *StartOptions, ch ExecutorChoice, plan *protocols.Plan, backend, self string) error {
	if plan != nil && plan.Executor.Kind == "slurm" {
		if !ch.Given["executor"] {
			ch.Executor = "slurm"
		}
		ps := plan.Executor.Slurm
		set := func(name string, apply func()) {
			if !ch.Given[name] {
				apply()
			}
		}
		set("partition", func() { ch.Slurm.Partition = ps.Partition })
		set("account", func() { ch.Slurm.Account = ps.Account })
		set("constraint", func() { ch.Slurm.Constraint = ps.Constraint })
		set("exclusive", func() { ch.Slurm.Exclusive = ps.Exclusive })
		set("queue_timeout", func() { ch.Slurm.QueueTimeoutS = ps.QueueTimeoutS })
	}
	switch ch.Executor {
	case "", "local":
		return nil
	case "slurm":
	default:
		return fmt.Errorf("--executor is local or slurm, not %q", ch.Executor)
	}
	if backend == "auto" {
		return errors.New("--executor slurm needs --gpu-backend nvml or fake: the nodes' backend cannot be detected from here")
	}
	if ch.Slurm.QueueTimeoutS <= 0 {
		return fmt.Errorf("--slurm-queue-timeout must be positive, not %d", ch.Slurm.QueueTimeoutS)
	}
	if ch.Slurm.NodeController == "" {
		ch.Slurm.NodeController = self
	}
	if !filepath.IsAbs(ch.Slurm.NodeController) {
		return fmt.Errorf("--slurm-node-controller must be an absolute path, not %q", ch.Slurm.NodeController)
	}
	opts := ch.Slurm
	so.Executor, so.Slurm = "slurm", &opts
	return nil
}

// SlurmConfig is the runner's Slurm executor for a campaign that uses it;
// nil for one that runs on the controller's host.
func (s Settings) SlurmConfig() *slurmexec.Config {
	if s.Executor != "slurm" || s.Slurm == nil {
		return nil
	}
	return &slurmexec.Config{Options: *s.Slurm, Campaign: s.CampaignID,
		NodeCommand: []string{s.Slurm.NodeController, "node-attempt"}, GPUBackend: s.GPUBackend, FakeGPUDir: s.FakeGPUDir}
}

// RunNodeAttempt is the node-side runner of one attempt: it reads the
// node spec the controller wrote, learns its Slurm step from the
// environment and its CPUs from its affinity, opens the node's GPUs (for
// the fake backend the node's own fake host), and runs the attempt
// (node.Run), reporting to out and reading the controller's
// commands from in. SIGTERM and SIGINT end the attempt as a stop does.
func RunNodeAttempt(specPath string, out io.Writer, in io.Reader, logTo io.Writer) error {
	b, err := os.ReadFile(specPath)
	if err != nil {
		return err
	}
	var spec node.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		return fmt.Errorf("%s: %w", specPath, err)
	}
	// the spec names the commands this runs: it and its campaign must be
	// the invoking user's alone, as for resume
	if err := CheckOwned(spec.CampaignDir, os.Geteuid()); err != nil {
		return err
	}
	if abs, err := filepath.Abs(specPath); err != nil {
		return err
	} else if err := checkOwnedPath(spec.CampaignDir, abs, os.Geteuid(), false, os.Lstat); err != nil {
		return err
	}
	step, err := slurm.StepFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	var mask unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mask); err != nil {
		return fmt.Errorf("the step's CPUs: %w", err)
	}
	var cpus []int
	for i := 0; i < len(mask)*64; i++ {
		if mask.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	fakeDir := ""
	if spec.GPUBackend == "fake" {
		if fakeDir, err = nodeFakeGPUs(spec.FakeGPUDir, step); err != nil {
			return err
		}
	}
	gpus, _, err := openGPUs(spec.GPUBackend, fakeDir)
	if err != nil {
		return err
	}
	if c, ok := gpus.(interface{ Close() error }); ok {
		defer c.Close()
	}
	log := zerolog.New(logTo).With().Timestamp().Int("pid", os.Getpid()).Str("node", step.Node).Logger()
	if err := launch.BecomeSubreaper(); err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	reaper := launch.NewReaper()
	if err := reaper.Start(ctx); err != nil {
		return err
	}
	defer reaper.Close()
	st, err := node.Run(ctx, node.Config{
		Spec: spec, Step: step, CPUs: cpus, StepCUDA: os.Getenv("CUDA_VISIBLE_DEVICES"), FakeGPUDir: fakeDir, GPUs: gpus,
		Launcher: &launch.Launcher{Reaper: reaper}, Now: time.Now, Log: log, Out: out, In: in,
	})
	if err != nil {
		return err
	}
	log.Info().Str("state", string(st)).Msg("attempt ended")
	return nil
}

// nodeFakeGPUs is the fake host of a node: base/<node>, made on first use
// with as many GPUs as the step's highest index needs (at least eight),
// each with a UUID that names the node and index, so that concurrent
// first uses write the same file.
func nodeFakeGPUs(base string, step slurm.Step) (string, error) {
	if base == "" {
		return "", errors.New("fake GPU backend without a fake GPU directory")
	}
	dir := filepath.Join(base, step.Node)
	n := 8
	for _, g := range step.GPUs {
		n = max(n, g+1)
	}
	devs := make([]fakegpu.Device, n)
	for i := range devs {
		devs[i] = fakegpu.Device{TotalMiB: 143771, NUMANode: -1, UUID: "GPU-fake-" + step.Node + "-" + strconv.Itoa(i)}
	}
	if err := fakegpu.InitWith(dir, devs); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	return dir, nil
}
