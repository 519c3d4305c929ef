package runner_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"warden/pkg/launch"
	"warden/pkg/runner"
	"warden/pkg/state"
)

// newRunnerWith is newRunner with its Config changed by edit first.
func (c *campaign) newRunnerWith(edit func(*runner.Config)) *runner.Runner {
	c.t.Helper()
	logf, err := os.OpenFile(c.logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { logf.Close() })
	cfg := runner.Config{
		Dir: c.dir, Plan: c.plan, Store: c.store, GPUs: c.gpus,
		Launcher: &launch.Launcher{Reaper: testReaper},
		Log:      zerolog.New(logf).With().Timestamp().Logger(),
		UID:      os.Getuid(), Workdir: filepath.Dir(c.protocol), ProtocolPath: c.protocol,
		FakeGPUDir: c.gpuDir,
	}
	edit(&cfg)
	rn, err := runner.New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	return rn
}

// TestResumeHoldsRunsThatShareTheCause (issue 39, friction 1): one bad
// server flag shared by every run. The first wave fails server-exit and
// the campaign stops; a resume with nothing fixed launches no attempt of
// the run not tried yet, which starts the same server, and stops
// awaiting-amendment naming it and the cause; a resume that asks for it
// (RetrySharedCause) tries it.
func TestResumeHoldsRunsThatShareTheCause(t *testing.T) {
	t.Parallel()
	c := newCampaign(t, protocol{patterns: 3, serverArgs: `, --no-such-flag`})
	c.run()
	c.wantStopped(state.StopForRun(state.ReasonServerExit))
	c.wantAttempts("p1.saturation", failed(state.ReasonServerExit))
	c.wantAttempts("p2.saturation", failed(state.ReasonServerExit))
	c.wantAttempts("p3.saturation")

	c.run() // the resume, nothing fixed
	cp := c.wantStopped(state.StopAwaitingAmendment)
	c.wantAttempts("p3.saturation")
	if !strings.Contains(cp.StopDetail, "held, not tried: p3.saturation share the cause of p1.saturation attempt 1 (server-exit, server ") ||
		!strings.Contains(cp.StopDetail, "--retry-shared-cause") {
		t.Fatalf("stop detail: %s", cp.StopDetail)
	}

	rn := c.newRunnerWith(func(cfg *runner.Config) { cfg.RetrySharedCause = true })
	c.start(rn).wait(t)
	c.wantStopped(state.StopForRun(state.ReasonServerExit))
	c.wantAttempts("p3.saturation", failed(state.ReasonServerExit))
	c.wantClean()
}
