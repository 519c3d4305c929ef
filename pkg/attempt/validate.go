package attempt

import (
	"fmt"
	"path/filepath"
	"time"

	"warden/pkg/atomicfile"
	"warden/pkg/dirlayout"
	"warden/pkg/gates"
	"warden/pkg/launch"
	"warden/pkg/outcome"
	"warden/pkg/safefile"
	"warden/pkg/state"
	"warden/pkg/validator"
	"warden/protocols"
)

// stopThenValidate ends the server gracefully, proves cleanup, runs the
// validators and records the terminal state.
func (a *Attempt) stopThenValidate() Outcome {
	if err := a.rec.Transition(state.Stopping, "", "stopping server through its API parent", nil); err != nil {
		return a.harness(err)
	}
	a.shutdown()
	if out, ok := a.cleanup(); !ok {
		return out
	}
	if len(a.run.Validators) == 0 {
		// nothing is started while it validates: recorded with the
		// terminal state
		a.rec.Pass(state.Validating, "validating artifacts", nil)
	} else if err := a.rec.Transition(state.Validating, "", "validating artifacts", nil); err != nil {
		return a.harness(err)
	}
	if a.drainVerdict != nil {
		a.rec.Gate(*a.drainVerdict)
	}
	if r, d := a.validate(); r == state.ReasonQualityFailed {
		return a.terminal(state.Quarantined, r, d)
	} else if r == state.ReasonInterrupted {
		return a.stopThenInterrupt(d)
	} else if r != "" {
		return a.terminal(state.Failed, r, d)
	}
	if a.quarant {
		drained := a.rec.Figure("drain_s")
		return a.terminalFig(state.Quarantined, state.ReasonDrainQuarantine,
			fmt.Sprintf("drain %.1f s over the %.0f s allowance of class %s", drained, a.run.DrainS, a.run.Class),
			map[string]float64{"drain_s": drained, "drain_allowance_s": a.run.DrainS})
	}
	return a.terminal(state.Complete, "", "run complete")
}

// validate runs the protocol's validators (exit code and JSON verdict)
// and the built-in privacy scan of the attempt directory.
func (a *Attempt) validate() (state.Reason, string) {
	if a.foreign != nil {
		if a.foreign.Verdict == gates.Error {
			return state.ReasonHarnessError, "gpu-processes: " + a.foreign.Detail
		}
		// seen after the client ended, before the shutdown
		return state.ReasonForeignGPUProcess, a.foreign.Detail
	}
	a.recordTerminalClasses()
	if r, d := a.checkManifest(); r != "" {
		return r, d
	}
	env := a.environ
	if len(a.run.Validators) > 0 {
		path, err := a.writeSignals()
		if err != nil {
			return state.ReasonHarnessError, err.Error()
		}
		env = append(append([]string(nil), a.environ...), validator.EnvSignalsFile+"="+path)
	}
	for _, v := range a.run.Validators {
		argv, err := v.Command.Expand(a.vars)
		if err != nil {
			return state.ReasonHarnessError, err.Error()
		}
		if argv, err = validator.BoundedArgv(argv, v.MemoryMiB); err != nil {
			return state.ReasonHarnessError, err.Error()
		}
		out := dirlayout.Stdout(a.dir, "validator-"+v.Name)
		p, err := a.env.Launcher.Start(launch.Spec{
			Role: "validator:" + v.Name, Argv: argv, Env: env, Dir: a.env.Workdir,
			StdoutPath: out, StderrPath: dirlayout.Stderr(a.dir, "validator-"+v.Name),
			Stop: launch.StopOptions{Grace: validator.Grace, GroupGrace: validator.Grace},
		})
		if err != nil {
			return state.ReasonValidatorFailed, fmt.Sprintf("validator %s: %v", v.Name, err)
		}
		switch a.waitValidator(p, v) {
		case validatorTimedOut:
			bound := validator.Timeout(v).Seconds()
			a.rec.SetFigure("validator_timeout_s", bound)
			return state.ReasonHarnessError, fmt.Sprintf("validator %s ran past its %g s bound (timeout_s); ended", v.Name, bound)
		case validatorStopped:
			return state.ReasonInterrupted, fmt.Sprintf("stopped while validator %s ran; ended", v.Name)
		}
		ex := p.Exit()
		stdout, _ := safefile.ReadFile(out, safefile.ChildLimit)
		vd := gates.ValidatorResult(v.Name, ex.Code, ex.Signal, stdout, a.env.Now())
		a.rec.Gate(vd)
		if !vd.Passed() {
			return outcome.ValidatorReason(vd.Class), fmt.Sprintf("validator %s: %s", v.Name, vd.Detail)
		}
	}
	// The campaign's own files are scanned beside the attempt's: both only
	// read, and the attempt's verdict is judged first.
	campaign := make(chan gates.Verdict, 1)
	go func() { campaign <- a.env.campaignPrivacy(a.plan.Privacy) }()
	pv := gates.PrivacyScan(a.dir, a.plan.Privacy, a.env.Private, func(rel string) bool {
		return rel == "state.json" || rel == "gates.jsonl" // the controller's own records
	}, 64<<20, a.env.Now())
	cv := <-campaign
	a.rec.Gate(pv)
	if !pv.Passed() {
		return state.ReasonPrivacyViolation, "privacy scan: " + pv.Detail
	}
	a.rec.Gate(cv)
	if !cv.Passed() {
		return state.ReasonPrivacyViolation, "privacy scan of the campaign's own files: " + cv.Detail
	}
	return "", ""
}

// writeSignals writes the attempt's recorded signals, a JSON array of
// state.Signal, to signals.json in the attempt directory, atomically, and
// returns its path. The signals are those already recorded in the store
// and those still pending for the next transition.
func (a *Attempt) writeSignals() (string, error) {
	sigs, err := a.rec.Signals()
	if err != nil {
		return "", fmt.Errorf("read the attempt's signals: %w", err)
	}
	path := filepath.Join(a.dir, "signals.json")
	if err := atomicfile.WriteJSON(path, sigs, 0o644, atomicfile.Beneath(a.env.Dir)); err != nil {
		return "", fmt.Errorf("write signals.json: %w", err)
	}
	return path, nil
}

// validatorEnd says how a validator's run ended when the controller ended
// it: not at all (it exited), past its time bound, or by a stop.
type validatorEnd int

const (
	validatorExited validatorEnd = iota
	validatorTimedOut
	validatorStopped
)

// waitValidator waits for the validator p until it exits, its time bound
// passes or the attempt is stopped; in the last two cases it ends p (its
// leader, then its group) before it returns.
func (a *Attempt) waitValidator(p *launch.Proc, v protocols.ValidatorSpec) validatorEnd {
	t := time.NewTimer(validator.Timeout(v))
	defer t.Stop()
	var stop <-chan struct{}
	if a.ctx != nil {
		stop = a.ctx.Done()
	}
	select {
	case <-p.Done():
		return validatorExited
	case <-t.C:
		a.stopProc(p)
		return validatorTimedOut
	case <-stop:
		a.stopProc(p)
		return validatorStopped
	}
}
