package slurmexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"warden/internal/cpulist"
	"warden/internal/shellquote"
	"warden/pkg/atomicfile"
	"warden/pkg/attempt"
	"warden/pkg/budget"
	"warden/pkg/failpoint"
	"warden/pkg/gates"
	"warden/pkg/launch"
	"warden/pkg/node"
	"warden/pkg/record"
	"warden/pkg/safefile"
	"warden/pkg/slurm"
	"warden/pkg/state"
)

// Config runs every attempt as a Slurm step: srun starts the
// controller's node-side runner (NodeCommand) on a node with the run's GPUs
// and CPUs; it runs the attempt there and reports each record on its
// standard output, which srun brings back. The controller stays the only
// writer of the state database.
type Config struct {
	Options slurm.Options
	// Campaign is the campaign's id: every job name starts with
	// slurm.CampaignPrefix(Campaign).
	Campaign string
	// NodeCommand is the node-side runner's command line, to which
	// "--spec FILE" is added (e.g. ["/opt/warden/controller", "node-attempt"]).
	NodeCommand []string
	// GPUBackend and FakeGPUDir are the campaign's, for the nodes.
	GPUBackend, FakeGPUDir string
}

// srunGrace is how long srun gets to end after its step's last report
// before the controller stops it; srunStopGrace how long it then gets
// after each signal (srun ends its step's tasks on SIGTERM).
const (
	srunGrace     = 30 * time.Second
	srunStopGrace = 10 * time.Second
)

// step is an attempt the Slurm executor runs as a Slurm step: its node-side
// runner runs the attempt and reports each record, which the step applies
// to the campaign's database.
type step struct {
	*record.Record
	x     *Executor
	env   *attempt.Env
	rec   record.Recorder
	spec  attempt.Spec
	alloc Allocation
	// serverStart is when the node reported its server started.
	serverStart time.Time
}

// execute runs the attempt as a Slurm step and records what its
// node-side runner reports.
func (a *step) execute(ctx context.Context) attempt.Outcome {
	env, sc := a.env, a.x.cfg
	needDirs, err := env.NeedDirs(a.spec.Run)
	if err != nil {
		return a.fail(state.ReasonHarnessError, err.Error())
	}
	alloc := a.alloc
	name, shared := slurm.JobName(sc.Campaign, a.spec.Run.ID, a.spec.N), alloc.ID != ""
	if shared {
		name = alloc.Name
	}
	spec := node.Spec{Schema: node.SpecSchema, CampaignDir: env.Dir, Workdir: env.Workdir, ProtocolPath: env.ProtocolPath,
		GPUBackend: sc.GPUBackend, FakeGPUDir: sc.FakeGPUDir, UID: env.UID, Plan: a.spec.Plan, Run: a.spec.Run, Attempt: a.spec.N,
		Dir: a.spec.Dir, Slots: a.spec.Slots, Regime: a.spec.Options.Regime, NeedDirs: needDirs, Background: a.spec.Options.Until != nil, JobName: name, Shared: shared}
	specPath := filepath.Join(a.spec.Dir, node.SpecFile)
	if err := atomicfile.WriteJSON(specPath, spec, 0o600, atomicfile.Beneath(env.Dir)); err != nil {
		return a.fail(state.ReasonHarnessError, "write the node spec: "+err.Error())
	}
	argv := sc.Options.SrunArgv(slurm.Request{GPUs: len(a.spec.GPUIDs), CPUs: len(a.spec.CPUs), JobName: name, JobID: alloc.ID},
		append(append([]string(nil), sc.NodeCommand...), "--spec", specPath))
	// The job's name is recorded before srun starts: a resume finds the
	// job by it even when its id was never reported.
	if _, err := a.x.store.UpdateAttempt(a.spec.Run.ID, a.spec.N, func(at *state.Attempt) error {
		at.Slurm = &state.SlurmStep{JobName: name, JobID: alloc.ID, Shared: shared}
		at.Commands = append(at.Commands, argv)
		return nil
	}); err != nil && !errors.Is(err, state.ErrStateFile) {
		return a.harness(err)
	}
	record.AppendLine(env.Dir, filepath.Join(a.spec.Dir, "commands.log"), fmt.Sprintf("%s srun: %s", env.Now().UTC().Format(time.RFC3339Nano), shellquote.Join(argv)), env.Log)

	inR, inW, err := os.Pipe()
	if err != nil {
		return a.fail(state.ReasonHarnessError, err.Error())
	}
	defer inW.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		return a.fail(state.ReasonHarnessError, err.Error())
	}
	defer outR.Close()
	srun, err := env.Launcher.Start(launch.Spec{
		Role: "srun", Argv: argv, Env: nodeEnv(), Dir: env.Workdir, Stdin: inR, Stdout: outW,
		StderrPath: filepath.Join(a.spec.Dir, "srun.err"),
		// srun's death cancels its step: a controller that dies takes its
		// steps with it, and never kills srun's process group (that
		// orphans the step)
		Pdeathsig: syscall.SIGKILL,
	})
	inR.Close()
	outW.Close()
	if err != nil {
		return a.fail(state.ReasonStepLost, "srun: "+err.Error())
	}
	failpoint.Hit("srun-started")

	reports := make(chan record.Report)
	decodeErr := make(chan error, 1)
	go func() {
		// ends at the end of srun's output: srun exited, or closed it
		defer close(reports)
		dec := json.NewDecoder(outR)
		for {
			var rep record.Report
			if err := dec.Decode(&rep); err != nil {
				decodeErr <- err
				return
			}
			reports <- rep
		}
	}()

	var last *record.Report // the last transition recorded
	stepSeen := false       // the node-side runner runs: it reported its step
	until := a.spec.Options.Until
	done := ctx.Done()
	for reports != nil {
		select {
		case rep, ok := <-reports:
			if !ok {
				reports = nil
				break
			}
			if err := a.applyReport(rep); err != nil {
				// the node does not speak the report protocol (or the
				// records are broken): end the step, then the attempt
				env.Log.Error().Err(err).Str("run", a.spec.Run.ID).Msg("record the node's report")
				a.sendNode(inW, node.CmdStop)
				a.stopSrun(srun)
				a.env.InFlight.Remove(a.Key())
				go func() {
					for range reports { // until srun's output ends, so the reader ends too
					}
				}()
				return a.endUnreported(ctx, state.ReasonHarnessError, "a report of the node-side runner could not be recorded: "+err.Error())
			}
			if rep.Kind == "step" {
				stepSeen = true
			}
			if rep.Kind == "transition" {
				last = &rep
				if rep.To == state.Measuring && a.spec.Options.Measuring != nil {
					a.spec.Options.Measuring <- a.spec.Run.ID
				}
			}
		case <-done:
			if !stepSeen {
				// still waiting for its resources: no runner reads the
				// command; srun's SIGTERM withdraws the request
				a.stopSrun(srun)
				done = nil
				break
			}
			cmd := node.CmdStop
			if errors.Is(context.Cause(ctx), attempt.ErrBudgetExhausted) {
				cmd = node.CmdBudget
			}
			a.sendNode(inW, cmd)
			done = nil
		case <-until:
			a.sendNode(inW, node.CmdUntil)
			until = nil
		}
	}
	inW.Close()
	select {
	case <-srun.Done():
	case <-time.After(srunGrace):
		a.stopSrun(srun)
	}
	a.env.InFlight.Remove(a.Key())
	ex := srun.Exit()
	if last != nil && last.To.Terminal() {
		return attempt.Outcome{State: last.To, Reason: last.Reason, Detail: last.Message,
			Interrupted: last.To == state.Interrupted, EarlyBackground: last.EarlyBackground}
	}
	derr := <-decodeErr
	detail := fmt.Sprintf("srun %s before the attempt's end was reported", attempt.ExitText(ex))
	if derr != nil && !errors.Is(derr, os.ErrClosed) && !errors.Is(derr, io.EOF) {
		detail += fmt.Sprintf(" (its output: %v)", derr)
	}
	if tail, err := safefile.ReadTail(filepath.Join(a.spec.Dir, "srun.err"), 2048); err == nil && len(tail) > 0 {
		detail += ": " + lastLine(tail)
	}
	return a.endUnreported(ctx, state.ReasonStepLost, detail)
}

// endUnreported ends an attempt whose step ended without reporting its
// end (step-lost), or whose reports could not be recorded (reason): its
// GPU time is charged to now from the server's start (the node may have
// held them until the step ended), and it fails with reason, or is
// interrupted when the controller had asked it to stop.
func (a *step) endUnreported(ctx context.Context, reason state.Reason, detail string) attempt.Outcome {
	env := a.env
	at, err := a.x.store.Attempt(a.spec.Run.ID, a.spec.N)
	if err != nil {
		return a.harness(err)
	}
	a.SetState(at.State)
	if srv := record.ServerProc(at); srv != nil && !charged(at) {
		amt := budget.Charge(len(a.spec.GPUIDs), srv.StartedAt, env.Now())
		a.SetFigure("gpu_seconds", amt)
		a.NoteCharge(amt, "server start to the end of its lost step")
	}
	if ctx.Err() != nil {
		why := state.ReasonInterrupted
		if errors.Is(context.Cause(ctx), attempt.ErrBudgetExhausted) {
			why = state.ReasonBudgetExhausted
		}
		if err := a.Transition(state.Interrupted, why, "the step ended while stopping: "+detail, nil); err != nil {
			return a.harness(err)
		}
		return attempt.Outcome{State: state.Interrupted, Reason: why, Detail: detail, Interrupted: true}
	}
	a.Gate(gates.Verdict{Gate: "cleanup", Verdict: gates.Error, At: env.Now(),
		Detail: "the node's GPUs were not read after the step ended: " + detail})
	// the legal path from where the attempt was to failed
	path := map[state.AttemptState][]state.AttemptState{
		state.Starting: {state.Stopping, state.Cleanup}, state.Ready: {state.Stopping, state.Cleanup},
		state.Measuring: {state.Stopping, state.Cleanup}, state.Stopping: {state.Cleanup},
	}[a.State()]
	for _, to := range path {
		why, msg := state.Reason(""), "the step's processes are Slurm's to end; its GPUs not proven free"
		if to == state.Stopping {
			why, msg = reason, detail
		}
		if err := a.Transition(to, why, msg, nil); err != nil {
			return a.harness(err)
		}
	}
	return a.fail(reason, detail)
}

// charged says whether the attempt's GPU time is on its figures already
// (the node reported its charge).
func charged(at state.Attempt) bool {
	_, ok := at.Figures["gpu_seconds"]
	return ok
}

// applyReport records one report of the node-side runner.
func (a *step) applyReport(rep record.Report) error {
	env := a.env
	if rep.Schema != record.ReportSchema {
		// another build of the controller on the node: what its reports
		// carry (the states passed through, say) this one may not read
		return fmt.Errorf("a report of schema %d, where this controller reads schema %d: the node-side runner (--slurm-node-controller) is another build of the controller", rep.Schema, record.ReportSchema)
	}
	switch rep.Kind {
	case "step":
		if rep.Step == nil {
			return errors.New("a step report without its step")
		}
		st := *rep.Step
		gpus, err := parseIntList(st.StepGPUs)
		if err != nil {
			return err
		}
		_, err = a.x.store.UpdateAttempt(a.spec.Run.ID, a.spec.N, func(at *state.Attempt) error {
			at.Slurm = &st
			at.GPUIDs = gpus
			at.CPUs = st.CPUs
			return nil
		})
		if errors.Is(err, state.ErrStateFile) {
			err = nil
		}
		if err == nil {
			failpoint.Hit("step-recorded")
		}
		return err
	case "proc":
		if rep.Proc == nil {
			return errors.New("a proc report without its process")
		}
		if rep.Proc.Role == "server" {
			env.InFlight.Add(a.Key(), len(a.spec.GPUIDs), rep.Proc.StartedAt)
			a.serverStart = rep.Proc.StartedAt
		}
		return a.rec.ProcStarted(a.spec.Run.ID, a.spec.N, *rep.Proc)
	case "transition":
		if !rep.To.Valid() {
			return fmt.Errorf("a transition to unknown state %q", rep.To)
		}
		a.chargeToReceipt(&rep)
		if err := a.rec.Transition(a.spec.Run.ID, a.spec.N, rep); err != nil {
			return err
		}
		a.SetState(rep.To)
		for _, l := range rep.Ledger {
			if l.Kind == state.LedgerCharge {
				a.env.InFlight.Remove(a.Key())
			}
		}
		env.Log.Info().Str("run", a.spec.Run.ID).Int("attempt", a.spec.N).Str("to", string(rep.To)).Str("reason", string(rep.Reason)).Str("executor", "slurm").Msg(rep.Message)
		return nil
	}
	return fmt.Errorf("a report of unknown kind %q", rep.Kind)
}

// chargeToReceipt raises a charge the node reports to the GPU time from
// its server's start to now, when that is more: the node measured to its
// own cleanup, but the controller knows the GPUs free only once the report
// arrives, and the records date the cleanup then. Never under-charged;
// the excess is the report's way from the node.
func (a *step) chargeToReceipt(rep *record.Report) {
	if a.serverStart.IsZero() {
		return
	}
	held := budget.Charge(len(a.spec.GPUIDs), a.serverStart, a.env.Now())
	for i := range rep.Ledger {
		l := &rep.Ledger[i]
		if l.Kind != state.LedgerCharge || l.GPUSeconds >= held {
			continue
		}
		l.GPUSeconds, l.Note = held, l.Note+", to the controller's receipt of the node's report"
		if _, ok := rep.AttemptFigures["gpu_seconds"]; ok {
			rep.AttemptFigures["gpu_seconds"] = held
		}
	}
}

// sendNode writes one command to the node-side runner. A runner that is
// gone cannot read it; its step's end says the rest.
func (a *step) sendNode(w *os.File, cmd string) {
	if _, err := w.WriteString(cmd + "\n"); err != nil {
		a.env.Log.Warn().Err(err).Str("run", a.spec.Run.ID).Str("command", cmd).Msg("tell the node-side runner")
	}
}

// stopSrun ends srun by its pid alone, never its process group: srun's
// own SIGTERM ends its step's tasks, and SIGKILL of srun cancels the step;
// killing srun's group (srun and its helper) would orphan the step, which
// would run on. Each signal is recorded.
func (a *step) stopSrun(p *launch.Proc) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		rec, err := launch.Signal(a.env.Boot, p.Identity, p.Role, sig)
		if err != nil {
			break // gone: the reaper reports its exit
		}
		a.NoteSignals(rec)
		select {
		case <-p.Done():
			return
		case <-time.After(srunStopGrace):
		}
	}
	select {
	case <-p.Done():
	case <-time.After(attempt.StopSlack):
		a.env.Log.Error().Str("run", a.spec.Run.ID).Int("pid", p.PID).Msg("srun did not exit after SIGKILL")
	}
}

// nodeEnv is srun's environment: the controller's, without what must not
// reach the node-side runner (a failpoint armed for the controller).
func nodeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, failpoint.EnvVar+"=") {
			env = append(env, kv)
		}
	}
	return env
}

func parseIntList(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	return cpulist.Parse(s)
}

// lastLine is the last line of b, trimmed.
func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return strings.TrimSpace(s)
}

// fail ends the attempt failed: no process of it runs here, and what ran
// on the node ended with its step.
func (a *step) fail(reason state.Reason, detail string) attempt.Outcome {
	reason, detail, err := a.End(state.Failed, reason, detail, nil)
	if err != nil {
		return a.harness(err)
	}
	return attempt.Outcome{State: state.Failed, Reason: reason, Detail: detail}
}

// harness ends an attempt whose transition could not be recorded: it
// stays live in the records, and resume charges it.
func (a *step) harness(err error) attempt.Outcome {
	a.env.Log.Error().Err(err).Str("run", a.spec.Run.ID).Msg("record transition")
	a.env.InFlight.Remove(a.Key())
	return attempt.Outcome{State: state.Failed, Reason: state.ReasonHarnessError, Detail: err.Error()}
}
