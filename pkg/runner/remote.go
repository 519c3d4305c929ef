package runner

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

	"warden/pkg/atomicfile"
	"warden/pkg/budget"
	"warden/pkg/failpoint"
	"warden/pkg/gates"
	"warden/pkg/launch"
	"warden/pkg/slurm"
	"warden/pkg/state"
	"warden/protocols"
)

// SlurmConfig runs every attempt as a Slurm step: srun starts the
// controller's node-side runner (NodeCommand) on a node with the run's GPUs
// and CPUs; it runs the attempt there and reports each record on its
// standard output, which srun brings back. The controller stays the only
// writer of the state database.
type SlurmConfig struct {
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

// executeOnSlurm runs the attempt as a Slurm step and records what its
// node-side runner reports.
func (a *attempt) executeOnSlurm(ctx context.Context) outcome {
	c := a.c
	sc := c.slurm
	needDirs, err := c.needDirs(a.run)
	if err != nil {
		return a.fail(state.ReasonHarnessError, err.Error())
	}
	alloc := a.opts.allocation
	name, shared := slurm.JobName(sc.Campaign, a.run.ID, a.n), alloc.ID != ""
	if shared {
		name = alloc.Name
	}
	spec := NodeSpec{Schema: nodeSpecSchema, CampaignDir: c.dir, Workdir: c.workdir, ProtocolPath: c.protocolPath,
		GPUBackend: sc.GPUBackend, FakeGPUDir: sc.FakeGPUDir, UID: c.uid, Plan: a.plan, Run: a.run, Attempt: a.n,
		Dir: a.dir, Slots: a.slots, Regime: a.opts.regime, NeedDirs: needDirs, Background: a.opts.until != nil, JobName: name, Shared: shared}
	specPath := filepath.Join(a.dir, NodeSpecFile)
	if err := atomicfile.WriteJSON(specPath, spec, 0o600, atomicfile.Beneath(c.dir)); err != nil {
		return a.fail(state.ReasonHarnessError, "write the node spec: "+err.Error())
	}
	argv := sc.Options.SrunArgv(slurm.Request{GPUs: len(a.gpuIDs), CPUs: len(a.cpus), JobName: name, JobID: alloc.ID},
		append(append([]string(nil), sc.NodeCommand...), "--spec", specPath))
	// The job's name is recorded before srun starts: a resume finds the
	// job by it even when its id was never reported.
	if _, err := c.store.UpdateAttempt(a.run.ID, a.n, func(at *state.Attempt) error {
		at.Slurm = &state.SlurmStep{JobName: name, JobID: alloc.ID, Shared: shared}
		at.Commands = append(at.Commands, argv)
		return nil
	}); err != nil && !errors.Is(err, state.ErrStateFile) {
		return a.harness(err)
	}
	c.appendLine(filepath.Join(a.dir, "commands.log"), fmt.Sprintf("%s srun: %s", c.now().UTC().Format(time.RFC3339Nano), shellQuote(argv)))

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
	srun, err := c.starter.Start(launch.Spec{
		Role: "srun", Argv: argv, Env: nodeEnv(), Dir: c.workdir, Stdin: inR, Stdout: outW,
		StderrPath: filepath.Join(a.dir, "srun.err"),
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

	reports := make(chan Report)
	decodeErr := make(chan error, 1)
	go func() {
		// ends at the end of srun's output: srun exited, or closed it
		defer close(reports)
		dec := json.NewDecoder(outR)
		for {
			var rep Report
			if err := dec.Decode(&rep); err != nil {
				decodeErr <- err
				return
			}
			reports <- rep
		}
	}()

	var last *Report  // the last transition recorded
	stepSeen := false // the node-side runner runs: it reported its step
	until := a.opts.until
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
				c.log.Error().Err(err).Str("run", a.run.ID).Msg("record the node's report")
				a.sendNode(inW, nodeCmdStop)
				a.stopSrun(srun)
				c.flights.remove(a.key())
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
				if rep.To == state.Measuring && a.opts.measuring != nil {
					a.opts.measuring <- a.run.ID
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
			cmd := nodeCmdStop
			if errors.Is(context.Cause(ctx), errBudgetExhausted) {
				cmd = nodeCmdBudget
			}
			a.sendNode(inW, cmd)
			done = nil
		case <-until:
			a.sendNode(inW, nodeCmdUntil)
			until = nil
		}
	}
	inW.Close()
	select {
	case <-srun.Done():
	case <-time.After(srunGrace):
		a.stopSrun(srun)
	}
	c.flights.remove(a.key())
	ex := srun.Exit()
	if last != nil && last.To.Terminal() {
		return outcome{state: last.To, reason: last.Reason, detail: last.Message,
			interrupted: last.To == state.Interrupted, earlyBackground: last.EarlyBackground}
	}
	derr := <-decodeErr
	detail := fmt.Sprintf("srun %s before the attempt's end was reported", exitText(ex))
	if derr != nil && !errors.Is(derr, os.ErrClosed) && !errors.Is(derr, io.EOF) {
		detail += fmt.Sprintf(" (its output: %v)", derr)
	}
	if tail, err := readTail(filepath.Join(a.dir, "srun.err"), 2048); err == nil && len(tail) > 0 {
		detail += ": " + lastLine(tail)
	}
	return a.endUnreported(ctx, state.ReasonStepLost, detail)
}

// endUnreported ends an attempt whose step ended without reporting its
// end (step-lost), or whose reports could not be recorded (reason): its
// GPU time is charged to now from the server's start (the node may have
// held them until the step ended), and it fails with reason, or is
// interrupted when the controller had asked it to stop.
func (a *attempt) endUnreported(ctx context.Context, reason state.Reason, detail string) outcome {
	c := a.c
	at, err := c.store.Attempt(a.run.ID, a.n)
	if err != nil {
		return a.harness(err)
	}
	a.state = at.State
	if srv := serverProc(at); srv != nil && !charged(at) {
		amt := budget.Charge(len(a.gpuIDs), srv.StartedAt, c.now())
		a.setFigure("gpu_seconds", amt)
		a.pendLedger = append(a.pendLedger, state.LedgerEntry{Kind: "charge", Run: a.run.ID, Attempt: a.n, GPUSeconds: amt,
			Note: "server start to the end of its lost step"})
	}
	if ctx.Err() != nil {
		why := state.ReasonInterrupted
		if errors.Is(context.Cause(ctx), errBudgetExhausted) {
			why = state.ReasonBudgetExhausted
		}
		if err := a.transition(state.Interrupted, why, "the step ended while stopping: "+detail, nil); err != nil {
			return a.harness(err)
		}
		return outcome{state: state.Interrupted, reason: why, detail: detail, interrupted: true}
	}
	a.gate(gates.Verdict{Gate: "cleanup", Verdict: gates.Error, At: c.now(),
		Detail: "the node's GPUs were not read after the step ended: " + detail})
	// the legal path from where the attempt was to failed
	path := map[state.AttemptState][]state.AttemptState{
		state.Starting: {state.Stopping, state.Cleanup}, state.Ready: {state.Stopping, state.Cleanup},
		state.Measuring: {state.Stopping, state.Cleanup}, state.Stopping: {state.Cleanup},
	}[a.state]
	for _, to := range path {
		why, msg := state.Reason(""), "the step's processes are Slurm's to end; its GPUs not proven free"
		if to == state.Stopping {
			why, msg = reason, detail
		}
		if err := a.transition(to, why, msg, nil); err != nil {
			return a.harness(err)
		}
	}
	return a.terminal(state.Failed, reason, detail)
}

// charged says whether the attempt's GPU time is on its figures already
// (the node reported its charge).
func charged(at state.Attempt) bool {
	_, ok := at.Figures["gpu_seconds"]
	return ok
}

// applyReport records one report of the node-side runner.
func (a *attempt) applyReport(rep Report) error {
	c := a.c
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
		_, err = c.store.UpdateAttempt(a.run.ID, a.n, func(at *state.Attempt) error {
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
			c.flights.add(a.key(), len(a.gpuIDs), rep.Proc.StartedAt)
		}
		return storeRecorder{c}.procStarted(a.run.ID, a.n, *rep.Proc)
	case "transition":
		if !rep.To.Valid() {
			return fmt.Errorf("a transition to unknown state %q", rep.To)
		}
		if err := c.recordTransition(a.run.ID, a.n, rep); err != nil {
			return err
		}
		a.state = rep.To
		for _, l := range rep.Ledger {
			if l.Kind == state.LedgerCharge {
				c.flights.remove(a.key())
			}
		}
		c.log.Info().Str("run", a.run.ID).Int("attempt", a.n).Str("to", string(rep.To)).Str("reason", string(rep.Reason)).Str("executor", "slurm").Msg(rep.Message)
		return nil
	}
	return fmt.Errorf("a report of unknown kind %q", rep.Kind)
}

// sendNode writes one command to the node-side runner. A runner that is
// gone cannot read it; its step's end says the rest.
func (a *attempt) sendNode(w *os.File, cmd string) {
	if _, err := w.WriteString(cmd + "\n"); err != nil {
		a.c.log.Warn().Err(err).Str("run", a.run.ID).Str("command", cmd).Msg("tell the node-side runner")
	}
}

// stopSrun ends srun by its pid alone, never its process group: srun's
// own SIGTERM ends its step's tasks, and SIGKILL of srun cancels the step;
// killing srun's group (srun and its helper) would orphan the step, which
// would run on. Each signal is recorded.
func (a *attempt) stopSrun(p *launch.Proc) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		rec, err := launch.Signal(a.c.boot, p.Identity, p.Role, sig)
		if err != nil {
			break // gone: the reaper reports its exit
		}
		a.pendSigs = append(a.pendSigs, toSignals([]launch.SignalRecord{rec})...)
		select {
		case <-p.Done():
			return
		case <-time.After(srunStopGrace):
		}
	}
	select {
	case <-p.Done():
	case <-time.After(stopSlack):
		a.c.log.Error().Str("run", a.run.ID).Int("pid", p.PID).Msg("srun did not exit after SIGKILL")
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
	return protocols.ParseCPUList(s)
}

// lastLine is the last line of b, trimmed.
func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return strings.TrimSpace(s)
}
