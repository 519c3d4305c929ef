package runner

import (
	"encoding/json"
	"errors"
	"io"
	"sync"
	"time"

	"warden/pkg/failpoint"
	"warden/pkg/state"
)

// Report is one record of an attempt, as a node-side runner sends it to
// the controller: one JSON object per line on its standard output. The
// controller is the only writer of the state database; it applies each
// report as it arrives, as it would its own attempt's record.
type Report struct {
	Schema int `json:"schema"`
	// Kind is "step" (the Slurm step's identity, first), "proc" (a
	// process started) or "transition".
	Kind string           `json:"kind"`
	Step *state.SlurmStep `json:"step,omitempty"`
	Proc *state.Proc      `json:"proc,omitempty"`

	// A transition: the state entered, why, and what was noted since the
	// last one (exits, signals, the attempt's figures, gate verdicts,
	// ledger entries), all recorded in its transaction.
	To             state.AttemptState  `json:"to,omitempty"`
	Reason         state.Reason        `json:"reason,omitempty"`
	Message        string              `json:"message,omitempty"`
	Figures        map[string]float64  `json:"figures,omitempty"`
	Exits          []state.Exit        `json:"exits,omitempty"`
	Signals        []state.Signal      `json:"signals,omitempty"`
	AttemptFigures map[string]float64  `json:"attempt_figures,omitempty"`
	Gates          []state.GateVerdict `json:"gates,omitempty"`
	Ledger         []state.LedgerEntry `json:"ledger,omitempty"`
	// EarlyBackground: a background load whose client ended before its
	// target was done.
	EarlyBackground bool      `json:"early_background,omitempty"`
	At              time.Time `json:"at"`
}

// reportSchema is the version of Report.
const reportSchema = 1

// recorder is where an attempt's records go: the campaign's database when
// the controller runs the attempt itself, the controller's standard input
// when a node-side runner does.
type recorder interface {
	transition(run string, n int, rep Report) error
	procStarted(run string, n int, p state.Proc) error
	// signals are the attempt's signals recorded so far.
	signals(run string, n int) ([]state.Signal, error)
}

// storeRecorder writes to the campaign's database.
type storeRecorder struct{ c *Runner }

func (r storeRecorder) transition(run string, n int, rep Report) error {
	return r.c.recordTransition(run, n, rep)
}

func (r storeRecorder) procStarted(run string, n int, p state.Proc) error {
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

func (r storeRecorder) signals(run string, n int) ([]state.Signal, error) {
	at, err := r.c.store.Attempt(run, n)
	return at.Signals, err
}

// recordTransition records a transition and what came with it in one
// transaction. A state.json that could not be written is logged (the
// database holds the record; resume rewrites the file).
func (c *Runner) recordTransition(run string, n int, rep Report) error {
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

func (r *lineRecorder) send(rep Report) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep.Schema = reportSchema
	if rep.At.IsZero() {
		rep.At = r.now()
	}
	r.sigs = append(r.sigs, rep.Signals...)
	return r.enc.Encode(rep)
}

func (r *lineRecorder) transition(_ string, _ int, rep Report) error {
	rep.Kind = "transition"
	return r.send(rep)
}

func (r *lineRecorder) procStarted(_ string, _ int, p state.Proc) error {
	return r.send(Report{Kind: "proc", Proc: &p})
}

func (r *lineRecorder) signals(string, int) ([]state.Signal, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]state.Signal(nil), r.sigs...), nil
}
