package slurmexec

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"warden/internal/cpulist"
	"warden/pkg/attempt"
	"warden/pkg/launch"
	"warden/pkg/record"
	"warden/pkg/slurm"
	"warden/pkg/state"
	"warden/protocols"
)

// Store is what the executor reads and writes of the campaign's records
// beside the transitions its Recorder writes: the step's identity and
// command line, and an attempt's state when its step ended unreported.
// *state.Store satisfies it.
type Store interface {
	UpdateAttempt(run string, n int, mutate func(*state.Attempt) error) (state.Attempt, error)
	Attempt(run string, n int) (state.Attempt, error)
}

// Executor runs a campaign's attempts as Slurm steps (Config).
type Executor struct {
	cfg   Config
	store Store
	log   zerolog.Logger
	l     *launch.Launcher
}

// New is the Slurm executor of a campaign whose records are store; it runs
// the cluster's commands through l.
func New(cfg Config, store Store, l *launch.Launcher, log zerolog.Logger) *Executor {
	return &Executor{cfg: cfg, store: store, l: l, log: log}
}

// Allocation is a Slurm job allocated for several attempts' steps (a
// co-location check's); zero: each attempt's step is a job of its own.
type Allocation struct {
	ID, Name string
}

// Run runs attempt s, created in the records, as a Slurm step (in alloc
// when it is set) and records what its node-side runner reports to rec,
// the campaign's database. env.NeedDirs and env.InFlight are required.
func (x *Executor) Run(ctx context.Context, env *attempt.Env, rec record.Recorder, s attempt.Spec, alloc Allocation) attempt.Outcome {
	r := record.New(record.Config{Recorder: rec, Dir: env.Dir, Log: env.Log, Now: env.Now, DiskFull: env.DiskFull, FlushFiles: env.FlushFiles}, s.Run.ID, s.N, s.Dir)
	st := &step{Record: r, x: x, env: env, rec: rec, spec: s, alloc: alloc}
	return st.execute(ctx)
}

// commandTimeout bounds one query or cancellation (squeue, sacct,
// scancel, salloc's grant aside).
const commandTimeout = 60 * time.Second

// Client runs the cluster's commands through l.
func Client(l *launch.Launcher) slurm.Client {
	return slurm.Client{Exec: func(ctx context.Context, argv []string) ([]byte, error) {
		out, _, err := captureOutput(ctx, l, argv)
		return out, err
	}}
}

// Allocate asks Slurm for one allocation on one node with the GPUs and
// CPUs of the given slots (a co-location check's target and
// backgrounds), for their steps to run in side by side: the block of unit
// shares the node, each step its own GPUs and CPUs of it (co-location and
// CPU maps mean what they mean on one host). Release cancels it.
func (x *Executor) Allocate(ctx context.Context, unit int, slots []protocols.SlotInfo) (Allocation, error) {
	name := slurm.CampaignPrefix(x.cfg.Campaign) + "colocation.u" + strconv.Itoa(unit)
	gpus, cpus := 0, 0
	for _, s := range slots {
		gpus += len(s.GPUs)
		n, _ := cpulist.Parse(s.CPUs)
		cpus += len(n)
	}
	argv := x.cfg.Options.SallocArgv(name, gpus, cpus)
	// salloc waits at most the queue bound; a little longer for itself
	ctx, cancel := context.WithTimeout(ctx, time.Duration(x.cfg.Options.QueueTimeoutS+60)*time.Second)
	defer cancel()
	_, stderr, err := captureOutput(ctx, x.l, argv)
	if err != nil {
		return Allocation{}, err
	}
	id, err := slurm.AllocationGranted(stderr)
	return Allocation{ID: id, Name: name}, err
}

// Release cancels an allocation.
func (x *Executor) Release(ctx context.Context, a Allocation) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commandTimeout)
	defer cancel()
	if err := Client(x.l).Cancel(ctx, a.ID); err != nil {
		x.log.Warn().Err(err).Str("job", a.ID).Msg("cancel the co-location allocation")
	}
}

// captureOutput runs argv through the launcher (its reaper collects the
// exit) and returns its standard output; a non-zero exit is an error that
// carries its standard error. The end of ctx stops it.
func captureOutput(ctx context.Context, l *launch.Launcher, argv []string) (stdout, stderr []byte, err error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	defer outR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		outW.Close()
		return nil, nil, err
	}
	defer errR.Close()
	p, err := l.Start(launch.Spec{Role: argv[0], Argv: argv, Stdout: outW, Stderr: errW,
		Stop: launch.StopOptions{Grace: time.Second, GroupGrace: time.Second}})
	outW.Close()
	errW.Close()
	if err != nil {
		return nil, nil, err
	}
	var ob, eb bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); io.Copy(&ob, io.LimitReader(outR, 64<<20)) }()
	go func() { defer wg.Done(); io.Copy(&eb, io.LimitReader(errR, 1<<20)) }()
	select {
	case <-p.Done():
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		p.Shutdown(sctx)
		cancel()
	}
	<-p.Done()
	wg.Wait()
	if ex := p.Exit(); ex.Code != 0 || ex.Signal != "" {
		return ob.Bytes(), eb.Bytes(), fmt.Errorf("%s: %s: %s", strings.Join(argv, " "), attempt.ExitText(ex), strings.TrimSpace(eb.String()))
	}
	return ob.Bytes(), eb.Bytes(), ctx.Err()
}
