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
	_, err := r.c.store.UpdateAttempt(run, n, func(at *state.Attempt) error {
		at.Procs = append(at.Procs, p)
		at.Commands = append(at.Commands, p.Argv)
		return nil
	})
	r.c.stopIfDiskFull(err)
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
	with := state.With{Gates: rep.Gates, Ledger: rep.Ledger}
	_, err := c.store.TransitionWith(run, n, rep.To, rep.Reason, rep.Message, rep.Figures, func(at *state.Attempt) error {
		at.Exits = append(at.Exits, rep.Exits...)
		at.Signals = append(at.Signals, rep.Signals...)
		if len(rep.AttemptFigures) > 0 && at.Figures == nil {
			at.Figures = map[string]float64{}
		}
		for k, v := range rep.AttemptFigures {
			at.Figures[k] = v
		}
		return nil
	}, with)
	c.stopIfDiskFull(err)
	if errors.Is(err, state.ErrStateFile) {
		c.log.Error().Err(err).Str("run", run).Msg("state.json")
		return nil
	}
	return err
}
