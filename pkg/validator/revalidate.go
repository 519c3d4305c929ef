package validator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"warden/pkg/atomicfile"
	"warden/pkg/dirlayout"
	"warden/pkg/gates"
	"warden/pkg/launch"
	"warden/pkg/safefile"
	"warden/pkg/state"
	"warden/protocols"
)

// EnvSanityOut names, in a re-run validator's environment, where
// controller validate sanity writes sanity.json instead of the ended
// attempt's directory.
const EnvSanityOut = "WARDEN_SANITY_OUT"

// EnvSignalsFile names, in a validator's environment, the attempt's
// signals.json: every signal the controller sent to the attempt's
// processes, with its time (A-P3-5: the Layer-1 checkpoint is judged
// against the signal to the server's API parent).
const EnvSignalsFile = "WARDEN_SIGNALS_FILE"

// revalidateTimeout bounds one validator re-run.
const revalidateTimeout = 10 * time.Minute

// Grace is a validator's grace period after SIGTERM, for its leader and
// then its group: a validator is a short check. stopSlack is how much
// longer than its graces a shutdown may take before it is abandoned.
const (
	Grace     = 5 * time.Second
	stopSlack = 30 * time.Second
)

// Revalidate runs run's validators again over a recorded attempt's
// artifacts, as an amendment's re-adjudication does: with the attempt's
// recorded launch variables (environment.json) and its recorded signal
// times, through the launcher. It starts no server and touches no GPU.
// The validators' output goes to outDir, never into the ended attempt's
// directory. It returns one verdict per validator.
func Revalidate(l *launch.Launcher, run protocols.Run, a state.Attempt, workdir, outDir string) ([]gates.Verdict, error) {
	if len(run.Validators) == 0 {
		return nil, nil
	}
	if damaged := a.DamagedEvidence(dirlayout.EvidenceChecked...); len(damaged) > 0 {
		// what the validators would read is not what the attempt left
		var out []gates.Verdict
		for _, v := range run.Validators {
			out = append(out, gates.Verdict{Gate: "validator:" + v.Name, Verdict: gates.Error, Detail: errors.Join(damaged...).Error(), At: time.Now()})
		}
		return out, nil
	}
	b, err := safefile.ReadFile(filepath.Join(a.Dir, "environment.json"), safefile.ChildLimit)
	if err != nil {
		return nil, fmt.Errorf("revalidate %s attempt %d: %w", a.RunID, a.N, err)
	}
	var env struct {
		Variables map[string]string `json:"variables"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, fmt.Errorf("revalidate %s attempt %d: environment.json: %w", a.RunID, a.N, err)
	}
	if err := atomicfile.MkdirAll(outDir, 0o700); err != nil {
		return nil, err
	}
	vars := env.Variables
	environ := append(os.Environ(),
		"WARDEN_RUN_ID="+a.RunID, "WARDEN_ATTEMPT="+vars["ATTEMPT"], "WARDEN_RUN_DIR="+vars["RUN_DIR"],
		"WARDEN_ATTEMPT_DIR="+a.Dir, "WARDEN_CAMPAIGN_DIR="+vars["CAMPAIGN_DIR"], "WARDEN_PHASE_FILE="+vars["PHASE_FILE"],
		EnvSignalsFile+"="+filepath.Join(a.Dir, "signals.json"), EnvSanityOut+"="+dirlayout.Sanity(outDir))
	var out []gates.Verdict
	for _, v := range run.Validators {
		argv, err := v.Command.Expand(vars)
		if err != nil {
			return out, err
		}
		if argv, err = BoundedArgv(argv, v.MemoryMiB); err != nil {
			return out, err
		}
		stdout := dirlayout.Stdout(outDir, "validator-"+v.Name)
		p, err := l.Start(launch.Spec{Role: "validator:" + v.Name, Argv: argv, Env: environ, Dir: workdir,
			StdoutPath: stdout, StderrPath: dirlayout.Stderr(outDir, "validator-"+v.Name),
			Stop: launch.StopOptions{Grace: Grace, GroupGrace: Grace}})
		if err != nil {
			out = append(out, gates.Verdict{Gate: "validator:" + v.Name, Verdict: gates.Error, Detail: err.Error(), At: time.Now()})
			continue
		}
		bound := revalidateTimeout
		if v.TimeoutS > 0 {
			bound = Timeout(v)
		}
		timer := time.NewTimer(bound)
		select {
		case <-p.Done():
		case <-timer.C:
			ctx, cancel := context.WithTimeout(context.Background(), 2*Grace+stopSlack)
			p.Shutdown(ctx)
			cancel()
			<-p.Done()
		}
		timer.Stop()
		ex := p.Exit()
		b, _ := safefile.ReadFile(stdout, safefile.ChildLimit)
		out = append(out, gates.ValidatorResult(v.Name, ex.Code, ex.Signal, b, time.Now()))
	}
	return out, nil
}
