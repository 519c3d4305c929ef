package runner

import (
	"errors"

	"warden/pkg/failpoint"
	"warden/pkg/record"
	"warden/pkg/state"
)

// storeRecorder writes to the campaign's database.
type storeRecorder struct{ c *Runner }

func (r storeRecorder) Transition(run string, n int, rep record.Report) error {
	return r.c.recordTransition(run, n, rep)
}

func (r storeRecorder) ProcStarted(run string, n int, p state.Proc) error {
	err := record.StoreProc(r.c.store, run, n, p)
	r.c.stopIfStorageFault(err)
	if err != nil && !errors.Is(err, state.ErrStateFile) {
		return err
	}
	return nil
}

func (r storeRecorder) Signals(run string, n int) ([]state.Signal, error) {
	at, err := r.c.store.Attempt(run, n)
	return at.Signals, err
}

// recordTransition records a transition and what came with it in one
// transaction. A state.json that could not be written is logged (the
// database holds the record; resume rewrites the file).
func (c *Runner) recordTransition(run string, n int, rep record.Report) error {
	failpoint.Hit("before-transition:" + string(rep.To))
	defer failpoint.Hit("after-transition:" + string(rep.To))
	err := record.Store(c.store, run, n, rep)
	c.stopIfStorageFault(err)
	if errors.Is(err, state.ErrStateFile) {
		c.log.Error().Err(err).Str("run", run).Msg("state.json")
		return nil
	}
	return err
}
