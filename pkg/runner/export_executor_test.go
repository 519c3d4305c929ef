package runner

import (
	"context"

	"warden/pkg/attempt"
	"warden/pkg/record"
	"warden/protocols"
)

// Executor is the executor seam as the package's external tests see it:
// what the loop asks of whoever runs its attempts (see executor). Run gets
// the recorder the local executor gives an attempt (the campaign's
// database), so a scripted attempt is recorded as a real one is.
type Executor interface {
	// Run runs attempt s, created in the records, to a terminal state.
	Run(ctx context.Context, env *attempt.Env, rec record.Recorder, s attempt.Spec) attempt.Outcome
	// Colocation prepares a co-location block of unit on slots; release
	// gives back what it holds.
	Colocation(ctx context.Context, unit int, slots []protocols.SlotInfo) (release func(), err error)
}

// SetExecutor has the runner run its attempts with x instead of on this
// host. Call it before Reconcile and Run.
func (c *Runner) SetExecutor(x Executor) { c.exec = testExecutor{c, x} }

// testExecutor adapts an Executor to the loop's executor.
type testExecutor struct {
	c *Runner
	x Executor
}

func (e testExecutor) run(ctx context.Context, env *attempt.Env, s attempt.Spec) attempt.Outcome {
	return e.x.Run(ctx, env, storeRecorder{e.c}, s)
}

func (e testExecutor) colocation(ctx context.Context, unit int, slots []protocols.SlotInfo) (executor, func(), error) {
	release, err := e.x.Colocation(ctx, unit, slots)
	if release == nil {
		release = func() {}
	}
	return e, release, err
}

func (testExecutor) reconcileJobs(context.Context) error { return nil }

func (testExecutor) stepsElsewhere() bool { return false }
