package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"warden/pkg/loadgen"
)

// stressFlags are the flags of "loadgen run" for the methodology's stress
// loads (docs/loadgen.md, "Stress loads"); bursts are --arrival burst:N.
type stressFlags struct {
	consumeRTF, consumeTokensPerS float64
	pauseAfterS, pauseS           float64
	cancelShare, releaseBoundS    float64
}

func bindStressFlags(cmd *cobra.Command, f *stressFlags) {
	fl := cmd.Flags()
	fl.Float64Var(&f.consumeRTF, "consume-rtf", 0, "slow consumer: read streamed audio no faster than this multiple of real time (1.0: real time; 0: as fast as it comes)")
	fl.Float64Var(&f.consumeTokensPerS, "consume-tokens-per-s", 0, "slow consumer: read text token chunks no faster than this many a second (0: as fast as they come)")
	fl.Float64Var(&f.pauseAfterS, "pause-after-s", 0, "pause: the first chunk read this many seconds or more after the send starts the pause (needs --pause-s)")
	fl.Float64Var(&f.pauseS, "pause-s", 0, "pause: seconds the client reads nothing from each stream, then resumes (0: no pause)")
	fl.Float64Var(&f.cancelShare, "cancel-after-first-chunk", 0, "share of requests, chosen from --workload-seed, the client cancels after their first output chunk (client-cancelled); then the server's /metrics must show them released")
	fl.Float64Var(&f.releaseBoundS, "cancel-release-bound-s", 0, fmt.Sprintf("seconds after the drain within which the server's running-requests gauge must read 0 (0: %.0f plus the lag of the gauge read: vLLM's is refreshed by a probe request, SGLang's lags 33 s)", loadgen.DefaultReleaseBound.Seconds()))
}

// apply puts the flags into the run's configuration.
func (f stressFlags) apply(cfg *loadgen.Config) error {
	s := loadgen.Stress{ConsumeRTF: f.consumeRTF, ConsumeTokensPerS: f.consumeTokensPerS, CancelAfterFirstChunk: f.cancelShare}
	for _, d := range []struct {
		name string
		s    float64
		to   *time.Duration
	}{{"pause-after-s", f.pauseAfterS, &s.PauseAfter}, {"pause-s", f.pauseS, &s.Pause}, {"cancel-release-bound-s", f.releaseBoundS, &s.ReleaseBound}} {
		v, err := secondsFlag(d.name, d.s)
		if err != nil {
			return err
		}
		*d.to = v
	}
	if err := s.Check(); err != nil {
		return refused("stress flags: %v", err)
	}
	cfg.Stress = s
	return nil
}

// printStress prints the stress block's outcome after the run's line,
// when the run had stress options.
func printStress(res *loadgen.Result) {
	s := res.Stress
	if s == nil {
		return
	}
	release := "none"
	if s.Release != nil {
		release = s.Release.Verdict
	}
	fmt.Printf("loadgen: stress held_p99_ms=%.3f paused=%d paused_failed=%d cancel_selected=%d cancelled=%d release=%s findings=%s\n",
		s.Held.P99, s.Paused, s.PausedFailed, s.CancelSelected, s.Cancelled, release, strings.Join(s.Findings, ","))
}
