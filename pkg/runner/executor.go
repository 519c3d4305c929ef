package runner

import (
	"context"
	"fmt"
	"strconv"
	"warden/pkg/record"

	"warden/pkg/attempt"
	"warden/pkg/slurm"
	"warden/protocols"
)

// executor runs the campaign's attempts: on this host (localExecutor) or
// each as a Slurm step (slurmExecutor). The loop, reconcile and
// co-location ask it what depends on where the processes run.
type executor interface {
	// run runs attempt s, created in the records, to a terminal state,
	// recording it in the campaign's database; in alloc when one was
	// allocated for it (colocation).
	run(ctx context.Context, env *attempt.Env, s attempt.Spec, alloc allocation) attempt.Outcome
	// colocation prepares a co-location block's shared resources (on
	// Slurm, one allocation on one node with the slots' GPUs and CPUs);
	// release gives them back. Zero and a no-op where nothing is shared.
	colocation(ctx context.Context, unit int, slots []protocols.SlotInfo) (alloc allocation, release func(), err error)
	// reconcileJobs ends what a previous controller left of the campaign
	// outside this host's processes (the campaign's jobs left in Slurm).
	reconcileJobs(ctx context.Context) error
	// stepsElsewhere says whether every attempt's processes are the
	// executor's to reconcile (Slurm's), whatever its record says.
	stepsElsewhere() bool
}

// localExecutor runs every attempt on the controller's host.
type localExecutor struct{ c *Runner }

func (x localExecutor) run(ctx context.Context, env *attempt.Env, s attempt.Spec, _ allocation) attempt.Outcome {
	return attempt.New(env, storeRecorder{x.c}, s).Execute(ctx)
}

func (localExecutor) colocation(context.Context, int, []protocols.SlotInfo) (allocation, func(), error) {
	return allocation{}, func() {}, nil
}

func (localExecutor) reconcileJobs(context.Context) error { return nil }

func (localExecutor) stepsElsewhere() bool { return false }

// slurmExecutor runs every attempt as a Slurm step (SlurmConfig).
type slurmExecutor struct {
	c   *Runner
	cfg *SlurmConfig
}

func (x slurmExecutor) run(ctx context.Context, env *attempt.Env, s attempt.Spec, alloc allocation) attempt.Outcome {
	rec := record.New(record.Config{Recorder: storeRecorder{x.c}, Dir: env.Dir, Log: env.Log, Now: env.Now, DiskFull: env.DiskFull}, s.Run.ID, s.N, s.Dir)
	st := &step{Record: rec, c: x.c, cfg: x.cfg, env: env, spec: s, alloc: alloc}
	return st.execute(ctx)
}

// colocation allocates one node for the block: the target and its
// backgrounds share it, each step its own GPUs and CPUs of it
// (co-location and CPU maps mean what they mean on one host).
func (x slurmExecutor) colocation(ctx context.Context, unit int, slots []protocols.SlotInfo) (allocation, func(), error) {
	name := slurm.CampaignPrefix(x.cfg.Campaign) + "colocation.u" + strconv.Itoa(unit)
	alloc, err := x.allocate(ctx, name, slots)
	if err != nil {
		return allocation{}, func() {}, err
	}
	return alloc, func() { x.c.releaseAllocation(ctx, alloc) }, nil
}

// reconcileJobs cancels the campaign's jobs: its processes are Slurm's,
// ended through Slurm only.
func (x slurmExecutor) reconcileJobs(ctx context.Context) error {
	if err := x.cancelCampaignJobs(ctx); err != nil {
		return fmt.Errorf("cancel the campaign's jobs left in Slurm: %w", err)
	}
	return nil
}

func (slurmExecutor) stepsElsewhere() bool { return true }
