package attempt

import (
	"context"
	"time"

	"warden/pkg/attempt/ownprocs"
	"warden/pkg/gates"
	"warden/pkg/gpu/sample"
	"warden/pkg/launch"
	"warden/pkg/phasefile"
	"warden/pkg/record"
	"warden/pkg/state"
	"warden/protocols"
)

// Attempt is the working state of one attempt.
type Attempt struct {
	// rec is the attempt's record: its transitions, gates and figures
	rec *record.Record
	env *Env
	// recorder is where rec writes, and where a started process is
	// recorded while the server is probed
	recorder record.Recorder
	// needDirs, when set, are the needed runs' result directories as the
	// controller resolved them (a node-side runner has no database)
	needDirs map[string]string
	plan     *protocols.Plan // the plan the attempt started under, kept through an amendment
	run      protocols.Run
	n        int
	dir      string
	slots    []protocols.SlotInfo
	gpuIDs   []int
	cpus     []int
	port     int
	vars     map[string]string
	environ  []string // the processes' environment
	server   *launch.Proc
	client   *launch.Proc
	started  time.Time // server start, for the GPU charge
	phases   *phasefile.Watcher
	quarant  bool

	exited map[int]bool // pids whose exit is noted
	opts   Options
	// drainVerdict is the drain gate once the client reported done
	drainVerdict *gates.Verdict
	sampler      *sample.Sampler
	hostRecs     []chan map[string]float64 // the figures of host records taken beside the attempt (beside)
	// own judges the processes the sampler sees on the GPUs (nil when
	// nothing samples); foreign is its verdict once taken, to fail the
	// attempt with.
	own     *ownprocs.Set
	foreign *gates.Verdict
	// ctx is the attempt's context; its cause says why it ended early
	// (ErrBudgetExhausted, or an operator's stop).
	ctx context.Context
	// stopErr holds what went wrong ending the attempt's processes (a
	// signal or cgroup operation that failed): a cleanup gate that then
	// fails is cleanup-failed, not a timeout.
	stopErr   error
	recording chan struct{} // closed once the last process started is recorded
}

// New prepares attempt s to run in env, its records written to rec. The
// attempt exists in the records already (created); Execute runs it.
func New(env *Env, rec record.Recorder, s Spec) *Attempt {
	a := &Attempt{env: env, recorder: rec, needDirs: s.NeedDirs, plan: s.Plan, run: s.Run, n: s.N, dir: s.Dir, slots: s.Slots,
		gpuIDs: s.GPUIDs, cpus: s.CPUs, port: s.Port, opts: s.Options}
	a.rec = record.New(record.Config{Recorder: rec, Dir: env.Dir, Log: env.Log, Now: env.Now, DiskFull: env.DiskFull, StorageFault: env.StorageFault, FlushFiles: env.FlushFiles}, s.Run.ID, s.N, s.Dir)
	return a
}

// Execute runs the attempt from a fresh server to a terminal state. Every
// step is a recorded transition; nothing slow happens inside a database
// transaction. ctx's end stops it (interrupted, or budget-exhausted when
// its cause is ErrBudgetExhausted). Each phase returns ok false with the
// attempt's outcome once it ended the attempt.
func (a *Attempt) Execute(ctx context.Context) Outcome {
	a.ctx = ctx
	// Reserved, preflight and starting are one commit, before the server
	// starts: preflight only reads (the GPUs, the host, the port) and
	// writes the attempt's own files.
	a.rec.Pass(state.Reserved, "budget reserved for the wave", nil)
	if ctx.Err() != nil {
		return a.interrupt("stopped before preflight")
	}
	readings, out, ok := a.preflight()
	if !ok {
		return out
	}
	if out, ok := a.startServer(ctx, readings); !ok {
		return out
	}
	if out, ok := a.startClient(); !ok {
		return out
	}
	defer a.phases.Close()
	reason, detail := a.measure(ctx)
	a.recordPostMeasure()
	if reason == state.ReasonInterrupted {
		return a.stopThenInterrupt(detail)
	}
	if reason != "" {
		return a.stopThenFail(reason, detail)
	}
	return a.stopThenValidate()
}
