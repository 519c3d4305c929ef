package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"warden/pkg/attempt"
	"warden/pkg/gates"
	"warden/pkg/outcome"
	"warden/pkg/phasefile"
	"warden/pkg/safefile"
	"warden/pkg/state"
	"warden/pkg/validator"
	"warden/protocols"
)

// runColocation executes one block of a co-location check (A-P3-1): the
// background loads start first and keep serving while the target's loads
// run back to back on its slot; then the backgrounds are stopped and the
// check's gate is judged. The solo block is the target alone.
func (c *Runner) runColocation(ctx context.Context, u *unitRun) unitResult {
	res := unitResult{unit: u.Unit}
	slotByName := map[string]protocols.SlotInfo{}
	for _, s := range c.currentPlan().Slots {
		slotByName[s.Name] = s
	}
	var bgRuns, targets []protocols.Run
	for _, r := range u.Runs {
		if r.Kind == "background" {
			bgRuns = append(bgRuns, r)
		} else {
			targets = append(targets, r)
		}
	}
	interrupted := func() unitResult { res.interrupted = true; return res }
	fail := func(run string, out attempt.Outcome) unitResult {
		// a co-location block is not retried: its gate judges the block
		// as it ran
		res.failedRun, res.reason, res.detail = run, out.Reason, out.Detail
		res.verdict = outcome.Next(out.State, out.Reason, 0, 0)
		return res
	}
	x, release, err := c.colocationExecutor(ctx, u, slotByName, len(bgRuns) > 0)
	if err != nil {
		if ctx.Err() != nil {
			return interrupted()
		}
		return fail(u.Runs[0].ID, attempt.Outcome{State: state.Failed, Reason: state.ReasonStepLost, Detail: "allocation for the co-location block: " + err.Error()})
	}
	defer release()

	// The backgrounds, until every one of them measures.
	bg := c.startBackgrounds(ctx, x, bgRuns, slotByName)
	defer bg.cancel()
	if e, ok := bg.serving(); !ok {
		bg.abort()
		if e.out.Interrupted || ctx.Err() != nil {
			return interrupted()
		}
		return fail(e.run, e.out)
	}
	if len(bgRuns) > 0 {
		c.log.Info().Int("backgrounds", len(bgRuns)).Str("regime", u.Regime).Msg("co-location backgrounds serving; running the target")
	}

	// The targets, back to back beside them.
	for _, r := range targets {
		out := c.runAttempt(ctx, x, r, []protocols.SlotInfo{slotByName[r.Slot]}, attempt.Options{Regime: r.Regime})
		if out.Interrupted {
			bg.abort()
			return interrupted()
		}
		if out.State != state.Complete && out.State != state.Quarantined {
			bg.abort()
			return fail(r.ID, out)
		}
	}

	// The backgrounds' ends, then the gate.
	var early []string // backgrounds that ended before their target did
	for _, o := range bg.finish() {
		switch {
		case o.out.Interrupted:
			return interrupted()
		case o.out.Reason == state.ReasonClientFailed && o.out.EarlyBackground:
			early = append(early, o.run)
		case o.out.State != state.Complete && o.out.State != state.Quarantined:
			return fail(o.run, o.out)
		}
	}
	if u.Gate == nil || ctx.Err() != nil {
		return res
	}
	if len(early) > 0 {
		// A-P3-1: the backgrounds "remain active through the target's
		// warm-up, clean interval, profile windows, and recovery
		// intervals"; a target measured without them says nothing of the
		// regime. The check fails (and the next regime is tried); the
		// background attempts stay failed beside it.
		c.recordColocation(*u.Gate, gates.Verdict{Verdict: gates.Fail, At: c.now(),
			Detail:  fmt.Sprintf("background load %s ended before the target's last profile window", strings.Join(early, ", ")),
			Figures: map[string]float64{"backgrounds_ended_early": float64(len(early))}})
		return res
	}
	c.judgeColocation(*u.Gate)
	return res
}

// colocationExecutor is the executor a co-location block of u runs with,
// and release, which gives back what it holds. On Slurm a block with
// backgrounds runs in one allocation on one node: the target and its
// backgrounds share the node, each step its own GPUs and CPUs of it
// (co-location and CPU maps mean what they mean on one host).
func (c *Runner) colocationExecutor(ctx context.Context, u *unitRun, slotByName map[string]protocols.SlotInfo, backgrounds bool) (executor, func(), error) {
	if !backgrounds {
		return c.exec, func() {}, nil
	}
	var slots []protocols.SlotInfo
	seen := map[string]bool{}
	for _, r := range u.Runs {
		if !seen[r.Slot] {
			seen[r.Slot] = true
			slots = append(slots, slotByName[r.Slot])
		}
	}
	return c.exec.colocation(ctx, u.Unit, slots)
}

// backgrounds are a co-location block's background loads, each attempt
// run in its own goroutine, which ends when the attempt does. Closing
// until ends them normally once every target is done; on a failure they
// are cancelled instead and end interrupted, so that a restarted block
// runs them again beside its target.
type backgrounds struct {
	n         int
	until     chan struct{}
	cancel    context.CancelFunc
	measuring chan string
	ended     chan bgEnd
	wg        sync.WaitGroup
}

// bgEnd is how one background's attempt ended.
type bgEnd struct {
	run string
	out attempt.Outcome
}

// startBackgrounds starts the attempts of runs through x.
func (c *Runner) startBackgrounds(ctx context.Context, x executor, runs []protocols.Run, slotByName map[string]protocols.SlotInfo) *backgrounds {
	bctx, cancel := context.WithCancel(ctx)
	b := &backgrounds{n: len(runs), until: make(chan struct{}), cancel: cancel,
		measuring: make(chan string, len(runs)), ended: make(chan bgEnd, len(runs))}
	for _, r := range runs {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			out := c.runAttempt(bctx, x, r, []protocols.SlotInfo{slotByName[r.Slot]}, attempt.Options{Regime: r.Regime, Measuring: b.measuring, Until: b.until})
			b.ended <- bgEnd{r.ID, out}
		}()
	}
	return b
}

// serving waits until every background's client measures; ok false with
// the first one that ended before that.
func (b *backgrounds) serving() (bgEnd, bool) {
	for n := 0; n < b.n; {
		select {
		case <-b.measuring:
			n++
		case e := <-b.ended:
			return e, false
		}
	}
	return bgEnd{}, true
}

// abort cancels the backgrounds and waits for their attempts' ends.
func (b *backgrounds) abort() {
	b.cancel()
	b.collect()
}

// finish ends the backgrounds normally (their targets are done) and
// returns how each attempt ended.
func (b *backgrounds) finish() []bgEnd {
	close(b.until)
	return b.collect()
}

// collect waits for every background's attempt and returns the ends not
// yet taken.
func (b *backgrounds) collect() []bgEnd {
	b.wg.Wait()
	var outs []bgEnd
	for len(b.ended) > 0 {
		outs = append(outs, <-b.ended)
	}
	return outs
}

// judgeColocation compares the co-located target with the solo target
// (throughput within the tolerance, and the validator's figures) and
// records the gate's verdict; a later regime runs only after a fail.
func (c *Runner) judgeColocation(g protocols.GateInfo) {
	now := c.now()
	record := func(v gates.Verdict) { c.recordColocation(g, v) }
	soloDir, err := c.resultDir(g.Solo)
	if err != nil {
		record(gates.Verdict{Verdict: gates.Error, Detail: err.Error(), At: now})
		return
	}
	targetDir, err := c.resultDir(g.Target)
	if err != nil {
		record(gates.Verdict{Verdict: gates.Error, Detail: err.Error(), At: now})
		return
	}
	if g.ProfileWindows > 0 {
		// A-P3-1: "This one-time placement check samples exactly one 2+8
		// window per moderate target".
		for _, t := range []struct{ name, dir string }{{"solo", soloDir}, {"co-located", targetDir}} {
			n, err := countPhase(filepath.Join(t.dir, "phases.jsonl"), "profile")
			switch {
			case err != nil:
				record(gates.Verdict{Verdict: gates.Error, Detail: fmt.Sprintf("%s target's profile windows: %v", t.name, err), At: now})
				return
			case n != g.ProfileWindows:
				record(gates.Verdict{Verdict: gates.Fail, At: now, Figures: map[string]float64{"profile_windows": float64(n)},
					Detail: fmt.Sprintf("the %s target had %d profile windows; the check samples exactly %d", t.name, n, g.ProfileWindows)})
				return
			}
		}
	}
	solo, coloc := gates.Measurement{Figures: map[string]float64{}}, gates.Measurement{Figures: map[string]float64{}}
	if solo.Throughput, err = gates.ReadThroughput(filepath.Join(soloDir, g.ThroughputFile), g.ThroughputField); err != nil {
		record(gates.Verdict{Verdict: gates.Error, Detail: "solo throughput: " + err.Error(), At: now})
		return
	}
	if coloc.Throughput, err = gates.ReadThroughput(filepath.Join(targetDir, g.ThroughputFile), g.ThroughputField); err != nil {
		record(gates.Verdict{Verdict: gates.Error, Detail: "co-located throughput: " + err.Error(), At: now})
		return
	}
	// the clean segments' own throughputs, for the criterion's noise
	// (none when the result does not give them)
	solo.Segments, _ = gates.ReadSegmentThroughputs(filepath.Join(soloDir, g.ThroughputFile))
	coloc.Segments, _ = gates.ReadSegmentThroughputs(filepath.Join(targetDir, g.ThroughputFile))
	var vv *gates.Verdict
	if g.Validator != nil {
		v := validator.RunGate(c.starter, g, validator.GateDirs{Solo: soloDir, Target: targetDir, Campaign: c.dir, Workdir: c.workdir, ProtocolDir: filepath.Dir(c.protocolPath)}, c.now)
		vv = &v
		// figures reported in pairs, solo.X and coloc.X, are compared
		for k, x := range v.Figures {
			if name, ok := strings.CutPrefix(k, "solo."); ok {
				solo.Figures[name] = x
			} else if name, ok := strings.CutPrefix(k, "coloc."); ok {
				coloc.Figures[name] = x
			}
		}
	}
	v := gates.Colocation(solo, coloc, g.ThroughputTolerance, g.FigureTolerance, c.now())
	if vv != nil {
		// the F3 criterion's own false-failure rate, beside the verdict
		for k, x := range vv.Figures {
			if strings.HasPrefix(k, "f3.self.") {
				v.Figures[k] = x
			}
		}
	}
	if vv != nil && !vv.Passed() && v.Verdict == gates.Pass {
		v.Verdict = vv.Verdict
		v.Detail = "validator: " + vv.Detail
	}
	record(v)
}

// recordColocation records a co-location gate's verdict; a later regime
// runs only after a fail.
func (c *Runner) recordColocation(g protocols.GateInfo, v gates.Verdict) {
	v.Gate = g.Name
	if _, err := c.store.AddGateVerdict(state.GateVerdict{Gate: g.Name, Run: g.Target, Verdict: v.Verdict, Figures: v.Figures, Detail: v.Detail, At: v.At}); err != nil {
		c.log.Error().Err(err).Str("gate", g.Name).Msg("record gate verdict")
	}
	c.log.Info().Str("gate", g.Name).Str("verdict", v.Verdict).Str("detail", v.Detail).Interface("figures", v.Figures).Msg("co-location gate")
}

// countPhase counts the lines of a client's phase file that report phase.
func countPhase(path, phase string) (int, error) {
	b, err := safefile.ReadFile(path, safefile.ChildLimit)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, line := range bytes.Split(b, []byte("\n")) {
		var p phasefile.Line
		if json.Unmarshal(line, &p) == nil && p.Phase == phase {
			n++
		}
	}
	return n, nil
}
