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

	"warden/pkg/launch"
	"warden/pkg/slurm"
)

// slurmCommandTimeout bounds one query or cancellation (squeue, sacct,
// scancel, salloc's grant aside).
const slurmCommandTimeout = 60 * time.Second

// slurmClient runs the cluster's commands through the runner's launcher.
func (c *Runner) slurmClient() slurm.Client {
	return slurm.Client{Exec: func(ctx context.Context, argv []string) ([]byte, error) {
		return captureOutput(ctx, c.starter, argv)
	}}
}

// captureOutput runs argv through the launcher (its reaper collects the
// exit) and returns its standard output; a non-zero exit is an error that
// carries its standard error. The end of ctx stops it.
func captureOutput(ctx context.Context, l *launch.Launcher, argv []string) ([]byte, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer outR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		outW.Close()
		return nil, err
	}
	defer errR.Close()
	p, err := l.Start(launch.Spec{Role: argv[0], Argv: argv, Stdout: outW, Stderr: errW,
		Stop: launch.StopOptions{Grace: time.Second, GroupGrace: time.Second}})
	outW.Close()
	errW.Close()
	if err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); io.Copy(&stdout, io.LimitReader(outR, 64<<20)) }()
	go func() { defer wg.Done(); io.Copy(&stderr, io.LimitReader(errR, 1<<20)) }()
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
		return stdout.Bytes(), fmt.Errorf("%s: %s: %s", strings.Join(argv, " "), exitText(ex), strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), ctx.Err()
}
