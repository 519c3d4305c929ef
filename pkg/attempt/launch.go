package attempt

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"warden/internal/cpulist"
	"warden/internal/shellquote"
	"warden/pkg/atomicfile"
	"warden/pkg/dirlayout"
	"warden/pkg/failpoint"
	"warden/pkg/gpu"
	"warden/pkg/launch"
	"warden/pkg/record"
	"warden/pkg/state"
	"warden/protocols"
)

// prepareCommands fixes the attempt's launch variables and environment
// and starts writing environment.json: the channel it returns gives the
// write's error once the file is durable.
func (a *Attempt) prepareCommands() (<-chan error, error) {
	env := a.env
	gpuStrs := make([]string, len(a.gpuIDs))
	for i, g := range a.gpuIDs {
		gpuStrs[i] = strconv.Itoa(g)
	}
	numa := ""
	if a.slots[0].NUMA != nil {
		numa = strconv.Itoa(*a.slots[0].NUMA)
	}
	a.vars = map[string]string{
		"CAMPAIGN_DIR": env.Dir,
		"RUN_DIR":      filepath.Dir(a.dir),
		"ATTEMPT_DIR":  a.dir,
		"ATTEMPT":      strconv.Itoa(a.n),
		"GPU_IDS":      strings.Join(gpuStrs, ","),
		"GPU_COUNT":    strconv.Itoa(len(a.gpuIDs)),
		"CPUS":         cpulist.Format(a.cpus),
		"NUMA_NODE":    numa,
		"PORT":         strconv.Itoa(a.port),
		"SLOT":         strings.Join(protocols.SlotNames(a.slots), "+"),
		"REGIME":       a.opts.Regime,
		"PHASE_FILE":   filepath.Join(a.dir, "phases.jsonl"),
		"PROTOCOL_DIR": filepath.Dir(env.ProtocolPath),
		"WORKDIR":      env.Workdir,
	}
	if a.needDirs == nil && env.NeedDirs != nil {
		var err error
		if a.needDirs, err = env.NeedDirs(a.run); err != nil {
			return nil, err
		}
	}
	for as, run := range a.run.NeedVars {
		res, ok := a.needDirs[as]
		if !ok {
			return nil, fmt.Errorf("run %s needs %s: no result directory given", a.run.ID, run)
		}
		a.vars[as] = res
	}
	if pt := a.run.Capacity; pt != nil {
		rate, err := pt.LaunchRate()
		if err != nil {
			return nil, fmt.Errorf("run %s: %w", a.run.ID, err)
		}
		a.vars[protocols.RateVar] = rate
	}
	cuda := a.vars["GPU_IDS"]
	if env.StepCUDA != "" {
		cuda = env.StepCUDA
	}
	environ := append(os.Environ(),
		"CUDA_VISIBLE_DEVICES="+cuda,
		"WARDEN_RUN_ID="+a.run.ID,
		"WARDEN_ATTEMPT="+a.vars["ATTEMPT"],
		"WARDEN_RUN_DIR="+a.vars["RUN_DIR"],
		a.marker(),
		"WARDEN_CAMPAIGN_DIR="+env.Dir,
		"WARDEN_PORT="+a.vars["PORT"],
		"WARDEN_GPU_IDS="+a.vars["GPU_IDS"],
		"WARDEN_CPUS="+a.vars["CPUS"],
		"WARDEN_PHASE_FILE="+a.vars["PHASE_FILE"],
		"WARDEN_DRAIN_ALLOWANCE_S="+strconv.FormatFloat(a.run.DrainS, 'f', -1, 64),
		"WARDEN_DRAIN_WATCHDOG_S="+strconv.FormatFloat(a.run.WatchdogS, 'f', -1, 64),
	)
	if env.FakeGPUDir != "" {
		environ = append(environ, gpu.FakeDirEnv+"="+env.FakeGPUDir)
	}
	a.environ = environ
	// environment.json is written beside the transition to starting; the
	// channel gives the write's error once it is done.
	rec := map[string]any{
		"variables": maps.Clone(a.vars), "gpu_backend": env.GPUs.Name(), "workdir": env.Workdir,
		"protocol_sha256": a.plan.Protocol.SHA256, "run": a.run.ID, "attempt": a.n,
	}
	written := make(chan error, 1)
	go func() {
		written <- atomicfile.WriteJSON(filepath.Join(a.dir, "environment.json"), rec, 0o644, atomicfile.Beneath(env.Dir))
	}()
	return written, nil
}

// start launches the server or the client in its own process group and
// cgroup, pinned to the slot's CPUs from its first instruction, and records
// its identity before anything acts on it (the server's while it is probed).
func (a *Attempt) start(role string, cmd protocols.CommandSpec, extraEnv map[string]string) (*launch.Proc, error) {
	p, proc, err := a.launch(role, cmd, extraEnv)
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := a.recorder.ProcStarted(a.run.ID, a.n, proc); err != nil {
			a.env.Log.Error().Err(err).Str("run", a.run.ID).Str("role", role).Msg("record a process started")
		}
	}()
	if a.recording = done; role != "server" {
		a.recorded()
	}
	return p, nil
}

// startNoted is start for a process whose record goes with the transition
// that follows at once: noted, not written alone.
func (a *Attempt) startNoted(role string, cmd protocols.CommandSpec, extraEnv map[string]string) (*launch.Proc, error) {
	p, proc, err := a.launch(role, cmd, extraEnv)
	if err == nil {
		a.rec.NoteProc(proc)
	}
	return p, err
}

// launch starts a process of the attempt (start) and returns it with its
// record.
func (a *Attempt) launch(role string, cmd protocols.CommandSpec, extraEnv map[string]string) (*launch.Proc, state.Proc, error) {
	a.recorded()
	argv, err := cmd.Expand(a.vars)
	if err != nil {
		return nil, state.Proc{}, err
	}
	env := append([]string(nil), a.environ...)
	for _, k := range slices.Sorted(maps.Keys(extraEnv)) {
		v, err := protocols.Expand(extraEnv[k], a.vars)
		if err != nil {
			return nil, state.Proc{}, err
		}
		env = append(env, k+"="+v)
	}
	record.AppendLine(a.env.Dir, filepath.Join(a.dir, "commands.log"), fmt.Sprintf("%s %s: %s", a.env.Now().UTC().Format(time.RFC3339Nano), role, shellquote.Join(argv)), a.env.Log)
	if a.own != nil {
		a.own.LockStart() // a sample that sees it waits until it is known
	}
	p, err := a.env.Launcher.Start(launch.Spec{
		Role: role, Argv: argv, Env: env, Dir: a.env.Workdir,
		StdoutPath: dirlayout.Stdout(a.dir, role), StderrPath: dirlayout.Stderr(a.dir, role),
		CPUs:   a.cpus,
		Cgroup: LeafName(a.run.ID, a.n, role),
		Stop:   a.stopOptions(role),
	})
	if a.own != nil {
		if err == nil {
			a.own.Register(p)
		}
		a.own.UnlockStart()
	}
	if err != nil {
		return nil, state.Proc{}, err
	}
	failpoint.Hit(role + "-started-unrecorded")
	return p, state.Proc{Role: role, PID: p.PID, StartTime: p.StartTime, BootID: p.BootID,
		PGID: p.PGID, Cgroup: p.Cgroup, Argv: argv, StartedAt: p.Started}, nil
}

// recorded waits until the last process started is recorded.
func (a *Attempt) recorded() {
	if a.recording != nil {
		<-a.recording
	}
}
