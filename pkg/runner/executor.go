package runner

import (
	"context"
	"fmt"

	"warden/pkg/attempt"
	"warden/pkg/slurmexec"
	"warden/protocols"
)

// executor runs the campaign's attempts: on this host (localExecutor) or
// each as a Slurm step (slurmExecutor). The loop, reconcile and
// co-location ask it what depends on where the processes run.
type executor interface {
	// run runs attempt s, created in the records, to a terminal state,
	// recording it in the campaign's database.
	run(ctx context.Context, env *attempt.Env, s attempt.Spec) attempt.Outcome
	// colocation prepares a co-location block of unit on slots: the
	// executor its attempts run with (on Slurm, in one allocation on one
	// node with the slots' GPUs and CPUs), and release, which gives what
	// it holds back.
	colocation(ctx context.Context, unit int, slots []protocols.SlotInfo) (x executor, release func(), err error)
	// reconcileJobs ends what a previous controller left of the campaign
	// outside this host's processes (the campaign's jobs left in Slurm).
	reconcileJobs(ctx context.Context) error
	// stepsElsewhere says whether every attempt's processes are the
	// executor's to reconcile (Slurm's), whatever its record says.
	stepsElsewhere() bool
}

// localExecutor runs every attempt on the controller's host.
type localExecutor struct{ c *Runner }

func (x localExecutor) run(ctx context.Context, env *attempt.Env, s attempt.Spec) attempt.Outcome {
	return attempt.New(env, storeRecorder{x.c}, s).Execute(ctx)
}

func (x localExecutor) colocation(context.Context, int, []protocols.SlotInfo) (executor, func(), error) {
	return x, func() {}, nil
}

func (localExecutor) reconcileJobs(context.Context) error { return nil }

func (localExecutor) stepsElsewhere() bool { return false }

// slurmExecutor runs every attempt as a Slurm step, in alloc when it is
// set (a co-location block's).
type slurmExecutor struct {
	c     *Runner
	x     *slurmexec.Executor
	alloc slurmexec.Allocation
}

func (x slurmExecutor) run(ctx context.Context, env *attempt.Env, s attempt.Spec) attempt.Outcome {
	return x.x.Run(ctx, env, storeRecorder{x.c}, s, x.alloc)
}

func (x slurmExecutor) colocation(ctx context.Context, unit int, slots []protocols.SlotInfo) (executor, func(), error) {
	alloc, err := x.x.Allocate(ctx, unit, slots)
	if err != nil {
		return nil, func() {}, err
	}
	return slurmExecutor{x.c, x.x, alloc}, func() { x.x.Release(ctx, alloc) }, nil
}

// reconcileJobs cancels the campaign's jobs: its processes are Slurm's,
// ended through Slurm only.
func (x slurmExecutor) reconcileJobs(ctx context.Context) error {
	if err := x.x.CancelCampaignJobs(ctx); err != nil {
		return fmt.Errorf("cancel the campaign's jobs left in Slurm: %w", err)
	}
	return nil
}

func (slurmExecutor) stepsElsewhere() bool { return true }
