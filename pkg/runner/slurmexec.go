package runner

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"warden/pkg/attempt"

	"warden/pkg/launch"
	"warden/pkg/slurm"
	"warden/protocols"
)

// slurmCommandTimeout bounds one query or cancellation (squeue, sacct,
// scancel, salloc's grant aside).
const slurmCommandTimeout = 60 * time.Second

// slurmClient runs the cluster's commands through the runner's launcher.
func (c *Runner) slurmClient() slurm.Client {
	return slurm.Client{Exec: func(ctx context.Context, argv []string) ([]byte, error) {
		out, _, err := captureOutput(ctx, c.starter, argv)
		return out, err
	}}
}

// allocate asks Slurm for one allocation on one node with the GPUs and
// CPUs of the given slots (a co-location check's target and
// backgrounds), for their steps to run in side by side. The allocation
// is cancelled with releaseAllocation.
func (x slurmExecutor) allocate(ctx context.Context, name string, slots []protocols.SlotInfo) (allocation, error) {
	c := x.c
	gpus, cpus := 0, 0
	for _, s := range slots {
		gpus += len(s.GPUs)
		n, _ := protocols.ParseCPUList(s.CPUs)
		cpus += len(n)
	}
	argv := x.cfg.Options.SallocArgv(name, gpus, cpus)
	// salloc waits at most the queue bound; a little longer for itself
	ctx, cancel := context.WithTimeout(ctx, time.Duration(x.cfg.Options.QueueTimeoutS+60)*time.Second)
	defer cancel()
	_, stderr, err := captureOutput(ctx, c.starter, argv)
	if err != nil {
		return allocation{}, err
	}
	id, err := slurm.AllocationGranted(stderr)
	return allocation{ID: id, Name: name}, err
}

// releaseAllocation cancels an allocation.
func (c *Runner) releaseAllocation(ctx context.Context, a allocation) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), slurmCommandTimeout)
	defer cancel()
	if err := c.slurmClient().Cancel(ctx, a.ID); err != nil {
		c.log.Warn().Err(err).Str("job", a.ID).Msg("cancel the co-location allocation")
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
