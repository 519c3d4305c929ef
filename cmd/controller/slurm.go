package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"warden/pkg/campaigndir"
	"warden/pkg/gpu/fakegpu"
	"warden/pkg/launch"
	"warden/pkg/runner"
	"warden/pkg/slurm"
	"warden/protocols"
)

// executorOptions are start's choice of where attempts run.
type executorOptions struct {
	executor string
	slurm    slurm.Options
}

func (o *executorOptions) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.executor, "executor", "local", "where attempts run: local (this host) or slurm (a Slurm step each; recorded for resume)")
	cmd.RegisterFlagCompletionFunc("executor", cobra.FixedCompletions([]string{"local", "slurm"}, cobra.ShellCompDirectiveNoFileComp))
	f.StringVar(&o.slurm.Partition, "slurm-partition", "", "with --executor slurm: the partition (srun -p); default the cluster's")
	f.StringVar(&o.slurm.Account, "slurm-account", "", "with --executor slurm: the account (srun -A)")
	f.StringVar(&o.slurm.Constraint, "slurm-constraint", "", "with --executor slurm: node features (srun -C)")
	f.BoolVar(&o.slurm.Exclusive, "slurm-exclusive", false, "with --executor slurm: a node of its own for each run's step (srun --exclusive)")
	f.IntVar(&o.slurm.QueueTimeoutS, "slurm-queue-timeout", slurm.DefaultQueueTimeoutS, "with --executor slurm: seconds a step may wait for busy resources (srun --immediate)")
	f.StringVar(&o.slurm.NodeController, "slurm-node-controller", "", "with --executor slurm: the controller binary the nodes run, at the same path on every node (default: this binary's path)")
}

// startOptions checks the choice and fills the campaign's start options.
// The protocol's executor section applies where the command line says
// nothing (a flag given wins).
func (o *executorOptions) startOptions(so *campaigndir.StartOptions, backendFlag string, flags *pflag.FlagSet, protocol string) error {
	if p, err := protocols.PlanFile(protocol, protocols.Options{}); err == nil && p.Executor.Kind == "slurm" {
		if !flags.Changed("executor") {
			o.executor = "slurm"
		}
		ps := p.Executor.Slurm
		for flag, apply := range map[string]func(){
			"slurm-partition":     func() { o.slurm.Partition = ps.Partition },
			"slurm-account":       func() { o.slurm.Account = ps.Account },
			"slurm-constraint":    func() { o.slurm.Constraint = ps.Constraint },
			"slurm-exclusive":     func() { o.slurm.Exclusive = ps.Exclusive },
			"slurm-queue-timeout": func() { o.slurm.QueueTimeoutS = ps.QueueTimeoutS },
		} {
			if !flags.Changed(flag) {
				apply()
			}
		}
	}
	switch o.executor {
	case "local":
		return nil
	case "slurm":
	default:
		return fmt.Errorf("--executor is local or slurm, not %q", o.executor)
	}
	if backendFlag == "auto" {
		// the head need not have the nodes' GPUs: auto would guess from the
		// wrong host
		return errors.New("--executor slurm needs --gpu-backend nvml or fake: the nodes' backend cannot be detected from here")
	}
	if o.slurm.QueueTimeoutS <= 0 {
		return fmt.Errorf("--slurm-queue-timeout must be positive, not %d", o.slurm.QueueTimeoutS)
	}
	if o.slurm.NodeController == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("the controller's own path, for the nodes: %w", err)
		}
		o.slurm.NodeController = exe
	}
	if !filepath.IsAbs(o.slurm.NodeController) {
		return fmt.Errorf("--slurm-node-controller must be an absolute path, not %q", o.slurm.NodeController)
	}
	so.Executor, so.Slurm = "slurm", &o.slurm
	return nil
}

// slurmConfig is the runner's Slurm executor for a campaign that uses
// it; nil for one that runs on this host.
func slurmConfig(set campaigndir.Settings) *runner.SlurmConfig {
	if set.Executor != "slurm" || set.Slurm == nil {
		return nil
	}
	return &runner.SlurmConfig{Options: *set.Slurm, Campaign: set.CampaignID,
		NodeCommand: []string{set.Slurm.NodeController, "node-attempt"}, GPUBackend: set.GPUBackend, FakeGPUDir: set.FakeGPUDir}
}

// Exit codes of node-attempt.
const (
	exitNodeOK     = 0 // the attempt ran to a terminal state, reported
	exitNodeFailed = 1 // the attempt could not begin (the report says nothing more)
)

func newNodeAttemptCmd() *cobra.Command {
	var specPath string
	cmd := &cobra.Command{
		Use:    "node-attempt --spec FILE",
		Short:  "Run one attempt on this Slurm node (started by the controller through srun)",
		Hidden: true,
		Long: `node-attempt is the node-side runner of the Slurm executor: srun starts it in
the attempt's step; it runs the attempt from preflight to its terminal state
on this node (the step's GPUs, read through the campaign's GPU backend; its
CPUs; processes in their own groups inside the step's cgroup) and reports
every record as a JSON line on standard output. The controller writes them
into the campaign's database. Lines on standard input are the controller's
commands (stop, budget, until); the end of the input ends the attempt.
Exit codes: 0 the attempt reached a terminal state; 1 it could not begin.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if specPath == "" {
				return &exitError{2, errors.New("node-attempt: --spec FILE is required")}
			}
			if err := runNodeAttempt(specPath); err != nil {
				return &exitError{exitNodeFailed, err}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&specPath, "spec", "", "the attempt's node spec (written by the controller)")
	return cmd
}

func runNodeAttempt(specPath string) error {
	b, err := os.ReadFile(specPath)
	if err != nil {
		return err
	}
	var spec runner.NodeSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		return fmt.Errorf("%s: %w", specPath, err)
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
	log := zerolog.New(os.Stderr).With().Timestamp().Int("pid", os.Getpid()).Str("node", step.Node).Logger()
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
	st, err := runner.RunNode(ctx, runner.NodeConfig{
		Spec: spec, Step: step, CPUs: cpus, FakeGPUDir: fakeDir, GPUs: gpus,
		Launcher: &launch.Launcher{Reaper: reaper}, Now: time.Now, Log: log, Out: os.Stdout, In: os.Stdin,
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
